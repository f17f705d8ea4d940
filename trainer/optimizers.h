// The optimizers a TrainJob may name (torch.optim's SGD, Adam and AdamW through LibTorch's
// torch::optim): their settings and validation (OptimizerSpec), setting their learning rate and
// momentum per step, and gradient clipping that stays on the device. Internal to trainer/:
// includes torch.
#ifndef MPSD_TRAINER_OPTIMIZERS_H_
#define MPSD_TRAINER_OPTIMIZERS_H_

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/field_checks.h"

namespace mpsd::trainer {

enum class OptimizerKind { kSgd, kAdam, kAdamW };

// "sgd", "adam", "adamw".
std::string OptimizerName(OptimizerKind kind);

// An optimizer's settings with every default applied (the values and their meaning are
// torch.optim's).
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdam;
  double learning_rate = 1e-3;
  // L2 penalty added to the gradient (sgd, adam) or decoupled decay (adamw).
  double weight_decay = 0;
  // sgd only; nesterov needs momentum > 0 (LibTorch checks it when the optimizer is built).
  double momentum = 0;
  bool nesterov = false;
  // adam, adamw.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

// The settings of `spec` with torch.optim's defaults (lr 1e-3 for adam and adamw, 1e-2 for sgd;
// AdamW's weight decay 0.01); name "" is adam. INVALID_ARGUMENT from `fields` (the spec's path,
// "train_job.optimizer") for an unknown name, a value out of range (learning_rate and eps > 0,
// weight_decay >= 0, momentum and betas in [0, 1), nesterov with momentum > 0) or a field of
// another optimizer ("momentum" for adam). Thread-safe.
absl::StatusOr<OptimizerConfig> ResolveOptimizer(const mpsd::v1::OptimizerSpec& spec,
                                                 const FieldChecks& fields);

// "sgd lr 0.1 weight_decay 0 momentum 0.9 nesterov", "adam lr 0.001 weight_decay 0 betas (0.9,
// 0.999) eps 1e-08": the settings for a job's log.
std::string DescribeOptimizer(const OptimizerConfig& config);

// A new optimizer over `parameters` (the model's, on its device). Throws c10::Error for settings
// LibTorch refuses (the caller validates first).
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(std::vector<torch::Tensor> parameters,
                                                       const OptimizerConfig& config);

// Parameters that share optimizer settings (TrainJob.param_groups).
struct ParameterGroup {
  std::vector<torch::Tensor> parameters;
  double learning_rate = 0;
  double weight_decay = 0;
};

// A new optimizer with one parameter group per entry of `groups` (in order), each with `config`'s
// settings but its own learning rate and weight decay. Throws c10::Error as MakeOptimizer does.
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(std::vector<ParameterGroup> groups,
                                                       const OptimizerConfig& config);

// Sets the learning rate of every parameter group, as a PyTorch scheduler does before a step:
// `learning_rate` × scales[i] for group i (× 1 where `scales` has no entry).
void SetLearningRate(torch::optim::Optimizer& optimizer, double learning_rate,
                     const std::vector<double>& scales = {});

// Sets SGD's momentum, or Adam's / AdamW's beta1, of every parameter group, as OneCycleLR does
// with cycle_momentum. `kind` is what `optimizer` was built as (MakeOptimizer's config.kind).
void SetMomentum(torch::optim::Optimizer& optimizer, OptimizerKind kind, double momentum);

// Every gradient of `optimizer`'s parameters (those that have one).
std::vector<torch::Tensor> Gradients(torch::optim::Optimizer& optimizer);

// Scales `gradients` in place so that their global L2 norm is at most `max_norm` (> 0), as
// torch.nn.utils.clip_grad_norm_ (PyTorch 2): total = ‖(‖g‖₂ for each g)‖₂, then every g ×=
// min(1, max_norm / (total + 1e-6)). Unlike LibTorch's clip_grad_norm_, which returns a double
// and so synchronises, everything stays on the device: returns the total norm before clipping,
// [] float32 on the gradients' device (0 with no gradient). A non-finite total makes the
// gradients NaN, as PyTorch's does (fp16 then skips the step).
torch::Tensor ClipGradNorm(const std::vector<torch::Tensor>& gradients, double max_norm);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_OPTIMIZERS_H_
