// Issue 32: mpsd's CUDA kernels of the ConvNet's fused layers (trainer/models/conv_kernels.cu,
// through conv_ops.h's AddChannelBiasRelu_ and BiasMaxPool2x2Relu) against their CPU reference
// loops (the same per-element code, which tests/trainer/conv_ops_test.cc checks against autograd
// in CI), and against autograd's composition on the GPU; then their time beside the composition's.
//
// For float32 and bfloat16, NCHW and channels_last, on the ConvNet's shapes at batch 128
// ([128, 32, 26, 26] for conv1's bias + ReLU, [128, 64, 24, 24] for conv2's bias + ReLU + max-pool)
// and an odd [3, 4, 7, 9] with ties, NaN and infinities: forward values and input gradients must
// equal the CPU reference's bitwise (NaN where it has NaN), the bias gradient within 1e-5
// (relative; the sums run in another order). Prints one PASS/FAIL line per case, then µs per
// forward + backward (CUDA events, 200 iterations after 20 warm-up, eager) of the fused layer
// and of the composition (AddChannelBias, MaxPool2x2, relu_). Exit status 1 if any case fails or
// the build has no CUDA kernels.
//
// Usage: mpsd_conv_kernels_check
#include <ATen/cuda/CUDAEvent.h>
#include <torch/torch.h>

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "trainer/models/conv_ops.h"

namespace {

using mpsd::trainer::AddChannelBias;
using mpsd::trainer::AddChannelBiasRelu_;
using mpsd::trainer::BiasMaxPool2x2Relu;
using mpsd::trainer::MaxPool2x2;

struct Layout {
  const char* name;
  torch::ScalarType dtype;
  at::MemoryFormat format;
};

const Layout kLayouts[] = {
    {"fp32 NCHW", torch::kFloat, at::MemoryFormat::Contiguous},
    {"fp32 channels_last", torch::kFloat, at::MemoryFormat::ChannelsLast},
    {"bf16 NCHW", torch::kBFloat16, at::MemoryFormat::Contiguous},
    {"bf16 channels_last", torch::kBFloat16, at::MemoryFormat::ChannelsLast}};

struct Result {
  torch::Tensor output, input_grad, bias_grad;
};

// One forward and backward of `layer` on copies of x and bias on `device`.
template <typename Layer>
Result Run(Layer layer, const torch::Tensor& x, const torch::Tensor& bias,
           const torch::Tensor& upstream, torch::Device device) {
  // Fresh leaves: `to` returns the tensor itself when it is already on `device`.
  const torch::Tensor xd = x.to(device).clone().requires_grad_(true);
  const torch::Tensor bd = bias.to(device).clone().requires_grad_(true);
  const torch::Tensor out = layer(xd * 1, bd);  // `* 1`: the layers may write their input
  (out * upstream.to(device)).sum().backward();
  return {out.detach().cpu(), xd.grad().cpu(), bd.grad().cpu()};
}

bool SameBits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && torch::equal(a.isnan(), b.isnan()) &&
         torch::equal(a.nan_to_num(0), b.nan_to_num(0));
}

double RelativeDifference(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

torch::Tensor Input(std::vector<int64_t> sizes, const Layout& layout, bool specials) {
  torch::Tensor x = specials ? torch::randint(-3, 4, sizes).to(torch::kFloat) : torch::randn(sizes);
  if (specials) {
    x[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
    x[0][1][1][1] = std::numeric_limits<float>::infinity();
    x[1][2][2][0] = -std::numeric_limits<float>::infinity();
    x[2][3] = -std::numeric_limits<float>::infinity();
  }
  return x.to(layout.dtype).contiguous(layout.format);
}

template <typename Fused, typename Composed>
bool Check(const char* what, Fused fused, Composed composed, const torch::Tensor& x,
           int64_t channels, const Layout& layout) {
  const torch::Tensor bias = torch::randn({channels}) * 0.75;
  const torch::Tensor probe = fused(x * 1, bias);
  const torch::Tensor upstream =
      torch::randn(probe.sizes(), torch::TensorOptions().dtype(layout.dtype));
  const Result cuda = Run(fused, x, bias, upstream, torch::kCUDA);
  const Result cpu = Run(fused, x, bias, upstream, torch::kCPU);
  const Result aten = Run(composed, x, bias, upstream, torch::kCUDA);
  const bool forward = SameBits(cuda.output, cpu.output) && SameBits(cuda.output, aten.output);
  const bool input_grad =
      SameBits(cuda.input_grad, cpu.input_grad) && SameBits(cuda.input_grad, aten.input_grad);
  const double bias_diff = RelativeDifference(cuda.bias_grad, cpu.bias_grad);
  const bool ok = forward && input_grad && bias_diff < 1e-5;
  std::printf(
      "%s %s %s %s: forward %s, input gradient %s, bias gradient %.2e from the CPU's "
      "(%.2e from the composition's)\n",
      ok ? "PASS" : "FAIL", what, layout.name, c10::str(x.sizes()).c_str(),
      forward ? "bitwise" : "DIFFERS", input_grad ? "bitwise" : "DIFFERS", bias_diff,
      RelativeDifference(cuda.bias_grad, aten.bias_grad));
  return ok;
}

// µs per forward + backward of `layer` on CUDA.
template <typename Layer>
double Time(Layer layer, const torch::Tensor& x, const torch::Tensor& bias,
            const torch::Tensor& upstream) {
  const torch::Tensor xd = x.cuda().clone().requires_grad_(true);
  const torch::Tensor bd = bias.cuda().clone().requires_grad_(true);
  const torch::Tensor up = upstream.cuda();
  const auto step = [&] {
    const torch::Tensor out = layer(xd * 1, bd);
    out.backward(up);
  };
  for (int i = 0; i < 20; ++i) step();
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  start.record();
  constexpr int kIterations = 200;
  for (int i = 0; i < kIterations; ++i) step();
  stop.record();
  stop.synchronize();
  return start.elapsed_time(stop) * 1000.0 / kIterations;
}

}  // namespace

int main() {
  if (!torch::cuda::is_available()) {
    std::printf("FAIL: no CUDA device\n");
    return 1;
  }
  if (!mpsd::trainer::HasConvCudaKernels()) {
    std::printf("FAIL: this build has no CUDA kernels (no nvcc at configure time?)\n");
    return 1;
  }
  torch::manual_seed(3);
  const auto bias_relu = [](torch::Tensor x, const torch::Tensor& b) {
    return AddChannelBiasRelu_(std::move(x), b);
  };
  const auto bias_relu_composed = [](torch::Tensor x, const torch::Tensor& b) {
    return AddChannelBias(std::move(x), b).relu_();
  };
  const auto pool = [](const torch::Tensor& x, const torch::Tensor& b) {
    return BiasMaxPool2x2Relu(x, b);
  };
  const auto pool_composed = [](const torch::Tensor& x, const torch::Tensor& b) {
    return MaxPool2x2(AddChannelBias(x, b)).relu_();
  };
  bool ok = true;
  for (const Layout& layout : kLayouts) {
    ok &= Check("bias+relu", bias_relu, bias_relu_composed, Input({3, 4, 7, 9}, layout, true), 4,
                layout);
    ok &= Check("bias+relu", bias_relu, bias_relu_composed, Input({128, 32, 26, 26}, layout, false),
                32, layout);
    ok &= Check("bias+maxpool+relu", pool, pool_composed, Input({3, 4, 7, 9}, layout, true), 4,
                layout);
    ok &= Check("bias+maxpool+relu", pool, pool_composed, Input({128, 64, 24, 24}, layout, false),
                64, layout);
  }
  std::printf("\nµs per forward + backward on CUDA (eager, 200 iterations; `x * 1` included)\n");
  std::printf("%-20s %-18s %10s %10s\n", "layer", "layout", "fused", "composed");
  for (const Layout& layout : kLayouts) {
    const torch::Tensor x1 = Input({128, 32, 26, 26}, layout, false);
    const torch::Tensor b1 = torch::randn({32});
    const torch::Tensor u1 = torch::randn(x1.sizes()).to(layout.dtype);
    std::printf("%-20s %-18s %10.1f %10.1f\n", "bias+relu", layout.name,
                Time(bias_relu, x1, b1, u1), Time(bias_relu_composed, x1, b1, u1));
    const torch::Tensor x2 = Input({128, 64, 24, 24}, layout, false);
    const torch::Tensor b2 = torch::randn({64});
    const torch::Tensor u2 = torch::randn({128, 64, 12, 12}).to(layout.dtype);
    std::printf("%-20s %-18s %10.1f %10.1f\n", "bias+maxpool+relu", layout.name,
                Time(pool, x2, b2, u2), Time(pool_composed, x2, b2, u2));
  }
  std::printf("\n%s\n", ok ? "all cases PASS" : "some case FAILED");
  return ok ? 0 : 1;
}
