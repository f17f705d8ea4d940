// The CUDA launchers of the ConvNet's fused layers (conv_kernels.cu), and StridesOf, which the
// launchers and conv_ops.cc's CPU loops share. The launchers are called by conv_ops.cc only, and
// only where the build defines MPSD_TRAINER_WITH_CUDA_KERNELS (CMake found the CUDA toolkit
// beside a CUDA LibTorch). Each launches one kernel on the current CUDA stream (so it can be
// captured in a CUDA graph) that applies conv_kernels.h's per-element functions; conv_ops.cc
// allocates the outputs and checks shapes, dtypes and layouts first. Tensors are on one CUDA
// device, dense, NCHW-contiguous or channels_last; T is float, bfloat16 or half. `channels_last`
// says which order the written tensor's memory runs in (HasChannelsLastStrides in models.h): the
// kernels walk it in that order. Stateless: thread-safe as the tensors are; a failed launch
// throws c10::Error (C10_CUDA_KERNEL_LAUNCH_CHECK), an asynchronous kernel error surfaces at the
// stream's next synchronisation, as ATen's own kernels' do.
#ifndef MPSD_TRAINER_MODELS_CONV_KERNELS_CUDA_H_
#define MPSD_TRAINER_MODELS_CONV_KERNELS_CUDA_H_

#include <ATen/core/Tensor.h>

#include "trainer/models/conv_kernels.h"

namespace mpsd::trainer::conv_kernels {

// A 4-D tensor's strides as conv_kernels.h's Strides, for the kernels and the CPU loops alike.
template <typename Index>
Strides<Index> StridesOf(const at::Tensor& t) {
  return {static_cast<Index>(t.stride(0)), static_cast<Index>(t.stride(1)),
          static_cast<Index>(t.stride(2)), static_cast<Index>(t.stride(3))};
}

// output [N, C, H, W] of T := relu(output + bias), in place; bias [C] float32.
void CudaBiasReluForward(const at::Tensor& output, const at::Tensor& bias, bool channels_last);

// input [N, C, H, W] of T, bias [C] float32 → output [N, C, H/2, W/2] of T and choice (uint8, the
// same shape and layout as output): conv_kernels.h's PoolWindowForward for every window.
void CudaBiasMaxPoolReluForward(const at::Tensor& input, const at::Tensor& bias,
                                const at::Tensor& output, const at::Tensor& choice,
                                bool channels_last);

// output_grad and choice [N, C, H/2, W/2] (output_grad of T, in choice's layout) → every
// windowed element of input_grad [N, C, H, W] of T (the rows and columns floor mode leaves out
// are not written), and bias_part [N, C, H/2, W/2] float32 in choice's layout: each window's
// share of the bias gradient (PoolWindowBackward).
void CudaBiasMaxPoolReluBackward(const at::Tensor& output_grad, const at::Tensor& choice,
                                 const at::Tensor& input_grad, const at::Tensor& bias_part,
                                 bool channels_last);

}  // namespace mpsd::trainer::conv_kernels

#endif  // MPSD_TRAINER_MODELS_CONV_KERNELS_CUDA_H_
