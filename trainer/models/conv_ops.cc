// See conv_ops.h.
#include "trainer/models/conv_ops.h"

#include <vector>

namespace mpsd::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool IsChannelsLast(const torch::Tensor& t) {
  return !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// grad [N, C, H, W] summed over N, H and W in float32: [C]. The inner sum runs along memory
// (NCHW: each [N, C] row's H*W; channels_last: over N for each (h, w, c)), the outer one over
// what is left, which is short.
torch::Tensor SumPerChannel(const torch::Tensor& grad) {
  const int64_t n = grad.size(0), c = grad.size(1), hw = grad.size(2) * grad.size(3);
  if (grad.is_contiguous()) {
    return grad.view({n, c, hw}).sum(/*dim=*/2, /*keepdim=*/false, torch::kFloat).sum(/*dim=*/0);
  }
  if (grad.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    return grad.permute({0, 2, 3, 1})
        .reshape({n, hw * c})
        .sum(/*dim=*/0, /*keepdim=*/false, torch::kFloat)
        .view({hw, c})
        .sum(/*dim=*/0);
  }
  return grad.sum({0, 2, 3}, /*keepdim=*/false, torch::kFloat);
}

struct ChannelBias : torch::autograd::Function<ChannelBias> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor output,
                               const torch::Tensor& bias) {
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    ctx->mark_dirty({output});
    output.add_(bias.to(output.scalar_type()).view({1, output.size(1), 1, 1}));
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor grad = grads[0];
    torch::Tensor bias_grad;
    if (ctx->needs_input_grad(1)) {
      const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
      bias_grad = SumPerChannel(grad).to(dtype);
    }
    return {ctx->needs_input_grad(0) ? grad : torch::Tensor(), bias_grad};
  }
};

struct MaxPool2x2Scatter : torch::autograd::Function<MaxPool2x2Scatter> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input) {
    auto [output, indices] = at::max_pool2d_with_indices(input, /*kernel_size=*/{2, 2},
                                                         /*stride=*/{2, 2}, /*padding=*/{0, 0},
                                                         /*dilation=*/{1, 1}, /*ceil_mode=*/false);
    ctx->save_for_backward({indices});
    ctx->saved_data["sizes"] = input.sizes().vec();
    ctx->saved_data["channels_last"] = IsChannelsLast(input);
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor& grad = grads[0];
    const torch::Tensor indices = ctx->get_saved_variables()[0];
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const int64_t n = sizes[0], c = sizes[1], hw = sizes[2] * sizes[3];
    // indices hold each window's choice as h * W + w within its [H, W] plane (ATen's
    // convention), so the scatter runs along the plane: dim 2 of [N, C, H*W], or dim 1 of
    // channels_last's [N, H*W, C]. Shapes and indices are logical: any layout gives the right
    // values, the matching one saves copies.
    if (ctx->saved_data["channels_last"].toBool()) {
      torch::Tensor input_grad =
          torch::zeros(sizes, grad.options().memory_format(at::MemoryFormat::ChannelsLast));
      input_grad.permute({0, 2, 3, 1})
          .view({n, hw, c})
          .scatter_(/*dim=*/1, indices.permute({0, 2, 3, 1}).reshape({n, -1, c}),
                    grad.permute({0, 2, 3, 1}).reshape({n, -1, c}));
      return {input_grad};
    }
    torch::Tensor input_grad =
        torch::zeros(sizes, grad.options().memory_format(at::MemoryFormat::Contiguous));
    input_grad.view({n, c, hw})
        .scatter_(/*dim=*/2, indices.reshape({n, c, -1}), grad.reshape({n, c, -1}));
    return {input_grad};
  }
};

}  // namespace

torch::Tensor AddChannelBias(torch::Tensor output, const torch::Tensor& bias) {
  TORCH_CHECK(output.dim() == 4 && bias.dim() == 1 && bias.size(0) == output.size(1),
              "AddChannelBias: output [N, C, H, W] and bias [C]");
  return ChannelBias::apply(std::move(output), bias);
}

torch::Tensor MaxPool2x2(const torch::Tensor& input) {
  TORCH_CHECK(input.dim() == 4, "MaxPool2x2: input [N, C, H, W]");
  return MaxPool2x2Scatter::apply(input);
}

}  // namespace mpsd::trainer
