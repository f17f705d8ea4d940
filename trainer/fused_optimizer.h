// One optimizer update for K fused trials (trainer/fused_models.h): SGD (momentum, nesterov),
// Adam and AdamW as LibTorch's torch::optim implements them (torch/csrc/api/src/optim/sgd.cpp,
// adam.cpp, adamw.cpp; the formulas of torch.optim.SGD / Adam / AdamW's documentation), applied
// to the stacked parameters at once with each trial's hyperparameters as [K, 1] tensors on the
// device broadcast over its slice. Internal to trainer/: includes torch.
//
// Per step, with g the gradient, p the parameter and trial k's lr, wd, momentum μ, β1, β2, ε:
//   sgd:   d = g + wd·p; b = d (first step), else b = μ·b + d; d = nesterov ? d + μ·b : b
//          (μ = 0: d unchanged); p −= lr·d.
//   adam:  g += wd·p; m = β1·m + (1 − β1)·g; v = β2·v + (1 − β2)·g²;
//          p −= lr / (1 − β1ᵗ) · m / (√v / √(1 − β2ᵗ) + ε).
//   adamw: p ×= 1 − lr·wd; then adam's update without the wd·p term.
// A trial marked inactive (stopped: cancelled, diverged) is frozen: its learning rate and weight
// decay are 0 and its gradients zeroed, so its parameters stay as they are (while finite).
//
// Thread-safety: none; it belongs to the loop that trains.
#ifndef MPSD_TRAINER_FUSED_OPTIMIZER_H_
#define MPSD_TRAINER_FUSED_OPTIMIZER_H_

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "trainer/optimizers.h"

namespace mpsd::trainer {

// One trial's hyperparameters for one step (the schedule applied: learning_rate and, for
// OneCycleLR with cycle_momentum, momentum / beta1 are the step's).
struct TrialHyperparameters {
  double learning_rate = 1e-3;
  double weight_decay = 0;
  double momentum = 0;  // sgd
  double beta1 = 0.9;   // adam, adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  bool active = true;  // false: frozen (see above)
};

class FusedOptimizer {
 public:
  // `parameters`: the fused model's (FusedModel::parameters), each with dim 0 trial-major for
  // `trials` trials; borrowed handles to the same tensors. `kind` and `nesterov` are every
  // trial's (PlanFusion refuses trials that differ in them).
  FusedOptimizer(OptimizerKind kind, bool nesterov, std::vector<torch::Tensor> parameters,
                 int trials);

  // Sets every parameter's gradient to undefined (PyTorch's zero_grad(set_to_none=True)).
  void ZeroGrad();

  // One update with `hyper[k]` for trial k (hyper.size() == trials). The step counter (Adam's
  // bias correction) is shared: every trial steps together. One host-to-device copy of the
  // [rows, K] hyperparameter table per call. Throws c10::Error for LibTorch failures.
  void Step(const std::vector<TrialHyperparameters>& hyper);

  int64_t steps() const { return steps_; }

 private:
  const OptimizerKind kind_;
  const bool nesterov_;
  const int trials_;
  std::vector<torch::Tensor> parameters_;
  // Per parameter: sgd's momentum buffer, adam's exp_avg and exp_avg_sq; undefined until the
  // first step.
  std::vector<torch::Tensor> first_;
  std::vector<torch::Tensor> second_;
  int64_t steps_ = 0;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_FUSED_OPTIMIZER_H_
