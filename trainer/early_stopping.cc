// Early stopping's improvement rule and patience (early_stopping.h).
#include "trainer/early_stopping.h"

#include <cmath>

namespace mpsd::trainer {

std::optional<double> MonitoredValue(const std::string& monitor,
                                     const mpsd::v1::EpochMetrics& epoch) {
  // multilabel and regression: their map holds every metric measured (none other is).
  if (!epoch.metrics().empty()) {
    const auto found = epoch.metrics().find(monitor);
    if (found == epoch.metrics().end()) return std::nullopt;
    return found->second;
  }
  if (monitor == "train_loss") return epoch.train_loss();
  if (monitor == "train_accuracy") return epoch.train_accuracy();
  if (monitor == "val_loss" && epoch.has_val_loss()) return epoch.val_loss();
  if (monitor == "val_accuracy" && epoch.has_val_accuracy()) return epoch.val_accuracy();
  if (monitor == "test_loss" && epoch.evaluated()) return epoch.test_loss();
  if (monitor == "test_accuracy" && epoch.evaluated()) return epoch.test_accuracy();
  return std::nullopt;
}

EarlyStopping::Decision EarlyStopping::Observe(int epoch, double value) {
  Decision decision;
  const bool better =
      !std::isnan(value) &&
      (!state_.best.has_value() || (config_.maximize ? value > *state_.best + config_.min_delta
                                                     : value < *state_.best - config_.min_delta));
  if (better) {
    state_.best = value;
    state_.best_epoch = epoch;
    state_.waited = 0;
    decision.improved = true;
    return decision;
  }
  decision.stop = ++state_.waited >= config_.patience;
  return decision;
}

}  // namespace mpsd::trainer
