// GradScaler: torch.cuda.amp.GradScaler's unscale_, step and update, with the scale kept on the
// host (its one synchronisation per step, reading found_inf, happens in Step anyway).
#include "trainer/grad_scaler.h"

#include <vector>

#include "trainer/compat/optim.h"
#include "trainer/optimizers.h"

namespace mpsd::trainer {

void GradScaler::Unscale(torch::optim::Optimizer& optimizer) {
  if (unscaled_) return;
  unscaled_ = true;
  std::vector<torch::Tensor> gradients = Gradients(optimizer);
  if (gradients.empty()) return;
  const auto options =
      torch::TensorOptions().dtype(torch::kFloat32).device(gradients.front().device());
  found_inf_ = torch::zeros({1}, options);
  compat::NonFiniteCheckAndUnscale(gradients, found_inf_, torch::full({1}, 1.0 / scale_, options));
}

bool GradScaler::Step(torch::optim::Optimizer& optimizer) {
  Unscale(optimizer);
  skipped_ = found_inf_.defined() && found_inf_.item<float>() > 0;
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
