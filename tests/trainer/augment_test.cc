// Tests for trainer/augment.cc: the properties of the random transforms (torchvision's
// RandomCrop(padding), RandomHorizontalFlip, RandomResizedCrop, RandomRotation, ColorJitter,
// RandomErasing, mixup and cutmix) on small random CPU batches: ranges, distributions, seeds.
// The deterministic kernels are checked against torchvision in augment_torchvision_test.
#include "trainer/augment.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
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

TEST(AugmentTest, ResizedCropBoxesKeepScaleAndRatioAndSpreadOverTheirRanges) {
  RandomResizedCropOptions options;
  options.enabled = true;
  options.scale_min = 0.2;
  options.scale_max = 0.6;
  options.ratio_min = 0.5;
  options.ratio_max = 2.0;
  const int64_t n = 4000, h = 64, w = 48;
  at::Generator generator = MakeGenerator(11);
  const augment_kernels::Boxes box =
      augment_kernels::DrawResizedCropBoxes(n, h, w, options, torch::kCPU, generator);
  const torch::Tensor bh = box.height.to(torch::kFloat64), bw = box.width.to(torch::kFloat64);
  // Inside the image.
  EXPECT_TRUE(box.top.ge(0).all().item<bool>());
  EXPECT_TRUE(box.left.ge(0).all().item<bool>());
  EXPECT_TRUE((box.top + box.height).le(h).all().item<bool>());
  EXPECT_TRUE((box.left + box.width).le(w).all().item<bool>());
  // Area and aspect within their ranges, up to the rounding of w and h to whole pixels (half a
  // pixel on each side).
  const torch::Tensor area = bh * bw / static_cast<double>(h * w);
  const torch::Tensor area_hi = (bh + 0.5) * (bw + 0.5) / static_cast<double>(h * w);
  const torch::Tensor area_lo = (bh - 0.5) * (bw - 0.5) / static_cast<double>(h * w);
  EXPECT_TRUE(area_hi.ge(options.scale_min).all().item<bool>());
  EXPECT_TRUE(area_lo.le(options.scale_max).all().item<bool>());
  const torch::Tensor ratio_hi = (bw + 0.5) / (bh - 0.5), ratio_lo = (bw - 0.5) / (bh + 0.5);
  EXPECT_TRUE(ratio_hi.ge(options.ratio_min).all().item<bool>());
  EXPECT_TRUE(ratio_lo.le(options.ratio_max).all().item<bool>());
  // Spread: the areas cover the range, and area and log(w / h) have the means of torchvision's
  // own RandomResizedCrop.get_params for this image and these ranges (40,000 draws with
  // python3-torchvision 0.14: 0.3872 and -0.0561; the tries that do not fit, wide boxes in this
  // narrow image, pull both below the middle of their ranges). Standard errors over 4,000
  // draws: 0.002 and 0.006.
  EXPECT_LT(area.min().item<double>(), 0.25);
  EXPECT_GT(area.max().item<double>(), 0.55);
  EXPECT_NEAR(area.mean().item<double>(), 0.3872, 0.008);
  EXPECT_NEAR((bw / bh).log().mean().item<double>(), -0.0561, 0.02);
  // Offsets over the free range: both ends reached.
  EXPECT_EQ(box.top.min().item<int64_t>(), 0);
  EXPECT_GT((box.top + box.height).max().item<int64_t>(), h - 2);
}

TEST(AugmentTest, ResizedCropFallsBackToTorchvisionsCentredBox) {
  // No try can fit a 1:10 box of 50-100% of a square image: the whole width, h = round(W / 10),
  // centred.
  RandomResizedCropOptions options;
  options.enabled = true;
  options.scale_min = 0.5;
  options.ratio_min = 10;
  options.ratio_max = 12;
  at::Generator generator = MakeGenerator(12);
  const augment_kernels::Boxes box =
      augment_kernels::DrawResizedCropBoxes(8, 40, 40, options, torch::kCPU, generator);
  EXPECT_TRUE(box.width.eq(40).all().item<bool>());
  EXPECT_TRUE(box.height.eq(4).all().item<bool>());
  EXPECT_TRUE(box.top.eq(18).all().item<bool>());
  EXPECT_TRUE(box.left.eq(0).all().item<bool>());
}

TEST(AugmentTest, RandomResizedCropOutputsTheSizeAndDependsOnTheSeedOnly) {
  const torch::Tensor images = Batch(16, 3, 20, 24);
  AugmentationOptions options;
  options.random_resized_crop.enabled = true;
  options.random_resized_crop.height = 12;
  options.random_resized_crop.width = 10;
  at::Generator a = MakeGenerator(7), b = MakeGenerator(7), c = MakeGenerator(8);
  const torch::Tensor first = Augment(images, options, a);
  EXPECT_EQ(first.sizes(), (std::vector<int64_t>{16, 3, 12, 10}));
  EXPECT_TRUE(torch::equal(first, Augment(images, options, b)));
  EXPECT_FALSE(torch::equal(first, Augment(images, options, c)));
  // Bilinear from inside the image: within the image's value range.
  EXPECT_LE(first.max().item<float>(), images.max().item<float>() + 1e-5f);
  EXPECT_GE(first.min().item<float>(), images.min().item<float>() - 1e-5f);
}

TEST(AugmentTest, ErasingBoxesFollowPAndScaleAndFitTheImage) {
  RandomErasingOptions options;
  options.p = 0.3;
  const int64_t n = 4000, h = 32, w = 32;
  at::Generator generator = MakeGenerator(13);
  const augment_kernels::Boxes box =
      augment_kernels::DrawErasingBoxes(n, h, w, options, torch::kCPU, generator);
  const torch::Tensor erased = box.height.gt(0) & box.width.gt(0);
  const double share = erased.to(torch::kFloat64).mean().item<double>();
  EXPECT_NEAR(share, 0.3, 0.03);  // binomial sd 0.007
  EXPECT_TRUE(box.height.lt(h).all().item<bool>());
  EXPECT_TRUE(box.width.lt(w).all().item<bool>());
  EXPECT_TRUE((box.top + box.height).le(h).all().item<bool>());
  EXPECT_TRUE((box.left + box.width).le(w).all().item<bool>());
  const torch::Tensor bh = box.height.index({erased}).to(torch::kFloat64);
  const torch::Tensor bw = box.width.index({erased}).to(torch::kFloat64);
  const torch::Tensor area_hi = (bh + 0.5) * (bw + 0.5) / static_cast<double>(h * w);
  const torch::Tensor area_lo = (bh - 0.5) * (bw - 0.5) / static_cast<double>(h * w);
  EXPECT_TRUE(area_hi.ge(options.scale_min).all().item<bool>());
  EXPECT_TRUE(area_lo.le(options.scale_max).all().item<bool>());
}

TEST(AugmentTest, ErasingSetsOneBoxPerErasedExampleAndKeepsTheRest) {
  const torch::Tensor images = Batch(64, 3, 16, 16);
  AugmentationOptions options;
  options.random_erasing.p = 0.5;
  options.random_erasing.value = torch::tensor({100.0f});
  at::Generator generator = MakeGenerator(14);
  const torch::Tensor out = Augment(images, options, generator);
  int erased = 0;
  for (int64_t i = 0; i < images.size(0); ++i) {
    const torch::Tensor changed = out[i].ne(images[i]);
    if (!changed.any().item<bool>()) continue;
    ++erased;
    // Changed pixels are the value, the same box in every channel, and form a rectangle.
    EXPECT_TRUE(out[i].index({changed}).eq(100.0f).all().item<bool>());
    const torch::Tensor mask = changed[0];
    EXPECT_TRUE(torch::equal(mask, changed[1]));
    const torch::Tensor rows = mask.any(1).nonzero(), cols = mask.any(0).nonzero();
    EXPECT_EQ(mask.sum().item<int64_t>(), rows.size(0) * cols.size(0)) << "example " << i;
  }
  EXPECT_GT(erased, 10);
  EXPECT_LT(erased, 54);
}

TEST(AugmentTest, RotationByZeroIsTheIdentityAndRotatedPixelsComeFromTheImageOrTheFill) {
  const torch::Tensor images = Batch(8, 3, 12, 12);
  AugmentationOptions options;
  options.rotation = true;
  at::Generator generator = MakeGenerator(15);
  EXPECT_TRUE(torch::equal(Augment(images, options, generator), images));
  options.rotation_min = -45;
  options.rotation_max = 45;
  options.padding_fill = torch::tensor({-7.0f, -8.0f, -9.0f});
  const torch::Tensor out = Augment(images, options, generator);
  for (int64_t i = 0; i < images.size(0); ++i) {
    for (int64_t c = 0; c < 3; ++c) {
      // Nearest neighbour: every value is one of the image's or the fill.
      const torch::Tensor values = out[i][c].flatten();
      const torch::Tensor known = torch::cat({images[i][c].flatten(), torch::full({1}, -7.0f - c)});
      EXPECT_TRUE(torch::isin(values, known).all().item<bool>()) << i << " " << c;
    }
  }
  EXPECT_FALSE(torch::equal(out, images));
}

TEST(AugmentTest, ColorJitterFactorsStayInTheirRangeAndUndoTheNormalisation) {
  // Pixels in [0.2, 0.6], normalised with mean 0.5 and std 0.25; brightness 0.4 scales the
  // pixels by a factor in [0.6, 1.4] per example (no clipping at 1 here).
  const torch::Tensor pixels = torch::rand({256, 3, 4, 4}, MakeGenerator(16)) * 0.4 + 0.2;
  AugmentationOptions options;
  SetNormalisation({0.5f}, {0.25f}, 3, options);
  options.color_jitter.brightness = 0.4;
  at::Generator generator = MakeGenerator(17);
  const torch::Tensor out = Augment((pixels - 0.5) / 0.25, options, generator) * 0.25 + 0.5;
  const torch::Tensor factor = (out / pixels).mean({1, 2, 3});
  EXPECT_TRUE(torch::allclose(out / pixels, factor.view({-1, 1, 1, 1}).expand_as(out), 0, 1e-4));
  EXPECT_GE(factor.min().item<double>(), 0.6 - 1e-4);
  EXPECT_LE(factor.max().item<double>(), 1.4 + 1e-4);
  EXPECT_LT(factor.min().item<double>(), 0.65);
  EXPECT_GT(factor.max().item<double>(), 1.35);
}

// Contrast alone, then saturation alone: each example's output is torchvision's blend of its
// pixels with the grayscale mean (contrast) or the grayscale (saturation), with one factor per
// example in [1 - v, 1 + v] (pixels kept in [0.3, 0.7] so that nothing clips).
TEST(AugmentTest, ColorJitterContrastAndSaturationAreBlendsWithOneFactorPerExample) {
  const torch::Tensor pixels = torch::rand({64, 3, 6, 6}, MakeGenerator(18)) * 0.4 + 0.3;
  const torch::Tensor gray =
      (0.2989 * pixels.select(1, 0) + 0.587 * pixels.select(1, 1) + 0.114 * pixels.select(1, 2))
          .unsqueeze(1);
  for (const bool contrast : {true, false}) {
    AugmentationOptions options;
    (contrast ? options.color_jitter.contrast : options.color_jitter.saturation) = 0.5;
    at::Generator generator = MakeGenerator(19);
    const torch::Tensor out = Augment(pixels, options, generator);
    const torch::Tensor other = contrast ? gray.mean({1, 2, 3}, /*keepdim=*/true).expand_as(pixels)
                                         : gray.expand_as(pixels);
    // Least squares factor per example of out - other = f (pixels - other).
    const torch::Tensor d = pixels - other, e = out - other;
    const torch::Tensor f = (d * e).sum({1, 2, 3}) / (d * d).sum({1, 2, 3});
    EXPECT_TRUE(torch::allclose(e, f.view({-1, 1, 1, 1}) * d, 0, 1e-5)) << contrast;
    EXPECT_GE(f.min().item<double>(), 0.5 - 1e-4) << contrast;
    EXPECT_LE(f.max().item<double>(), 1.5 + 1e-4) << contrast;
    EXPECT_GT(f.max().item<double>() - f.min().item<double>(), 0.5) << contrast;
  }
}

TEST(AugmentTest, EverythingTogetherIsSeededAndKeepsTheShape) {
  const torch::Tensor images = Batch(32, 3, 20, 20);
  AugmentationOptions options;
  SetNormalisation({0.4f, 0.5f, 0.6f}, {0.2f, 0.25f, 0.3f}, 3, options);
  options.random_resized_crop = {true, 16, 16, 0.3, 1.0, 0.75, 4.0 / 3};
  options.random_crop_padding = 2;
  options.horizontal_flip = true;
  options.rotation = true;
  options.rotation_min = -10;
  options.rotation_max = 10;
  options.color_jitter = {0.4, 0.4, 0.4, 0.1};
  options.random_erasing.p = 0.5;
  at::Generator a = MakeGenerator(21), b = MakeGenerator(21), c = MakeGenerator(22);
  const torch::Tensor first = Augment(images, options, a);
  EXPECT_EQ(first.sizes(), (std::vector<int64_t>{32, 3, 16, 16}));
  EXPECT_TRUE(torch::isfinite(first).all().item<bool>());
  EXPECT_TRUE(torch::equal(first, Augment(images, options, b)));
  EXPECT_FALSE(torch::equal(first, Augment(images, options, c)));
}

TEST(AugmentTest, PreprocessResizesThenCropsAndDrawsNothing) {
  const torch::Tensor images = Batch(4, 3, 20, 30);
  Preprocessing preprocess{/*resize_height=*/16, /*resize_width=*/24, /*crop_height=*/12,
                           /*crop_width=*/12};
  const torch::Tensor out = Preprocess(images, preprocess);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 3, 12, 12}));
  EXPECT_TRUE(torch::equal(
      out, augment_kernels::CenterCrop(augment_kernels::Resize(images, 16, 24), 12, 12)));
  EXPECT_TRUE(Preprocess(images, Preprocessing{}).is_same(images));
  EXPECT_THROW(augment_kernels::CenterCrop(images, 21, 10), c10::Error);
}

// Images whose every pixel tells its example: image i is the constant i + 1.
torch::Tensor Constants(int64_t n, int64_t h = 8, int64_t w = 8) {
  return (torch::arange(n, torch::kFloat32) + 1).view({n, 1, 1, 1}).expand({n, 3, h, w}).clone();
}

TEST(AugmentTest, MixupTargetsSumToOneAndWeighTheImagesAlike) {
  const int64_t n = 16, classes = 20;
  const torch::Tensor images = Constants(n);
  const torch::Tensor labels = torch::arange(n, torch::kInt64);  // all distinct
  AugmentationOptions options;
  options.mixup_alpha = 0.4;
  at::Generator generator = MakeGenerator(31);
  const MixedBatch mixed = MixBatch(images, labels, classes, options, generator);
  ASSERT_EQ(mixed.targets.sizes(), (std::vector<int64_t>{n, classes}));
  EXPECT_TRUE(torch::allclose(mixed.targets.sum(1), torch::ones({n}), 0, 1e-6));
  const double lambda = mixed.targets[0][0].item<double>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = (i + n - 1) % n;  // rolled by one
    EXPECT_NEAR(mixed.targets[i][i].item<double>(), lambda, 1e-6);
    EXPECT_NEAR(mixed.targets[i][j].item<double>(), 1 - lambda, 1e-6);
    // Image i is λ (i + 1) + (1 - λ) (j + 1) everywhere.
    const double expected =
        lambda * static_cast<double>(i + 1) + (1 - lambda) * static_cast<double>(j + 1);
    EXPECT_TRUE(torch::allclose(mixed.images[i], torch::full({3, 8, 8}, expected), 0, 1e-4));
  }
}

// λ of many batches against Beta(α, α): mean 1/2, variance 1 / (4 (2α + 1)), and the share
// below 0.1 (for α = 0.4 about 0.24, for α = 4 about 0.003: the shape, not just the moments).
TEST(AugmentTest, MixupLambdaIsBetaAlphaAlpha) {
  for (const double alpha : {0.4, 4.0}) {
    AugmentationOptions options;
    options.mixup_alpha = alpha;
    at::Generator generator = MakeGenerator(32);
    const torch::Tensor images = Constants(2, 2, 2);
    const torch::Tensor labels = torch::tensor({0, 1}, torch::kInt64);
    const int draws = 4000;
    std::vector<double> lambdas;
    for (int d = 0; d < draws; ++d) {
      lambdas.push_back(
          MixBatch(images, labels, 2, options, generator).targets[0][0].item<double>());
    }
    const torch::Tensor l = torch::tensor(lambdas, torch::kFloat64);
    const double variance = 1 / (4 * (2 * alpha + 1));
    EXPECT_NEAR(l.mean().item<double>(), 0.5, 4 * std::sqrt(variance / draws)) << alpha;
    EXPECT_NEAR(l.var().item<double>(), variance, 0.15 * variance) << alpha;
    const double below = l.lt(0.1).to(torch::kFloat64).mean().item<double>();
    if (alpha < 1) {
      EXPECT_NEAR(below, 0.24, 0.03);  // binomial sd 0.007
    } else {
      EXPECT_LT(below, 0.01);
    }
    EXPECT_TRUE(l.ge(0).all().item<bool>() && l.le(1).all().item<bool>());
  }
}

TEST(AugmentTest, CutmixPastesOneBoxAndWeighsTheTargetsByItsArea) {
  const int64_t n = 8, h = 10, w = 14;
  AugmentationOptions options;
  options.cutmix_alpha = 1.0;
  at::Generator generator = MakeGenerator(33);
  const torch::Tensor images = Constants(n, h, w);
  const torch::Tensor labels = torch::arange(n, torch::kInt64);
  int pasted = 0;
  for (int trial = 0; trial < 50; ++trial) {
    const MixedBatch mixed = MixBatch(images, labels, n, options, generator);
    EXPECT_TRUE(torch::allclose(mixed.targets.sum(1), torch::ones({n}), 0, 1e-6));
    // The same box in every image: the pixels that come from the rolled neighbour.
    const torch::Tensor from_rolled = mixed.images.ne(images);
    const double box_share = from_rolled[0][0].to(torch::kFloat64).mean().item<double>();
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(torch::equal(from_rolled[i], from_rolled[0]));
      EXPECT_NEAR(mixed.targets[i][i].item<double>(), 1 - box_share, 1e-6);
    }
    if (box_share > 0) ++pasted;
  }
  EXPECT_GT(pasted, 25);
}

TEST(AugmentTest, MixupOrCutmixPerBatchWhenBothAreSet) {
  AugmentationOptions options;
  options.mixup_alpha = 1.0;
  options.cutmix_alpha = 1.0;
  at::Generator generator = MakeGenerator(34);
  const torch::Tensor images = Constants(4, 8, 8);
  const torch::Tensor labels = torch::arange(4, torch::kInt64);
  int mixup = 0, cutmix = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const torch::Tensor out = MixBatch(images, labels, 4, options, generator).images;
    // Mixup gives non-integer pixels everywhere; cutmix keeps whole values.
    if (torch::equal(out, out.round())) {
      ++cutmix;
    } else {
      ++mixup;
    }
  }
  EXPECT_GT(mixup, 10);
  EXPECT_GT(cutmix, 10);
}

TEST(AugmentTest, MixBatchRejectsTargetsThatAreNotClassIndices) {
  AugmentationOptions options;
  options.mixup_alpha = 0.2;
  at::Generator generator = MakeGenerator(35);
  EXPECT_THROW(MixBatch(Batch(4), torch::zeros({4}), 3, options, generator), c10::Error);
  EXPECT_THROW(MixBatch(Batch(4), torch::zeros({4, 3}, torch::kInt64), 3, options, generator),
               c10::Error);
}

}  // namespace
}  // namespace mpsd::trainer
