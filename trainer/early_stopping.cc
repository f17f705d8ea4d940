// Early stopping's improvement rule and patience (early_stopping.h).
#include "trainer/early_stopping.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_format.h"

namespace mpsd::trainer {

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

std::string EarlyStoppingReachNote(const EarlyStoppingConfig& config, int epochs,
                                   int eval_every_epochs) {
  if (!config.enabled || epochs < 1 || eval_every_epochs < 1) return "";
  const int evaluated = epochs / eval_every_epochs + (epochs % eval_every_epochs == 0 ? 0 : 1);
  // The earliest stop follows a first evaluated epoch and `patience` more; a stop at the last
  // evaluated epoch ends nothing early.
  const int64_t needed = static_cast<int64_t>(config.patience) + 2;
  if (evaluated >= needed) return "";
  return absl::StrFormat(
      "early stopping cannot end this job early: %d of its %d epoch(s) %s evaluated "
      "(eval_every_epochs %d), and patience %d needs at least %d; the best epoch is still kept",
      evaluated, epochs, evaluated == 1 ? "is" : "are", eval_every_epochs, config.patience, needed);
}

}  // namespace mpsd::trainer
