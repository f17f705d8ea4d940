// Tests for trainer/augment.cc: the properties of torchvision's RandomCrop(padding) and
// RandomHorizontalFlip on small random CPU batches.
#include "trainer/augment.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace mpsd::trainer {
namespace {

at::Generator MakeGenerator(uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

// [N, C, H, W] with distinct values, so that no window or mirror equals another by accident.
torch::Tensor Batch(int64_t n, int64_t c = 3, int64_t h = 8, int64_t w = 6) {
  return torch::randn({n, c, h, w}, MakeGenerator(99), torch::kFloat32);
}

// image [C, H, W] padded by p with `fill` (one value per channel).
torch::Tensor Pad(const torch::Tensor& image, int64_t p, const std::vector<float>& fill) {
  const int64_t c = image.size(0), h = image.size(1), w = image.size(2);
  torch::Tensor padded = torch::empty({c, h + 2 * p, w + 2 * p});
  for (int64_t i = 0; i < c; ++i) padded[i].fill_(fill.empty() ? 0.0f : fill[i]);
  padded.narrow(1, p, h).narrow(2, p, w).copy_(image);
  return padded;
}

// The offsets (dy, dx) at which `crop` is an exact window of `padded`; {-1, -1} if none.
std::pair<int64_t, int64_t> FindWindow(const torch::Tensor& padded, const torch::Tensor& crop) {
  const int64_t h = crop.size(1), w = crop.size(2);
  for (int64_t dy = 0; dy + h <= padded.size(1); ++dy) {
    for (int64_t dx = 0; dx + w <= padded.size(2); ++dx) {
      if (torch::equal(padded.narrow(1, dy, h).narrow(2, dx, w), crop)) return {dy, dx};
    }
  }
  return {-1, -1};
}

TEST(AugmentTest, DisabledReturnsTheImagesThemselves) {
  const torch::Tensor images = Batch(4);
  at::Generator generator = MakeGenerator(1);
  EXPECT_TRUE(Augment(images, AugmentationOptions{}, generator).is_same(images));
}

TEST(AugmentTest, FlipMirrorsSomeExamplesExactlyAndKeepsTheRest) {
  const torch::Tensor images = Batch(64);
  AugmentationOptions options;
  options.horizontal_flip = true;
  at::Generator generator = MakeGenerator(1);
  const torch::Tensor out = Augment(images, options, generator);
  ASSERT_EQ(out.sizes(), images.sizes());
  EXPECT_EQ(out.dtype(), images.dtype());
  int flipped = 0, kept = 0;
  for (int64_t i = 0; i < images.size(0); ++i) {
    if (torch::equal(out[i], images[i])) {
      ++kept;
    } else if (torch::equal(out[i], images[i].flip({2}))) {
      ++flipped;
    } else {
      ADD_FAILURE() << "example " << i << " is neither the image nor its mirror";
    }
  }
  // Each with probability 1/2: all 64 alike has probability 2^-63.
  EXPECT_GT(flipped, 0);
  EXPECT_GT(kept, 0);
}

TEST(AugmentTest, CropIsAShiftedWindowOfTheZeroPaddedImage) {
  const int64_t p = 2;
  const torch::Tensor images = Batch(32);
  AugmentationOptions options;
  options.random_crop_padding = p;
  at::Generator generator = MakeGenerator(2);
  const torch::Tensor out = Augment(images, options, generator);
  ASSERT_EQ(out.sizes(), images.sizes());
  std::vector<int64_t> offsets;
  for (int64_t i = 0; i < images.size(0); ++i) {
    const auto [dy, dx] = FindWindow(Pad(images[i], p, {}), out[i]);
    ASSERT_GE(dy, 0) << "example " << i << " is no window of its padded image";
    EXPECT_LE(dy, 2 * p);
    EXPECT_LE(dx, 2 * p);
    offsets.push_back(dy * 100 + dx);
  }
  // 25 offsets, each 1/25: one offset for all 32 examples would be a broken draw.
  std::sort(offsets.begin(), offsets.end());
  EXPECT_GT(std::unique(offsets.begin(), offsets.end()) - offsets.begin(), 3);
}

TEST(AugmentTest, CropPadsWithTheFillOfEachChannel) {
  const int64_t p = 3;
  const std::vector<float> fill = {-1.5f, 0.25f, 7.0f};
  const torch::Tensor images = Batch(16);
  AugmentationOptions options;
  options.random_crop_padding = p;
  options.padding_fill = torch::tensor(fill);
  options.horizontal_flip = true;
  at::Generator generator = MakeGenerator(3);
  const torch::Tensor out = Augment(images, options, generator);
  for (int64_t i = 0; i < images.size(0); ++i) {
    const torch::Tensor padded = Pad(images[i], p, fill);
    const bool window = FindWindow(padded, out[i]).first >= 0;
    const bool mirrored_window = FindWindow(padded, out[i].flip({2})).first >= 0;
    EXPECT_TRUE(window || mirrored_window) << "example " << i;
  }
}

TEST(AugmentTest, SameSeedSameResultOtherSeedOtherResult) {
  const torch::Tensor images = Batch(16);
  AugmentationOptions options;
  options.random_crop_padding = 2;
  options.horizontal_flip = true;
  at::Generator a = MakeGenerator(5), b = MakeGenerator(5), c = MakeGenerator(6);
  const torch::Tensor first = Augment(images, options, a);
  EXPECT_TRUE(torch::equal(first, Augment(images, options, b)));
  EXPECT_FALSE(torch::equal(first, Augment(images, options, c)));
  // The generator advanced: the next batch is augmented differently.
  EXPECT_FALSE(torch::equal(first, Augment(images, options, a)));
}

TEST(AugmentTest, RejectsWhatTheCallerShouldHaveChecked) {
  at::Generator generator = MakeGenerator(1);
  AugmentationOptions options;
  options.random_crop_padding = 6;  // the width
  EXPECT_THROW(Augment(Batch(2), options, generator), c10::Error);
  options.random_crop_padding = 1;
  EXPECT_THROW(Augment(torch::zeros({2, 8, 6}), options, generator), c10::Error);
  options.padding_fill = torch::zeros({1});  // 1 value for 3 channels
  EXPECT_THROW(Augment(Batch(2), options, generator), c10::Error);
}

}  // namespace
}  // namespace mpsd::trainer
