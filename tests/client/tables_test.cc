// The sweep and compare tables and their four renderings.
#include "client/tables.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace mpsd::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Job Trial(const std::string& id, int index, const std::string& lr, double accuracy,
              double loss) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::Job::SUCCEEDED);
  job.mutable_trial()->set_sweep_id("1");
  job.mutable_trial()->set_index(index);
  auto* p = job.mutable_trial()->add_parameters();
  p->set_path("optimizer.learning_rate");
  p->set_value(lr);
  job.mutable_summary()->set_epochs(1);
  job.mutable_summary()->set_test_accuracy(accuracy);
  job.mutable_summary()->set_test_loss(loss);
  job.mutable_summary()->set_samples_per_second(1000 + index);
  return job;
}

TEST(TablesTest, SweepTableRanksBestFirstAndUnfinishedLast) {
  std::vector<v1::Job> trials = {Trial("2", 0, "0.1", 0.5, 1.2), Trial("3", 1, "0.01", 0.8, 0.6),
                                 Trial("4", 2, "0.001", 0.7, 0.5)};
  v1::Job queued;
  queued.set_id("5");
  queued.set_state(v1::Job::QUEUED);
  queued.mutable_trial()->set_index(3);
  trials.push_back(queued);
  absl::StatusOr<TextTable> table = SweepTable(trials, "test_accuracy");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->rows.size(), 4u);
  EXPECT_EQ(table->rows[0][2], "3");
  EXPECT_EQ(table->rows[1][2], "4");
  EXPECT_EQ(table->rows[2][2], "2");
  EXPECT_EQ(table->rows[3][2], "5");
  EXPECT_EQ(table->rows[3][3], "-");  // no value for a parameter it does not carry
  // Ranks count the trials with a value; the queued one has none, and the line says so.
  EXPECT_EQ(table->rows[2][0], "3");
  EXPECT_EQ(table->rows[3][0], "-");
  std::string ranked_by;
  ASSERT_TRUE(SweepTable(trials, "test_accuracy", false, "auto", &ranked_by).ok());
  EXPECT_EQ(ranked_by,
            "test_accuracy, highest first (each trial's final value); 1 trial(s) "
            "without a value of it unranked (-), last");
  table = SweepTable(trials, "test_loss");
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->rows[0][2], "4");
  EXPECT_THAT(std::string(SweepTable(trials, "accuracy").status().message()),
              HasSubstr("--metric: unknown \"accuracy\""));
  // A typo is named with the nearest metric; the headers the table shows count as names.
  EXPECT_THAT(std::string(SweepTable(trials, "test_acuracy").status().message()),
              HasSubstr("--metric: unknown \"test_acuracy\" (did you mean \"test_accuracy\"?); "
                        "expected one of val_accuracy, val_loss, test_accuracy, "));
  EXPECT_THAT(std::string(SweepTable(trials, "TEST_ACX").status().message()),
              HasSubstr("(did you mean \"test_acc\"?)"));
  EXPECT_THAT(std::string(SweepTable(trials, "test_acuracy").status().message()),
              HasSubstr(", or a metric column's header as the table shows it (VAL_ACC)"));
}

// Equal accuracies (common on a small split) are ordered by the same split's loss, and the
// line beside the table says so only where it decided an order; a column's header is a metric.
TEST(TablesTest, SweepBreaksAccuracyTiesByLossAndTakesHeadersAsMetrics) {
  std::vector<v1::Job> trials = {Trial("2", 0, "0.1", 0.8, 0.67), Trial("3", 1, "0.01", 0.8, 0.56),
                                 Trial("4", 2, "0.001", 0.7, 0.5)};
  std::string ranked_by;
  absl::StatusOr<TextTable> table = SweepTable(trials, "test_accuracy", false, "auto", &ranked_by);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "3");  // 0.8 at loss 0.56 before 0.8 at 0.67
  EXPECT_EQ(table->rows[1][2], "2");
  EXPECT_EQ(table->rows[2][2], "4");
  EXPECT_EQ(ranked_by,
            "test_accuracy, highest first (each trial's final value); ties by test_loss, lowest "
            "first");
  // No tie, no note.
  trials[0].mutable_summary()->set_test_accuracy(0.81);
  ASSERT_TRUE(SweepTable(trials, "test_accuracy", false, "auto", &ranked_by).ok());
  EXPECT_EQ(ranked_by, "test_accuracy, highest first (each trial's final value)");
  // Headers in any case name their metric; the line names the metric's own name.
  for (const char* header : {"TEST_ACC", "test_acc", "Test_Acc"}) {
    table = SweepTable(trials, header, false, "auto", &ranked_by);
    ASSERT_TRUE(table.ok()) << header << ": " << table.status();
    EXPECT_EQ(table->rows[0][2], "2") << header;
    EXPECT_THAT(ranked_by, ::testing::StartsWith("test_accuracy, highest first")) << header;
  }
  table = SweepTable(trials, "samples/s", false, "auto", &ranked_by);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "4");  // samples/s 1000 + index: the last trial is fastest
  EXPECT_THAT(ranked_by, ::testing::StartsWith("samples_per_second, highest first"));
}

// A regression sweep: ranked on val_r2 by default (higher is better), any task metric by name
// (val_mse: lower is better), each a column; a metric no trial measured is unknown.
TEST(TablesTest, SweepOfARegressionRanksOnItsMetrics) {
  std::vector<v1::Job> trials = {Trial("2", 0, "0.1", 0, 0.3), Trial("3", 1, "0.01", 0, 0.2),
                                 Trial("4", 2, "0.001", 0, 0.4)};
  const double r2[] = {0.8, 0.7, 0.95}, mse[] = {0.1, 0.05, 0.2};
  for (int i = 0; i < 3; ++i) {
    v1::JobSummary& s = *trials[i].mutable_summary();
    s.clear_test_accuracy();
    (*s.mutable_metrics())["val_r2"] = r2[i];
    (*s.mutable_metrics())["val_mse"] = mse[i];
    (*s.mutable_metrics())["val_loss"] = mse[i];
  }
  absl::StatusOr<TextTable> table = SweepTable(trials, "auto");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "4");
  EXPECT_EQ(table->rows[1][2], "2");
  EXPECT_EQ(table->rows[2][2], "3");
  EXPECT_THAT(table->header, ::testing::Contains("VAL_R2"));
  EXPECT_THAT(table->header, ::testing::Contains("VAL_MSE"));
  table = SweepTable(trials, "val_mse");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "3");
  EXPECT_THAT(std::string(SweepTable(trials, "test_r2").status().message()),
              HasSubstr("--metric: unknown \"test_r2\""));
}

// A job's own metric (metrics: [{name: top2}] reports val_top2): mpsctl cannot know which way is
// better, so ranking by it needs --mode; max and min rank it each way, and --mode also turns a
// known metric's direction around.
TEST(TablesTest, SweepByAJobsOwnMetricNeedsAModeAndHonoursIt) {
  std::vector<v1::Job> trials = {Trial("2", 0, "0.1", 0.5, 1.2), Trial("3", 1, "0.01", 0.8, 0.6),
                                 Trial("4", 2, "0.001", 0.7, 0.5)};
  const double top2[] = {0.9, 0.6, 0.75};
  for (int i = 0; i < 3; ++i)
    (*trials[i].mutable_summary()->mutable_metrics())["val_top2"] = top2[i];
  EXPECT_THAT(std::string(SweepTable(trials, "val_top2").status().message()),
              HasSubstr("--metric val_top2: whether higher is better is the job's own metric's "
                        "to say; add --mode max or --mode min"));
  absl::StatusOr<TextTable> table = SweepTable(trials, "val_top2", false, "max");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "2");
  EXPECT_EQ(table->rows[1][2], "4");
  EXPECT_EQ(table->rows[2][2], "3");
  EXPECT_THAT(table->header, ::testing::Contains("VAL_TOP2"));
  table = SweepTable(trials, "val_top2", false, "min");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "3");
  // A known metric ranks without a mode, and min turns it around.
  EXPECT_EQ(SweepTable(trials, "test_accuracy")->rows[0][2], "3");
  EXPECT_EQ(SweepTable(trials, "test_accuracy", false, "min")->rows[0][2], "2");
  EXPECT_THAT(std::string(SweepTable(trials, "test_accuracy", false, "up").status().message()),
              HasSubstr("--mode: unknown \"up\" (expected auto, min or max)"));
}

// A NaN (a metric of the job's own that gave up) ranks last whichever way, as unmeasured; JSON
// has no NaN, so it is null there.
TEST(TablesTest, NanRanksLastEitherWayAndIsNullInJson) {
  std::vector<v1::Job> trials = {Trial("2", 0, "0.1", 0.5, 1.2), Trial("3", 1, "0.01", 0.8, 0.6),
                                 Trial("4", 2, "0.001", 0.7, 0.5), Trial("5", 3, "0.3", 0.1, 2.0)};
  const double h[] = {0.16, std::nan(""), 0.43, std::nan("")};
  for (int i = 0; i < 4; ++i) (*trials[i].mutable_summary()->mutable_metrics())["test_h"] = h[i];
  for (const char* mode : {"min", "max"}) {
    absl::StatusOr<TextTable> table = SweepTable(trials, "test_h", true, mode);
    ASSERT_TRUE(table.ok()) << table.status();
    std::vector<std::string> order;
    for (const auto& row : table->rows) order.push_back(row[2]);
    EXPECT_THAT(order, ::testing::ElementsAre(std::string(mode) == "min" ? "2" : "4",
                                              std::string(mode) == "min" ? "4" : "2", "3", "5"))
        << mode;
    absl::StatusOr<std::string> json = RenderTable(*table, "json");
    ASSERT_TRUE(json.ok());
    EXPECT_THAT(*json, HasSubstr("\"test_h\":null"));
    EXPECT_THAT(*json, Not(HasSubstr("nan")));
  }
}

// Issue 27: with a validation split the sweep is ranked on it by default, not on the test set
// (here the two disagree), and compare shows validation first; unmeasured figures are "-".
TEST(TablesTest, SweepRanksOnValidationByDefaultAndCompareShowsIt) {
  std::vector<v1::Job> trials = {Trial("2", 0, "0.1", 0.9, 0.3), Trial("3", 1, "0.01", 0.6, 0.9)};
  trials[0].mutable_summary()->set_val_accuracy(0.7);
  trials[0].mutable_summary()->set_val_loss(0.8);
  trials[1].mutable_summary()->set_val_accuracy(0.8);
  trials[1].mutable_summary()->set_val_loss(0.5);
  absl::StatusOr<TextTable> table = SweepTable(trials, "auto");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "3");  // best validation, worse test
  EXPECT_EQ(table->rows[1][2], "2");
  table = SweepTable(trials, "test_accuracy");
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->rows[0][2], "2");
  // Without validation, "auto" is the test split, as before.
  const std::vector<v1::Job> plain = {Trial("2", 0, "0.1", 0.5, 1.2),
                                      Trial("3", 1, "0.01", 0.8, 0.6)};
  EXPECT_EQ(SweepTable(plain, "auto")->rows[0][2], "3");
  // The validation columns appear only where a trial measured them.
  EXPECT_THAT(table->header, ::testing::Contains("VAL_ACC"));
  EXPECT_THAT(SweepTable(plain, "auto")->header, ::testing::Not(::testing::Contains("VAL_ACC")));
  EXPECT_EQ(SweepTable(plain, "auto")->rows[0].size(), SweepTable(plain, "auto")->header.size());
  // Finished trials that measured no validation metric: ranking by one is refused, saying why.
  EXPECT_THAT(std::string(SweepTable(plain, "val_accuracy").status().message()),
              HasSubstr("--metric val_accuracy: no trial measured it (val_* need a validation "
                        "split: dataset.validation)"));

  trials[1].mutable_summary()->clear_test_accuracy();
  trials[1].mutable_summary()->clear_test_loss();
  const std::string csv = *RenderTable(CompareTable(trials), "csv");
  EXPECT_THAT(csv, HasSubstr("val_accuracy,0.7,0.8\n"));
  EXPECT_THAT(csv, HasSubstr("test_accuracy,0.9,-\n"));
}

// An EvalJob sweep (e.g. over checkpoints) and a BenchJob sweep (e.g. over batch sizes): their
// summaries hold no epochs, yet rank: the evaluation's accuracy, and the BenchJob's fastest row.
TEST(TablesTest, SweepsOfEvalJobsAndBenchJobsRankOnWhatTheyMeasured) {
  std::vector<v1::Job> evals;
  for (const auto& [id, accuracy] : {std::pair<const char*, double>{"2", 0.81}, {"3", 0.87}}) {
    v1::Job job = Trial(id, static_cast<int>(evals.size()), "0.1", accuracy, 1 - accuracy);
    job.mutable_spec()->mutable_eval_job();
    job.mutable_summary()->set_epochs(0);
    evals.push_back(job);
  }
  absl::StatusOr<TextTable> table = SweepTable(evals, "auto");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "3");
  EXPECT_EQ(table->rows[0][0], "1");  // ranked, not "-"
  EXPECT_EQ(table->rows[1][0], "2");

  // EvalJobs of the training split: its loss in TRAIN_LOSS, ranked by its accuracy.
  std::vector<v1::Job> on_train;
  for (const auto& [id, accuracy] : {std::pair<const char*, double>{"7", 0.93}, {"8", 0.97}}) {
    v1::Job job;
    job.set_id(id);
    job.set_state(v1::Job::SUCCEEDED);
    job.mutable_trial()->set_index(static_cast<int>(on_train.size()));
    job.mutable_spec()->mutable_eval_job();
    (*job.mutable_summary()->mutable_metrics())["train_loss"] = 1 - accuracy;
    (*job.mutable_summary()->mutable_metrics())["train_accuracy"] = accuracy;
    on_train.push_back(job);
  }
  table = SweepTable(on_train, "auto");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "8");
  EXPECT_EQ(table->rows[0][0], "1");
  EXPECT_THAT(table->header, ::testing::Contains("TRAIN_LOSS"));
  ASSERT_TRUE(SweepTable(on_train, "train_loss").ok());
  EXPECT_EQ(SweepTable(on_train, "train_loss")->rows[0][2], "8");  // 0.03 before 0.07

  std::vector<v1::Job> benches;
  for (const auto& [id, rows] :
       {std::pair<const char*, std::vector<double>>{"5", {900, 1500}}, {"6", {1200, 0}}}) {
    v1::Job job;
    job.set_id(id);
    job.set_state(v1::Job::SUCCEEDED);
    job.mutable_trial()->set_index(static_cast<int>(benches.size()));
    job.mutable_spec()->mutable_bench_job();
    for (const double samples_per_second : rows) {
      v1::BenchRow& row = *job.mutable_summary()->add_bench_rows();
      row.set_status(samples_per_second > 0 ? v1::BenchRow::OK : v1::BenchRow::OUT_OF_MEMORY);
      row.set_samples_per_second(samples_per_second);
    }
    benches.push_back(job);
  }
  std::string ranked_by;
  table = SweepTable(benches, "auto", false, "auto", &ranked_by);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "5");  // its fastest row 1500 against 1200 (the OOM row skipped)
  EXPECT_EQ(table->rows[1][0], "2");
  EXPECT_EQ(ranked_by,
            "samples_per_second, highest first (each trial's fastest benchmark row that ran)");
}

// Before any epoch ends, trials whose spec holds a validation split are ranked on it too (their
// spec says so; no summary says anything yet), and best_value says why it cannot rank them yet.
TEST(TablesTest, RunningTrialsThatValidateRankOnValidationBeforeAnyEpoch) {
  std::vector<v1::Job> trials;
  for (int i = 0; i < 2; ++i) {
    v1::Job& job = trials.emplace_back();
    job.set_id(absl::StrCat(i + 2));
    job.set_state(v1::Job::RUNNING);
    job.mutable_trial()->set_index(i);
    job.mutable_spec()->mutable_train_job()->mutable_dataset()->mutable_validation()->set_fraction(
        0.1);
  }
  std::string ranked_by;
  ASSERT_TRUE(SweepTable(trials, "auto", false, "auto", &ranked_by).ok());
  EXPECT_THAT(ranked_by, ::testing::StartsWith("val_accuracy"));
  EXPECT_THAT(std::string(SweepTable(trials, "best_value").status().message()),
              HasSubstr("--metric best_value: no trial has ended with a best epoch yet"));
}

// A trial that kept a best epoch (early stopping) shows it and its monitored value beside the
// final figures; a sweep without one has no such columns.
TEST(TablesTest, SweepShowsTheBestEpochWhereATrialKeptOne) {
  std::vector<v1::Job> trials = {Trial("2", 0, "0.1", 0.9, 0.3), Trial("3", 1, "0.01", 0.6, 0.9)};
  EXPECT_THAT(SweepTable(trials, "auto")->header,
              ::testing::Not(::testing::Contains("BEST_EPOCH")));
  trials[0].mutable_summary()->set_best_epoch(4);
  trials[0].mutable_summary()->set_best_value(0.6197);
  absl::StatusOr<TextTable> table = SweepTable(trials, "auto");
  ASSERT_TRUE(table.ok()) << table.status();
  const auto at = [&](size_t row, const std::string& header) {
    const auto column = std::find(table->header.begin(), table->header.end(), header);
    EXPECT_NE(column, table->header.end()) << header;
    return table->rows[row][static_cast<size_t>(column - table->header.begin())];
  };
  ASSERT_EQ(table->rows[0][2], "2");
  EXPECT_EQ(at(0, "BEST_EPOCH"), "4");
  EXPECT_EQ(at(0, "BEST_VALUE"), "0.6197");
  EXPECT_EQ(at(1, "BEST_EPOCH"), "-");
  EXPECT_EQ(at(1, "BEST_VALUE"), "-");
  EXPECT_EQ(table->rows[1].size(), table->header.size());
  // The column names the metric where every trial that kept a best epoch monitored the same.
  trials[0].mutable_summary()->set_monitor("val_loss");
  EXPECT_THAT(SweepTable(trials, "auto")->header, ::testing::Contains("BEST_VAL_LOSS"));
  trials[1].mutable_summary()->set_best_epoch(2);
  trials[1].mutable_summary()->set_monitor("val_accuracy");
  EXPECT_THAT(SweepTable(trials, "auto")->header, ::testing::Contains("BEST_VALUE"));
}

// --metric best_value ranks by each trial's best epoch (the model its best.pt holds), in the
// monitored metric's direction; its column's header names it too. Trials that monitored
// different metrics, or kept no best epoch, do not rank by it.
TEST(TablesTest, SweepRanksByTheBestEpochsValue) {
  std::vector<v1::Job> trials = {Trial("2", 0, "0.1", 0.9, 0.3), Trial("3", 1, "0.01", 0.6, 0.9),
                                 Trial("4", 2, "0.001", 0.7, 0.5)};
  EXPECT_THAT(std::string(SweepTable(trials, "best_value").status().message()),
              HasSubstr("--metric best_value: no trial kept a best epoch"));
  const double best[] = {0.41, 0.32, 0.35};
  for (int i = 0; i < 3; ++i) {
    v1::JobSummary& s = *trials[i].mutable_summary();
    s.set_monitor("val_loss");
    s.set_best_epoch(i + 2);
    s.set_best_value(best[i]);
  }
  std::string ranked_by;
  for (const char* metric : {"best_value", "BEST_VAL_LOSS", "Best_Value"}) {
    absl::StatusOr<TextTable> table = SweepTable(trials, metric, false, "auto", &ranked_by);
    ASSERT_TRUE(table.ok()) << metric << ": " << table.status();
    EXPECT_EQ(table->rows[0][2], "3") << metric;  // val_loss 0.32: lowest first
    EXPECT_EQ(table->rows[1][2], "4") << metric;
    EXPECT_EQ(table->rows[2][2], "2") << metric;
  }
  EXPECT_EQ(ranked_by,
            "best_value (each trial's best val_loss: the epoch its best.pt holds), lowest first");
  ASSERT_TRUE(SweepTable(trials, "best_value", false, "max", &ranked_by).ok());
  EXPECT_THAT(ranked_by, HasSubstr("highest first"));
  EXPECT_THAT(std::string(SweepTable(trials, "best_val_accuracy").status().message()),
              HasSubstr("--metric best_val_accuracy: the trials monitored val_loss"));
  // An accuracy is ranked highest first.
  for (v1::Job& trial : trials) trial.mutable_summary()->set_monitor("val_accuracy");
  absl::StatusOr<TextTable> table = SweepTable(trials, "best_value");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows[0][2], "2");
  trials[1].mutable_summary()->set_monitor("val_loss");
  EXPECT_THAT(std::string(SweepTable(trials, "best_value").status().message()),
              HasSubstr("the trials monitored different metrics (val_accuracy, val_loss)"));
}

// A trial whose training stopped before its epochs ended (its own early_stopping) says so in
// the table, with the epochs it trained: its state alone (SUCCEEDED) does not.
TEST(TablesTest, SweepShowsWhichTrialsStoppedEarly) {
  std::vector<v1::Job> trials = {Trial("2", 0, "0.1", 0.9, 0.3), Trial("3", 1, "0.01", 0.6, 0.9)};
  for (v1::Job& trial : trials) {
    trial.mutable_summary()->set_epochs(10);
    trial.mutable_summary()->set_stop_reason("epochs_completed");
  }
  EXPECT_THAT(SweepTable(trials, "auto")->header, Not(::testing::Contains("STOP_REASON")));
  trials[1].mutable_summary()->set_epochs(4);
  trials[1].mutable_summary()->set_stop_reason("early_stopped");
  absl::StatusOr<TextTable> table = SweepTable(trials, "auto");
  ASSERT_TRUE(table.ok()) << table.status();
  const auto at = [&](size_t row, const std::string& header) {
    const auto column = std::find(table->header.begin(), table->header.end(), header);
    EXPECT_NE(column, table->header.end()) << header;
    return table->rows[row][static_cast<size_t>(column - table->header.begin())];
  };
  ASSERT_EQ(table->rows[1][2], "3");
  EXPECT_EQ(at(0, "EPOCHS"), "10");
  EXPECT_EQ(at(0, "STOP_REASON"), "epochs_completed");
  EXPECT_EQ(at(1, "EPOCHS"), "4");
  EXPECT_EQ(at(1, "STOP_REASON"), "early_stopped");
  EXPECT_EQ(at(1, "STATE"), "SUCCEEDED");
  EXPECT_EQ(table->rows[1].size(), table->header.size());
  EXPECT_THAT(*RenderTable(*table, "json"), HasSubstr("\"stop_reason\":\"early_stopped\""));
  // Stopped by the sweep's scheduler (ASHA): its training ended "cancelled"; the table says who.
  trials[0].set_state(v1::Job::CANCELLED);
  trials[0].set_failure_reason(v1::Job::EARLY_STOPPED);
  trials[0].mutable_summary()->set_stop_reason("cancelled");
  table = SweepTable(trials, "auto");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->rows[0][2], "2");
  EXPECT_EQ(at(0, "STATE"), "EARLY_STOPPED");
  EXPECT_EQ(at(0, "STOP_REASON"), "sweep.scheduler");
}

TEST(TablesTest, RendersTableMarkdownCsvAndJson) {
  TextTable table{{"A", "B"}, {{"x,y", "1.5"}, {"p|q", "-"}}, {}, {}};
  EXPECT_EQ(*RenderTable(table, "table"), "A    B\nx,y  1.5\np|q  -\n");
  EXPECT_EQ(*RenderTable(table, "markdown"),
            "| A | B |\n|---|---|\n| x,y | 1.5 |\n| p\\|q | - |\n");
  EXPECT_EQ(*RenderTable(table, "csv"), "A,B\n\"x,y\",1.5\np|q,-\n");
  // Keys in column order, snake_case; "-" is null; numbers are numbers.
  EXPECT_EQ(*RenderTable(table, "json"),
            "[{\"a\":\"x,y\",\"b\":1.5},\n{\"a\":\"p|q\",\"b\":null}]\n");
  google::protobuf::Value json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*RenderTable(table, "json"), &json).ok());
  EXPECT_EQ(json.list_value().values(0).struct_value().fields().at("b").number_value(), 1.5);
  // Header words become snake_case keys; a text column keeps "12" a string; a number JSON would
  // not take as written (".5") is written in a form it takes.
  TextTable headed{{"SAMPLES/S", "JOB", "x"}, {{"12", "12", ".5"}}, {}, {false, true, false}};
  EXPECT_EQ(*RenderTable(headed, "json"), "[{\"samples_s\":12,\"job\":\"12\",\"x\":0.5}]\n");
  EXPECT_EQ(*RenderTable(TextTable{{"A"}, {}, {}, {}}, "json"), "[]\n");
  EXPECT_FALSE(RenderTable(table, "html").ok());
}

TEST(TablesTest, SweepJsonHasSnakeCaseKeysInColumnOrderAndExactNumbers) {
  std::vector<v1::Job> trials(2);
  for (int i = 0; i < 2; ++i) {
    trials[i].set_id(absl::StrCat(10 + i));
    trials[i].set_state(v1::Job::SUCCEEDED);
    trials[i].mutable_trial()->set_index(i);
    v1::SweepAssignment* p = trials[i].mutable_trial()->add_parameters();
    p->set_path("optimizer.learning_rate");
    p->set_value(i == 0 ? "0.01" : "0.001");
    trials[i].mutable_summary()->set_epochs(1);
    trials[i].mutable_summary()->set_test_accuracy(0.812345678 + i * 0.1);
    trials[i].mutable_summary()->set_samples_per_second(1234.5);
  }
  auto table = SweepTable(trials, "test_accuracy", /*exact=*/true);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::string json = *RenderTable(*table, "json");
  EXPECT_THAT(json,
              ::testing::StartsWith(
                  "[{\"rank\":1,\"trial\":1,\"job_id\":\"11\",\"optimizer.learning_rate\":0.001,"
                  "\"state\":\"SUCCEEDED\",\"test_accuracy\":0.912345678,\"test_loss\":null,"));
  EXPECT_THAT(json, HasSubstr("\"samples_per_second\":1234.5,\"epoch_time_s\":0,"
                              "\"peak_allocated_bytes\":null,\"time_s\":0}"));
  EXPECT_THAT(json, Not(HasSubstr("S/EPOCH")));
}

TEST(TablesTest, CompareShowsOnlyDifferingKeys) {
  v1::Job a, b;
  a.set_id("1");
  b.set_id("2");
  a.mutable_spec()->mutable_train_job()->set_batch_size(64);
  b.mutable_spec()->mutable_train_job()->set_batch_size(64);
  a.mutable_spec()->mutable_train_job()->mutable_optimizer()->set_learning_rate(0.1);
  b.mutable_spec()->mutable_train_job()->mutable_optimizer()->set_learning_rate(0.01);
  (*b.mutable_spec()->mutable_labels())["project"] = "x";
  const TextTable table = CompareTable({a, b});
  const std::string csv = *RenderTable(table, "csv");
  EXPECT_THAT(csv, HasSubstr("KEY,job 1,job 2\n"));
  EXPECT_THAT(csv, HasSubstr("labels.project,-,x\n"));
  EXPECT_THAT(csv, HasSubstr("optimizer.learning_rate,0.1,0.01\n"));
  EXPECT_THAT(csv, ::testing::Not(HasSubstr("batch_size")));
}

// The summary's other metrics (a user's test_top2, a regression's test_r2) are rows of their
// own; the loss and accuracy the map repeats are not shown twice.
TEST(TablesTest, CompareShowsTheSummarysOtherMetricsOnce) {
  v1::Job a, b;
  a.set_id("1");
  b.set_id("2");
  for (v1::Job* job : {&a, &b}) {
    job->mutable_summary()->set_test_accuracy(0.5);
    (*job->mutable_summary()->mutable_metrics())["test_accuracy"] = 0.5;
  }
  (*a.mutable_summary()->mutable_metrics())["test_top2"] = 0.8;
  const std::string csv = *RenderTable(CompareTable({a, b}), "csv");
  EXPECT_THAT(csv, HasSubstr("test_top2,0.8,-\n"));
  EXPECT_EQ(csv.find("test_accuracy"), csv.rfind("test_accuracy")) << csv;
}

}  // namespace
}  // namespace mpsd::client
