// The dataset registry and the decoding of IDX splits into device tensors.
#include "trainer/datasets.h"

#include <array>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_format.h"
#include "trainer/idx.h"

namespace mpsd::trainer {
namespace {

// Normalisation constants as in pytorch/examples (MNIST) and the usual Fashion-MNIST values:
// the mean and standard deviation of the training pixels scaled to [0, 1].
constexpr std::array<DatasetInfo, 2> kDatasets = {{
    {"fashion-mnist", "/usr/share/datasets/fashion-mnist", 0.2860f, 0.3530f, 10, 28, 28},
    {"mnist", "/usr/share/datasets/mnist", 0.1307f, 0.3081f, 10, 28, 28},
}};

constexpr std::array<absl::string_view, 4> kIdxFiles = {
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte"};

// uint8 [N, H, W] → float32 [N, 1, H, W] on `device`. Only bytes are copied to the device; the
// copy does not alias `array`, which the caller frees.
torch::Tensor ImagesToDevice(const IdxArray& array, const DatasetInfo& info,
                             const torch::Device& device) {
  const int64_t n = array.dims[0];
  torch::Tensor bytes =
      torch::from_blob(const_cast<uint8_t*>(array.data.data()),
                       {n, /*channels=*/1, info.height, info.width}, torch::kUInt8);
  return bytes.to(device).to(torch::kFloat32).div_(255.0).sub_(info.mean).div_(info.std);
}

torch::Tensor LabelsToDevice(const IdxArray& array, const torch::Device& device) {
  torch::Tensor bytes =
      torch::from_blob(const_cast<uint8_t*>(array.data.data()), {array.dims[0]}, torch::kUInt8);
  return bytes.to(device).to(torch::kInt64);
}

absl::StatusOr<TensorSplit> LoadSplit(const DatasetInfo& info, const std::string& root,
                                      const std::string& prefix, int64_t limit,
                                      const torch::Device& device) {
  absl::StatusOr<IdxSplit> split = ReadIdxSplit(root, prefix, limit, info.num_classes);
  if (!split.ok()) return split.status();
  const std::vector<int64_t>& dims = split->images.dims;
  if (dims.size() != 3 || dims[1] != info.height || dims[2] != info.width) {
    const absl::StatusOr<std::string> path = FindIdxFile(root, prefix + "-images-idx3-ubyte");
    return absl::DataLossError(
        absl::StrFormat("%s: images are %d×%d, expected %d×%d for %s", path.ok() ? *path : root,
                        dims.size() > 1 ? dims[1] : 0, dims.size() > 2 ? dims[2] : 0, info.height,
                        info.width, info.name));
  }
  return TensorSplit{ImagesToDevice(split->images, info, device),
                     LabelsToDevice(split->labels, device)};
}

}  // namespace

const DatasetInfo* FindDataset(absl::string_view name) {
  for (const DatasetInfo& info : kDatasets) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

std::vector<std::string> DatasetNames() {
  std::vector<std::string> names;
  for (const DatasetInfo& info : kDatasets) names.emplace_back(info.name);
  return names;
}

absl::Status CheckDatasetFiles(const std::string& root) {
  std::error_code error;
  if (!std::filesystem::exists(root, error)) {
    return absl::NotFoundError(absl::StrFormat("directory %s does not exist", root));
  }
  if (!std::filesystem::is_directory(root, error)) {
    return absl::NotFoundError(absl::StrFormat("%s is not a directory", root));
  }
  for (absl::string_view name : kIdxFiles) {
    absl::StatusOr<std::string> path = FindIdxFile(root, std::string(name));
    if (!path.ok()) return path.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceDataset> LoadDataset(const DatasetInfo& info, const std::string& root,
                                          int64_t limit_train, int64_t limit_test,
                                          const torch::Device& device) {
  absl::StatusOr<TensorSplit> train = LoadSplit(info, root, "train", limit_train, device);
  if (!train.ok()) return train.status();
  absl::StatusOr<TensorSplit> test = LoadSplit(info, root, "t10k", limit_test, device);
  if (!test.ok()) return test.status();
  return DeviceDataset{*std::move(train), *std::move(test)};
}

}  // namespace mpsd::trainer
