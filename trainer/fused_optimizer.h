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
// decay are 0 and its gradients zeroed, so its parameters stay as they are (while finite): sgd
// p −= 0·d; adam p −= 0·m/(√v/c + ε) with ε > 0; adamw p ×= 1 − 0·wd = 1, then adam's −0·….
//
// Two ways to give the hyperparameters: Step(hyper) computes the step's table on the host and
// copies it to the device (the per-trial CPU loop, bit-identical to LibTorch's scalar updates);
// Tabulate + StepWithRows read a precomputed table on the device at a step counter (the batched
// step and its CUDA graph, trainer/fused_step.h: no host value changes between steps). Both
// compute the table's values the same way (in double, rounded to float32 once).
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

  // Rows of a step's hyperparameter table (each row one value per trial; the order is internal,
  // trainer/fused_optimizer.cc's Row).
  static constexpr int64_t kRows = 9;

  // The table of every step of a run: [T, kRows, K] float32 on the CPU, where entry t holds the
  // values Step would compute for its (t+1)-th update from steps[t] (K hyperparameters each:
  // steps[t].size() == trials). Pure.
  torch::Tensor Tabulate(const std::vector<std::vector<TrialHyperparameters>>& steps) const;

  // Freezes trial k in `table` (Tabulate's, on any device) for every step: its learning rate
  // and weight decay 0 and its gradient masked, exactly as Step does for an inactive trial.
  // A few small kernels on the table's device; no sync.
  void FreezeInTable(torch::Tensor& table, int k) const;

  // One update with `rows` = one step of Tabulate's table, [kRows, K, 1] float32 on the
  // parameters' device. Gradients are always masked by the active row (torch::where, so a
  // frozen trial's NaN gradient does not reach its moments). Queues work only: no host read,
  // no host-to-device copy, so a CUDA graph can capture it once InitState has run. Throws
  // c10::Error for LibTorch failures. Does not advance steps().
  void StepWithRows(const torch::Tensor& rows);

  // Creates every parameter's optimizer state as zeros now (sgd's momentum buffer, adam's
  // moments), so that StepWithRows allocates nothing. A zero momentum buffer's first update,
  // μ·0 + d, equals LibTorch's clone of d.
  void InitState();

  // The optimizer's state tensors (defined ones), to snapshot and restore around a warm-up.
  std::vector<torch::Tensor> State() const;

 private:
  // Fills table[.][k] for update number `step` (1-based) from hyper (Step's arithmetic).
  void FillRows(const std::vector<TrialHyperparameters>& hyper, int64_t step,
                torch::TensorAccessor<double, 2> out) const;
  // The update with `rows` [kRows, K, 1] on the device; `mask`: multiply gradients by the active
  // row (Step, with a frozen trial), `where_mask`: select them by it (StepWithRows).
  void Apply(const torch::Tensor& rows, bool mask, bool where_mask);

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
