// Tests for server/core/trial_stopping.h: ASHA and the median stopping rule on results worked
// out by hand (values are dyadic fractions where a tie or a mean must come out exact), the
// reading of SweepSpec.scheduler, and SweepStopper's reading of epoch events.
#include "server/core/trial_stopping.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TrialStoppingConfig Asha(int grace_period, int reduction_factor, int max_epochs,
                         bool maximize = false) {
  TrialStoppingConfig config;
  config.rule = TrialStoppingConfig::Rule::kAsha;
  config.metric = maximize ? "val_accuracy" : "val_loss";
  config.maximize = maximize;
  config.grace_period = grace_period;
  config.reduction_factor = reduction_factor;
  config.max_epochs = max_epochs;
  return config;
}

TrialStoppingConfig Median(int grace_period, int min_samples_required, int max_epochs = 10) {
  TrialStoppingConfig config;
  config.rule = TrialStoppingConfig::Rule::kMedianStopping;
  config.metric = "val_loss";
  config.grace_period = grace_period;
  config.min_samples_required = min_samples_required;
  config.max_epochs = max_epochs;
  return config;
}

TEST(AshaRuleTest, RungsLieAtGraceTimesPowersOfTheFactorBelowTheEpochs) {
  EXPECT_THAT(AshaRule(Asha(1, 2, 3)).rung_epochs(), ElementsAre(1, 2));
  EXPECT_THAT(AshaRule(Asha(1, 2, 4)).rung_epochs(), ElementsAre(1, 2));  // 4 is the last epoch
  EXPECT_THAT(AshaRule(Asha(1, 2, 5)).rung_epochs(), ElementsAre(1, 2, 4));
  EXPECT_THAT(AshaRule(Asha(1, 3, 28)).rung_epochs(), ElementsAre(1, 3, 9, 27));
  EXPECT_THAT(AshaRule(Asha(2, 2, 9)).rung_epochs(), ElementsAre(2, 4, 8));
  EXPECT_THAT(AshaRule(Asha(1, 1000000, 2000000000)).rung_epochs(), ElementsAre(1, 1000000));
}

// reduction_factor 2, mode min: the cutoff is the median of the losses recorded at the rung.
//   trial  loss  recorded before       cutoff              decision
//   a      0.5   {}                    none                go on
//   b      0.9   {0.5}                 0.5                 stop
//   c      0.4   {0.5, 0.9}            0.7 (midway)        go on
//   d      0.7   {0.5, 0.9, 0.4}       0.5 (the middle)    stop
//   e      0.5   {0.5, 0.9, 0.4, 0.7}  0.6 (0.5..0.7 mid)  go on
TEST(AshaRuleTest, TheCutoffIsTheQuantileOfTheValuesRecordedBefore) {
  AshaRule rule(Asha(1, 2, 3));
  EXPECT_FALSE(rule.OnResult("a", 1, 0.5).stop);
  const StopDecision b = rule.OnResult("b", 1, 0.9);
  EXPECT_TRUE(b.stop);
  EXPECT_EQ(b.reason,
            "asha stopped the trial at its rung of epoch 1: val_loss 0.9 is worse than the cutoff "
            "0.5 for the best 1/2 at this rung (1 trial(s) recorded there before it; mode min, "
            "grace_period 1, reduction_factor 2)");
  EXPECT_FALSE(rule.OnResult("c", 1, 0.4).stop);
  const StopDecision d = rule.OnResult("d", 1, 0.7);
  EXPECT_TRUE(d.stop);
  EXPECT_THAT(d.reason, HasSubstr("val_loss 0.7 is worse than the cutoff 0.5 "));
  EXPECT_THAT(d.reason, HasSubstr("(3 trial(s) recorded there before it"));
  EXPECT_FALSE(rule.OnResult("e", 1, 0.5).stop);  // below 0.6
  // Stopped trials were recorded too: f meets {0.5, 0.9, 0.4, 0.7, 0.5}, median 0.5.
  EXPECT_TRUE(rule.OnResult("f", 1, 0.55).stop);
}

// reduction_factor 3, mode max: the cutoff is the 2/3 quantile (numpy's linear interpolation
// at index 2/3 × (n - 1) into the sorted values); only the top third goes on.
//   trial  accuracy  recorded before (sorted)  index  cutoff                         decision
//   a      0.80      {}                        -      none                           go on
//   b      0.70      {0.80}                    0      0.80                           stop
//   c      0.85      {0.70, 0.80}              0.667  0.70 + 0.667 × 0.10 = 0.7667   go on
//   d      0.76      {0.70, 0.80, 0.85}        1.333  0.80 + 0.333 × 0.05 = 0.8167   stop
TEST(AshaRuleTest, AFactorOfThreeKeepsTheTopThirdOfAMaximisedMetric) {
  AshaRule rule(Asha(1, 3, 10, /*maximize=*/true));
  EXPECT_FALSE(rule.OnResult("a", 1, 0.80).stop);
  EXPECT_TRUE(rule.OnResult("b", 1, 0.70).stop);
  EXPECT_FALSE(rule.OnResult("c", 1, 0.85).stop);
  const StopDecision d = rule.OnResult("d", 1, 0.76);
  EXPECT_TRUE(d.stop);
  EXPECT_THAT(d.reason, HasSubstr("val_accuracy 0.76 is worse than the cutoff 0.816667 for the "
                                  "best 1/3"));
  EXPECT_THAT(d.reason, HasSubstr("mode max"));
}

// A value equal to the cutoff goes on (Ray stops only below it); so does the first at a rung.
TEST(AshaRuleTest, AValueEqualToTheCutoffGoesOn) {
  AshaRule rule(Asha(1, 2, 3));
  EXPECT_FALSE(rule.OnResult("a", 1, 0.5).stop);
  EXPECT_FALSE(rule.OnResult("b", 1, 0.5).stop);
  EXPECT_FALSE(rule.OnResult("c", 1, 0.5).stop);
  EXPECT_TRUE(rule.OnResult("d", 1, 0.5000001).stop);
}

// Each rung judges a trial once, with its first value at or after the rung; a result is checked
// against the highest such rung only (Ray visits the rungs highest first and stops at the first
// it records at).
TEST(AshaRuleTest, AResultIsJudgedAtTheHighestRungNotYetRecorded) {
  AshaRule rule(Asha(1, 2, 5));  // rungs 1, 2, 4
  EXPECT_FALSE(rule.OnResult("a", 1, 0.5).stop);
  EXPECT_FALSE(rule.OnResult("a", 2, 0.4).stop);
  EXPECT_FALSE(rule.OnResult("a", 3, 0.3).stop);  // no rung at 3: nothing recorded
  // b's first value comes at epoch 2 (an evaluation skipped epoch 1): rung 2, against a's 0.4.
  EXPECT_FALSE(rule.OnResult("b", 2, 0.35).stop);
  // b's next value is judged at rung 1, where it has none yet: against a's 0.5.
  const StopDecision late = rule.OnResult("b", 3, 0.6);
  EXPECT_TRUE(late.stop);
  EXPECT_THAT(late.reason, HasSubstr("rung of epoch 1: val_loss 0.6 (epoch 3) is worse than the "
                                     "cutoff 0.5"));
  // Once judged at a rung, never again there: b's 0.9 at epoch 3 meets no rung.
  EXPECT_FALSE(rule.OnResult("b", 3, 0.9).stop);
  // c reaches rung 4 first: nothing recorded there, it goes on however bad.
  EXPECT_FALSE(rule.OnResult("c", 4, 9.0).stop);
}

// A NaN value never stops its trial but is recorded (Ray records it); later cutoffs leave it out
// (numpy's nanpercentile).
TEST(AshaRuleTest, NaNValuesDoNotStopAndDoNotCount) {
  AshaRule rule(Asha(1, 2, 3));
  EXPECT_FALSE(rule.OnResult("a", 1, std::nan("")).stop);
  EXPECT_FALSE(rule.OnResult("b", 1, 0.5).stop);  // only a NaN before: no cutoff
  EXPECT_TRUE(rule.OnResult("c", 1, 0.7).stop);   // cutoff 0.5, not the median of {NaN, 0.5}
  EXPECT_FALSE(rule.OnResult("a", 1, 9.0).stop);  // a was recorded (as NaN) at this rung
}

// Results that arrive together (a fused run's trials at one epoch boundary) are each judged as
// if it had arrived last: against every other value at the rung. Fed one by one, the first of
// them always went on (nothing recorded before it); together, reduction_factor 2 keeps the
// better half whatever the order. Mode min:
//   trial  loss  the others at the rung   cutoff (median)  decision
//   b      0.9   {0.5, 0.4, 0.7}          0.5              stop
//   a      0.5   {0.9, 0.4, 0.7}          0.7              go on
//   d      0.7   {0.9, 0.5, 0.4}          0.5              stop
//   c      0.4   {0.9, 0.5, 0.7}          0.7              go on
TEST(AshaRuleTest, ResultsThatArriveTogetherAreEachJudgedAgainstAllTheOthers) {
  const std::vector<TrialResult> set = {{"b", 1, 0.9}, {"a", 1, 0.5}, {"d", 1, 0.7}, {"c", 1, 0.4}};
  std::vector<bool> stops;
  AshaRule rule(Asha(1, 2, 3));
  for (const StopDecision& decision : rule.OnResults(set)) stops.push_back(decision.stop);
  EXPECT_THAT(stops, ElementsAre(true, false, true, false));
  // The same set in the opposite order: the same decisions.
  AshaRule reversed(Asha(1, 2, 3));
  const std::vector<TrialResult> back(set.rbegin(), set.rend());
  stops.clear();
  for (const StopDecision& decision : reversed.OnResults(back)) stops.push_back(decision.stop);
  EXPECT_THAT(stops, ElementsAre(false, true, false, true));
  const StopDecision b = AshaRule(Asha(1, 2, 3)).OnResults(set).front();
  EXPECT_THAT(b.reason, HasSubstr("val_loss 0.9 is worse than the cutoff 0.5 for the best 1/2 at "
                                  "this rung (3 trial(s) recorded there besides it, 3 of them "
                                  "at the same time;"));
  // All four were recorded: a later result alone meets {0.9, 0.5, 0.7, 0.4}, median 0.6.
  EXPECT_FALSE(rule.OnResult("e", 1, 0.6).stop);
  EXPECT_TRUE(rule.OnResult("f", 1, 0.61).stop);
}

// A set may reach different rungs: each of its results is judged at its own, against the
// others there only.
TEST(AshaRuleTest, ASetsResultsAreJudgedEachAtItsOwnRung) {
  AshaRule rule(Asha(1, 2, 5));  // rungs 1, 2, 4
  EXPECT_FALSE(rule.OnResult("a", 1, 0.5).stop);
  EXPECT_FALSE(rule.OnResult("a", 2, 0.5).stop);
  // b reaches rung 1 (against a's 0.5 and c's), c its first rung at epoch 2 too: rung 2, against
  // a's 0.5 alone (b is not at rung 2).
  const std::vector<StopDecision> decisions = rule.OnResults({{"b", 1, 0.45}, {"c", 2, 0.6}});
  EXPECT_FALSE(decisions[0].stop);
  EXPECT_TRUE(decisions[1].stop);
  EXPECT_THAT(decisions[1].reason, HasSubstr("rung of epoch 2: val_loss 0.6 is worse than the "
                                             "cutoff 0.5"));
  EXPECT_THAT(decisions[1].reason, HasSubstr("(1 trial(s) recorded there before it;"));
}

// grace_period 1, min_samples_required 2, mode min. Running means over epochs 1..2:
//   trial  epoch 1  epoch 2  epoch 3  mean(1..2)
//   a      1.0      0.5      0.25     0.75
//   b      1.0      0.75     0.5      0.875
//   c      1.25     1.0      -        1.125  at epoch 2: others a, b → median 0.8125; best 1.0:
//   stop d      0.875    1.0      -               at epoch 2: others a, b, c → median 0.875; best
//   0.875:
//                                            equal, goes on
TEST(MedianStoppingRuleTest, StopsATrialWhoseBestIsWorseThanTheMedianOfTheOthersMeans) {
  MedianStoppingRule rule(Median(1, 2));
  for (int epoch = 1; epoch <= 3; ++epoch) {
    EXPECT_FALSE(rule.OnResult("a", epoch, std::vector<double>{1.0, 0.5, 0.25}[epoch - 1]).stop);
  }
  for (int epoch = 1; epoch <= 3; ++epoch) {
    EXPECT_FALSE(rule.OnResult("b", epoch, std::vector<double>{1.0, 0.75, 0.5}[epoch - 1]).stop);
  }
  EXPECT_FALSE(rule.OnResult("c", 1, 1.25).stop);  // at grace_period: never
  const StopDecision c = rule.OnResult("c", 2, 1.0);
  EXPECT_TRUE(c.stop);
  EXPECT_EQ(c.reason,
            "median_stopping stopped the trial at epoch 2: its best val_loss so far, 1, is worse "
            "than the cutoff 0.8125, the median of the running means (epochs 1 to 2) of the 2 "
            "other trial(s) that reached epoch 2 (mode min, grace_period 1, "
            "min_samples_required 2)");
  EXPECT_FALSE(rule.OnResult("d", 1, 0.875).stop);
  const StopDecision d = rule.OnResult("d", 2, 1.0);
  EXPECT_FALSE(d.stop) << d.reason;
  // At epoch 3 only a and b count (c and d stopped at 2): median (0.5833 + 0.75) / 2.
  EXPECT_TRUE(rule.OnResult("d", 3, 1.0).stop);
}

TEST(MedianStoppingRuleTest, WaitsForMinSamplesRequiredOtherTrials) {
  MedianStoppingRule rule(Median(1, 3));
  for (const char* trial : {"a", "b"}) {
    EXPECT_FALSE(rule.OnResult(trial, 1, 0.5).stop);
    EXPECT_FALSE(rule.OnResult(trial, 2, 0.5).stop);
  }
  EXPECT_FALSE(rule.OnResult("c", 1, 4.0).stop);
  EXPECT_FALSE(rule.OnResult("c", 2, 4.0).stop);  // two others only
  EXPECT_FALSE(rule.OnResult("d", 1, 4.0).stop);
  EXPECT_TRUE(rule.OnResult("d", 2, 4.0).stop);  // a, b, c: median 0.5
}

// grace_period 2, min_samples_required 1: running means start at epoch 2; a trial's best counts
// every epoch, the ones before grace_period too (Ray's _best_result).
//   trial  e1    e2    e3    mean(2..3)
//   a      0.0   1.0   1.0   1.0   (with epoch 1 it would be 0.667)
//   b      5.0   0.75  1.0         at e3: others a → median 1.0; best 0.75: goes on (with epoch 1
//                                  in a's mean it would stop)
//   c      0.25  2.0   2.0         at e3: others a, b (0.875) → median 0.9375; best 0.25 (epoch 1):
//                                  goes on
//   d      9.0   9.0   9.0         at e2 (= grace_period): never; at e3: stops
TEST(MedianStoppingRuleTest, MeansStartAtGracePeriodAndTheBestCountsEveryEpoch) {
  MedianStoppingRule rule(Median(2, 1));
  for (int epoch = 1; epoch <= 3; ++epoch) {
    EXPECT_FALSE(rule.OnResult("a", epoch, std::vector<double>{0.0, 1.0, 1.0}[epoch - 1]).stop);
  }
  EXPECT_FALSE(rule.OnResult("b", 1, 5.0).stop);
  EXPECT_FALSE(rule.OnResult("b", 2, 0.75).stop);
  EXPECT_FALSE(rule.OnResult("b", 3, 1.0).stop);
  EXPECT_FALSE(rule.OnResult("c", 1, 0.25).stop);
  EXPECT_FALSE(rule.OnResult("c", 2, 2.0).stop);
  EXPECT_FALSE(rule.OnResult("c", 3, 2.0).stop);
  EXPECT_FALSE(rule.OnResult("d", 1, 9.0).stop);
  EXPECT_FALSE(rule.OnResult("d", 2, 9.0).stop);
  const StopDecision d = rule.OnResult("d", 3, 9.0);
  EXPECT_TRUE(d.stop);
  // Others at epoch 3: a 1.0, b 0.875, c 2.0: median 1.0.
  EXPECT_THAT(d.reason, HasSubstr("its best val_loss so far, 9, is worse than the cutoff 1, the "
                                  "median of the running means (epochs 2 to 3) of the 3 other"));
}

TEST(MedianStoppingRuleTest, ModeMaxComparesHigherAsBetter) {
  TrialStoppingConfig config = Median(1, 1);
  config.metric = "val_accuracy";
  config.maximize = true;
  MedianStoppingRule rule(config);
  EXPECT_FALSE(rule.OnResult("a", 1, 0.5).stop);
  EXPECT_FALSE(rule.OnResult("a", 2, 0.75).stop);
  EXPECT_FALSE(rule.OnResult("b", 1, 0.25).stop);
  const StopDecision b = rule.OnResult("b", 2, 0.5);  // a's mean 0.625; b's best 0.5
  EXPECT_TRUE(b.stop);
  EXPECT_THAT(b.reason, HasSubstr("its best val_accuracy so far, 0.5, is worse than the cutoff "
                                  "0.625"));
  EXPECT_FALSE(rule.OnResult("c", 1, 0.625).stop);
  EXPECT_FALSE(rule.OnResult("c", 2, 0.625).stop);  // others a 0.625, b 0.375: median 0.5
}

// A NaN is left out; an epoch reported again (a resumed trial) replaces the earlier value.
TEST(MedianStoppingRuleTest, NaNIsLeftOutAndARepeatedEpochReplaces) {
  MedianStoppingRule rule(Median(1, 1));
  EXPECT_FALSE(rule.OnResult("a", 1, 1.0).stop);
  EXPECT_FALSE(rule.OnResult("a", 2, 1.0).stop);
  EXPECT_FALSE(rule.OnResult("b", 1, std::nan("")).stop);
  EXPECT_FALSE(rule.OnResult("b", 2, std::nan("")).stop);
  EXPECT_FALSE(rule.OnResult("c", 1, 2.0).stop);
  EXPECT_TRUE(rule.OnResult("c", 2, 2.0).stop);  // b has no value: a's mean 1.0 alone
  // a's epoch 2 again: 3.0 replaces 1.0 (a's best stays 1.0, better than c's mean 2.0).
  EXPECT_FALSE(rule.OnResult("a", 2, 3.0).stop);
  // d meets a's mean (1 + 3) / 2 = 2.0 and c's 2.0: median 2.0, and 1.75 is better. (Had a kept
  // its first epoch 2, the median would be 1.5 and d would stop.)
  EXPECT_FALSE(rule.OnResult("d", 1, 1.75).stop);
  EXPECT_FALSE(rule.OnResult("d", 2, 1.75).stop);
}

// ---------------------------------------------------------------------------------------------

// A set at one epoch: every result of it is recorded before any is judged, so the trials of a
// fused run count for each other (fed one by one, the first had no others at its epoch yet).
// grace_period 1, min_samples_required 2, mode min; at epoch 2 the running means (1..2) are
// a 0.75, b 0.875, c 1.125: c's best 1.0 is worse than the median 0.8125 of a's and b's.
TEST(MedianStoppingRuleTest, ASetIsRecordedBeforeAnyOfItIsJudged) {
  MedianStoppingRule rule(Median(1, 2));
  for (const StopDecision& d : rule.OnResults({{"c", 1, 1.25}, {"a", 1, 1.0}, {"b", 1, 1.0}})) {
    EXPECT_FALSE(d.stop);  // epoch 1 is the grace period
  }
  const std::vector<StopDecision> decisions =
      rule.OnResults({{"c", 2, 1.0}, {"a", 2, 0.5}, {"b", 2, 0.75}});
  EXPECT_TRUE(decisions[0].stop);
  EXPECT_THAT(decisions[0].reason, HasSubstr("its best val_loss so far, 1, is worse than the "
                                             "cutoff 0.8125"));
  EXPECT_FALSE(decisions[1].stop);
  EXPECT_FALSE(decisions[2].stop);
}

mpsd::v1::SweepSpec SweepWith(const std::string& type, const std::string& metric) {
  mpsd::v1::SweepSpec sweep;
  sweep.mutable_scheduler()->set_type(type);
  sweep.mutable_scheduler()->set_metric(metric);
  return sweep;
}

TEST(ReadTrialStoppingTest, DefaultsAndModeByName) {
  EXPECT_EQ(*ReadTrialStopping(mpsd::v1::SweepSpec(), 3), std::nullopt);
  absl::StatusOr<std::optional<TrialStoppingConfig>> asha =
      ReadTrialStopping(SweepWith("asha", "val_loss"), 3);
  ASSERT_TRUE(asha.ok()) << asha.status();
  ASSERT_TRUE(asha->has_value());
  EXPECT_EQ((*asha)->rule, TrialStoppingConfig::Rule::kAsha);
  EXPECT_FALSE((*asha)->maximize);
  EXPECT_EQ((*asha)->grace_period, 1);
  EXPECT_EQ((*asha)->reduction_factor, 3);
  EXPECT_EQ((*asha)->max_epochs, 3);
  absl::StatusOr<std::optional<TrialStoppingConfig>> median =
      ReadTrialStopping(SweepWith("median_stopping", "val_accuracy"), 3);
  ASSERT_TRUE(median.ok()) << median.status();
  EXPECT_EQ((*median)->rule, TrialStoppingConfig::Rule::kMedianStopping);
  EXPECT_TRUE((*median)->maximize);
  EXPECT_EQ((*median)->min_samples_required, 3);
  for (const char* lower : {"train_loss", "val_mse", "test_mae", "val_my_loss"}) {
    EXPECT_FALSE((*ReadTrialStopping(SweepWith("asha", lower), 3))->maximize) << lower;
  }
  for (const char* higher : {"val_macro_f1", "val_r2", "val_top2_accuracy"}) {
    EXPECT_TRUE((*ReadTrialStopping(SweepWith("asha", higher), 3))->maximize) << higher;
  }
  mpsd::v1::SweepSpec own = SweepWith("asha", "val_top5");
  own.mutable_scheduler()->set_mode("max");
  EXPECT_TRUE((*ReadTrialStopping(own, 3))->maximize);
  own.mutable_scheduler()->set_mode("min");
  EXPECT_FALSE((*ReadTrialStopping(own, 3))->maximize);
}

TEST(ReadTrialStoppingTest, BadValuesNameTheirField) {
  const auto error = [](const mpsd::v1::SweepSpec& sweep, int max_epochs = 3) {
    absl::StatusOr<std::optional<TrialStoppingConfig>> read = ReadTrialStopping(sweep, max_epochs);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(read.status().message());
  };
  EXPECT_EQ(error(SweepWith("hyperband", "val_loss")),
            "sweep.scheduler.type: must be asha or median_stopping, got \"hyperband\"");
  EXPECT_THAT(error(SweepWith("", "val_loss")), HasSubstr("sweep.scheduler.type: required"));
  EXPECT_THAT(error(SweepWith("asha", "")), HasSubstr("sweep.scheduler.metric: required"));
  EXPECT_THAT(error(SweepWith("asha", "val_top5")),
              HasSubstr("sweep.scheduler.mode: required for the metric \"val_top5\""));
  // A typo of a built-in name is named as one, before the mode it would otherwise need.
  EXPECT_EQ(error(SweepWith("asha", "val_acc")),
            "sweep.scheduler.metric: \"val_acc\" is no built-in epoch metric (did you mean "
            "\"val_accuracy\"?); a metric of the job's own (TrainJob.metrics) needs "
            "sweep.scheduler.mode");
  mpsd::v1::SweepSpec sweep = SweepWith("asha", "val_loss");
  sweep.mutable_scheduler()->set_mode("lowest");
  EXPECT_EQ(error(sweep), "sweep.scheduler.mode: must be min or max, got \"lowest\"");
  sweep = SweepWith("asha", "val_accuracy");
  sweep.mutable_scheduler()->set_mode("min");
  EXPECT_EQ(error(sweep),
            "sweep.scheduler.mode: min for val_accuracy, where higher is better: write max, or "
            "leave mode out for the default");
  sweep = SweepWith("asha", "val_loss");
  sweep.mutable_scheduler()->set_reduction_factor(1);
  EXPECT_EQ(error(sweep), "sweep.scheduler.reduction_factor: must be >= 2, got 1");
  sweep = SweepWith("asha", "val_loss");
  sweep.mutable_scheduler()->set_grace_period(0);
  EXPECT_EQ(error(sweep), "sweep.scheduler.grace_period: must be >= 1 (epochs), got 0");
  sweep = SweepWith("asha", "val_loss");
  sweep.mutable_scheduler()->set_min_samples_required(2);
  EXPECT_THAT(error(sweep), HasSubstr("sweep.scheduler.min_samples_required: only type "
                                      "median_stopping takes it"));
  sweep = SweepWith("median_stopping", "val_loss");
  sweep.mutable_scheduler()->set_reduction_factor(2);
  EXPECT_THAT(error(sweep), HasSubstr("sweep.scheduler.reduction_factor: only type asha"));
  sweep = SweepWith("median_stopping", "val_loss");
  sweep.mutable_scheduler()->set_min_samples_required(0);
  EXPECT_EQ(error(sweep), "sweep.scheduler.min_samples_required: must be >= 1, got 0");
  // No epoch left to stop at: asha's first rung at the last epoch; median_stopping stops only
  // after grace_period and before the last epoch.
  sweep = SweepWith("asha", "val_loss");
  sweep.mutable_scheduler()->set_grace_period(3);
  EXPECT_THAT(error(sweep, 3), HasSubstr("sweep.scheduler.grace_period: 3 leaves no epoch to stop "
                                         "a trial at"));
  EXPECT_TRUE(ReadTrialStopping(sweep, 4).ok());
  EXPECT_THAT(error(SweepWith("median_stopping", "val_loss"), 2),
              HasSubstr("sweep.scheduler.grace_period: 1 leaves no epoch"));
  EXPECT_TRUE(ReadTrialStopping(SweepWith("median_stopping", "val_loss"), 3).ok());
}

// ---------------------------------------------------------------------------------------------

mpsd::v1::EpochMetrics Epoch(int epoch, std::optional<double> val_loss) {
  mpsd::v1::EpochMetrics metrics;
  metrics.set_epoch(epoch);
  metrics.set_train_loss(0.1);  // never the metric here
  if (val_loss.has_value()) metrics.set_val_loss(*val_loss);
  return metrics;
}

TEST(SweepStopperTest, ReadsTheMetricFromEpochsAndPassesOverThoseWithout) {
  SweepStopper stopper(Asha(1, 2, 3));
  EXPECT_EQ(stopper.Describe(), "asha on val_loss (min; rungs at epochs 1, 2, reduction_factor 2)");
  EXPECT_FALSE(stopper.Observe("a", 3, Epoch(1, 0.5)).stop);
  // b's epoch 1 did not measure val_loss: nothing recorded, so its epoch 2 is judged at rung 2
  // (nothing there yet), not at rung 1.
  EXPECT_FALSE(stopper.Observe("b", 3, Epoch(1, std::nullopt)).stop);
  EXPECT_FALSE(stopper.Observe("b", 3, Epoch(2, 0.9)).stop);
  EXPECT_TRUE(stopper.Observe("c", 3, Epoch(1, 0.9)).stop);
  // A user's metric in the map.
  TrialStoppingConfig own = Asha(1, 2, 3);
  own.metric = "val_top2";
  own.maximize = true;
  SweepStopper mapped(own);
  mpsd::v1::EpochMetrics epoch = Epoch(1, 0.5);
  (*epoch.mutable_metrics())["val_top2"] = 0.75;
  EXPECT_FALSE(mapped.Observe("a", 3, epoch).stop);
  (*epoch.mutable_metrics())["val_top2"] = 0.5;
  EXPECT_TRUE(mapped.Observe("b", 3, epoch).stop);
}

// A trial at its last epoch has finished training: a stop there is dropped, but its value
// still counts for the trials after it.
TEST(SweepStopperTest, NeverStopsATrialAtItsLastEpoch) {
  SweepStopper stopper(Asha(1, 2, 3));
  EXPECT_FALSE(stopper.Observe("a", 3, Epoch(1, 0.5)).stop);
  EXPECT_FALSE(stopper.Observe("short", 1, Epoch(1, 0.9)).stop);  // trains 1 epoch
  // Recorded all the same: rung 1 holds {0.5, 0.9}, cutoff 0.7.
  EXPECT_TRUE(stopper.Observe("b", 3, Epoch(1, 0.8)).stop);
  EXPECT_EQ(SweepStopper(Median(1, 3)).Describe(),
            "median_stopping on val_loss (min; after epoch 1, once 3 other trial(s) reached the "
            "epoch)");
}

// ObserveTogether: the epochs of a set, each read as Observe reads one, decided together; the
// decisions in the events' order, with a stop at a trial's last epoch dropped.
TEST(SweepStopperTest, ObservesAFusedRunsEpochsTogether) {
  SweepStopper stopper(Asha(1, 2, 3));
  const std::vector<StopDecision> decisions = stopper.ObserveTogether({
      {"worst", 3, Epoch(1, 0.9)},
      {"unmeasured", 3, Epoch(1, std::nullopt)},
      {"best", 3, Epoch(1, 0.4)},
      {"last", 1, Epoch(1, 0.8)},  // trains 1 epoch: done, never stopped
      {"good", 3, Epoch(1, 0.5)},
  });
  ASSERT_EQ(decisions.size(), 5u);
  EXPECT_TRUE(decisions[0].stop);
  EXPECT_THAT(decisions[0].reason, HasSubstr("val_loss 0.9 is worse than the cutoff 0.5"));
  EXPECT_FALSE(decisions[1].stop);
  EXPECT_FALSE(decisions[2].stop);
  EXPECT_FALSE(decisions[3].stop);
  EXPECT_FALSE(decisions[4].stop);  // others {0.9, 0.4, 0.8}: cutoff 0.8
}

}  // namespace
}  // namespace mpsd::server
