// Training-time augmentation of image batches on the device: torchvision's transforms
// (torchvision 0.14: transforms.RandomResizedCrop, Resize, CenterCrop, RandomCrop with padding,
// RandomHorizontalFlip, RandomRotation, ColorJitter, RandomErasing; references/classification's
// RandomMixup and RandomCutmix), drawn per example (mixup and cutmix: per batch, as torchvision's)
// but run as a few whole-batch kernels: no per-example loop, no host work, no host-device
// synchronisation, so that the CUDA graph of the training step (trainer/graphed_step.h) can
// capture them. The deterministic parts are torchvision's formulas (the tensor path,
// transforms/functional_tensor.py) and are tested against torchvision itself
// (tests/trainer/augment_test.cc). Internal to trainer/: includes torch.
//
// Units: the images given to these functions are the dataset's, normalised per channel
// ((pixel - mean[c]) / std[c], pixels in [0, 1]): DatasetSpec.mean/std is torchvision's
// Normalize. Colour adjustments work on pixels (torchvision's ColorJitter runs before
// Normalize): they undo the normalisation (pixel_mean, pixel_std), adjust, and redo it. Black
// (rotation's and the padded crop's fill) is pixel 0, i.e. -mean[c] / std[c]. Erasing writes
// its value as is, in normalised units (torchvision's RandomErasing runs after Normalize).
#ifndef MPSD_TRAINER_AUGMENT_H_
#define MPSD_TRAINER_AUGMENT_H_

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace mpsd::trainer {

// Resize then CenterCrop: what every batch gets (training batches too, unless
// RandomResizedCrop replaces them). 0 = not set.
struct Preprocessing {
  // Resize's output [resize_height, resize_width] (already resolved from torchvision's
  // one-value form by ResolvedResize); 0 = no resize.
  int64_t resize_height = 0;
  int64_t resize_width = 0;
  // CenterCrop's output; 0 = no crop. At most the (resized) image's size.
  int64_t crop_height = 0;
  int64_t crop_width = 0;

  bool enabled() const { return resize_height > 0 || crop_height > 0; }
};

// torchvision's Resize output size for an image of height × width: `size` one value (the
// smaller edge becomes size[0], the other int(size[0] * long / short)) or [height, width]
// (transforms.functional._compute_resized_output_size, without max_size). Pure.
std::pair<int64_t, int64_t> ResolvedResize(const std::vector<int64_t>& size, int64_t height,
                                           int64_t width);

struct RandomResizedCropOptions {
  bool enabled = false;
  int64_t height = 0, width = 0;  // output size
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};

struct ColorJitterOptions {
  // Factors uniform in [max(0, 1 - v), 1 + v]; hue shift uniform in [-hue, hue]; 0 = off.
  double brightness = 0, contrast = 0, saturation = 0, hue = 0;
  bool enabled() const { return brightness > 0 || contrast > 0 || saturation > 0 || hue > 0; }
};

struct RandomErasingOptions {
  double p = 0;  // 0 = off
  double scale_min = 0.02, scale_max = 0.33;
  double ratio_min = 0.3, ratio_max = 3.3;
  // [1] (every channel) or [C] float32 (normalised units); undefined = 0. On the images'
  // device (MoveToDevice): a host tensor would be copied on every call, which a CUDA graph
  // cannot capture.
  torch::Tensor value;
};

struct AugmentationOptions {
  // Every split's Resize + CenterCrop (see Preprocessing); training batches get them from here
  // unless random_resized_crop is enabled.
  Preprocessing preprocess;
  RandomResizedCropOptions random_resized_crop;
  // Pixels of padding on each side before a random crop back to the original size, as
  // torchvision.transforms.RandomCrop(size, padding=random_crop_padding); 0 = no crop. The
  // caller keeps it in [0, min(H, W)) (ResolveDataset checks it).
  int64_t random_crop_padding = 0;
  // Flip each image left-right with probability 0.5 (RandomHorizontalFlip).
  bool horizontal_flip = false;
  // RandomRotation(degrees=(rotation_min, rotation_max)): uniform angle in degrees,
  // counter-clockwise, nearest neighbour, black outside.
  bool rotation = false;
  double rotation_min = 0, rotation_max = 0;
  ColorJitterOptions color_jitter;
  RandomErasingOptions random_erasing;
  // Beta(alpha, alpha) of mixup and cutmix; 0 = off (MixBatch).
  double mixup_alpha = 0;
  double cutmix_alpha = 0;
  // The value of black per channel: [C] float32, in the units of the images given to Augment
  // (-mean[c] / std[c]); undefined = 0. ResolveDataset / LoadDataset set it with the
  // normalisation, and LoadDataset moves it to the data's device (on another device it is
  // copied there on every call, which synchronises a CUDA device with the host).
  torch::Tensor padding_fill;
  // The normalisation the images carry: [C] float32 each, on the images' device; undefined =
  // none (pixels as stored). Set together with padding_fill.
  torch::Tensor pixel_mean;
  torch::Tensor pixel_std;

  // Whether Augment changes anything (mixup/cutmix are MixBatch's).
  bool enabled() const {
    return preprocess.enabled() || random_resized_crop.enabled || random_crop_padding > 0 ||
           horizontal_flip || rotation || color_jitter.enabled() || random_erasing.p > 0;
  }
  bool mixes() const { return mixup_alpha > 0 || cutmix_alpha > 0; }
};

// Sets options.padding_fill (-mean[c] / std[c]), pixel_mean and pixel_std as [C] float32 host
// tensors from a dataset's normalisation (one value per channel, or one for all; empty = none,
// which leaves them undefined). The caller moves them to the data's device.
void SetNormalisation(const std::vector<float>& mean, const std::vector<float>& std,
                      int64_t channels, AugmentationOptions& options);

// Moves the options' tensors (fill, normalisation, erase value) to `device`, once, where the
// images are.
void MoveToDevice(const torch::Device& device, AugmentationOptions& options);

// Returns `images` ([N, C, H, W], float32 or another floating dtype, on any device) augmented
// per example, in this order: random_resized_crop (else preprocess: resize, center crop), the
// padded random crop (pad by p = random_crop_padding with padding_fill, crop back to the size at
// an offset uniform in [0, 2p]²), horizontal flip (p 0.5), rotation, colour jitter, erasing.
// The output is [N, C, H', W'] with H' × W' the random_resized_crop or preprocess size (else H ×
// W), same dtype and device, outside autograd; `images` itself when !options.enabled(). The
// random numbers come from `generator` only (of the images' device type), so the same generator
// state gives the same result. Not thread-safe with other users of `generator`. Throws
// c10::Error for a tensor that is not 4-D, a padding that is negative or >= H or W, a crop
// larger than the image, or fill/mean/std/erase values of other than C (or 1) values. Queues
// device work only: no host-device synchronisation.
torch::Tensor Augment(const torch::Tensor& images, const AugmentationOptions& options,
                      at::Generator& generator);

// Evaluation's part of the pipeline: Resize then CenterCrop (as `preprocess` says) of
// [N, C, H, W]; `images` itself when !preprocess.enabled(). Deterministic; no host sync.
torch::Tensor Preprocess(const torch::Tensor& images, const Preprocessing& preprocess);

// A batch after mixup / cutmix: images [N, C, H, W] as given, targets [N, num_classes] float32
// (each row sums to 1).
struct MixedBatch {
  torch::Tensor images;
  torch::Tensor targets;
};

// torchvision references/classification's RandomMixup / RandomCutmix with p = 1 on one batch:
// labels [N] int64 class indices in [0, num_classes) become one-hot rows; the batch is mixed
// with itself rolled by one example along dim 0, with λ ~ Beta(alpha, alpha) drawn once for the
// batch (Γ(alpha) / (Γ(alpha) + Γ(alpha)), from `generator`):
//  - mixup: images = λ x + (1 - λ) x_rolled, targets = λ y + (1 - λ) y_rolled.
//  - cutmix: a box centred at a uniform pixel (r_x, r_y), half-sizes int(0.5 √(1 - λ) W) and
//    int(0.5 √(1 - λ) H), clipped to the image, is copied from x_rolled; λ' = 1 - box area /
//    (H W); targets = λ' y + (1 - λ') y_rolled.
// With both alphas set, each batch takes one of the two with probability 0.5. Requires
// options.mixes(). Throws c10::Error for labels that are not [N] int64 or images not 4-D.
// No host sync.
MixedBatch MixBatch(const torch::Tensor& images, const torch::Tensor& labels, int64_t num_classes,
                    const AugmentationOptions& options, at::Generator& generator);

// The deterministic kernels Augment is made of, for tests and the benchmark. Images [N, C, H, W]
// floating; per-example parameters are [N] tensors on the images' device.
namespace augment_kernels {

// Per-example boxes: [N] int64 each, on the device the draws were made on.
struct Boxes {
  torch::Tensor top, left, height, width;
};
// RandomResizedCrop.get_params for N images of height × width: area uniform in the scale range
// × H × W, aspect w / h log-uniform in the ratio range, w = round(√(area · aspect)), h =
// round(√(area / aspect)) (Python's round: half to even), 10 tries per example, the first with
// 0 < w <= W and 0 < h <= H taken at a uniform offset; none: torchvision's fallback (the whole
// image clipped to the ratio range, centred).
Boxes DrawResizedCropBoxes(int64_t n, int64_t height, int64_t width,
                           const RandomResizedCropOptions& options, const torch::Device& device,
                           at::Generator& generator);
// RandomErasing.get_params and its coin (p): h = round(√(area · ratio)), w = round(√(area /
// ratio)), the first of 10 tries with h < H and w < W; an example not erased (the coin, or no
// fitting try) gets a box of height and width 0.
Boxes DrawErasingBoxes(int64_t n, int64_t height, int64_t width,
                       const RandomErasingOptions& options, const torch::Device& device,
                       at::Generator& generator);

// torchvision.transforms.functional.resize(img, [height, width], antialias=True) of float
// images: F.interpolate(mode="bilinear", align_corners=False, antialias=True).
torch::Tensor Resize(const torch::Tensor& images, int64_t height, int64_t width);
// torchvision's center_crop: offsets int(round((H - height) / 2)), round half to even (Python's
// round). height <= H, width <= W.
torch::Tensor CenterCrop(const torch::Tensor& images, int64_t height, int64_t width);
// torchvision's resized_crop(img, top, left, h, w, [out_height, out_width], antialias=False)
// per example (crop boxes int64 [N], inside the image, h and w >= 1): bilinear,
// align_corners=False, source coordinates clamped to the box as F.interpolate clamps them to
// the cropped image.
torch::Tensor ResizedCrop(const torch::Tensor& images, const torch::Tensor& top,
                          const torch::Tensor& left, const torch::Tensor& height,
                          const torch::Tensor& width, int64_t out_height, int64_t out_width);
// Rotation by `degrees` ([N] float) counter-clockwise about the centre, nearest neighbour,
// `fill` ([C] or undefined = 0) outside: torchvision's rotate(img, angle,
// InterpolationMode.NEAREST, expand=False, fill) as affine_grid + grid_sample.
torch::Tensor Rotate(const torch::Tensor& images, const torch::Tensor& degrees,
                     const torch::Tensor& fill);
// functional_tensor.adjust_brightness / adjust_contrast / adjust_saturation / adjust_hue on
// pixels in [0, 1], with a factor per example ([N] float32). Saturation and hue leave 1-channel
// images as they are; hue factors in [-0.5, 0.5].
torch::Tensor AdjustBrightness(const torch::Tensor& pixels, const torch::Tensor& factor);
torch::Tensor AdjustContrast(const torch::Tensor& pixels, const torch::Tensor& factor);
torch::Tensor AdjustSaturation(const torch::Tensor& pixels, const torch::Tensor& factor);
torch::Tensor AdjustHue(const torch::Tensor& pixels, const torch::Tensor& factor);
// torchvision's erase(img, i, j, h, w, v) per example: rows [top, top + height) and columns
// [left, left + width) set to `value` ([C] or [1]); a box of height or width 0 erases nothing.
torch::Tensor Erase(const torch::Tensor& images, const torch::Tensor& top,
                    const torch::Tensor& left, const torch::Tensor& height,
                    const torch::Tensor& width, const torch::Tensor& value);

}  // namespace augment_kernels

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_AUGMENT_H_
