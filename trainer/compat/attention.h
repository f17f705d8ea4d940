// Scaled dot-product attention across LibTorch versions (the transformer zoo model). Internal
// to trainer/: includes torch.
#ifndef MPSD_TRAINER_COMPAT_ATTENTION_H_
#define MPSD_TRAINER_COMPAT_ATTENTION_H_

#include <torch/torch.h>

namespace mpsd::trainer::compat {

// softmax(q·kᵀ / √d)·v with dropout `dropout_p` on the probabilities; q, k, v: [N, heads, T, d],
// the result [N, heads, T, d]. LibTorch 2 has a fused kernel (flash / memory-efficient attention
// on CUDA); 1.13 has none, so it is spelled out there (same result, more memory).
torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, double dropout_p);

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_ATTENTION_H_
