// Datasets the executor can train on, decoded once into tensors that stay on the device for the
// whole job, so the training loop batches by index and does no per-example work on the host.
// Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_DATASETS_H_
#define MPSD_TRAINER_DATASETS_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {

// A dataset of single-channel images in the four IDX files of MNIST's layout.
struct DatasetInfo {
  absl::string_view name;          // "fashion-mnist"
  absl::string_view default_root;  // "/usr/share/datasets/fashion-mnist"
  // Per-pixel normalisation after scaling to [0, 1]: (x - mean) / std.
  float mean = 0;
  float std = 1;
  int num_classes = 10;
  int64_t height = 28;
  int64_t width = 28;
  // One image is [channels, height, width]; IDX datasets have one channel.
  int64_t channels = 1;
};

// The registry: nullptr for an unknown name. Entries live for the whole process.
const DatasetInfo* FindDataset(absl::string_view name);
// Known names in registry order ("fashion-mnist", "mnist"), for error messages.
std::vector<std::string> DatasetNames();

// Checks without reading them that `root` is a directory holding the four IDX files, each raw or
// .gz. NOT_FOUND naming the directory or the first missing file. Thread-safe.
absl::Status CheckDatasetFiles(const std::string& root);

// One split on the device.
struct TensorSplit {
  torch::Tensor images;  // [N, 1, H, W] float32, normalised with the dataset's mean and std
  torch::Tensor labels;  // [N] int64, each in [0, num_classes)
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

struct DeviceDataset {
  TensorSplit train;
  TensorSplit test;
};

// Reads the train and t10k splits under `root`, keeping the first limit_train / limit_test
// examples (0 = all), and decodes them onto `device`: only the raw bytes cross to the device,
// conversion and normalisation run there. Errors are the IDX reader's, naming the file
// (NOT_FOUND, DATA_LOSS), plus DATA_LOSS for images of another size than the dataset's. Throws
// c10::Error for device failures (e.g. out of memory); the caller's firewall converts.
absl::StatusOr<DeviceDataset> LoadDataset(const DatasetInfo& info, const std::string& root,
                                          int64_t limit_train, int64_t limit_test,
                                          const torch::Device& device);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_DATASETS_H_
