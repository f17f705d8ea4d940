// Tests for api/epoch_metric.h: an epoch metric is read only where the epoch measured it.
#include "api/epoch_metric.h"

#include <gtest/gtest.h>

#include <optional>

namespace mpsd::api {
namespace {

TEST(EpochMetricTest, ReadsOnlyWhatTheEpochMeasured) {
  mpsd::v1::EpochMetrics epoch;
  epoch.set_train_loss(0.7);
  epoch.set_test_accuracy(0.9);  // not evaluated: not a value
  EXPECT_EQ(EpochMetricValue("train_loss", epoch), 0.7);
  EXPECT_EQ(EpochMetricValue("val_loss", epoch), std::nullopt);
  EXPECT_EQ(EpochMetricValue("test_accuracy", epoch), std::nullopt);
  epoch.set_evaluated(true);
  epoch.set_val_loss(0.4);
  EXPECT_EQ(EpochMetricValue("test_accuracy", epoch), 0.9);
  EXPECT_EQ(EpochMetricValue("val_loss", epoch), 0.4);
  EXPECT_EQ(EpochMetricValue("val_accuracy", epoch), std::nullopt);
}

// Multilabel and regression epochs: their metrics map holds every metric measured; a name it
// lacks was not measured (a regression's accuracy fields are 0, not values).
TEST(EpochMetricTest, ATaskIsReadFromItsMetricsMap) {
  mpsd::v1::EpochMetrics epoch;
  epoch.set_train_loss(0.7);
  epoch.set_evaluated(true);
  epoch.set_val_loss(0.4);
  (*epoch.mutable_metrics())["train_loss"] = 0.7;
  (*epoch.mutable_metrics())["val_loss"] = 0.4;
  (*epoch.mutable_metrics())["val_r2"] = 0.93;
  EXPECT_EQ(EpochMetricValue("val_r2", epoch), 0.93);
  EXPECT_EQ(EpochMetricValue("val_loss", epoch), 0.4);
  EXPECT_EQ(EpochMetricValue("test_r2", epoch), std::nullopt);
  EXPECT_EQ(EpochMetricValue("train_accuracy", epoch), std::nullopt);
  EXPECT_EQ(EpochMetricValue("test_accuracy", epoch), std::nullopt);
}

TEST(EpochMetricTest, AModeAgainstTheNamesDirectionIsNamed) {
  EXPECT_EQ(ModeContradiction("val_loss", /*maximize=*/false), "");
  EXPECT_EQ(ModeContradiction("val_accuracy", /*maximize=*/true), "");
  EXPECT_EQ(ModeContradiction("val_top5", /*maximize=*/true), "");  // no direction by name
  EXPECT_EQ(ModeContradiction("val_top5", /*maximize=*/false), "");
  EXPECT_EQ(ModeContradiction("val_loss", /*maximize=*/true),
            "max for val_loss, where lower is better: write min, or leave mode out for the "
            "default");
  EXPECT_EQ(ModeContradiction("val_macro_f1", /*maximize=*/false),
            "min for val_macro_f1, where higher is better: write max, or leave mode out for the "
            "default");
}

}  // namespace
}  // namespace mpsd::api
