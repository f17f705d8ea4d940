// Two layers of the zoo's convolutional models as autograd functions whose backward launches
// fewer or cheaper kernels than autograd's, for the CUDA fast path (issue 32: the seed ConvNet's
// step spends 16% of its device time in reductions and 10% in max-pool, tests/perf/RESULTS.md).
// Values and gradients are the ones autograd computes for the same layers: AddChannelBias's bias
// gradient differs only in summation order (float32 accumulation, ~1e-7 relative),
// MaxPool2x2's input gradient is bitwise equal. Internal to trainer/: includes torch.
//
// Both work on every device and are tested on the CPU against autograd
// (tests/trainer/conv_ops_test.cc) and on the GPU by tests/perf/maxpool_grad_bench.py and
// tests/perf/bias_grad_bench.py (their times) and mpsd_graph_check (the graphed step against
// the eager one). The zoo uses them on CUDA only: on the CPU, ATen's fused convolution bias and
// max-pool backward are as fast, and MPS keeps the operators it implements natively.
// Stateless free functions: thread-safe as the tensors they are given are. Errors: a tensor of
// another rank, or a bias whose length is not output's channel count, throws c10::Error
// (TORCH_CHECK) naming the function and the expected shape.
#ifndef MPSD_TRAINER_MODELS_CONV_OPS_H_
#define MPSD_TRAINER_MODELS_CONV_OPS_H_

#include <torch/torch.h>

namespace mpsd::trainer {

// `output` + `bias` broadcast over channels, written into `output` (a convolution's output
// [N, C, H, W], any float dtype, contiguous or channels_last; bias [C], any float dtype, cast to
// output's) and returned: what torch::nn::Conv2d does after its biasless convolution. The
// backward passes the gradient through to `output` and sums bias's gradient [C] in two stages,
// the contiguous inner dimension first (NCHW: over H*W, then N; channels_last: over N, then
// H*W), in float32, cast to bias's dtype: two short, coalesced reductions instead of autograd's
// one strided reduction over N, H and W (bias_grad_bench.py: 12 µs instead of 26 µs for the
// ConvNet's [128, 32, 26, 26] float32 gradient on an H200). `output` must not be needed by
// anything else (it is modified in place; autograd's version check enforces it).
torch::Tensor AddChannelBias(torch::Tensor output, const torch::Tensor& bias);

// max_pool2d(input, kernel_size=2) (2×2 windows, stride 2, no padding, floor mode) of
// input [N, C, H, W], any float dtype, contiguous or channels_last; returns [N, C, H/2, W/2] in
// input's layout. The backward writes each output gradient to the element its window chose,
// into zeros (a scatter over the N*C*H*W/4 gradients), instead of ATen's max_pool backward,
// which visits every input element (4× as many) to find the windows that chose it. The windows
// do not overlap, so each input element receives at most one gradient and the result is
// bitwise ATen's, ties and NaN included (both follow the forward's saved indices).
torch::Tensor MaxPool2x2(const torch::Tensor& input);

// The ConvNet's two bias-and-ReLU layers as one kernel each (issue 32: elementwise kernels were
// 37% of the bf16 + channels_last step's device time). Same values and input gradients as
// autograd's composition, bitwise (conv_kernels.h says how the rounding is kept); the bias
// gradient [C] is summed in float32 (SumPerChannel's two stages), differing only in order.
// On CUDA they run mpsd's kernels (conv_kernels.cu) where the build has them
// (HasConvCudaKernels()), else the composition of AddChannelBias, MaxPool2x2 and relu_; on the
// CPU they run the kernels' reference loops, the same per-element code (conv_kernels.h), which
// tests/trainer/conv_ops_test.cc checks against autograd and tests/perf/conv_kernels_check.cc
// checks the CUDA kernels against. Errors: as above; an input that is neither contiguous nor
// channels_last is made contiguous first.

// relu(output + bias) written into `output` (a convolution's output [N, C, H, W], float32,
// bfloat16 or half, contiguous or channels_last; bias [C], cast as AddChannelBias casts it) and
// returned: AddChannelBias(output, bias).relu_() in one pass. The backward is ReLU's (the
// gradient where the result is > 0) and AddChannelBias's bias sum. `output` must not be needed by
// anything else.
torch::Tensor AddChannelBiasRelu_(torch::Tensor output, const torch::Tensor& bias);

// relu(max_pool2d(input + bias, kernel_size=2)) of a convolution's output `input`
// [N, C, H, W] (dtypes and layouts as above; floor mode) → [N, C, H/2, W/2] in input's layout:
// MaxPool2x2(AddChannelBias(input, bias)).relu_() in one pass that reads `input` once and leaves
// it unchanged. It saves one byte per output (which window element, if any, gets its gradient);
// the backward writes the input gradient in one pass and sums the bias gradient over the outputs
// (4× fewer elements than the input).
torch::Tensor BiasMaxPool2x2Relu(const torch::Tensor& input, const torch::Tensor& bias);

// Whether this build has conv_kernels.cu's CUDA kernels (CMake found the CUDA toolkit beside a
// CUDA LibTorch).
bool HasConvCudaKernels();

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODELS_CONV_OPS_H_
