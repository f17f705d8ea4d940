// The deterministic kernels of trainer/augment.h against torchvision itself (Debian's
// python3-torchvision 0.14 with python3-torch 1.13): the script below runs
// torchvision.transforms.functional on a random batch and saves its inputs and outputs with
// torch.save; the test reads them (ReadStateDict) and runs the same transforms in C++.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/common/temp_dir.h"
#include "trainer/augment.h"
#include "trainer/state_dict.h"

namespace mpsd::trainer {
namespace {

namespace k = augment_kernels;

constexpr char kPython[] = MPSD_TORCHVISION_PYTHON;

constexpr char kScript[] = R"PY(
import sys, torch
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode
torch.manual_seed(0)
out = {}
x = torch.rand(4, 3, 17, 23)
out["x"] = x
out["resize_one"] = F.resize(x, [12], antialias=True)       # smaller edge 12 -> 12x16
out["resize_two"] = F.resize(x, [9, 31], antialias=True)    # down in H, up in W
out["center_crop"] = F.center_crop(x, [10, 8])               # offsets round(3.5)=4, round(7.5)=8
out["center_crop_even"] = F.center_crop(x, [12, 20])         # offsets round(2.5)=2, round(1.5)=2
out["resize_crop"] = F.center_crop(F.resize(x, [14], antialias=True), [14, 14])
factors = [0.5, 1.3, 0.0, 2.0]
hues = [-0.5, -0.1, 0.2, 0.5]
out["brightness"] = torch.stack([F.adjust_brightness(x[i], f) for i, f in enumerate(factors)])
out["contrast"] = torch.stack([F.adjust_contrast(x[i], f) for i, f in enumerate(factors)])
out["saturation"] = torch.stack([F.adjust_saturation(x[i], f) for i, f in enumerate(factors)])
out["hue"] = torch.stack([F.adjust_hue(x[i], h) for i, h in enumerate(hues)])
g = x[:, :1].contiguous()
out["gray"] = g
out["gray_contrast"] = torch.stack([F.adjust_contrast(g[i], f) for i, f in enumerate(factors)])
boxes = [(0, 0, 5, 7), (3, 4, 14, 1), (16, 22, 1, 1), (2, 3, 0, 6)]
v = torch.tensor([0.5, -1.0, 2.0])[:, None, None]
out["erase"] = torch.stack([F.erase(x[i], t, l, h, w, v) for i, (t, l, h, w) in enumerate(boxes)])
crops = [(0, 0, 17, 23), (2, 5, 9, 11), (10, 1, 7, 20), (4, 4, 3, 2)]
out["resized_crop"] = torch.stack([
    F.resized_crop(x[i], t, l, h, w, [11, 13], antialias=False)
    for i, (t, l, h, w) in enumerate(crops)])
sq = torch.rand(4, 3, 10, 10)
out["square"] = sq
out["rotate90"] = F.rotate(sq, 90.0, interpolation=InterpolationMode.NEAREST)
out["rotate30"] = F.rotate(sq, 30.0, interpolation=InterpolationMode.NEAREST, fill=[0.25, 0.5, 0.75])
out["rotate_rect"] = F.rotate(x, -20.0, interpolation=InterpolationMode.NEAREST)
torch.save(out, sys.argv[1])
)PY";

class AugmentTorchvisionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::string(kPython).empty()) return;
    dir_ = new testing::TempDir();
    const std::string script = *dir_ / "write.py";
    std::ofstream(script) << kScript;
    const std::string file = *dir_ / "reference.pt";
    ASSERT_EQ(std::system(absl::StrCat(kPython, " ", script, " ", file).c_str()), 0);
    absl::StatusOr<NamedTensors> read = ReadStateDict(file);
    ASSERT_TRUE(read.ok()) << read.status();
    ref_ = new std::map<std::string, torch::Tensor>(read->begin(), read->end());
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete ref_;
    dir_ = nullptr;
    ref_ = nullptr;
  }
  void SetUp() override {
    if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch and torchvision";
    ASSERT_NE(ref_, nullptr);
  }
  static const torch::Tensor& Ref(const std::string& name) { return ref_->at(name); }

  static testing::TempDir* dir_;
  static std::map<std::string, torch::Tensor>* ref_;
};

testing::TempDir* AugmentTorchvisionTest::dir_ = nullptr;
std::map<std::string, torch::Tensor>* AugmentTorchvisionTest::ref_ = nullptr;

// float32 results of the same formula, computed in another order or fused differently.
void ExpectClose(const torch::Tensor& actual, const torch::Tensor& expected, double atol = 1e-5) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  EXPECT_TRUE(torch::allclose(actual, expected, /*rtol=*/0, atol))
      << "max difference " << (actual - expected).abs().max().item<double>();
}

torch::Tensor Factors(const std::vector<float>& values) { return torch::tensor(values); }
torch::Tensor Longs(const std::vector<int64_t>& values) { return torch::tensor(values); }

TEST_F(AugmentTorchvisionTest, ResizeIsTorchvisionsAntialiasedBilinear) {
  const torch::Tensor& x = Ref("x");
  const auto [h1, w1] = ResolvedResize({12}, 17, 23);
  EXPECT_EQ(h1, 12);
  EXPECT_EQ(w1, 16);  // int(12 * 23 / 17)
  ExpectClose(k::Resize(x, h1, w1), Ref("resize_one"));
  ExpectClose(k::Resize(x, 9, 31), Ref("resize_two"));
}

TEST_F(AugmentTorchvisionTest, CenterCropRoundsTheOffsetsAsPython) {
  const torch::Tensor& x = Ref("x");
  EXPECT_TRUE(torch::equal(k::CenterCrop(x, 10, 8), Ref("center_crop")));
  EXPECT_TRUE(torch::equal(k::CenterCrop(x, 12, 20), Ref("center_crop_even")));
  Preprocessing preprocess;
  std::tie(preprocess.resize_height, preprocess.resize_width) = ResolvedResize({14}, 17, 23);
  preprocess.crop_height = preprocess.crop_width = 14;
  ExpectClose(Preprocess(x, preprocess), Ref("resize_crop"));
}

TEST_F(AugmentTorchvisionTest, ColourAdjustmentsAreFunctionalTensors) {
  const torch::Tensor& x = Ref("x");
  const torch::Tensor factors = Factors({0.5f, 1.3f, 0.0f, 2.0f});
  ExpectClose(k::AdjustBrightness(x, factors), Ref("brightness"), 1e-6);
  ExpectClose(k::AdjustContrast(x, factors), Ref("contrast"), 1e-6);
  ExpectClose(k::AdjustSaturation(x, factors), Ref("saturation"), 1e-6);
  ExpectClose(k::AdjustHue(x, Factors({-0.5f, -0.1f, 0.2f, 0.5f})), Ref("hue"), 1e-5);
  // One channel: contrast on the image's mean; saturation and hue leave it as it is.
  const torch::Tensor& gray = Ref("gray");
  ExpectClose(k::AdjustContrast(gray, factors), Ref("gray_contrast"), 1e-6);
  EXPECT_TRUE(torch::equal(k::AdjustSaturation(gray, factors), gray));
  EXPECT_TRUE(torch::equal(k::AdjustHue(gray, factors), gray));
}

TEST_F(AugmentTorchvisionTest, EraseWritesTheValueIntoEachBox) {
  const torch::Tensor out =
      k::Erase(Ref("x"), Longs({0, 3, 16, 2}), Longs({0, 4, 22, 3}), Longs({5, 14, 1, 0}),
               Longs({7, 1, 1, 6}), torch::tensor({0.5f, -1.0f, 2.0f}));
  EXPECT_TRUE(torch::equal(out, Ref("erase")));
}

TEST_F(AugmentTorchvisionTest, ResizedCropIsCropThenBilinearResize) {
  const torch::Tensor out = k::ResizedCrop(Ref("x"), Longs({0, 2, 10, 4}), Longs({0, 5, 1, 4}),
                                           Longs({17, 9, 7, 3}), Longs({23, 11, 20, 2}), 11, 13);
  ExpectClose(out, Ref("resized_crop"));
}

TEST_F(AugmentTorchvisionTest, RotationIsTorchvisionsNearestRotate) {
  const torch::Tensor& square = Ref("square");
  // 90 degrees counter-clockwise on a square image: torch.rot90 from H towards W.
  const torch::Tensor quarter = k::Rotate(square, torch::full({4}, 90.0f), {});
  EXPECT_TRUE(torch::equal(quarter, Ref("rotate90")));
  EXPECT_TRUE(torch::equal(quarter, square.rot90(1, {2, 3})));
  // Other angles: nearest neighbour, so a pixel whose source lies on a rounding boundary may
  // take the neighbour torchvision's own grid (computed in another order) does not; nearly all
  // agree.
  const auto agreement = [](const torch::Tensor& a, const torch::Tensor& b) {
    return a.eq(b).to(torch::kFloat64).mean().item<double>();
  };
  const torch::Tensor turned =
      k::Rotate(square, torch::full({4}, 30.0f), torch::tensor({0.25f, 0.5f, 0.75f}));
  EXPECT_GT(agreement(turned, Ref("rotate30")), 0.98);
  const torch::Tensor& x = Ref("x");
  EXPECT_GT(agreement(k::Rotate(x, torch::full({4}, -20.0f), {}), Ref("rotate_rect")), 0.98);
}

}  // namespace
}  // namespace mpsd::trainer
