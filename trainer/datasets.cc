// The dataset registry, the dataset part of job validation, and the loaders: IDX and CIFAR-10
// files decoded on the device, synthetic data drawn there.
#include "trainer/datasets.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/effective_spec.h"
#include "trainer/cifar.h"
#include "trainer/device.h"
#include "trainer/field_checks.h"
#include "trainer/idx.h"
#include "trainer/models.h"
#include "trainer/own_data.h"

namespace mpsd::trainer {
namespace {

constexpr std::array<absl::string_view, 4> kIdxFiles = {
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte"};

// synthetic's defaults (DatasetSpec.synthetic in the proto).
constexpr int64_t kSyntheticTrainExamples = 10000;
constexpr int64_t kSyntheticTestExamples = 1000;
// Values per synthetic split: 16 GiB of float32. More is a typo, not a benchmark.
constexpr int64_t kMaxSyntheticValues = int64_t{1} << 32;

// ---- Decoding on the device ------------------------------------------------------------------

// uint8 pixels [N, C, H, W] already on the device → float32 scaled to [0, 1] and normalised per
// channel with the dataset's mean and std.
torch::Tensor NormaliseOnDevice(const torch::Tensor& pixels, const DatasetInfo& info) {
  const int64_t channels = pixels.size(1);
  const auto on_device = torch::TensorOptions().device(pixels.device());
  const torch::Tensor mean =
      torch::tensor(info.mean, torch::kFloat32).to(on_device).view({1, channels, 1, 1});
  const torch::Tensor std =
      torch::tensor(info.std, torch::kFloat32).to(on_device).view({1, channels, 1, 1});
  return pixels.to(torch::kFloat32).div_(255.0).sub_(mean).div_(std);
}

// Host bytes → the same bytes on `device`. The copy does not alias `bytes`, which the caller
// frees.
torch::Tensor BytesToDevice(const std::vector<uint8_t>& bytes, std::vector<int64_t> shape,
                            const torch::Device& device) {
  return torch::from_blob(const_cast<uint8_t*>(bytes.data()), shape, torch::kUInt8).to(device);
}

// ---- IDX (mnist, fashion-mnist) ---------------------------------------------------------------

absl::Status CheckIdxFiles(const std::string& root) {
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

// The whole split is read (its labels say which examples a subset keeps), then only the kept
// rows cross to the device.
absl::StatusOr<TensorSplit> LoadIdxSplit(const DatasetInfo& info, const std::string& root,
                                         const std::string& prefix, const SubsetRequest& request,
                                         const torch::Device& device,
                                         std::vector<std::string>& notes) {
  absl::StatusOr<IdxSplit> split = ReadIdxSplit(root, prefix, /*limit=*/0, info.num_classes);
  if (!split.ok()) return split.status();
  const std::vector<int64_t>& dims = split->images.dims;
  const int64_t height = info.input_shape[1], width = info.input_shape[2];
  if (dims.size() != 3 || dims[1] != height || dims[2] != width) {
    const absl::StatusOr<std::string> path = FindIdxFile(root, prefix + "-images-idx3-ubyte");
    return absl::DataLossError(absl::StrFormat(
        "%s: images are %d×%d, expected %d×%d for %s", path.ok() ? *path : root,
        dims.size() > 1 ? dims[1] : 0, dims.size() > 2 ? dims[2] : 0, height, width, info.name));
  }
  const std::vector<uint8_t>& label_bytes = split->labels.data;
  absl::StatusOr<Subset> subset =
      ChooseSubset(std::vector<int64_t>(label_bytes.begin(), label_bytes.end()), request);
  if (!subset.ok()) return subset.status();
  notes.insert(notes.end(), subset->notes.begin(), subset->notes.end());
  std::vector<uint8_t> images = std::move(split->images.data);
  std::vector<uint8_t> labels = std::move(split->labels.data);
  if (subset->subsetted) {
    images = SelectRows(images, height * width, subset->indices);
    labels = SelectRows(labels, 1, subset->indices);
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  return TensorSplit{NormaliseOnDevice(BytesToDevice(images, {n, 1, height, width}, device), info),
                     BytesToDevice(labels, {n}, device).to(torch::kInt64)};
}

absl::StatusOr<DeviceDataset> LoadIdx(const DatasetConfig& config, uint64_t seed,
                                      const torch::Device& device) {
  std::vector<std::string> notes;
  absl::StatusOr<TensorSplit> train =
      LoadIdxSplit(*config.info, config.root, "train",
                   MakeSubsetRequest(config, seed, /*train=*/true), device, notes);
  if (!train.ok()) return train.status();
  absl::StatusOr<TensorSplit> test =
      LoadIdxSplit(*config.info, config.root, "t10k",
                   MakeSubsetRequest(config, seed, /*train=*/false), device, notes);
  if (!test.ok()) return test.status();
  DeviceDataset data;
  data.train = *std::move(train);
  data.test = *std::move(test);
  data.augmentation = config.augmentation;
  data.notes = std::move(notes);
  return data;
}

// ---- CIFAR-10 ---------------------------------------------------------------------------------

// The records cross to the device as they are ([N, 3073] bytes); label and image are split there.
// The whole split is read; a subset keeps its records on the host first.
absl::StatusOr<TensorSplit> LoadCifarSplit(const DatasetInfo& info, const std::string& root,
                                           CifarSplitKind kind, const SubsetRequest& request,
                                           const torch::Device& device,
                                           std::vector<std::string>& notes) {
  absl::StatusOr<CifarRecords> records = ReadCifarSplit(root, kind, /*limit=*/0);
  if (!records.ok()) return records.status();
  std::vector<int64_t> labels(records->count);
  for (int64_t i = 0; i < records->count; ++i) labels[i] = records->label(i);
  absl::StatusOr<Subset> subset = ChooseSubset(labels, request);
  if (!subset.ok()) return subset.status();
  notes.insert(notes.end(), subset->notes.begin(), subset->notes.end());
  if (subset->subsetted) {
    records->bytes = SelectRows(records->bytes, kCifarRecordBytes, subset->indices);
    records->count = static_cast<int64_t>(subset->indices.size());
  }
  const int64_t n = records->count;
  const torch::Tensor bytes = BytesToDevice(records->bytes, {n, kCifarRecordBytes}, device);
  const torch::Tensor pixels =
      bytes.narrow(/*dim=*/1, /*start=*/1, kCifarImageBytes).reshape({n, 3, 32, 32});
  return TensorSplit{NormaliseOnDevice(pixels, info),
                     bytes.select(/*dim=*/1, /*index=*/0).to(torch::kInt64)};
}

absl::StatusOr<DeviceDataset> LoadCifar(const DatasetConfig& config, uint64_t seed,
                                        const torch::Device& device) {
  std::vector<std::string> notes;
  absl::StatusOr<TensorSplit> train =
      LoadCifarSplit(*config.info, config.root, CifarSplitKind::kTrain,
                     MakeSubsetRequest(config, seed, /*train=*/true), device, notes);
  if (!train.ok()) return train.status();
  absl::StatusOr<TensorSplit> test =
      LoadCifarSplit(*config.info, config.root, CifarSplitKind::kTest,
                     MakeSubsetRequest(config, seed, /*train=*/false), device, notes);
  if (!test.ok()) return test.status();
  DeviceDataset data;
  data.train = *std::move(train);
  data.test = *std::move(test);
  data.augmentation = config.augmentation;
  data.notes = std::move(notes);
  return data;
}

// ---- synthetic --------------------------------------------------------------------------------

TensorSplit DrawSyntheticSplit(const DatasetConfig& config, int64_t n, at::Generator& generator,
                               const torch::Device& device) {
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), config.input_shape.begin(), config.input_shape.end());
  const auto on_device = torch::TensorOptions().device(device);
  torch::Tensor inputs = torch::randn(shape, generator, on_device.dtype(torch::kFloat32));
  torch::Tensor labels =
      torch::randint(config.num_classes, {n}, generator, on_device.dtype(torch::kInt64));
  return TensorSplit{std::move(inputs), std::move(labels)};
}

absl::StatusOr<DeviceDataset> LoadSynthetic(const DatasetConfig& config, uint64_t seed,
                                            const torch::Device& device) {
  at::Generator generator = MakeDeviceGenerator(device, seed);
  TensorSplit train = DrawSyntheticSplit(config, config.synthetic_train, generator, device);
  TensorSplit test = DrawSyntheticSplit(config, config.synthetic_test, generator, device);
  DeviceDataset data;
  data.train = std::move(train);
  data.test = std::move(test);
  data.augmentation = config.augmentation;
  return data;
}

// ---- The registry -----------------------------------------------------------------------------

// Normalisation constants: the mean and standard deviation of the training pixels scaled to
// [0, 1]. MNIST's as in pytorch/examples; Fashion-MNIST's the usual values; CIFAR-10's per
// channel (R, G, B) as torchvision users usually write them (the std over all training pixels,
// not the 0.2023/0.1994/0.2010 of per-image stds some scripts copy).
const std::vector<DatasetInfo>& Registry() {
  static const std::vector<DatasetInfo> registry = {
      {"fashion-mnist",
       {1, 28, 28},
       10,
       60'000,
       10'000,
       {0.2860f},
       {0.3530f},
       CheckIdxFiles,
       LoadIdx},
      {"mnist", {1, 28, 28}, 10, 60'000, 10'000, {0.1307f}, {0.3081f}, CheckIdxFiles, LoadIdx},
      {"cifar10",
       {3, 32, 32},
       kCifarClasses,
       50'000,
       10'000,
       {0.4914f, 0.4822f, 0.4465f},
       {0.2470f, 0.2435f, 0.2616f},
       CheckCifarFiles,
       LoadCifar},
      {"synthetic", {3, 32, 32}, 10, 0, 0, {}, {}, nullptr, LoadSynthetic},
      {"image_folder", {}, 0, 0, 0, {}, {}, nullptr, LoadImageFolder, ResolveImageFolder},
      {"tensors", {}, 0, 0, 0, {}, {}, nullptr, LoadTensors, ResolveTensors},
  };
  return registry;
}

// ---- Validation -------------------------------------------------------------------------------

const FieldChecks& Fields() {
  static const FieldChecks* const fields = new FieldChecks("train_job.dataset");
  return *fields;
}

absl::Status FieldError(absl::string_view field, absl::string_view problem) {
  return Fields().Error(field, problem);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Examples in one synthetic split: the spec's (or the default), then the limit.
absl::StatusOr<int64_t> SyntheticExamples(absl::string_view field, bool has_value, int64_t value,
                                          int64_t default_value, int64_t limit,
                                          const std::vector<int64_t>& shape) {
  if (has_value) {
    if (absl::Status s = Fields().Positive(field, value); !s.ok()) return s;
  }
  int64_t n = has_value ? value : default_value;
  if (limit > 0) n = std::min(n, limit);
  int64_t per_example = 1;
  for (const int64_t dim : shape) per_example *= dim;  // CheckInputShape bounds it by 2^31
  if (n > kMaxSyntheticValues / per_example) {
    return FieldError(field, absl::StrFormat("%d examples of shape %s are more than 2^32 values "
                                             "(16 GiB of float32), the most a split may have",
                                             n, ShapeString(shape)));
  }
  return n;
}

absl::Status ResolveSynthetic(const mpsd::v1::SyntheticSpec& spec, DatasetConfig& config) {
  if (!spec.input_shape().empty()) {
    config.input_shape.assign(spec.input_shape().begin(), spec.input_shape().end());
    if (absl::Status s = CheckInputShape(config.input_shape); !s.ok()) {
      return FieldError("synthetic.input_shape", s.message());
    }
  }
  if (spec.has_num_classes()) {
    if (absl::Status s = CheckNumClasses(spec.num_classes()); !s.ok()) {
      return FieldError("synthetic.num_classes", s.message());
    }
    config.num_classes = spec.num_classes();
  }
  absl::StatusOr<int64_t> train = SyntheticExamples(
      "synthetic.train_examples", spec.has_train_examples(), spec.train_examples(),
      kSyntheticTrainExamples, config.limit_train, config.input_shape);
  if (!train.ok()) return train.status();
  absl::StatusOr<int64_t> test =
      SyntheticExamples("synthetic.test_examples", spec.has_test_examples(), spec.test_examples(),
                        kSyntheticTestExamples, config.limit_test, config.input_shape);
  if (!test.ok()) return test.status();
  config.synthetic_train = *train;
  config.synthetic_test = *test;
  return absl::OkStatus();
}

// DatasetSpec.validation: one of fraction and source; a source only where the dataset has one.
absl::Status ResolveValidation(const mpsd::v1::DatasetSpec& spec, DatasetConfig& config) {
  if (!spec.has_validation()) return absl::OkStatus();
  const mpsd::v1::ValidationSpec& validation = spec.validation();
  if (validation.has_fraction() == !validation.source().empty()) {
    return FieldError("validation",
                      "set one of fraction (held out of the training split) and "
                      "source (a split the dataset has: \"val\")");
  }
  if (validation.has_fraction()) {
    if (absl::Status s = Fields().InRange("validation.fraction", validation.fraction(),
                                          Interval{0, false, 1, false});
        !s.ok()) {
      return s;
    }
    config.validation_fraction = validation.fraction();
    return absl::OkStatus();
  }
  if (validation.source() != "val") {
    return FieldError("validation.source",
                      absl::StrFormat("unknown source \"%s\" (known: val)", validation.source()));
  }
  if (config.info->resolve == nullptr) {
    return FieldError("validation.source",
                      absl::StrFormat("%s has no validation split of its own; use "
                                      "validation.fraction to hold one out of the training split",
                                      config.info->name));
  }
  config.validation_from_source = true;
  return absl::OkStatus();
}

// A [min, max] pair of a repeated double field: low and high kept (the defaults) when empty;
// else exactly two values, each inside `each` (an unbounded `each`: > 0 and finite), min <= max.
absl::Status ResolveRange(absl::string_view field,
                          const google::protobuf::RepeatedField<double>& values,
                          const std::optional<Interval>& each, double& low, double& high) {
  if (values.empty()) return absl::OkStatus();
  if (values.size() != 2) {
    return FieldError(field, absl::StrFormat("needs [min, max], got %d values", values.size()));
  }
  for (int i = 0; i < 2; ++i) {
    const std::string element = Indexed(field, i);
    if (absl::Status s = each.has_value() ? Fields().InRange(element, values[i], *each)
                                          : Fields().PositiveFinite(element, values[i]);
        !s.ok()) {
      return s;
    }
  }
  if (values[0] > values[1]) {
    return FieldError(field, absl::StrFormat("min %g is larger than max %g", values[0], values[1]));
  }
  low = values[0];
  high = values[1];
  return absl::OkStatus();
}

// A size field of one value (`square`: [v, v]; else torchvision's one-value meaning, kept as
// one value) or [height, width], each in [1, 4096].
absl::StatusOr<std::vector<int64_t>> ResolveSize(
    absl::string_view field, const google::protobuf::RepeatedField<int32_t>& values, bool square) {
  if (values.size() != 1 && values.size() != 2) {
    return FieldError(
        field, absl::StrFormat("needs one value or [height, width], got %d values", values.size()));
  }
  std::vector<int64_t> size;
  for (int i = 0; i < values.size(); ++i) {
    if (absl::Status s =
            Fields().InRange(values.size() == 1 ? std::string(field) : Indexed(field, i),
                             int64_t{values[i]}, 1, 4096);
        !s.ok()) {
      return s;
    }
    size.push_back(values[i]);
  }
  if (square && size.size() == 1) size.push_back(size[0]);
  return size;
}

absl::Status ResolveMix(absl::string_view field, const mpsd::v1::MixSpec& spec, double& alpha) {
  if (!spec.has_alpha()) {
    return FieldError(field,
                      "needs alpha (Beta(alpha, alpha); torchvision's references use 0.2 "
                      "for mixup, 1.0 for cutmix)");
  }
  const std::string name = absl::StrCat(field, ".alpha");
  if (absl::Status s = Fields().PositiveFinite(name, spec.alpha()); !s.ok()) return s;
  alpha = spec.alpha();
  return absl::OkStatus();
}

absl::Status ResolveAugmentation(const mpsd::v1::AugmentationSpec& spec, DatasetConfig& config) {
  config.model_input_shape = config.input_shape;
  if (spec.ByteSizeLong() == 0) return absl::OkStatus();  // nothing set
  const std::vector<int64_t>& shape = config.input_shape;
  if (shape.size() != 3) {
    return FieldError("augmentation",
                      absl::StrFormat("needs images [C, H, W], but the examples of dataset %s "
                                      "have shape %s",
                                      config.info->name, ShapeString(shape)));
  }
  const int64_t channels = shape[0];
  AugmentationOptions& options = config.augmentation;
  // Resize, then CenterCrop: what evaluation sees, and so the model's input.
  int64_t height = shape[1], width = shape[2];
  if (!spec.resize().empty()) {
    absl::StatusOr<std::vector<int64_t>> size =
        ResolveSize("augmentation.resize", spec.resize(), /*square=*/false);
    if (!size.ok()) return size.status();
    std::tie(height, width) = ResolvedResize(*size, height, width);
    if (height < 1 || width < 1 || height > 4096 || width > 4096) {
      return FieldError("augmentation.resize",
                        absl::StrFormat("makes the %d×%d images %d×%d; each side must be in "
                                        "[1, 4096]",
                                        shape[1], shape[2], height, width));
    }
    options.preprocess.resize_height = height;
    options.preprocess.resize_width = width;
  }
  if (!spec.center_crop().empty()) {
    absl::StatusOr<std::vector<int64_t>> size =
        ResolveSize("augmentation.center_crop", spec.center_crop(), /*square=*/true);
    if (!size.ok()) return size.status();
    if ((*size)[0] > height || (*size)[1] > width) {
      return FieldError(
          "augmentation.center_crop",
          absl::StrFormat("%d×%d is larger than the %s images (%d×%d)", (*size)[0], (*size)[1],
                          spec.resize().empty() ? "dataset's" : "resized", height, width));
    }
    height = (*size)[0];
    width = (*size)[1];
    options.preprocess.crop_height = height;
    options.preprocess.crop_width = width;
  }
  if (spec.has_random_resized_crop()) {
    const mpsd::v1::RandomResizedCropSpec& crop = spec.random_resized_crop();
    RandomResizedCropOptions& o = options.random_resized_crop;
    o.enabled = true;
    o.height = height;
    o.width = width;
    if (!crop.size().empty()) {
      absl::StatusOr<std::vector<int64_t>> size =
          ResolveSize("augmentation.random_resized_crop.size", crop.size(), /*square=*/true);
      if (!size.ok()) return size.status();
      if ((*size)[0] != height || (*size)[1] != width) {
        return FieldError(
            "augmentation.random_resized_crop.size",
            absl::StrFormat("%d×%d, but evaluation batches are %d×%d (the images "
                            "after resize and center_crop) and the model takes one "
                            "input size; set center_crop (or resize) to %d×%d",
                            (*size)[0], (*size)[1], height, width, (*size)[0], (*size)[1]));
      }
    }
    if (absl::Status s = ResolveRange("augmentation.random_resized_crop.scale", crop.scale(),
                                      Interval{0, false, 1, true}, o.scale_min, o.scale_max);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ResolveRange("augmentation.random_resized_crop.ratio", crop.ratio(),
                                      std::nullopt, o.ratio_min, o.ratio_max);
        !s.ok()) {
      return s;
    }
  }
  config.model_input_shape = {channels, height, width};

  const int64_t padding = spec.random_crop_padding();
  if (absl::Status s = Fields().AtLeast("augmentation.random_crop_padding", padding, 0); !s.ok()) {
    return s;
  }
  if (padding >= height || padding >= width) {
    return FieldError("augmentation.random_crop_padding",
                      absl::StrFormat("must be smaller than the image's height and width "
                                      "(%d×%d), got %d",
                                      height, width, padding));
  }
  options.random_crop_padding = padding;
  options.horizontal_flip = spec.horizontal_flip();

  if (spec.has_random_rotation()) {
    const auto& degrees = spec.random_rotation().degrees();
    const std::string field = "augmentation.random_rotation.degrees";
    if (degrees.size() == 1) {
      if (absl::Status s = Fields().InRange(field, degrees[0], Interval{0, true, 360, true});
          !s.ok()) {
        return s;
      }
      options.rotation_min = -degrees[0];
      options.rotation_max = degrees[0];
    } else if (degrees.size() == 2) {
      if (absl::Status s = ResolveRange(field, degrees, Interval{-360, true, 360, true},
                                        options.rotation_min, options.rotation_max);
          !s.ok()) {
        return s;
      }
    } else {
      return FieldError(field, absl::StrFormat("needs one value d (angles in [-d, d]) or [min, "
                                               "max], got %d values",
                                               degrees.size()));
    }
    options.rotation = true;
  }

  if (spec.has_color_jitter()) {
    const mpsd::v1::ColorJitterSpec& jitter = spec.color_jitter();
    ColorJitterOptions& o = options.color_jitter;
    for (const auto& [name, value, target] :
         {std::tuple{"brightness", jitter.brightness(), &o.brightness},
          std::tuple{"contrast", jitter.contrast(), &o.contrast},
          std::tuple{"saturation", jitter.saturation(), &o.saturation},
          std::tuple{"hue", jitter.hue(), &o.hue}}) {
      const std::string path = absl::StrCat("augmentation.color_jitter.", name);
      if (absl::Status s = std::string(name) == "hue"
                               ? Fields().InRange(path, value, Interval{0, true, 0.5, true})
                               : Fields().NonNegativeFinite(path, value);
          !s.ok()) {
        return s;
      }
      *target = value;
    }
  }

  if (spec.has_random_erasing()) {
    const mpsd::v1::RandomErasingSpec& erasing = spec.random_erasing();
    RandomErasingOptions& o = options.random_erasing;
    o.p = erasing.has_p() ? erasing.p() : 0.5;
    if (absl::Status s =
            Fields().InRange("augmentation.random_erasing.p", o.p, Interval{0, true, 1, true});
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ResolveRange("augmentation.random_erasing.scale", erasing.scale(),
                                      Interval{0, false, 1, true}, o.scale_min, o.scale_max);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ResolveRange("augmentation.random_erasing.ratio", erasing.ratio(),
                                      std::nullopt, o.ratio_min, o.ratio_max);
        !s.ok()) {
      return s;
    }
    if (erasing.value_size() != 0 && erasing.value_size() != 1 &&
        erasing.value_size() != channels) {
      return FieldError("augmentation.random_erasing.value",
                        absl::StrFormat("needs one value or one per channel (%d), got %d", channels,
                                        erasing.value_size()));
    }
    for (int i = 0; i < erasing.value_size(); ++i) {
      if (absl::Status s =
              Fields().Float32(Indexed("augmentation.random_erasing.value", i), erasing.value(i));
          !s.ok()) {
        return s;
      }
    }
    if (erasing.value_size() > 0) {
      o.value = torch::tensor(std::vector<float>(erasing.value().begin(), erasing.value().end()),
                              torch::kFloat32);
    }
  }

  if (spec.has_mixup()) {
    if (absl::Status s = ResolveMix("augmentation.mixup", spec.mixup(), options.mixup_alpha);
        !s.ok()) {
      return s;
    }
  }
  if (spec.has_cutmix()) {
    if (absl::Status s = ResolveMix("augmentation.cutmix", spec.cutmix(), options.cutmix_alpha);
        !s.ok()) {
      return s;
    }
  }
  // torchvision pads and rotates with black: pixel 0, i.e. -mean / std after normalisation.
  // Host tensors here; LoadDataset moves them to the device once. (image_folder and tensors
  // know their normalisation only when loaded: LoadOwnData sets them then.)
  if (!config.info->mean.empty()) {
    SetNormalisation(config.info->mean, config.info->std, channels, options);
  }
  return absl::OkStatus();
}

}  // namespace

const DatasetInfo* FindDataset(absl::string_view name) {
  for (const DatasetInfo& info : Registry()) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

std::vector<std::string> DatasetNames() {
  std::vector<std::string> names;
  for (const DatasetInfo& info : Registry()) names.emplace_back(info.name);
  return names;
}

absl::StatusOr<DatasetConfig> ResolveDataset(const mpsd::v1::DatasetSpec& spec) {
  const std::string known = KnownNames(DatasetNames());
  if (spec.name().empty()) return FieldError("name", "required " + known);
  DatasetConfig config;
  config.info = FindDataset(spec.name());
  if (config.info == nullptr) {
    return FieldError("name", absl::StrFormat("unknown dataset \"%s\" %s", spec.name(), known));
  }
  if (absl::Status s = Fields().AtLeast("limit_train", spec.limit_train(), 0); !s.ok()) return s;
  if (absl::Status s = Fields().AtLeast("limit_test", spec.limit_test(), 0); !s.ok()) return s;
  config.limit_train = spec.limit_train();
  config.limit_test = spec.limit_test();
  if (spec.subset() == "first") {
    config.subset = SubsetMode::kFirst;
  } else if (!spec.subset().empty() && spec.subset() != "stratified") {
    return FieldError("subset", absl::StrFormat("unknown subset \"%s\" (known: stratified, "
                                                "first)",
                                                spec.subset()));
  }
  config.allow_missing_classes = spec.allow_missing_classes();
  config.input_shape = config.info->input_shape;
  config.num_classes = config.info->num_classes;
  if (absl::Status s = ResolveValidation(spec, config); !s.ok()) return s;
  if (config.info->resolve != nullptr) {
    if (absl::Status s = config.info->resolve(spec, config); !s.ok()) return s;
  } else {
    if (absl::Status s = CheckOwnDataFieldsUnset(spec); !s.ok()) return s;
    if (config.info->check_files == nullptr) {
      if (absl::Status s = ResolveSynthetic(spec.synthetic(), config); !s.ok()) return s;
    }
  }
  if (absl::Status s = ResolveAugmentation(spec.augmentation(), config); !s.ok()) return s;
  if (config.info->check_files != nullptr) {
    config.root = spec.root().empty() ? api::DefaultDatasetRoot(config.info->name) : spec.root();
    if (absl::Status s = config.info->check_files(config.root); !s.ok()) {
      return FieldError("root", s.message());
    }
  }
  return config;
}

namespace {

// The training examples before validation.fraction holds some out.
int64_t ExamplesBeforeHoldOut(const DatasetConfig& config) {
  int64_t examples = 0;
  if (config.info->resolve != nullptr) {
    examples = config.own.train_examples;  // own data, counted
  } else if (config.info->check_files == nullptr) {
    examples = config.synthetic_train;
  } else {
    examples = config.info->train_examples;
    if (config.limit_train > 0) examples = std::min(examples, config.limit_train);
  }
  return examples;
}

}  // namespace

int64_t NominalTrainExamples(const DatasetConfig& config) {
  const int64_t examples = ExamplesBeforeHoldOut(config);
  // What SplitValidation leaves to train on.
  return examples - std::llround(config.validation_fraction * static_cast<double>(examples));
}

absl::Status CheckValidationFraction(const DatasetConfig& config) {
  if (config.validation_fraction <= 0) return absl::OkStatus();
  const int64_t examples = ExamplesBeforeHoldOut(config);
  // As SplitValidation rounds it.
  const int64_t held_out = std::llround(config.validation_fraction * static_cast<double>(examples));
  if (held_out >= 1 && held_out < examples) return absl::OkStatus();
  return FieldError(
      "validation.fraction",
      absl::StrFormat("%g of %d training examples holds out %d, which leaves %s",
                      config.validation_fraction, examples, held_out,
                      held_out < 1 ? "the validation split empty" : "nothing to train on"));
}

absl::Status HoldOutValidation(const DatasetConfig& config, uint64_t seed, DeviceDataset& data) {
  if (config.validation_fraction <= 0) return absl::OkStatus();
  const torch::Tensor labels = data.train.labels.to(torch::kCPU).contiguous();
  const int64_t* begin = labels.data_ptr<int64_t>();
  absl::StatusOr<ValidationSplit> split = SplitValidation(
      std::vector<int64_t>(begin, begin + labels.numel()), config.validation_fraction,
      MakeSubsetRequest(config, seed, /*train=*/true, data.class_names));
  if (!split.ok()) return split.status();
  data.notes.insert(data.notes.end(), split->notes.begin(), split->notes.end());
  const torch::Tensor train_index =
      torch::tensor(split->train, torch::kInt64).to(data.train.labels.device());
  const torch::Tensor val_index =
      torch::tensor(split->validation, torch::kInt64).to(data.train.labels.device());
  const TensorSplit& train = data.train;
  data.val = TensorSplit{train.images.index_select(/*dim=*/0, val_index),
                         train.labels.index_select(/*dim=*/0, val_index)};
  data.train = TensorSplit{train.images.index_select(/*dim=*/0, train_index),
                           train.labels.index_select(/*dim=*/0, train_index)};
  data.validation =
      absl::StrFormat("fraction %g of train (seed %d)", config.validation_fraction, seed);
  return absl::OkStatus();
}

SubsetRequest MakeSubsetRequest(const DatasetConfig& config, uint64_t seed, bool train,
                                std::vector<std::string> class_names) {
  SubsetRequest request;
  request.limit = train ? config.limit_train : config.limit_test;
  request.mode = config.subset;
  request.seed = seed;
  // Float targets are one stratum (own_data.cc draws them uniformly).
  request.num_classes = config.float_targets ? 1 : config.num_classes;
  if (!config.float_targets) request.class_names = std::move(class_names);
  request.allow_missing_classes = config.allow_missing_classes;
  request.split = train ? "train" : "test";
  request.field = train ? "limit_train" : "limit_test";
  return request;
}

absl::StatusOr<DeviceDataset> LoadDataset(const DatasetConfig& config, uint64_t seed,
                                          const torch::Device& device) {
  absl::StatusOr<DeviceDataset> data = config.info->load(config, seed, device);
  if (!data.ok()) return data;
  // image_folder and tensors split on the host, before placing (a streamed split has no images
  // on the device); the others here.
  if (config.info->resolve == nullptr) {
    if (absl::Status s = HoldOutValidation(config, seed, *data); !s.ok()) return s;
    // The published datasets' pixels, normalised with the registry's constants (synthetic's
    // inputs are drawn already standard normal: none).
    data->scaled = !config.info->mean.empty();
    data->mean = config.info->mean;
    data->std = config.info->std;
  }
  if (data->train.size() > 0 && !config.float_targets) {  // one read-back of the labels
    const torch::Tensor counts =
        torch::bincount(data->train.labels.to(torch::kCPU), /*weights=*/{}, config.num_classes);
    const auto values = counts.accessor<int64_t, 1>();
    for (int64_t c = 0; c < counts.size(0); ++c) data->train_class_counts.push_back(values[c]);
  }
  // Augment must find the fill on the device: a host tensor would be copied, and the device
  // synchronised with the host, on every training step.
  MoveToDevice(device, data->augmentation);
  // Validation and test batches are resized and centre-cropped as training's are.
  data->test.preprocess = data->augmentation.preprocess;
  data->val.preprocess = data->augmentation.preprocess;
  return data;
}

}  // namespace mpsd::trainer
