// The divergence check: non-finite or too large training losses end the job.
#include "trainer/divergence.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/failure_reason.h"

namespace mpsd::trainer {

bool DivergenceCheck::Observe(int64_t step, int epoch, double loss, double learning_rate) {
  if (diverged_.has_value()) return true;
  const bool finite = std::isfinite(loss);
  if (finite && !(threshold_ > 0 && loss > threshold_)) {
    has_finite_ = true;
    last_finite_loss_ = loss;
    last_finite_step_ = step;
    return false;
  }
  diverged_ = Diverged{step, epoch, loss, learning_rate};
  return true;
}

absl::Status DivergenceCheck::Error(int64_t total_steps) const {
  if (!diverged_.has_value()) return absl::OkStatus();
  const Diverged& d = *diverged_;
  const std::string what =
      std::isfinite(d.loss)
          ? absl::StrFormat("training loss %g above divergence_threshold %g", d.loss, threshold_)
          : absl::StrFormat("training loss %g", d.loss);
  const std::string last =
      has_finite_ ? absl::StrFormat("last finite loss %.6g at step %d", last_finite_loss_,
                                    last_finite_step_)
                  : std::string("no finite loss before it");
  return api::WithFailureReason(
      absl::AbortedError(absl::StrFormat("diverged at step %d of %d (epoch %d): %s at learning "
                                         "rate %g; %s",
                                         d.step, total_steps, d.epoch, what, d.learning_rate,
                                         last)),
      mpsd::v1::Job::DIVERGED);
}

}  // namespace mpsd::trainer
