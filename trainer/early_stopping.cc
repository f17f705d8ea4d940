// Early stopping's improvement rule and patience (early_stopping.h).
#include "trainer/early_stopping.h"

#include <cmath>

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

}  // namespace mpsd::trainer
