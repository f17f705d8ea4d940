// See conv_kernels_cuda.h. One thread per element the kernel writes, in the output's memory order
// (conv_kernels.h's PositionOf), 256 threads a block, on the current stream.
#include "trainer/models/conv_kernels_cuda.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "trainer/models/conv_kernels.h"

namespace mpsd::trainer::conv_kernels {
namespace {

constexpr int kThreads = 256;

int64_t Blocks(int64_t elements) { return (elements + kThreads - 1) / kThreads; }

bool ChannelsLast(const at::Tensor& t) {
  return !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

template <typename T>
__global__ void BiasReluKernel(T* data, const float* bias, int64_t elements, int64_t channels,
                               int64_t height, int64_t width, bool channels_last) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= elements) return;
  const Position p = PositionOf(i, channels, height, width, channels_last);
  data[i] = BiasRelu(data[i], BiasAs<T>(bias[p.c]));
}

// Strides of the input, in elements, along N, C, H and W.
struct Strides {
  int64_t n, c, h, w;
};

Strides StridesOf(const at::Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

template <typename T>
__global__ void PoolForwardKernel(const T* input, Strides in, const float* bias, T* output,
                                  uint8_t* choice, int64_t elements, int64_t channels,
                                  int64_t height, int64_t width, bool channels_last) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= elements) return;
  const Position p = PositionOf(i, channels, height, width, channels_last);
  const T* window = input + p.n * in.n + p.c * in.c + 2 * p.h * in.h + 2 * p.w * in.w;
  PoolWindowForward(window, in.h, in.w, BiasAs<T>(bias[p.c]), output + i, choice + i);
}

template <typename T>
__global__ void PoolBackwardKernel(const T* output_grad, const uint8_t* choice, T* input_grad,
                                   Strides in, float* bias_part, int64_t elements, int64_t channels,
                                   int64_t height, int64_t width, bool channels_last) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= elements) return;
  const Position p = PositionOf(i, channels, height, width, channels_last);
  T* window = input_grad + p.n * in.n + p.c * in.c + 2 * p.h * in.h + 2 * p.w * in.w;
  bias_part[i] = PoolWindowBackward(output_grad[i], choice[i], window, in.h, in.w);
}

}  // namespace

void CudaBiasReluForward(const at::Tensor& output, const at::Tensor& bias) {
  const int64_t elements = output.numel();
  if (elements == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, output.scalar_type(), "CudaBiasReluForward", [&] {
        BiasReluKernel<scalar_t><<<Blocks(elements), kThreads, 0, stream>>>(
            output.data_ptr<scalar_t>(), bias.data_ptr<float>(), elements, output.size(1),
            output.size(2), output.size(3), ChannelsLast(output));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

void CudaBiasMaxPoolReluForward(const at::Tensor& input, const at::Tensor& bias,
                                const at::Tensor& output, const at::Tensor& choice) {
  const int64_t elements = output.numel();
  if (elements == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, input.scalar_type(), "CudaBiasMaxPoolReluForward", [&] {
        PoolForwardKernel<scalar_t><<<Blocks(elements), kThreads, 0, stream>>>(
            input.data_ptr<scalar_t>(), StridesOf(input), bias.data_ptr<float>(),
            output.data_ptr<scalar_t>(), choice.data_ptr<uint8_t>(), elements, output.size(1),
            output.size(2), output.size(3), ChannelsLast(output));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

void CudaBiasMaxPoolReluBackward(const at::Tensor& output_grad, const at::Tensor& choice,
                                 const at::Tensor& input_grad, const at::Tensor& bias_part) {
  const int64_t elements = choice.numel();
  if (elements == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, input_grad.scalar_type(), "CudaBiasMaxPoolReluBackward", [&] {
        PoolBackwardKernel<scalar_t><<<Blocks(elements), kThreads, 0, stream>>>(
            output_grad.data_ptr<scalar_t>(), choice.data_ptr<uint8_t>(),
            input_grad.data_ptr<scalar_t>(), StridesOf(input_grad), bias_part.data_ptr<float>(),
            elements, choice.size(1), choice.size(2), choice.size(3), ChannelsLast(choice));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

}  // namespace mpsd::trainer::conv_kernels
