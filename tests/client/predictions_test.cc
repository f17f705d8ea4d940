// client/predictions.h (mpsctl predict's output) and FormatConfusionMatrix of client/format.h
// (an EvalJob's summary): the exact text people and programs read.
#include "client/predictions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/format.h"

namespace mpsd::client {
namespace {

using ::testing::HasSubstr;

v1::Prediction Classified(const std::string& input, std::vector<int> classes,
                          std::vector<double> probabilities, std::vector<std::string> names) {
  v1::Prediction p;
  p.set_input(input);
  for (int c : classes) p.add_classes(c);
  for (double v : probabilities) p.add_probabilities(v);
  for (const std::string& n : names) p.add_class_names(n);
  return p;
}

TEST(PredictionsTest, ClassificationTableNamesEachInputOnceAndAlignsColumns) {
  const std::vector<v1::Prediction> predictions = {
      Classified("/d/a.png", {9, 7}, {0.97123, 0.02}, {"Ankle boot", "Sneaker"}),
      Classified("/d/bb.png", {1, 3}, {0.5, 0.25}, {})};
  EXPECT_EQ(FormatPredictions(predictions, "classification", PredictionFormat::kTable),
            "INPUT      RANK  CLASS  NAME        PROBABILITY\n"
            "/d/a.png      1      9  Ankle boot       0.9712\n"
            "              2      7  Sneaker          0.0200\n"
            "/d/bb.png     1      1  -                0.5000\n"
            "              2      3  -                0.2500\n");
}

TEST(PredictionsTest, CsvQuotesInputsWithCommas) {
  const std::vector<v1::Prediction> predictions = {
      Classified("/d/a,b.png", {2}, {0.75}, {"Pull\"over"})};
  EXPECT_EQ(FormatPredictions(predictions, "classification", PredictionFormat::kCsv),
            "input,rank,class,name,probability\n"
            "\"/d/a,b.png\",1,2,\"Pull\"\"over\",0.7500\n");
}

TEST(PredictionsTest, RegressionAndMultilabelHaveTheirOwnColumns) {
  v1::Prediction value;
  value.set_input("x.pt[0]");
  value.add_values(1.5);
  value.add_values(-0.25);
  EXPECT_EQ(FormatPredictions({value}, "regression", PredictionFormat::kCsv),
            "input,output,value\nx.pt[0],0,1.5\nx.pt[0],1,-0.25\n");
  v1::Prediction labels;
  labels.set_input("x.pt[0]");
  labels.add_probabilities(0.9);
  labels.add_probabilities(0.1);
  labels.add_classes(0);
  EXPECT_EQ(FormatPredictions({labels}, "multilabel", PredictionFormat::kCsv),
            "input,label,name,probability,predicted\nx.pt[0],0,-,0.9000,yes\n"
            "x.pt[0],1,-,0.1000,no\n");
}

TEST(PredictionsTest, JsonIsOnePredictionPerLine) {
  const std::string json =
      FormatPredictions({Classified("a.png", {4}, {1}, {}), Classified("b.png", {5}, {1}, {})},
                        "classification", PredictionFormat::kJson);
  EXPECT_THAT(json, HasSubstr("\"input\":\"a.png\""));
  EXPECT_EQ(std::count(json.begin(), json.end(), '\n'), 2);
}

TEST(PredictionsTest, OneLinePerEventForTheLog) {
  EXPECT_EQ(FormatPredictionLine(
                Classified("/d/a.png", {9, 7}, {0.97123, 0.02}, {"Ankle boot", "Sneaker"})),
            "prediction /d/a.png: 9 Ankle boot 0.9712, 7 Sneaker 0.0200");
  EXPECT_EQ(FormatPredictionLine(Classified("b.png", {4}, {0.5}, {})),
            "prediction b.png: 4 0.5000");
  v1::Prediction value;
  value.set_input("x.pt[0]");
  value.add_values(1.5);
  value.add_values(-0.25);
  EXPECT_EQ(FormatPredictionLine(value), "prediction x.pt[0]: values 1.5, -0.25");
}

TEST(PredictionsTest, UnknownFormatIsAnError) {
  EXPECT_FALSE(ParsePredictionFormat("xml").ok());
  EXPECT_EQ(*ParsePredictionFormat("csv"), PredictionFormat::kCsv);
}

TEST(ConfusionMatrixTest, RowsAreTrueClassesWithTheirTotals) {
  v1::JobSummary s;
  s.set_confusion_classes(2);
  for (int64_t v : {8, 2, 1, 19}) s.add_confusion_matrix(v);
  s.add_class_names("cat");
  s.add_class_names("dog");
  EXPECT_EQ(FormatConfusionMatrix(s, "  "),
            "  confusion matrix (examples; rows: true class, columns: predicted class):\n"
            "  true \\ predicted    0    1 total\n"
            "  0 cat               8    2    10\n"
            "  1 dog               1   19    20\n");
  s.add_confusion_matrix(3);  // not K × K: nothing
  EXPECT_EQ(FormatConfusionMatrix(s, ""), "");
}

}  // namespace
}  // namespace mpsd::client
