// Tests for trainer/models/conv_ops.h on the CPU: AddChannelBias, MaxPool2x2 and the fused
// AddChannelBiasRelu_ and BiasMaxPool2x2Relu (here their CUDA kernels' reference loops, the same
// per-element code: conv_kernels.h) against the autograd of the layers they replace
// (torch::conv2d with its bias, torch::max_pool2d, relu), forward values and every gradient, in
// float32 and bfloat16, contiguous and channels_last, on odd sizes, ties, NaN and infinities. The
// zoo uses them on CUDA, where tests/perf/conv_kernels_check runs the kernels against these
// loops and tests/perf/mpsd_graph_check the ConvNet's graphed step against its eager one.
#include "trainer/models/conv_ops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

namespace mpsd::trainer {
namespace {

struct Layout {
  std::string name;
  torch::ScalarType dtype;
  at::MemoryFormat format;
};

std::vector<Layout> Layouts() {
  return {{"float32 contiguous", torch::kFloat, at::MemoryFormat::Contiguous},
          {"float32 channels_last", torch::kFloat, at::MemoryFormat::ChannelsLast},
          {"bfloat16 contiguous", torch::kBFloat16, at::MemoryFormat::Contiguous},
          {"bfloat16 channels_last", torch::kBFloat16, at::MemoryFormat::ChannelsLast}};
}

// Largest |a - b| relative to b's largest magnitude (0 for two zero tensors).
double RelativeDifference(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

TEST(ConvOpsTest, AddChannelBiasHasConv2dsValuesAndGradients) {
  for (const Layout& layout : Layouts()) {
    SCOPED_TRACE(layout.name);
    torch::manual_seed(7);
    const auto options = torch::TensorOptions().dtype(layout.dtype);
    const torch::Tensor input0 =
        torch::randn({5, 3, 9, 7}, options).contiguous(layout.format).requires_grad_(true);
    const torch::Tensor weight0 =
        torch::randn({6, 3, 3, 3}, options).contiguous(layout.format).requires_grad_(true);
    // The parameter stays float32 under bf16, as autocast leaves it.
    const torch::Tensor bias0 = torch::randn({6}).requires_grad_(true);
    const torch::Tensor upstream = torch::randn({5, 6, 7, 5}, options).contiguous(layout.format);

    // Autograd's biasless convolution and broadcast add: the same arithmetic as AddChannelBias's
    // forward (conv2d's own bias may be added inside the convolution, rounded differently).
    const torch::Tensor expected =
        (torch::conv2d(input0, weight0) + bias0.to(layout.dtype).view({1, 6, 1, 1})).relu_();
    (expected * upstream).sum().backward();

    const torch::Tensor input = input0.detach().clone().requires_grad_(true);
    const torch::Tensor weight = weight0.detach().clone().requires_grad_(true);
    const torch::Tensor bias = bias0.detach().clone().requires_grad_(true);
    const torch::Tensor actual = AddChannelBias(torch::conv2d(input, weight), bias).relu_();
    (actual * upstream).sum().backward();

    EXPECT_TRUE(torch::equal(actual, expected));
    EXPECT_EQ(actual.is_contiguous(layout.format), expected.is_contiguous(layout.format));
    EXPECT_TRUE(torch::equal(input.grad(), input0.grad()));
    EXPECT_TRUE(torch::equal(weight.grad(), weight0.grad()));
    ASSERT_EQ(bias.grad().scalar_type(), torch::kFloat);
    // Only the summation order differs, and the accumulation is float32 in bf16 too: within
    // 1e-5 of the float64 sum of the same gradient, where autograd's bf16 sum is ~1e-3 off.
    const torch::Tensor relu_mask = (expected <= 0).logical_not().to(torch::kDouble);
    const torch::Tensor exact = (upstream.to(torch::kDouble) * relu_mask).sum({0, 2, 3});
    EXPECT_LT(RelativeDifference(bias.grad(), exact), 1e-5);
    EXPECT_LT(RelativeDifference(bias.grad(), bias0.grad()),
              layout.dtype == torch::kFloat ? 1e-5 : 1e-2);
  }
}

TEST(ConvOpsTest, AddChannelBiasPassesTheGradientOnlyWhereNeeded) {
  // A frozen bias (fine-tuning) gets no gradient; the output still does.
  const torch::Tensor input = torch::randn({2, 3, 4, 4}).requires_grad_(true);
  const torch::Tensor bias = torch::randn({3});
  AddChannelBias(input * 1, bias).sum().backward();
  EXPECT_TRUE(torch::equal(input.grad(), torch::ones_like(input)));
  EXPECT_FALSE(bias.grad().defined());
}

TEST(ConvOpsTest, AddChannelBiasRefusesShapesItCannotBroadcast) {
  EXPECT_THROW(AddChannelBias(torch::zeros({2, 3, 4, 4}), torch::zeros({4})), c10::Error);
  EXPECT_THROW(AddChannelBias(torch::zeros({2, 3}), torch::zeros({3})), c10::Error);
}

// [N, C, H, W] with ties (values from a handful of integers), NaN, +inf and -inf in it.
torch::Tensor PoolInput(int64_t h, int64_t w, const Layout& layout) {
  torch::Tensor x = torch::randint(-3, 4, {3, 4, h, w}).to(torch::kFloat);
  x[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
  x[0][1][1][1] = std::numeric_limits<float>::infinity();
  x[1][2][2][0] = -std::numeric_limits<float>::infinity();
  x[2][3] = -std::numeric_limits<float>::infinity();  // a whole plane of -inf
  return x.to(layout.dtype).contiguous(layout.format);
}

TEST(ConvOpsTest, MaxPool2x2IsMaxPool2dBitwiseForwardAndBackward) {
  for (const Layout& layout : Layouts()) {
    for (const auto& [h, w] : std::vector<std::pair<int64_t, int64_t>>{{8, 6}, {7, 9}, {3, 2}}) {
      SCOPED_TRACE(layout.name + " " + std::to_string(h) + "x" + std::to_string(w));
      torch::manual_seed(11);
      const torch::Tensor input0 = PoolInput(h, w, layout).requires_grad_(true);
      const torch::Tensor expected = torch::max_pool2d(input0, /*kernel_size=*/2);
      const torch::Tensor upstream =
          torch::randn(expected.sizes(), torch::TensorOptions().dtype(layout.dtype));
      (expected * upstream).sum().backward();

      const torch::Tensor input = input0.detach().clone().requires_grad_(true);
      const torch::Tensor actual = MaxPool2x2(input);
      (actual * upstream).sum().backward();

      EXPECT_TRUE(torch::equal(actual.isnan(), expected.isnan()));
      EXPECT_TRUE(torch::equal(actual.nan_to_num(0), expected.nan_to_num(0)));
      EXPECT_TRUE(torch::equal(input.grad(), input0.grad()));
      EXPECT_EQ(input.grad().is_contiguous(layout.format), true);
    }
  }
}

TEST(ConvOpsTest, MaxPool2x2RefusesAnythingButFourDimensions) {
  EXPECT_THROW(MaxPool2x2(torch::zeros({4, 4})), c10::Error);
}

// The bias gradient of a fused layer: float32, within 1e-5 of the float64 sum of what autograd
// passes to the bias (`exact`: ReLU's gradient, which passes wherever the output is not <= 0,
// NaN included), and near autograd's own sum (bf16's is rounded, ~1e-3 off).
void ExpectBiasGradient(const torch::Tensor& actual, const torch::Tensor& autograds,
                        const torch::Tensor& exact, const Layout& layout) {
  ASSERT_EQ(actual.scalar_type(), torch::kFloat);
  EXPECT_LT(RelativeDifference(actual, exact), 1e-5);
  EXPECT_LT(RelativeDifference(actual, autograds), layout.dtype == torch::kFloat ? 1e-5 : 1e-2);
}

TEST(ConvOpsTest, AddChannelBiasReluIsBiasAndReluBitwise) {
  for (const Layout& layout : Layouts()) {
    SCOPED_TRACE(layout.name);
    torch::manual_seed(5);
    const torch::Tensor x0 = PoolInput(7, 5, layout).requires_grad_(true);
    const torch::Tensor bias0 = torch::randn({4}).requires_grad_(true);
    const torch::Tensor upstream =
        torch::randn(x0.sizes(), torch::TensorOptions().dtype(layout.dtype));
    const torch::Tensor expected = (x0 + bias0.to(layout.dtype).view({1, 4, 1, 1})).relu();
    (expected * upstream).sum().backward();

    const torch::Tensor x = x0.detach().clone().requires_grad_(true);
    const torch::Tensor bias = bias0.detach().clone().requires_grad_(true);
    const torch::Tensor actual = AddChannelBiasRelu_(x.clone(), bias);
    (actual * upstream).sum().backward();

    EXPECT_TRUE(actual.is_contiguous(layout.format));
    EXPECT_TRUE(torch::equal(actual.isnan(), expected.isnan()));
    EXPECT_TRUE(torch::equal(actual.nan_to_num(0), expected.nan_to_num(0)));
    EXPECT_TRUE(torch::equal(x.grad(), x0.grad()));
    const torch::Tensor passed =
        upstream.to(torch::kDouble) * (expected <= 0).logical_not().to(torch::kDouble);
    ExpectBiasGradient(bias.grad(), bias0.grad(), passed.sum({0, 2, 3}), layout);
  }
}

TEST(ConvOpsTest, BiasMaxPool2x2ReluIsBiasMaxPoolAndReluBitwise) {
  for (const Layout& layout : Layouts()) {
    for (const auto& [h, w] : std::vector<std::pair<int64_t, int64_t>>{{8, 6}, {7, 9}, {3, 2}}) {
      SCOPED_TRACE(layout.name + " " + std::to_string(h) + "x" + std::to_string(w));
      torch::manual_seed(13);
      const torch::Tensor x0 = PoolInput(h, w, layout).requires_grad_(true);
      // Small biases of both signs: windows whose maximum crosses 0 once the bias is added.
      const torch::Tensor bias0 = (torch::randn({4}) * 0.75).requires_grad_(true);
      const torch::Tensor expected =
          torch::max_pool2d(x0 + bias0.to(layout.dtype).view({1, 4, 1, 1}), /*kernel_size=*/2)
              .relu();
      const torch::Tensor upstream =
          torch::randn(expected.sizes(), torch::TensorOptions().dtype(layout.dtype));
      (expected * upstream).sum().backward();

      const torch::Tensor x = x0.detach().clone().requires_grad_(true);
      const torch::Tensor bias = bias0.detach().clone().requires_grad_(true);
      const torch::Tensor before = x.detach().clone();
      const torch::Tensor actual = BiasMaxPool2x2Relu(x, bias);
      (actual * upstream).sum().backward();

      EXPECT_TRUE(torch::equal(x.detach().nan_to_num(0), before.nan_to_num(0)));  // unchanged
      EXPECT_TRUE(actual.is_contiguous(layout.format));
      EXPECT_TRUE(torch::equal(actual.isnan(), expected.isnan()));
      EXPECT_TRUE(torch::equal(actual.nan_to_num(0), expected.nan_to_num(0)));
      EXPECT_TRUE(torch::equal(x.grad(), x0.grad()));
      EXPECT_TRUE(x.grad().is_contiguous(layout.format));
      const torch::Tensor passed =
          upstream.to(torch::kDouble) * (expected <= 0).logical_not().to(torch::kDouble);
      ExpectBiasGradient(bias.grad(), bias0.grad(), passed.sum({0, 2, 3}), layout);
    }
  }
}

TEST(ConvOpsTest, FusedLayersPassTheGradientOnlyWhereNeededAndRefuseBadShapes) {
  // A frozen bias (fine-tuning) gets no gradient; the input still does.
  const torch::Tensor x = torch::randn({2, 3, 4, 4}).requires_grad_(true);
  const torch::Tensor bias = torch::randn({3});
  (AddChannelBiasRelu_(x * 1, bias).sum() + BiasMaxPool2x2Relu(x, bias).sum()).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(bias.grad().defined());
  EXPECT_THROW(AddChannelBiasRelu_(torch::zeros({2, 3, 4, 4}), torch::zeros({4})), c10::Error);
  EXPECT_THROW(BiasMaxPool2x2Relu(torch::zeros({2, 3, 4, 4}), torch::zeros({4})), c10::Error);
  EXPECT_THROW(BiasMaxPool2x2Relu(torch::zeros({3, 4, 4}), torch::zeros({3})), c10::Error);
  // A strided view is read as a contiguous copy: the same values as the composition.
  const torch::Tensor wide = torch::randn({2, 3, 8, 8});
  const torch::Tensor view = wide.slice(/*dim=*/3, 0, 8, 2);
  EXPECT_TRUE(torch::equal(BiasMaxPool2x2Relu(view, bias),
                           torch::max_pool2d(view + bias.view({1, 3, 1, 1}), 2).relu()));
}

}  // namespace
}  // namespace mpsd::trainer
