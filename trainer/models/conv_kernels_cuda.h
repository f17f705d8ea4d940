// The CUDA launchers of the ConvNet's fused layers (conv_kernels.cu): called by conv_ops.cc only,
// and only where the build defines MPSD_TRAINER_WITH_CUDA_KERNELS (CMake found the CUDA toolkit
// beside a CUDA LibTorch). Each launches one kernel on the current CUDA stream (so it can be
// captured in a CUDA graph) that applies conv_kernels.h's per-element functions; conv_ops.cc
// allocates the outputs and checks shapes, dtypes and layouts first. Tensors are on one CUDA
// device, dense, NCHW-contiguous or channels_last; T is float, bfloat16 or half.
#ifndef MPSD_TRAINER_MODELS_CONV_KERNELS_CUDA_H_
#define MPSD_TRAINER_MODELS_CONV_KERNELS_CUDA_H_

#include <ATen/core/Tensor.h>

namespace mpsd::trainer::conv_kernels {

// output [N, C, H, W] of T := relu(output + bias), in place; bias [C] float32.
void CudaBiasReluForward(const at::Tensor& output, const at::Tensor& bias);

// input [N, C, H, W] of T, bias [C] float32 → output [N, C, H/2, W/2] of T and choice (uint8, the
// same shape and layout as output): conv_kernels.h's PoolWindowForward for every window.
void CudaBiasMaxPoolReluForward(const at::Tensor& input, const at::Tensor& bias,
                                const at::Tensor& output, const at::Tensor& choice);

// output_grad and choice [N, C, H/2, W/2] (output_grad of T, in choice's layout) → every
// windowed element of input_grad [N, C, H, W] of T (the rows and columns floor mode leaves out
// are not written), and bias_part [N, C, H/2, W/2] float32 in choice's layout: each window's
// share of the bias gradient (PoolWindowBackward).
void CudaBiasMaxPoolReluBackward(const at::Tensor& output_grad, const at::Tensor& choice,
                                 const at::Tensor& input_grad, const at::Tensor& bias_part);

}  // namespace mpsd::trainer::conv_kernels

#endif  // MPSD_TRAINER_MODELS_CONV_KERNELS_CUDA_H_
