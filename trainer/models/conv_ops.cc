// See conv_ops.h.
#include "trainer/models/conv_ops.h"

#include <vector>

#include "trainer/models.h"
#include "trainer/models/conv_kernels.h"
#include "trainer/models/conv_kernels_cuda.h"

namespace mpsd::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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
    ctx->saved_data["channels_last"] = HasChannelsLastStrides(input);
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

at::MemoryFormat FormatOf(const torch::Tensor& t) {
  return HasChannelsLastStrides(t) ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

// `t` if it is dense in either layout, else a contiguous copy.
torch::Tensor Dense(const torch::Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast) ? t : t.contiguous();
}

// ---- the CPU reference loops of conv_kernels.cu: the same per-element functions ----------------
// One output element per iteration, in memory order, as the CUDA kernels' threads.

void CpuBiasReluForward(const torch::Tensor& output, const torch::Tensor& bias,
                        bool channels_last) {
  const int64_t channels = output.size(1), height = output.size(2), width = output.size(3);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, output.scalar_type(), "CpuBiasReluForward", [&] {
        scalar_t* data = output.data_ptr<scalar_t>();
        const float* bias_data = bias.data_ptr<float>();
        at::parallel_for(0, output.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            const conv_kernels::Position<int64_t> p =
                conv_kernels::PositionOf(i, channels, height, width, channels_last);
            data[i] =
                conv_kernels::BiasRelu(data[i], conv_kernels::BiasAs<scalar_t>(bias_data[p.c]));
          }
        });
      });
}

void CpuBiasMaxPoolReluForward(const torch::Tensor& input, const torch::Tensor& bias,
                               const torch::Tensor& output, const torch::Tensor& choice,
                               bool channels_last) {
  const int64_t channels = output.size(1), height = output.size(2), width = output.size(3);
  const conv_kernels::Strides<int64_t> in = conv_kernels::StridesOf<int64_t>(input);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, input.scalar_type(), "CpuBiasMaxPoolReluForward", [&] {
        const scalar_t* input_data = input.data_ptr<scalar_t>();
        const float* bias_data = bias.data_ptr<float>();
        scalar_t* out = output.data_ptr<scalar_t>();
        uint8_t* chosen = choice.data_ptr<uint8_t>();
        at::parallel_for(0, output.numel(), 1 << 12, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            const conv_kernels::Position<int64_t> p =
                conv_kernels::PositionOf(i, channels, height, width, channels_last);
            conv_kernels::PoolWindowForward(input_data + conv_kernels::WindowOffset(p, in), in.h,
                                            in.w, conv_kernels::BiasAs<scalar_t>(bias_data[p.c]),
                                            out + i, chosen + i);
          }
        });
      });
}

void CpuBiasMaxPoolReluBackward(const torch::Tensor& output_grad, const torch::Tensor& choice,
                                const torch::Tensor& input_grad, const torch::Tensor& bias_part,
                                bool channels_last) {
  const int64_t channels = choice.size(1), height = choice.size(2), width = choice.size(3);
  const conv_kernels::Strides<int64_t> in = conv_kernels::StridesOf<int64_t>(input_grad);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, input_grad.scalar_type(), "CpuBiasMaxPoolReluBackward", [&] {
        const scalar_t* grad = output_grad.data_ptr<scalar_t>();
        const uint8_t* chosen = choice.data_ptr<uint8_t>();
        scalar_t* in_grad = input_grad.data_ptr<scalar_t>();
        float* part = bias_part.data_ptr<float>();
        at::parallel_for(0, choice.numel(), 1 << 12, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            const conv_kernels::Position<int64_t> p =
                conv_kernels::PositionOf(i, channels, height, width, channels_last);
            part[i] = conv_kernels::PoolWindowBackward(
                grad[i], chosen[i], in_grad + conv_kernels::WindowOffset(p, in), in.h, in.w);
          }
        });
      });
}

// The fused layers on the CPU (the reference loops) or on CUDA (the kernels); ConvOps below
// sends every other case to the composition (public functions below). Each walks the tensor it
// writes in memory order.
bool HasFusedKernels(const torch::Tensor& t) {
  return t.is_cpu() || (t.is_cuda() && HasConvCudaKernels());
}

void BiasReluForward(const torch::Tensor& output, const torch::Tensor& bias) {
  const bool channels_last = HasChannelsLastStrides(output);
#ifdef MPSD_TRAINER_WITH_CUDA_KERNELS
  if (output.is_cuda()) return conv_kernels::CudaBiasReluForward(output, bias, channels_last);
#endif
  CpuBiasReluForward(output, bias, channels_last);
}

void BiasMaxPoolReluForward(const torch::Tensor& input, const torch::Tensor& bias,
                            const torch::Tensor& output, const torch::Tensor& choice) {
  const bool channels_last = HasChannelsLastStrides(output);
#ifdef MPSD_TRAINER_WITH_CUDA_KERNELS
  if (input.is_cuda()) {
    return conv_kernels::CudaBiasMaxPoolReluForward(input, bias, output, choice, channels_last);
  }
#endif
  CpuBiasMaxPoolReluForward(input, bias, output, choice, channels_last);
}

void BiasMaxPoolReluBackward(const torch::Tensor& output_grad, const torch::Tensor& choice,
                             const torch::Tensor& input_grad, const torch::Tensor& bias_part) {
  const bool channels_last = HasChannelsLastStrides(choice);
#ifdef MPSD_TRAINER_WITH_CUDA_KERNELS
  if (choice.is_cuda()) {
    return conv_kernels::CudaBiasMaxPoolReluBackward(output_grad, choice, input_grad, bias_part,
                                                     channels_last);
  }
#endif
  CpuBiasMaxPoolReluBackward(output_grad, choice, input_grad, bias_part, channels_last);
}

struct ChannelBiasRelu : torch::autograd::Function<ChannelBiasRelu> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor output,
                               const torch::Tensor& bias) {
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    BiasReluForward(output, bias.to(torch::kFloat).contiguous());
    // Written through its data pointer: tell autograd's version counter, as an ATen op would.
    output.unsafeGetTensorImpl()->bump_version();
    ctx->mark_dirty({output});
    ctx->save_for_backward({output});
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor result = ctx->get_saved_variables()[0];
    const torch::Tensor grad = at::threshold_backward(grads[0], result, /*threshold=*/0);
    torch::Tensor bias_grad;
    if (ctx->needs_input_grad(1)) {
      const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
      bias_grad = SumPerChannel(grad).to(dtype);
    }
    return {ctx->needs_input_grad(0) ? grad : torch::Tensor(), bias_grad};
  }
};

struct ChannelBiasMaxPoolRelu : torch::autograd::Function<ChannelBiasMaxPoolRelu> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& bias) {
    const at::MemoryFormat format = FormatOf(input);
    const std::vector<int64_t> sizes = {input.size(0), input.size(1), input.size(2) / 2,
                                        input.size(3) / 2};
    torch::Tensor output = torch::empty(sizes, input.options().memory_format(format));
    torch::Tensor choice =
        torch::empty(sizes, input.options().dtype(torch::kUInt8).memory_format(format));
    BiasMaxPoolReluForward(input, bias.to(torch::kFloat).contiguous(), output, choice);
    ctx->save_for_backward({choice});
    ctx->saved_data["sizes"] = input.sizes().vec();
    ctx->saved_data["channels_last"] = format == at::MemoryFormat::ChannelsLast;
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor choice = ctx->get_saved_variables()[0];
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const at::MemoryFormat format = ctx->saved_data["channels_last"].toBool()
                                        ? at::MemoryFormat::ChannelsLast
                                        : at::MemoryFormat::Contiguous;
    const torch::Tensor grad = grads[0].contiguous(FormatOf(choice));
    const auto options = grad.options().memory_format(format);
    // Floor mode leaves an odd last row or column out of every window: its gradient is 0.
    torch::Tensor input_grad = sizes[2] % 2 == 0 && sizes[3] % 2 == 0
                                   ? torch::empty(sizes, options)
                                   : torch::zeros(sizes, options);
    torch::Tensor bias_part = torch::empty_like(choice, choice.options().dtype(torch::kFloat));
    BiasMaxPoolReluBackward(grad, choice, input_grad, bias_part);
    torch::Tensor bias_grad;
    if (ctx->needs_input_grad(1)) {
      const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
      bias_grad = SumPerChannel(bias_part).to(dtype);
    }
    return {ctx->needs_input_grad(0) ? input_grad : torch::Tensor(), bias_grad};
  }
};

}  // namespace

bool HasConvCudaKernels() {
#ifdef MPSD_TRAINER_WITH_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

torch::Tensor AddChannelBiasRelu_(torch::Tensor output, const torch::Tensor& bias) {
  TORCH_CHECK(output.dim() == 4 && bias.dim() == 1 && bias.size(0) == output.size(1),
              "AddChannelBiasRelu_: output [N, C, H, W] and bias [C]");
  if (!HasFusedKernels(output) ||
      !(output.is_contiguous() || output.is_contiguous(at::MemoryFormat::ChannelsLast))) {
    return AddChannelBias(std::move(output), bias).relu_();
  }
  return ChannelBiasRelu::apply(std::move(output), bias);
}

torch::Tensor BiasMaxPool2x2Relu(const torch::Tensor& input, const torch::Tensor& bias) {
  TORCH_CHECK(input.dim() == 4 && bias.dim() == 1 && bias.size(0) == input.size(1),
              "BiasMaxPool2x2Relu: input [N, C, H, W] and bias [C]");
  if (!HasFusedKernels(input)) return MaxPool2x2(AddChannelBias(input, bias)).relu_();
  return ChannelBiasMaxPoolRelu::apply(Dense(input), bias);
}

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
