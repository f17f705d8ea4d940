// The divergence check of a training job: a NaN or infinite training loss, or one above
// TrainJob.divergence_threshold, ends the job FAILED with DIVERGED at that step; with
// nan_policy skip_step a non-finite loss is a skipped step instead (the loop did not apply its
// update) until more than max_skipped_steps were skipped. The loop feeds
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
  // skip_non_finite: nan_policy skip_step, skipping at most max_skipped steps in the job.
  explicit DivergenceCheck(double threshold = 0, bool skip_non_finite = false,
                           int64_t max_skipped = 0)
      : threshold_(threshold), skip_non_finite_(skip_non_finite), max_skipped_(max_skipped) {}

  enum class Verdict { kFine, kSkipped, kDiverged };
  // Step `step` (1-based, as step events count) had training loss `loss` at `learning_rate`.
  // kSkipped: a non-finite loss under skip_non_finite within max_skipped (counted); kDiverged
  // for the first diverged step, which is kept (later calls return kDiverged and are ignored).
  Verdict Observe(int64_t step, int epoch, double loss, double learning_rate);

  bool diverged() const { return diverged_.has_value(); }
  // The first diverged step; 0 when none.
  int64_t diverged_step() const { return diverged_.has_value() ? diverged_->step : 0; }
  // Steps skipped so far (kSkipped verdicts, and those restored).
  int64_t skipped() const { return state_.skipped; }

  // What a checkpoint keeps so that a resumed job counts on and names the same last finite loss.
  struct State {
    int64_t skipped = 0;
    bool has_finite = false;
    double last_finite_loss = 0;
    int64_t last_finite_step = 0;
  };
  const State& state() const { return state_; }
  void Restore(const State& state) { state_ = state; }

  // ABORTED with the failure reason DIVERGED attached (api/failure_reason.h):
  // "diverged at step 7 of 40 (epoch 1): training loss nan at learning rate 1e+06; last finite
  // loss 2.3026 at step 6" (skip_non_finite adds how many steps were skipped). Only after
  // Observe returned kDiverged.
  absl::Status Error(int64_t total_steps) const;

 private:
  struct Diverged {
    int64_t step;
    int epoch;
    double loss;
    double learning_rate;
  };
  const double threshold_;
  const bool skip_non_finite_;
  const int64_t max_skipped_;
  std::optional<Diverged> diverged_;
  State state_;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_DIVERGENCE_H_
