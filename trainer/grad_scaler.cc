// GradScaler: torch.cuda.amp.GradScaler's unscale_, step and update, with the scale kept on the
// host (its one synchronisation per step, reading found_inf, happens in Step anyway).
#include "trainer/grad_scaler.h"

#include "trainer/optimizers.h"

namespace mpsd::trainer {

void GradScaler::Unscale(torch::optim::Optimizer& optimizer) {
  if (unscaled_) return;
  unscaled_ = true;
  const double inverse = 1.0 / scale_;
  for (const torch::Tensor& gradient : Gradients(optimizer)) {
    torch::Tensor non_finite = gradient.isfinite().all().logical_not();
    found_inf_ = found_inf_.defined() ? found_inf_.logical_or(non_finite) : non_finite;
    gradient.mul_(inverse);
  }
}

bool GradScaler::Step(torch::optim::Optimizer& optimizer) {
  Unscale(optimizer);
  skipped_ = found_inf_.defined() && found_inf_.item<bool>();
  if (!skipped_) optimizer.step();
  found_inf_ = torch::Tensor();
  unscaled_ = false;
  return !skipped_;
}

void GradScaler::Update() {
  if (skipped_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
}

}  // namespace mpsd::trainer
