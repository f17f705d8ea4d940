// The divergence check: non-finite or too large training losses end the job.
#include "trainer/divergence.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/failure_reason.h"

namespace mpsd::trainer {

DivergenceCheck::Verdict DivergenceCheck::Observe(int64_t step, int epoch, double loss,
                                                  double learning_rate) {
  if (diverged_.has_value()) return Verdict::kDiverged;
  const bool finite = std::isfinite(loss);
  if (finite && !(threshold_ > 0 && loss > threshold_)) {
    state_.has_finite = true;
    state_.last_finite_loss = loss;
    state_.last_finite_step = step;
    return Verdict::kFine;
  }
  if (!finite && skip_non_finite_ && state_.skipped < max_skipped_) {
    ++state_.skipped;
    return Verdict::kSkipped;
  }
  diverged_ = Diverged{step, epoch, loss, learning_rate};
  return Verdict::kDiverged;
}

absl::Status DivergenceCheck::Error(int64_t total_steps) const {
  if (!diverged_.has_value()) return absl::OkStatus();
  const Diverged& d = *diverged_;
  const std::string what =
      std::isfinite(d.loss)
          ? absl::StrFormat("training loss %g above divergence_threshold %g", d.loss, threshold_)
          : absl::StrFormat("training loss %g", d.loss);
  std::string last = state_.has_finite
                         ? absl::StrFormat("last finite loss %.6g at step %d",
                                           state_.last_finite_loss, state_.last_finite_step)
                         : std::string("no finite loss before it");
  if (skip_non_finite_ && !std::isfinite(d.loss)) {
    absl::StrAppendFormat(&last,
                          "; %d step(s) with a non-finite loss skipped before it, "
                          "max_skipped_steps %d (nan_policy skip_step)",
                          state_.skipped, max_skipped_);
  }
  return api::WithFailureReason(absl::AbortedError(absl::StrFormat(
                                    "diverged at step %d of %d (epoch %d): %s at learning "
                                    "rate %g; %s",
                                    d.step, total_steps, d.epoch, what, d.learning_rate, last)),
                                mpsd::v1::Job::DIVERGED);
}

}  // namespace mpsd::trainer
