// Scaled dot-product attention (trainer/compat/attention.h).
#include "trainer/compat/attention.h"

#include <torch/version.h>

#include <cmath>

namespace mpsd::trainer::compat {

torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, double dropout_p) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor probabilities =
      torch::softmax(torch::matmul(q, k.transpose(/*dim0=*/-2, /*dim1=*/-1)) * scale, /*dim=*/-1);
  if (dropout_p > 0) probabilities = torch::dropout(probabilities, dropout_p, /*train=*/true);
  return torch::matmul(probabilities, v);
#endif
}

}  // namespace mpsd::trainer::compat
