// Per-sample throughput of the training-time augmentations (trainer/augment.h) on one device:
// each transform alone, then the ImageNet-style and CIFAR-style pipelines, on a random batch of
// normalised images, as the training loop runs them (whole-batch kernels from the device's
// generator). Prints one line per case: the median of `iters` timed batches after 3 warm-ups,
// in ms per batch and samples per second. On CUDA each timed batch ends with a synchronize.
//
// Usage: mpsd_augment_throughput [device=cpu] [iters=20]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "trainer/augment.h"

namespace {

using mpsd::trainer::AugmentationOptions;

void Sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

double MedianMs(const std::function<void()>& run, const torch::Device& device, int iters) {
  for (int i = 0; i < 3; ++i) run();
  Sync(device);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    Sync(device);
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void Case(const std::string& name, const torch::Tensor& images, const AugmentationOptions& options,
          const torch::Device& device, int iters) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  const torch::Tensor labels = torch::randint(
      10, {images.size(0)}, torch::TensorOptions().dtype(torch::kInt64).device(device));
  const double ms = MedianMs(
      [&] {
        torch::Tensor out = mpsd::trainer::Augment(images, options, generator);
        if (options.mixes()) {
          out = mpsd::trainer::MixBatch(out, labels, 10, options, generator).images;
        }
      },
      device, iters);
  const int64_t n = images.size(0);
  std::printf("%-34s %4ld x %ld x %3ld x %3ld  %9.3f ms/batch  %11.0f samples/s\n", name.c_str(),
              static_cast<long>(n), static_cast<long>(images.size(1)),
              static_cast<long>(images.size(2)), static_cast<long>(images.size(3)), ms,
              1000.0 * static_cast<double>(n) / ms);
}

}  // namespace

int main(int argc, char** argv) {
  const torch::Device device(argc > 1 ? argv[1] : "cpu");
  const int iters = argc > 2 ? std::stoi(argv[2]) : 20;
  torch::manual_seed(0);
  std::printf("augmentation throughput on %s, %d threads, median of %d batches\n",
              device.str().c_str(), torch::get_num_threads(), iters);

  struct Shape {
    int64_t n, c, h, w;
  };
  for (const Shape shape : {Shape{256, 3, 32, 32}, Shape{64, 3, 224, 224}}) {
    const torch::Tensor images =
        torch::randn({shape.n, shape.c, shape.h, shape.w}, torch::TensorOptions().device(device));
    AugmentationOptions base;
    mpsd::trainer::SetNormalisation({0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}, shape.c,
                                    base);
    mpsd::trainer::MoveToDevice(device, base);
    const int64_t side = shape.h;
    const auto with = [&](const std::function<void(AugmentationOptions&)>& set) {
      AugmentationOptions o = base;
      set(o);
      return o;
    };
    Case("random_crop_padding 4 + flip", images, with([](AugmentationOptions& o) {
           o.random_crop_padding = 4;
           o.horizontal_flip = true;
         }),
         device, iters);
    Case("random_resized_crop (same size)", images, with([&](AugmentationOptions& o) {
           o.random_resized_crop.enabled = true;
           o.random_resized_crop.height = o.random_resized_crop.width = side;
         }),
         device, iters);
    Case("resize 7/8 + center_crop", images, with([&](AugmentationOptions& o) {
           o.preprocess = {side * 7 / 8, side * 7 / 8, side * 3 / 4, side * 3 / 4};
         }),
         device, iters);
    Case("random_rotation 15", images, with([](AugmentationOptions& o) {
           o.rotation = true;
           o.rotation_min = -15;
           o.rotation_max = 15;
         }),
         device, iters);
    Case("color_jitter b/c/s 0.4", images, with([](AugmentationOptions& o) {
           o.color_jitter = {0.4, 0.4, 0.4, 0};
         }),
         device, iters);
    Case("color_jitter b/c/s 0.4 hue 0.1", images, with([](AugmentationOptions& o) {
           o.color_jitter = {0.4, 0.4, 0.4, 0.1};
         }),
         device, iters);
    Case("random_erasing p 0.25", images,
         with([](AugmentationOptions& o) { o.random_erasing.p = 0.25; }), device, iters);
    Case("mixup 0.2", images, with([](AugmentationOptions& o) { o.mixup_alpha = 0.2; }), device,
         iters);
    Case("cutmix 1.0", images, with([](AugmentationOptions& o) { o.cutmix_alpha = 1.0; }), device,
         iters);
    Case("pipeline rrc+flip+jitter+erase+mix", images, with([&](AugmentationOptions& o) {
           o.random_resized_crop.enabled = true;
           o.random_resized_crop.height = o.random_resized_crop.width = side;
           o.horizontal_flip = true;
           o.color_jitter = {0.4, 0.4, 0.4, 0};
           o.random_erasing.p = 0.25;
           o.mixup_alpha = 0.2;
           o.cutmix_alpha = 1.0;
         }),
         device, iters);
  }
  return 0;
}
