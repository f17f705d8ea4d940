// Optimizer kernels by LibTorch version (trainer/compat/optim.h).
#include "trainer/compat/optim.h"

#include "trainer/compat/platform.h"

namespace mpsd::trainer::compat {

bool HasFusedAdam() { return MPSD_TRAINER_HAS_FUSED_ADAM; }

void FusedAdamUpdate(const std::vector<torch::Tensor>& params,
                     const std::vector<torch::Tensor>& grads,
                     const std::vector<torch::Tensor>& exp_avgs,
                     const std::vector<torch::Tensor>& exp_avg_sqs,
                     const std::vector<torch::Tensor>& state_steps, const torch::Tensor& lr,
                     double beta1, double beta2, double weight_decay, double eps, bool decoupled) {
#if MPSD_TRAINER_HAS_FUSED_ADAM
  at::_foreach_add_(state_steps, 1);
  if (decoupled) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, state_steps, lr,
                      beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, state_steps, lr,
                     beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  }
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)state_steps, (void)lr;
  (void)beta1, (void)beta2, (void)weight_decay, (void)eps, (void)decoupled;
  TORCH_CHECK(false, "fused Adam needs LibTorch >= 2.2, this is ", TORCH_VERSION);
#endif
}

void MultiTensorSgdUpdate(const std::vector<torch::Tensor>& params,
                          const std::vector<torch::Tensor>& grads,
                          const std::vector<torch::Tensor>& buffers, const torch::Tensor& lr,
                          const torch::Tensor& momentum, double weight_decay, bool nesterov,
                          bool use_momentum) {
  if (params.empty()) return;
#if MPSD_TRAINER_HAS_FOREACH_TENSOR_SCALAR
  std::vector<torch::Tensor> d =
      weight_decay != 0 ? at::_foreach_add(grads, params, weight_decay) : grads;
  if (use_momentum) {
    at::_foreach_mul_(buffers, momentum);
    at::_foreach_add_(buffers, d);
    if (nesterov) {
      d = at::_foreach_add(d, at::_foreach_mul(buffers, momentum));
    } else {
      d = buffers;
    }
  }
  at::_foreach_sub_(params, at::_foreach_mul(d, lr));
#else
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor d = weight_decay != 0 ? grads[i].add(params[i], weight_decay) : grads[i];
    if (use_momentum) {
      buffers[i].mul_(momentum).add_(d);
      d = nesterov ? d.add(buffers[i] * momentum) : buffers[i];
    }
    params[i].sub_(d * lr);
  }
#endif
}

void ZeroGradToNone(torch::optim::Optimizer& optimizer) {
#if TORCH_VERSION_MAJOR >= 2
  optimizer.zero_grad(/*set_to_none=*/true);
#else
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      if (param.grad().defined()) param.mutable_grad().reset();
    }
  }
#endif
}

void NonFiniteCheckAndUnscale(std::vector<torch::Tensor>& gradients, torch::Tensor& found_inf,
                              const torch::Tensor& inverse_scale) {
  if (gradients.empty()) return;
  if (found_inf.is_cuda()) {
    at::_amp_foreach_non_finite_check_and_unscale_(gradients, found_inf, inverse_scale);
    return;
  }
  for (torch::Tensor& gradient : gradients) {
    found_inf.add_(gradient.isfinite().all().logical_not());
    gradient.mul_(inverse_scale.to(gradient.scalar_type()));
  }
}

}  // namespace mpsd::trainer::compat
