// Augmentation as whole-batch kernels: the crop is two gathers from the padded batch (rows, then
// columns, each at a per-example offset), the flip one `where` between the batch and its mirror.
#include "trainer/augment.h"

namespace mpsd::trainer {
namespace {

// [N, C, H, W] → the random H×W window of each example's padded image.
torch::Tensor RandomCrop(const torch::Tensor& images, int64_t padding, const torch::Tensor& fill,
                         at::Generator& generator) {
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  const int64_t padded_w = w + 2 * padding;
  torch::Tensor padded = torch::empty({n, c, h + 2 * padding, padded_w}, images.options());
  if (!fill.defined()) {
    padded.zero_();
  } else {
    TORCH_CHECK(fill.dim() == 1 && fill.size(0) == c, "Augment: padding_fill is ", fill.sizes(),
                ", expected [", c, "]");
    // A no-op when the fill is already on the images' device in their dtype.
    const torch::Tensor values = fill.to(images.options());
    padded.copy_(values.view({1, c, 1, 1}).expand_as(padded));
  }
  padded.narrow(/*dim=*/2, padding, h).narrow(/*dim=*/3, padding, w).copy_(images);

  // Offsets in [0, 2p], as RandomCrop's randint(0, h + 2p - h + 1).
  const auto index_options = torch::TensorOptions().dtype(torch::kInt64).device(images.device());
  const torch::Tensor dy = torch::randint(2 * padding + 1, {n}, generator, index_options);
  const torch::Tensor dx = torch::randint(2 * padding + 1, {n}, generator, index_options);
  const torch::Tensor rows = dy.view({n, 1}) + torch::arange(h, index_options);  // [N, H]
  const torch::Tensor cols = dx.view({n, 1}) + torch::arange(w, index_options);  // [N, W]
  const torch::Tensor band =
      padded.gather(/*dim=*/2, rows.view({n, 1, h, 1}).expand({n, c, h, padded_w}));
  return band.gather(/*dim=*/3, cols.view({n, 1, 1, w}).expand({n, c, h, w}));
}

torch::Tensor RandomHorizontalFlip(const torch::Tensor& images, at::Generator& generator) {
  const int64_t n = images.size(0);
  const torch::Tensor flip =
      torch::rand({n}, generator, torch::TensorOptions().device(images.device())).lt(0.5);
  return torch::where(flip.view({n, 1, 1, 1}), images.flip({/*dim=*/3}), images);
}

}  // namespace

torch::Tensor Augment(const torch::Tensor& images, const AugmentationOptions& options,
                      at::Generator& generator) {
  if (!options.enabled()) return images;
  TORCH_CHECK(images.dim() == 4, "Augment: expected images [N, C, H, W], got ", images.sizes());
  const int64_t padding = options.random_crop_padding;
  TORCH_CHECK(padding >= 0 && padding < images.size(2) && padding < images.size(3),
              "Augment: random_crop_padding ", padding, " outside [0, min(H, W)) for ",
              images.sizes());
  torch::NoGradGuard no_grad;
  torch::Tensor out = images;
  if (padding > 0) out = RandomCrop(out, padding, options.padding_fill, generator);
  if (options.horizontal_flip) out = RandomHorizontalFlip(out, generator);
  return out;
}

}  // namespace mpsd::trainer
