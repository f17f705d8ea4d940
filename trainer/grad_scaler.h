// Dynamic loss scaling for fp16 training, as torch.cuda.amp.GradScaler does it, on any device
// (so the CPU tests exercise it). Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_GRAD_SCALER_H_
#define MPSD_TRAINER_GRAD_SCALER_H_

#include <torch/torch.h>

#include <cstdint>

namespace mpsd::trainer {

// The loss is multiplied by `scale` before backward so that small fp16 gradients do not flush
// to zero; the gradients are divided by it again before clipping and the optimizer step. A step
// whose gradients hold inf or NaN is skipped and the scale backs off; after `growth_interval`
// clean steps in a row it grows. Usage per optimizer step (as in PyTorch):
//   Scale(loss).backward();        // once per accumulated batch
//   Unscale(optimizer);            // then clip the (now true) gradients
//   const bool stepped = Step(optimizer);
//   Update();
// Only Step synchronises (once, to read whether any gradient was inf/NaN; GradScaler.step does
// the same). Not thread-safe; one per job.
class GradScaler {
 public:
  // GradScaler's defaults.
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
  };

  explicit GradScaler(const Options& options) : options_(options), scale_(options.init_scale) {}
  GradScaler() : GradScaler(Options()) {}

  // loss × scale (same shape, device and dtype as `loss`).
  torch::Tensor Scale(const torch::Tensor& loss) const { return loss * scale_; }

  // Divides every gradient of `optimizer`'s parameters by the scale in place and records, on
  // the device, whether any of them holds inf or NaN. No synchronisation. At most once per step.
  void Unscale(torch::optim::Optimizer& optimizer);

  // Runs optimizer.step() unless the gradients held inf/NaN (unscaling them first if Unscale
  // was not called for this step). Returns whether it stepped. Synchronises once.
  bool Step(torch::optim::Optimizer& optimizer);

  // After Step: a skipped step multiplies the scale by backoff_factor and restarts the count of
  // clean steps; the growth_interval-th clean step in a row multiplies it by growth_factor.
  void Update();

  // The scale the next step's loss is multiplied by.
  double scale() const { return scale_; }
  // Clean steps in a row since the scale last changed (GradScaler's _growth_tracker).
  int64_t growth_tracker() const { return growth_tracker_; }
  // Restores the state saved from scale() and growth_tracker() (checkpoints).
  void Restore(double scale, int64_t growth_tracker) {
    scale_ = scale;
    growth_tracker_ = growth_tracker;
  }

 private:
  const Options options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  // [1] float32 on the gradients' device, > 0 when a gradient of the current step is inf/NaN;
  // defined once Unscale ran for the step.
  torch::Tensor found_inf_;
  bool unscaled_ = false;
  bool skipped_ = false;  // the last Step's decision, for Update
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_GRAD_SCALER_H_
