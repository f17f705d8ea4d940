// See conv_kernels_cuda.h. One thread per element the kernel writes, in the output's memory order
// (conv_kernels.h's PositionOf), 256 threads a block, on the current stream.
#include "trainer/models/conv_kernels_cuda.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <limits>

#include "trainer/models/conv_kernels.h"

namespace mpsd::trainer::conv_kernels {
namespace {

constexpr int kThreads = 256;

int64_t Blocks(int64_t elements) { return (elements + kThreads - 1) / kThreads; }

template <typename T, typename Index>
__global__ void BiasReluKernel(T* data, const float* bias, Index elements, Index channels,
                               Index height, Index width, bool channels_last) {
  const Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= elements) return;
  const Position<Index> p = PositionOf(i, channels, height, width, channels_last);
  data[i] = BiasRelu(data[i], BiasAs<T>(bias[p.c]));
}

template <typename T, typename Index>
__global__ void PoolForwardKernel(const T* input, Strides<Index> in, const float* bias, T* output,
                                  uint8_t* choice, Index elements, Index channels, Index height,
                                  Index width, bool channels_last) {
  const Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= elements) return;
  const Position<Index> p = PositionOf(i, channels, height, width, channels_last);
  const T* window = input + WindowOffset(p, in);
  PoolWindowForward(window, static_cast<int64_t>(in.h), static_cast<int64_t>(in.w),
                    BiasAs<T>(bias[p.c]), output + i, choice + i);
}

template <typename T, typename Index>
__global__ void PoolBackwardKernel(const T* output_grad, const uint8_t* choice, T* input_grad,
                                   Strides<Index> in, float* bias_part, Index elements,
                                   Index channels, Index height, Index width, bool channels_last) {
  const Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= elements) return;
  const Position<Index> p = PositionOf(i, channels, height, width, channels_last);
  T* window = input_grad + WindowOffset(p, in);
  bias_part[i] = PoolWindowBackward(output_grad[i], choice[i], window, static_cast<int64_t>(in.h),
                                    static_cast<int64_t>(in.w));
}

// Whether every element index of these dense tensors (and so every offset from their data
// pointers) fits 32-bit arithmetic.
bool Fits32(const at::Tensor& a, const at::Tensor& b) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  return a.numel() < kMax && b.numel() < kMax;
}

}  // namespace

void CudaBiasReluForward(const at::Tensor& output, const at::Tensor& bias, bool channels_last) {
  const int64_t elements = output.numel();
  if (elements == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, output.scalar_type(), "CudaBiasReluForward", [&] {
        const auto launch = [&](auto index) {
          using Index = decltype(index);
          BiasReluKernel<scalar_t, Index><<<Blocks(elements), kThreads, 0, stream>>>(
              output.data_ptr<scalar_t>(), bias.data_ptr<float>(), static_cast<Index>(elements),
              static_cast<Index>(output.size(1)), static_cast<Index>(output.size(2)),
              static_cast<Index>(output.size(3)), channels_last);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        Fits32(output, output) ? launch(int32_t{}) : launch(int64_t{});
      });
}

void CudaBiasMaxPoolReluForward(const at::Tensor& input, const at::Tensor& bias,
                                const at::Tensor& output, const at::Tensor& choice,
                                bool channels_last) {
  const int64_t elements = output.numel();
  if (elements == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, input.scalar_type(), "CudaBiasMaxPoolReluForward", [&] {
        const auto launch = [&](auto index) {
          using Index = decltype(index);
          PoolForwardKernel<scalar_t, Index><<<Blocks(elements), kThreads, 0, stream>>>(
              input.data_ptr<scalar_t>(), StridesOf<Index>(input), bias.data_ptr<float>(),
              output.data_ptr<scalar_t>(), choice.data_ptr<uint8_t>(), static_cast<Index>(elements),
              static_cast<Index>(output.size(1)), static_cast<Index>(output.size(2)),
              static_cast<Index>(output.size(3)), channels_last);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        Fits32(input, output) ? launch(int32_t{}) : launch(int64_t{});
      });
}

void CudaBiasMaxPoolReluBackward(const at::Tensor& output_grad, const at::Tensor& choice,
                                 const at::Tensor& input_grad, const at::Tensor& bias_part,
                                 bool channels_last) {
  const int64_t elements = choice.numel();
  if (elements == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, input_grad.scalar_type(), "CudaBiasMaxPoolReluBackward", [&] {
        const auto launch = [&](auto index) {
          using Index = decltype(index);
          PoolBackwardKernel<scalar_t, Index><<<Blocks(elements), kThreads, 0, stream>>>(
              output_grad.data_ptr<scalar_t>(), choice.data_ptr<uint8_t>(),
              input_grad.data_ptr<scalar_t>(), StridesOf<Index>(input_grad),
              bias_part.data_ptr<float>(), static_cast<Index>(elements),
              static_cast<Index>(choice.size(1)), static_cast<Index>(choice.size(2)),
              static_cast<Index>(choice.size(3)), channels_last);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        Fits32(input_grad, choice) ? launch(int32_t{}) : launch(int64_t{});
      });
}

}  // namespace mpsd::trainer::conv_kernels
