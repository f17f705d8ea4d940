// Optimizer kernels whose availability differs between LibTorch versions: the fused Adam/AdamW
// update, the multi-tensor SGD update, dropping gradients, GradScaler's unscale, and the key of
// torch::optim's per-parameter state. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_COMPAT_OPTIM_H_
#define MPSD_TRAINER_COMPAT_OPTIM_H_

#include <torch/torch.h>
#include <torch/version.h>

#include <string>
#include <vector>

namespace mpsd::trainer::compat {

// The key of a parameter in torch::optim::Optimizer::state(): the TensorImpl's address printed
// as a string in LibTorch 1.x, the address itself (void*) in 2.x. (A function's type, not a
// class layout: every unit of one build sees the same TORCH_VERSION_MAJOR.)
inline auto OptimizerStateKey(const torch::Tensor& param) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<void*>(param.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(param.unsafeGetTensorImpl());
#endif
}

// Whether FusedAdamUpdate runs here: LibTorch >= 2.2. Thread-safe.
bool HasFusedAdam();

// One Adam (decoupled = false: L2 weight decay, torch.optim.Adam) or AdamW (decoupled = true)
// update of every parameter in a few kernel launches, as torch.optim.Adam(fused=True) does:
// state_steps (one [] float32 tensor per parameter, on the device) += 1, then the fused kernel
// with the bias corrections computed on the device from them. `lr` is a [] float32 tensor on
// the device, so a CUDA graph that captured this call follows a schedule. All lists have the
// same length; exp_avgs/exp_avg_sqs are the first and second moments, shaped like the params.
// Without HasFusedAdam(): throws c10::Error (callers check it first).
void FusedAdamUpdate(const std::vector<torch::Tensor>& params,
                     const std::vector<torch::Tensor>& grads,
                     const std::vector<torch::Tensor>& exp_avgs,
                     const std::vector<torch::Tensor>& exp_avg_sqs,
                     const std::vector<torch::Tensor>& state_steps, const torch::Tensor& lr,
                     double beta1, double beta2, double weight_decay, double eps, bool decoupled);

// One torch.optim.SGD update (dampening 0; the formula of PyTorch's _multi_tensor_sgd) of every
// parameter, with `lr` and `momentum` [] float32 tensors on the parameters' device (so a CUDA
// graph that captured this call follows a schedule): d = g + weight_decay·p; with `use_momentum`,
// buf = momentum·buf + d (a zero buffer gives PyTorch's first step, buf = d), then
// d = nesterov ? d + momentum·buf : buf; finally p -= lr·d. `buffers` is empty without momentum,
// else one per parameter. Multi-tensor (_foreach) kernels from LibTorch 2.1; one tensor at a
// time before (same arithmetic).
void MultiTensorSgdUpdate(const std::vector<torch::Tensor>& params,
                          const std::vector<torch::Tensor>& grads,
                          const std::vector<torch::Tensor>& buffers, const torch::Tensor& lr,
                          const torch::Tensor& momentum, double weight_decay, bool nesterov,
                          bool use_momentum);

// Drops the gradients instead of zeroing them: PyTorch 2's default (set_to_none=true), which
// saves one kernel per parameter per step. LibTorch 1.13's zero_grad() can only zero.
void ZeroGradToNone(torch::optim::Optimizer& optimizer);

// GradScaler's unscale_: multiplies every gradient in place by `inverse_scale` ([1] float32 on
// their device) and adds a positive number to `found_inf` ([1] float32, same device) when any
// holds inf or NaN. No synchronisation. On CUDA: at::_amp_foreach_non_finite_check_and_unscale_,
// the fused kernel torch.cuda.amp.GradScaler uses (all gradients on one device); elsewhere spelled
// out per gradient (LibTorch 1.13 has no CPU kernel for it).
void NonFiniteCheckAndUnscale(std::vector<torch::Tensor>& gradients, torch::Tensor& found_inf,
                              const torch::Tensor& inverse_scale);

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_OPTIM_H_
