// Training-time augmentation of image batches on the device: torchvision's RandomCrop with
// zero padding and RandomHorizontalFlip(0.5), drawn per example but run as a few whole-batch
// kernels (no per-example loop, no host work). Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_AUGMENT_H_
#define MPSD_TRAINER_AUGMENT_H_

#include <torch/torch.h>

#include <cstdint>

namespace mpsd::trainer {

struct AugmentationOptions {
  // Pixels of padding on each side before a random crop back to the original size, as
  // torchvision.transforms.RandomCrop(size, padding=random_crop_padding); 0 = no crop. The
  // caller keeps it in [0, min(H, W)) (ResolveDataset checks it).
  int64_t random_crop_padding = 0;
  // Flip each image left-right with probability 0.5 (RandomHorizontalFlip).
  bool horizontal_flip = false;
  // The value of the padding per channel: [C] float32, in the units of the images given to
  // Augment; undefined = 0. torchvision pads the raw image with black before Normalize, so for
  // normalised images this is -mean[c] / std[c] (ResolveDataset sets it so, on the CPU, and
  // LoadDataset moves it to the data's device). On another device than the images it is copied
  // there on every call, which synchronises a CUDA device with the host: keep it on theirs.
  torch::Tensor padding_fill;

  bool enabled() const { return random_crop_padding > 0 || horizontal_flip; }
};

// Returns `images` ([N, C, H, W], any floating dtype, on any device) augmented per example: each
// image is padded by p = random_crop_padding on every side with padding_fill, then cropped
// back to H×W at an offset drawn uniformly from [0, 2p] × [0, 2p]; then, with horizontal_flip,
// mirrored left-right with probability 0.5. The random numbers come from `generator` only (of the
// images' device type), so the same generator state gives the same result. Returns `images`
// itself when !options.enabled(); otherwise a new tensor, same shape, dtype and device, outside
// autograd. Not thread-safe with other users of `generator`. Throws c10::Error for a tensor that
// is not 4-D, a padding that is negative or >= H or W, or padding_fill of other than C values.
// Queues device work only: no host-device synchronisation.
torch::Tensor Augment(const torch::Tensor& images, const AugmentationOptions& options,
                      at::Generator& generator);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_AUGMENT_H_
