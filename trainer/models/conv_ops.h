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

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODELS_CONV_OPS_H_
