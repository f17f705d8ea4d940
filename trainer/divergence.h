// The divergence check of a training job: a NaN or infinite training loss, or one above
// TrainJob.divergence_threshold, ends the job FAILED with DIVERGED at that step. The loop feeds
// it the per-step losses it reads back from the device in groups (trainer/train_loop.cc's
// StepReadback, on the eager and the CUDA-graph path alike), so the check adds no device work
// and no synchronisation: it looks at values the host has already copied. Torch-free.
// Thread-compatible: one per job, used by the loop's thread.
#ifndef MPSD_TRAINER_DIVERGENCE_H_
#define MPSD_TRAINER_DIVERGENCE_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace mpsd::trainer {

class DivergenceCheck {
 public:
  // threshold: a finite loss above it diverges too; <= 0 = only non-finite losses.
  explicit DivergenceCheck(double threshold = 0) : threshold_(threshold) {}

  // Step `step` (1-based, as step events count) had training loss `loss` at `learning_rate`.
  // Returns true when it diverged; the first diverged step is kept, later calls are ignored.
  bool Observe(int64_t step, int epoch, double loss, double learning_rate);

  bool diverged() const { return diverged_.has_value(); }
  // The first diverged step; 0 when none.
  int64_t diverged_step() const { return diverged_.has_value() ? diverged_->step : 0; }

  // ABORTED with the failure reason DIVERGED attached (api/failure_reason.h):
  // "diverged at step 7 of 40 (epoch 1): training loss nan at learning rate 1e+06; last finite
  // loss 2.3026 at step 6". Only after Observe returned true.
  absl::Status Error(int64_t total_steps) const;

 private:
  struct Diverged {
    int64_t step;
    int epoch;
    double loss;
    double learning_rate;
  };
  const double threshold_;
  std::optional<Diverged> diverged_;
  bool has_finite_ = false;
  double last_finite_loss_ = 0;
  int64_t last_finite_step_ = 0;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_DIVERGENCE_H_
