// ASHA and the median stopping rule over a sweep's trials (trial_stopping.h), and the reading
// of SweepSpec.scheduler.
#include "server/core/trial_stopping.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/epoch_metric.h"
#include "api/field_text.h"

namespace mpsd::server {
namespace {

absl::Status Refuse(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("sweep.scheduler.", field, ": ", why));
}

std::string Quoted(const std::string& text) {
  return absl::StrCat("\"", absl::CHexEscape(text.substr(0, 64)), "\"");
}

absl::Status ReadMode(const mpsd::v1::SweepScheduler& s, TrialStoppingConfig& config) {
  if (s.mode() == "min" || s.mode() == "max") {
    config.maximize = s.mode() == "max";
    if (std::string why = api::ModeContradiction(config.metric, config.maximize); !why.empty()) {
      return Refuse("mode", why);
    }
    return absl::OkStatus();
  }
  if (!s.mode().empty()) {
    return Refuse("mode", absl::StrCat("must be min or max, got ", Quoted(s.mode())));
  }
  const std::optional<bool> maximize = api::HigherIsBetter(config.metric);
  if (!maximize.has_value()) {
    // The names with a direction (api::HigherIsBetter's endings) on each split: a name close to
    // one of them is most likely its typo, not a metric of the job's own.
    std::vector<std::string> named;
    for (const char* split : {"train_", "val_", "test_"}) {
      for (const char* metric : {"loss", "accuracy", "macro_f1", "mse", "mae", "r2"}) {
        named.push_back(absl::StrCat(split, metric));
      }
    }
    if (const std::optional<std::string> meant = api::ClosestName(config.metric, named);
        meant.has_value()) {
      return Refuse("metric", absl::StrCat(Quoted(config.metric),
                                           " is no built-in epoch metric (did you mean \"", *meant,
                                           "\"?); a metric of the job's own (TrainJob.metrics) "
                                           "needs sweep.scheduler.mode"));
    }
    // A misspelt built-in name lands here too (the job's own metric names are known only to
    // the executor, which checks the name once the mode is given): say so.
    return Refuse("mode", absl::StrCat("required for the metric ", Quoted(config.metric),
                                       ": min (lower is better) or max; only names ending in "
                                       "_loss, _mse, _mae (min) or _accuracy, _f1, _r2 (max) "
                                       "have a default (if this is not a metric of your own, "
                                       "check its spelling: e.g. val_loss, val_accuracy, "
                                       "train_loss, test_accuracy, lowercase)"));
  }
  config.maximize = *maximize;
  return absl::OkStatus();
}

// grace_period, reduction_factor and min_samples_required: ranges, and set only for the rule
// that uses them.
absl::Status ReadNumbers(const mpsd::v1::SweepScheduler& s, TrialStoppingConfig& config) {
  const bool asha = config.rule == TrialStoppingConfig::Rule::kAsha;
  if (s.has_grace_period()) {
    if (s.grace_period() < 1) {
      return Refuse("grace_period", absl::StrCat("must be >= 1 (epochs), got ", s.grace_period()));
    }
    config.grace_period = s.grace_period();
  }
  if (s.has_reduction_factor()) {
    if (!asha) return Refuse("reduction_factor", "only type asha takes it, not median_stopping");
    if (s.reduction_factor() < 2) {
      return Refuse("reduction_factor", absl::StrCat("must be >= 2, got ", s.reduction_factor()));
    }
    config.reduction_factor = s.reduction_factor();
  }
  if (s.has_min_samples_required()) {
    if (asha) return Refuse("min_samples_required", "only type median_stopping takes it, not asha");
    if (s.min_samples_required() < 1) {
      return Refuse("min_samples_required",
                    absl::StrCat("must be >= 1, got ", s.min_samples_required()));
    }
    config.min_samples_required = s.min_samples_required();
  }
  // No trial is stopped at its last epoch: the first epoch a stop can happen at must lie below.
  const int64_t first_stop = asha ? config.grace_period : int64_t{config.grace_period} + 1;
  if (first_stop >= config.max_epochs) {
    return Refuse("grace_period",
                  absl::StrCat(config.grace_period, " leaves no epoch to stop a trial at: ",
                               asha ? "asha's first rung is at epoch grace_period"
                                    : "median_stopping stops trials only after epoch grace_period",
                               ", the trials train ", config.max_epochs,
                               " epoch(s), and no trial is stopped at its last epoch"));
  }
  return absl::OkStatus();
}

// Linear interpolation as numpy's _lerp (numpy/lib/function_base.py), which quantile's "linear"
// method uses: from the nearer end, so that t = 1 gives b exactly.
double Lerp(double a, double b, double t) {
  return t >= 0.5 ? b - (b - a) * (1 - t) : a + (b - a) * t;
}

// numpy.nanpercentile(values, q × 100) with the default "linear" method: the NaNs left out,
// the virtual index q × (n - 1) into the sorted values. nullopt when no value is left (Ray's
// cutoff is then None, or NaN, and nothing is cut).
std::optional<double> LinearQuantile(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const double index = q * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(index));
  if (below + 1 >= values.size()) return values.back();
  return Lerp(values[below], values[below + 1], index - static_cast<double>(below));
}

// A value in the metric's own units from its compared form.
double Shown(const TrialStoppingConfig& config, double compared) {
  return config.maximize ? compared : -compared;
}

const char* ModeName(const TrialStoppingConfig& config) { return config.maximize ? "max" : "min"; }

}  // namespace

absl::StatusOr<std::optional<TrialStoppingConfig>> ReadTrialStopping(
    const mpsd::v1::SweepSpec& sweep, int max_epochs) {
  if (!sweep.has_scheduler()) return std::nullopt;
  const mpsd::v1::SweepScheduler& s = sweep.scheduler();
  TrialStoppingConfig config;
  config.max_epochs = max_epochs;
  if (s.type() == "asha") {
    config.rule = TrialStoppingConfig::Rule::kAsha;
  } else if (s.type() == "median_stopping") {
    config.rule = TrialStoppingConfig::Rule::kMedianStopping;
  } else {
    return Refuse("type", s.type().empty() ? std::string("required: asha or median_stopping")
                                           : absl::StrCat("must be asha or median_stopping, got ",
                                                          Quoted(s.type())));
  }
  if (s.metric().empty()) {
    return Refuse("metric",
                  "required: an epoch metric such as val_loss or val_accuracy (the "
                  "names early_stopping.monitor takes)");
  }
  config.metric = s.metric();
  if (absl::Status mode = ReadMode(s, config); !mode.ok()) return mode;
  if (absl::Status numbers = ReadNumbers(s, config); !numbers.ok()) return numbers;
  return config;
}

// ---------------------------------------------------------------------------------------------
// ASHA

AshaRule::AshaRule(const TrialStoppingConfig& config) : config_(config) {
  for (int64_t epoch = config.grace_period; epoch < config.max_epochs;
       epoch *= config.reduction_factor) {
    Rung rung;
    rung.epoch = static_cast<int>(epoch);
    rungs_.insert(rungs_.begin(), std::move(rung));  // highest first
  }
}

std::vector<int> AshaRule::rung_epochs() const {
  std::vector<int> epochs;
  for (auto it = rungs_.rbegin(); it != rungs_.rend(); ++it) epochs.push_back(it->epoch);
  return epochs;
}

std::vector<StopDecision> AshaRule::OnResults(const std::vector<TrialResult>& results) {
  // Ray's q: nanpercentile(recorded, (1 - 1/rf) * 100), which divides by 100 again.
  const double q = (1.0 - 1.0 / config_.reduction_factor) * 100.0 / 100.0;
  // Each result's rung, found before any of the set is recorded there: the highest one reached
  // where the trial has no value yet.
  std::vector<Rung*> at(results.size(), nullptr);
  for (size_t i = 0; i < results.size(); ++i) {
    for (Rung& rung : rungs_) {
      if (results[i].epoch < rung.epoch || rung.recorded.count(results[i].trial) > 0) continue;
      at[i] = &rung;
      break;
    }
  }
  for (size_t i = 0; i < results.size(); ++i) {
    if (at[i] != nullptr) {
      at[i]->recorded[results[i].trial] = config_.maximize ? results[i].value : -results[i].value;
    }
  }
  std::vector<StopDecision> decisions(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    if (at[i] == nullptr) continue;
    const Rung& rung = *at[i];
    const TrialResult& result = results[i];
    std::vector<double> others;
    for (const auto& [id, recorded] : rung.recorded) {
      if (id != result.trial) others.push_back(recorded);
    }
    const std::optional<double> cutoff = LinearQuantile(others, q);
    const double compared = rung.recorded.at(result.trial);
    StopDecision& decision = decisions[i];
    decision.stop = cutoff.has_value() && compared < *cutoff;
    if (!decision.stop) continue;
    int together = 0;  // others of this set at this rung
    for (size_t j = 0; j < results.size(); ++j) together += j != i && at[j] == at[i];
    decision.reason = absl::StrFormat(
        "asha stopped the trial at its rung of epoch %d: %s %.6g%s is worse than the cutoff "
        "%.6g for the best 1/%d at this rung (%d trial(s) recorded there %s; mode %s, "
        "grace_period %d, reduction_factor %d)",
        rung.epoch, config_.metric, result.value,
        result.epoch == rung.epoch ? std::string() : absl::StrCat(" (epoch ", result.epoch, ")"),
        Shown(config_, *cutoff), config_.reduction_factor, static_cast<int>(others.size()),
        together == 0 ? std::string("before it")
                      : absl::StrCat("besides it, ", together, " of them at the same time"),
        ModeName(config_), config_.grace_period, config_.reduction_factor);
  }
  return decisions;
}

// ---------------------------------------------------------------------------------------------
// Median stopping

MedianStoppingRule::MedianStoppingRule(const TrialStoppingConfig& config) : config_(config) {}

std::optional<double> MedianStoppingRule::RunningMean(const std::map<int, double>& results,
                                                      int epoch) const {
  double sum = 0;
  int count = 0;
  for (auto it = results.lower_bound(config_.grace_period);
       it != results.end() && it->first <= epoch; ++it) {
    sum += it->second;
    ++count;
  }
  if (count == 0) return std::nullopt;
  return sum / count;
}

std::vector<StopDecision> MedianStoppingRule::OnResults(const std::vector<TrialResult>& results) {
  for (const TrialResult& result : results) {
    if (!std::isnan(result.value)) {
      results_[result.trial][result.epoch] = config_.maximize ? result.value : -result.value;
    }
  }
  std::vector<StopDecision> decisions;
  for (const TrialResult& result : results) {
    decisions.push_back(std::isnan(result.value) ? StopDecision{}
                                                 : Decide(result.trial, result.epoch));
  }
  return decisions;
}

StopDecision MedianStoppingRule::Decide(const std::string& trial, int epoch) const {
  const std::map<int, double>& mine = results_.at(trial);
  if (epoch <= config_.grace_period) return {};
  std::vector<double> means;
  for (const auto& [id, results] : results_) {
    if (id == trial || results.empty() || results.rbegin()->first < epoch) continue;
    const std::optional<double> mean = RunningMean(results, epoch);
    if (!mean.has_value()) return {};  // Ray's median is NaN then: nothing stops
    means.push_back(*mean);
  }
  if (static_cast<int>(means.size()) < config_.min_samples_required) return {};
  std::sort(means.begin(), means.end());
  const size_t middle = means.size() / 2;
  const double median =
      means.size() % 2 == 1 ? means[middle] : (means[middle - 1] + means[middle]) / 2;
  double best = mine.begin()->second;
  for (const auto& [e, v] : mine) best = std::max(best, v);
  StopDecision decision;
  decision.stop = best < median;
  if (!decision.stop) return decision;
  decision.reason = absl::StrFormat(
      "median_stopping stopped the trial at epoch %d: its best %s so far, %.6g, is worse than "
      "the cutoff %.6g, the median of the running means (epochs %d to %d) of the %d other "
      "trial(s) that reached epoch %d (mode %s, grace_period %d, min_samples_required %d)",
      epoch, config_.metric, Shown(config_, best), Shown(config_, median), config_.grace_period,
      epoch, static_cast<int>(means.size()), epoch, ModeName(config_), config_.grace_period,
      config_.min_samples_required);
  return decision;
}

// ---------------------------------------------------------------------------------------------

std::unique_ptr<TrialStoppingRule> MakeTrialStoppingRule(const TrialStoppingConfig& config) {
  if (config.rule == TrialStoppingConfig::Rule::kAsha) return std::make_unique<AshaRule>(config);
  return std::make_unique<MedianStoppingRule>(config);
}

SweepStopper::SweepStopper(const TrialStoppingConfig& config)
    : config_(config), rule_(MakeTrialStoppingRule(config)) {}

StopDecision SweepStopper::Observe(const std::string& trial, int trial_epochs,
                                   const mpsd::v1::EpochMetrics& epoch) {
  return ObserveTogether({TrialEpoch{trial, trial_epochs, epoch}}).front();
}

std::vector<StopDecision> SweepStopper::ObserveTogether(const std::vector<TrialEpoch>& events) {
  std::vector<TrialResult> results;
  std::vector<size_t> fed;  // index into events of each result
  for (size_t i = 0; i < events.size(); ++i) {
    const std::optional<double> value = api::EpochMetricValue(config_.metric, events[i].epoch);
    if (!value.has_value()) continue;
    results.push_back(TrialResult{events[i].trial, events[i].epoch.epoch(), *value});
    fed.push_back(i);
  }
  std::vector<StopDecision> decisions(events.size());
  if (results.empty()) return decisions;
  std::vector<StopDecision> made = rule_->OnResults(results);
  for (size_t k = 0; k < fed.size(); ++k) {
    const TrialEpoch& event = events[fed[k]];
    // A stop at the trial's last epoch is dropped: its training is done.
    if (event.epoch.epoch() < event.trial_epochs) decisions[fed[k]] = std::move(made[k]);
  }
  return decisions;
}

std::string SweepStopper::Describe() const {
  if (config_.rule == TrialStoppingConfig::Rule::kAsha) {
    return absl::StrFormat("asha on %s (%s; rungs at epochs %s, reduction_factor %d)",
                           config_.metric, ModeName(config_),
                           absl::StrJoin(AshaRule(config_).rung_epochs(), ", "),
                           config_.reduction_factor);
  }
  return absl::StrFormat(
      "median_stopping on %s (%s; after epoch %d, once %d other trial(s) reached the epoch)",
      config_.metric, ModeName(config_), config_.grace_period, config_.min_samples_required);
}

}  // namespace mpsd::server
