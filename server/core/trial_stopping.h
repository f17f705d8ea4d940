// Early stopping across a sweep's trials (SweepSpec.scheduler): Ray Tune's ASHA and median
// stopping rule as pure classes the scheduler feeds with each trial's epoch results, counted in
// epochs. No I/O, no clock, no threads: a rule's state is a function of the results it was fed,
// in order, so a restarted daemon rebuilds it by feeding the stored epoch events again.
#ifndef MPSD_SERVER_CORE_TRIAL_STOPPING_H_
#define MPSD_SERVER_CORE_TRIAL_STOPPING_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// SweepSpec.scheduler read, with its defaults. A plain value.
struct TrialStoppingConfig {
  enum class Rule { kAsha, kMedianStopping };
  Rule rule = Rule::kAsha;
  // An epoch metric by name (api/epoch_metric.h): "val_loss", "val_accuracy", "val_<name>".
  std::string metric;
  // mode "max": higher values are better.
  bool maximize = false;
  // Epochs, >= 1: asha's first rung; median_stopping stops nothing at or before it.
  int grace_period = 1;
  // asha: >= 2; each rung keeps the best 1/reduction_factor.
  int reduction_factor = 3;
  // median_stopping: >= 1 other trials at an epoch before a trial is compared there.
  int min_samples_required = 3;
  // The largest TrainJob.epochs of the sweep's trials (Ray Tune's max_t): asha's rungs lie
  // below it.
  int max_epochs = 1;
};

// The sweep's scheduler: nullopt when `sweep` has none. `max_epochs`: the largest epochs of its
// trials (effective, >= 1). INVALID_ARGUMENT naming the field ("sweep.scheduler.type", ".metric",
// ".mode", ".grace_period", ".reduction_factor", ".min_samples_required") for: a type other than
// asha or median_stopping, no metric, a mode other than min or max, no mode for a metric whose
// direction its name does not say (SweepScheduler.mode), grace_period < 1,
// reduction_factor < 2, min_samples_required < 1, a field the type does not use, and a
// grace_period that leaves no epoch a trial could be stopped at (asha: grace_period >=
// max_epochs; median_stopping: grace_period + 1 >= max_epochs, as no trial is stopped at its
// last epoch). Whether the trials report the metric is the executor's to say (api/executor.h,
// Validate). Pure.
absl::StatusOr<std::optional<TrialStoppingConfig>> ReadTrialStopping(
    const mpsd::v1::SweepSpec& sweep, int max_epochs);

// A rule's answer to one result.
struct StopDecision {
  bool stop = false;
  // For the trial's message and log when `stop`: the rule, the rung or epoch, the trial's value
  // and the cutoff it missed, in the metric's own units. Empty otherwise.
  std::string reason;
};

// One result: trial `trial` (any stable id; the scheduler's job id) measured `value` of the
// metric at the end of epoch `epoch` (1-based), in the metric's units (the rule applies the
// mode).
struct TrialResult {
  std::string trial;
  int epoch = 0;
  double value = 0;
};

// A stopping rule over the results of a sweep's trials. Thread-compatible: one caller at a time
// (the scheduler calls it under its lock).
class TrialStoppingRule {
 public:
  virtual ~TrialStoppingRule() = default;
  // Results that arrive together, each of a different trial: a fused run's trials at one epoch
  // boundary. Each is decided as if it had arrived after the others (every other trial's
  // result of the set counts for it), so the decisions do not depend on the set's order: fed
  // one by one, the first trial of a fused group at an asha rung would always go on, as there
  // was nothing recorded there before it. A trial's results come in increasing epoch order
  // over calls; a resumed trial may report an epoch again. The decisions, in `results`' order,
  // are about those trials now; the rule remembers the results either way.
  virtual std::vector<StopDecision> OnResults(const std::vector<TrialResult>& results) = 0;
  // One result alone: OnResults of a set of one.
  StopDecision OnResult(const std::string& trial, int epoch, double value) {
    return OnResults({TrialResult{trial, epoch, value}}).front();
  }
};
// Ray Tune's AsyncHyperBandScheduler with one bracket (ray/tune/schedulers/async_hyperband.py,
// _Bracket.on_result and cutoff; Li et al., "A System for Massively Parallel Hyperparameter
// Tuning", MLSys 2020), its time attribute the epoch and max_t the trials' epochs.
//
// Rungs at grace_period × reduction_factor^k epochs, k = 0, 1, ... while below max_epochs
// (Ray's rung at max_t itself is where every trial ends anyway). Values are compared as Ray's
// metric_op makes them, higher is better (mode min: negated). A result at epoch e is checked
// against the highest rung with rung epoch <= e at which the trial has no value yet (rungs are
// visited highest first, and only one rung per result): if there is one, the trial's cutoff
// there is the (1 - 1/reduction_factor) quantile, numpy's default "linear" interpolation, of the
// values the rung recorded before, and those of the results that arrived with it (OnResults;
// NaN values left out, as nanpercentile); the trial stops when
// its value is below the cutoff (strictly: a value equal to the cutoff goes on), and its value
// is recorded at the rung either way (a NaN value too, which never stops). With nothing
// recorded at the rung there is no cutoff and the trial goes on; with one value recorded the
// cutoff is that value, so the second trial at a rung goes on only if it is at least as good as
// the first (Ray cuts there too). Example, mode min, reduction_factor 2 (the median of the
// recorded losses): losses 0.5, 0.9, 0.4, 0.7 reaching a rung in that order: 0.5 goes on (no
// cutoff), 0.9 stops (cutoff 0.5), 0.4 goes on (cutoff 0.7, the median of 0.5 and 0.9), 0.7
// stops (cutoff 0.5, the median of 0.5, 0.9 and 0.4). tests/server/core/trial_stopping_test.cc
// works more by hand.
class AshaRule final : public TrialStoppingRule {
 public:
  explicit AshaRule(const TrialStoppingConfig& config);
  std::vector<StopDecision> OnResults(const std::vector<TrialResult>& results) override;
  // The rung epochs, lowest first.
  std::vector<int> rung_epochs() const;

 private:
  struct Rung {
    int epoch = 0;
    // Trial → its value there, as compared (higher is better).
    std::map<std::string, double> recorded;
  };
  const TrialStoppingConfig config_;
  // Highest first, as Ray's _Bracket._rungs.
  std::vector<Rung> rungs_;
};

// Ray Tune's MedianStoppingRule (ray/tune/schedulers/median_stopping_rule.py, on_trial_result;
// Golovin et al., "Google Vizier: A Service for Black-Box Optimization", KDD 2017), its time
// attribute the epoch, with hard_stop (a stopped trial ends).
//
// Each trial's results are kept per epoch (a repeated epoch replaces the earlier value). A
// result at epoch e > grace_period is judged against the other trials whose newest result is at
// epoch e or later, once there are at least min_samples_required of them: the trial stops when
// its best value so far (over all its epochs, grace_period's and before included: Ray's
// _best_result) is worse than the median (the mean of the middle two for an even count) of
// those trials' running means, each the mean of its values at epochs grace_period to e
// (Ray's _running_mean). Ties go on. Where Ray pauses a trial that lacks samples while other
// trials are pending (min_time_slice), this rule lets it go on: mpsd does not pause a running
// trial. A NaN value is left out (it decides nothing and counts in no mean); another trial with no
// value from grace_period to e makes the median undefined (NaN in Ray): no trial stops then.
class MedianStoppingRule final : public TrialStoppingRule {
 public:
  explicit MedianStoppingRule(const TrialStoppingConfig& config);
  std::vector<StopDecision> OnResults(const std::vector<TrialResult>& results) override;

 private:
  // The decision on `trial`'s result at `epoch`, recorded already.
  StopDecision Decide(const std::string& trial, int epoch) const;
  // The mean of `results` at epochs grace_period to `epoch`; nullopt when there is none.
  std::optional<double> RunningMean(const std::map<int, double>& results, int epoch) const;

  const TrialStoppingConfig config_;
  // Trial → epoch → value, as compared (higher is better).
  std::map<std::string, std::map<int, double>> results_;
};

// The rule `config` names.
std::unique_ptr<TrialStoppingRule> MakeTrialStoppingRule(const TrialStoppingConfig& config);

// A sweep's rule fed from its trials' epoch events. Thread-compatible, as the rule.
class SweepStopper {
 public:
  explicit SweepStopper(const TrialStoppingConfig& config);

  // One epoch event of trial `trial`, a job that trains `trial_epochs` epochs: the metric's
  // value read from it (api/epoch_metric.h) and fed to the rule; an epoch that did not measure
  // it is passed over (no decision, nothing recorded). A stop at the trial's last epoch
  // (epoch >= trial_epochs) is dropped: its training is done, and it is kept as finished.
  StopDecision Observe(const std::string& trial, int trial_epochs,
                       const mpsd::v1::EpochMetrics& epoch);
  // One epoch event of each of several trials that arrive together (a fused run's trials at
  // one epoch boundary), decided as the rule's OnResults decides a set; the decisions in
  // `events`' order, as Observe's.
  struct TrialEpoch {
    std::string trial;
    int trial_epochs = 1;
    mpsd::v1::EpochMetrics epoch;
  };
  std::vector<StopDecision> ObserveTogether(const std::vector<TrialEpoch>& events);

  const TrialStoppingConfig& config() const { return config_; }
  // "asha on val_loss (min; rungs at epochs 1, 2, reduction_factor 2)", for logs.
  std::string Describe() const;

 private:
  const TrialStoppingConfig config_;
  const std::unique_ptr<TrialStoppingRule> rule_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_TRIAL_STOPPING_H_
