// image_folder and tensors: validation, loading, normalisation and placement (resident on the
// device, or streamed from the host).
#include "trainer/own_data.h"
#include "trainer/compat/cuda_memory.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainer/dataset_cache.h"
#include "trainer/device.h"
#include "trainer/field_checks.h"
#include "trainer/image_folder.h"
#include "trainer/models.h"
#include "trainer/streamed_split.h"
#include "trainer/tensor_file.h"
#include "trainer/torch_archive.h"

namespace mpsd::trainer {
namespace {

constexpr int kMaxImageSide = 4096;
constexpr int kStreamDepth = 2;  // batches copied ahead of the one in use
constexpr int64_t kStatsChunkRows = 4096;

absl::Status FieldError(absl::string_view field, absl::string_view problem) {
  static const FieldChecks* const fields = new FieldChecks("train_job.dataset");
  return fields->Error(field, problem);
}

std::string MiB(int64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

// mean/std (after input_shape is known: C = input_shape[0]), placement, device_budget_bytes.
absl::Status ResolveCommon(const mpsd::v1::DatasetSpec& spec, DatasetConfig& config) {
  OwnDataConfig& own = config.own;
  if (spec.mean_size() != spec.std_size()) {
    return FieldError(spec.mean_size() < spec.std_size() ? "mean" : "std",
                      absl::StrFormat("set both mean and std or neither (got %d and %d values)",
                                      spec.mean_size(), spec.std_size()));
  }
  const int64_t channels = config.input_shape.empty() ? 1 : config.input_shape[0];
  if (spec.mean_size() != 0 && spec.mean_size() != 1 && spec.mean_size() != channels) {
    return FieldError("mean", absl::StrFormat("needs 1 value or %d (one per channel, dim 1 of a "
                                              "batch), got %d",
                                              channels, spec.mean_size()));
  }
  for (int i = 0; i < spec.mean_size(); ++i) {
    if (!std::isfinite(spec.mean(i))) {
      return FieldError(absl::StrCat("mean[", i, "]"),
                        absl::StrCat("must be finite, got ", spec.mean(i)));
    }
    if (!(spec.std(i) > 0) || !std::isfinite(spec.std(i))) {
      return FieldError(absl::StrCat("std[", i, "]"),
                        absl::StrCat("must be > 0 and finite, got ", spec.std(i)));
    }
  }
  own.mean.assign(spec.mean().begin(), spec.mean().end());
  own.std.assign(spec.std().begin(), spec.std().end());
  const std::string& placement = spec.placement();
  if (placement.empty() || placement == "auto") {
    own.placement = Placement::kAuto;
  } else if (placement == "resident") {
    own.placement = Placement::kResident;
  } else if (placement == "streamed") {
    own.placement = Placement::kStreamed;
  } else {
    return FieldError("placement", absl::StrFormat("unknown placement \"%s\" (known: auto, "
                                                   "resident, streamed)",
                                                   placement));
  }
  if (spec.device_budget_bytes() < 0) {
    return FieldError("device_budget_bytes",
                      absl::StrFormat("must be >= 0, got %d", spec.device_budget_bytes()));
  }
  own.device_budget_bytes = spec.device_budget_bytes();
  return absl::OkStatus();
}

absl::Status ResolveDecodeOptions(const mpsd::v1::ImageFolderSpec& spec,
                                  ImageDecodeOptions& options) {
  if (spec.image_size_size() != 2) {
    return FieldError("image_folder.image_size",
                      absl::StrFormat("required: [height, width] in pixels, got %d value(s)",
                                      spec.image_size_size()));
  }
  for (int i = 0; i < 2; ++i) {
    if (spec.image_size(i) < 1 || spec.image_size(i) > kMaxImageSide) {
      return FieldError(
          absl::StrCat("image_folder.image_size[", i, "]"),
          absl::StrFormat("must be in [1, %d], got %d", kMaxImageSide, spec.image_size(i)));
    }
  }
  options.height = spec.image_size(0);
  options.width = spec.image_size(1);
  options.channels = spec.has_channels() ? spec.channels() : 3;
  if (options.channels != 1 && options.channels != 3) {
    return FieldError(
        "image_folder.channels",
        absl::StrFormat("must be 3 (RGB) or 1 (grayscale), got %d", options.channels));
  }
  if (spec.on_bad_image() == "skip") {
    options.skip_bad_images = true;
  } else if (!spec.on_bad_image().empty() && spec.on_bad_image() != "fail") {
    return FieldError(
        "image_folder.on_bad_image",
        absl::StrFormat("must be \"fail\" or \"skip\", got \"%s\"", spec.on_bad_image()));
  }
  if (spec.decode_threads() < 0 || spec.decode_threads() > 1024) {
    return FieldError("image_folder.decode_threads",
                      absl::StrFormat("must be in [0, 1024], got %d", spec.decode_threads()));
  }
  options.threads = spec.decode_threads();
  return absl::OkStatus();
}

// Keeps the files ChooseSubset picks (by the class each file's directory names; `uniform`: one
// stratum, for float targets), before anything is decoded; the notes say what was kept.
absl::Status ApplySubset(const SubsetRequest& request, std::vector<ImageFile>& files,
                         std::vector<std::string>& notes, bool uniform) {
  std::vector<int64_t> labels;
  labels.reserve(files.size());
  for (const ImageFile& file : files) labels.push_back(uniform ? 0 : file.label);
  absl::StatusOr<Subset> subset = ChooseSubset(labels, request);
  if (!subset.ok()) return subset.status();
  notes.insert(notes.end(), subset->notes.begin(), subset->notes.end());
  if (!subset->subsetted) return absl::OkStatus();
  std::vector<ImageFile> kept;
  kept.reserve(subset->indices.size());
  for (const int64_t i : subset->indices) kept.push_back(std::move(files[i]));
  files = std::move(kept);
  return absl::OkStatus();
}

// ---- image_folder's float targets: <split>/targets.csv -------------------------------------

// "<root>/train/targets.csv" of a split.
std::string TargetsPath(const ImageFolderSplit& split) { return split.dir + "/targets.csv"; }

// The split's targets.csv as [files, D] float32 in the split's file order: one row per image,
// its path relative to the split's directory, then its D values ("cat/001.png,0.5,1.25"); a
// first line whose second field is not a number is a header. Every image needs exactly one row
// and every row an image; values must be finite. INVALID_ARGUMENT naming the file and the line.
absl::StatusOr<torch::Tensor> ReadTargetsCsv(const ImageFolderSplit& split) {
  const std::string path = TargetsPath(split);
  std::error_code exists_error;
  if (!std::filesystem::exists(path, exists_error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": missing (train/targets.csv gives the images float targets; every split needs "
        "its own)"));
  }
  // Read whole and bounded by executor.max_file_bytes, as every file a job names.
  absl::StatusOr<std::vector<char>> bytes = ReadWholeFile(path);
  if (!bytes.ok()) return absl::InvalidArgumentError(bytes.status().message());
  std::map<std::string, size_t> index;  // relative path → row in `split.files`
  for (size_t i = 0; i < split.files.size(); ++i) {
    index[split.files[i].path.substr(split.dir.size() + 1)] = i;
  }
  std::vector<std::vector<float>> rows(split.files.size());
  int64_t width = -1;
  int number = 0;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(bytes->data(), bytes->size()), '\n')) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::vector<std::string> fields = absl::StrSplit(line, ',');
    const auto where = [&](absl::string_view problem) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: line %d: %s", path, number, problem));
    };
    std::vector<float> values;
    for (size_t f = 1; f < fields.size(); ++f) {
      double value = 0;
      if (!absl::SimpleAtod(absl::StripAsciiWhitespace(fields[f]), &value)) {
        if (number == 1 && f == 1) break;  // a header
        return where(absl::StrFormat("\"%s\" is not a number", fields[f]));
      }
      if (!std::isfinite(value)) {
        return where(absl::StrFormat("%s; targets must be finite (no NaN or infinity)", fields[f]));
      }
      values.push_back(static_cast<float>(value));
    }
    if (number == 1 && values.size() + 1 < fields.size()) continue;  // the header
    if (values.empty()) return where("expected a file's path, then its target values");
    if (width >= 0 && static_cast<int64_t>(values.size()) != width) {
      return where(absl::StrFormat("%d values, but the rows before have %d", values.size(), width));
    }
    width = static_cast<int64_t>(values.size());
    const std::string file(absl::StripAsciiWhitespace(fields[0]));
    const auto found = index.find(file);
    if (found == index.end()) {
      return where(absl::StrFormat("%s is not an image of %s", file, split.dir));
    }
    if (!rows[found->second].empty()) return where(absl::StrCat(file, " has a row already"));
    rows[found->second] = std::move(values);
  }
  if (width < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no rows"));
  torch::Tensor targets = torch::empty({static_cast<int64_t>(rows.size()), width});
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: no row for %s", path, split.files[i].path.substr(split.dir.size() + 1)));
    }
    targets[static_cast<int64_t>(i)].copy_(torch::tensor(rows[i]));
  }
  return targets;
}

// The first target of `targets` (ReadTargetsCsv's) that is neither 0 nor 1, for messages
// ("val/targets.csv, cat/003.png, value 2: 0.5"); "" when there is none.
std::string NonBinaryTarget(const ImageFolderSplit& split, const torch::Tensor& targets) {
  const torch::Tensor at = targets.ne(0).logical_and(targets.ne(1)).nonzero();
  if (at.size(0) == 0) return "";
  const int64_t row = at[0][0].item<int64_t>(), column = at[0][1].item<int64_t>();
  return absl::StrFormat("%s, %s, value %d: %g", TargetsPath(split),
                         split.files[row].path.substr(split.dir.size() + 1), column + 1,
                         targets[row][column].item<double>());
}

// Reads every split's targets.csv at submit: the width, and what multilabel needs to know.
absl::Status ResolveFolderTargets(const ImageFolderListing& listing, DatasetConfig& config) {
  for (const ImageFolderSplit* split : {&listing.train, &listing.test, &listing.val}) {
    if (split->dir.empty()) continue;
    absl::StatusOr<torch::Tensor> targets = ReadTargetsCsv(*split);
    if (!targets.ok()) return FieldError("root", targets.status().message());
    if (config.float_targets && targets->size(1) != config.num_classes) {
      return FieldError("root", absl::StrFormat("%s: %d values per row, but %s has %d",
                                                TargetsPath(*split), targets->size(1),
                                                TargetsPath(listing.train), config.num_classes));
    }
    config.float_targets = true;
    config.num_classes = static_cast<int>(targets->size(1));
    config.target_shape = {targets->size(1)};
    if (config.non_binary_target.empty()) {
      config.non_binary_target = NonBinaryTarget(*split, *targets);
    }
  }
  return absl::OkStatus();
}

// Float targets: each file's label becomes its row in the split (the decode cache keeps it, and
// its key changes with it), so that the decoded rows find their targets after subsets and
// skipped images.
void LabelFilesByRow(ImageFolderSplit& split) {
  for (size_t i = 0; i < split.files.size(); ++i) split.files[i].label = static_cast<int>(i);
}

// What subsets and validation splits stratify y by: its class indices (CPU int64 [N]), or one
// stratum for float targets (a uniform draw).
std::vector<int64_t> Strata(const torch::Tensor& y) {
  if (y.scalar_type() != torch::kInt64) return std::vector<int64_t>(y.size(0), 0);
  const torch::Tensor labels = y.contiguous();
  const int64_t* begin = labels.data_ptr<int64_t>();
  return std::vector<int64_t>(begin, begin + labels.numel());
}

// A tensors split's x and y restricted to what ChooseSubset picks from y.
absl::Status SubsetTensors(const SubsetRequest& request, torch::Tensor& x, torch::Tensor& y,
                           std::vector<std::string>& notes) {
  absl::StatusOr<Subset> subset = ChooseSubset(Strata(y), request);
  if (!subset.ok()) return subset.status();
  notes.insert(notes.end(), subset->notes.begin(), subset->notes.end());
  if (!subset->subsetted) return absl::OkStatus();
  const torch::Tensor index = torch::tensor(subset->indices, torch::kInt64);
  x = x.index_select(/*dim=*/0, index);
  y = y.index_select(/*dim=*/0, index);
  return absl::OkStatus();
}

// DatasetSpec.validation.fraction on the host: rows of train_x / train_y move to val_x /
// val_y (SplitValidation's stratified draw), before placing, so streamed data splits too.
absl::Status HoldOutOnHost(const DatasetConfig& config, uint64_t seed, torch::Tensor& train_x,
                           torch::Tensor& train_y, torch::Tensor& val_x, torch::Tensor& val_y,
                           std::vector<std::string>& notes) {
  if (config.validation_fraction <= 0) return absl::OkStatus();
  absl::StatusOr<ValidationSplit> split =
      SplitValidation(Strata(train_y), config.validation_fraction,
                      MakeSubsetRequest(config, seed, /*train=*/true, config.own.class_names));
  if (!split.ok()) return split.status();
  notes.insert(notes.end(), split->notes.begin(), split->notes.end());
  const torch::Tensor train_index = torch::tensor(split->train, torch::kInt64);
  const torch::Tensor val_index = torch::tensor(split->validation, torch::kInt64);
  val_x = train_x.index_select(/*dim=*/0, val_index);
  val_y = train_y.index_select(/*dim=*/0, val_index);
  train_x = train_x.index_select(/*dim=*/0, train_index);
  train_y = train_y.index_select(/*dim=*/0, train_index);
  return absl::OkStatus();
}

std::string ValidationName(const DatasetConfig& config, uint64_t seed, absl::string_view source) {
  if (config.validation_fraction > 0) {
    return absl::StrFormat("fraction %g of train (seed %d)", config.validation_fraction, seed);
  }
  return config.validation_from_source ? std::string(source) : std::string();
}

// ---- Placement ----------------------------------------------------------------------------

// The transform both placements apply: /255 for uint8, then the normalisation.
InputTransform MakeTransform(const torch::Tensor& host, const std::vector<float>& mean,
                             const std::vector<float>& std, const torch::Device& device) {
  InputTransform transform;
  transform.scale_uint8 = host.scalar_type() == torch::kUInt8;
  if (!mean.empty()) {
    std::vector<int64_t> shape(host.dim(), 1);
    shape[1] = static_cast<int64_t>(mean.size());
    const auto on_device = torch::TensorOptions().device(device);
    transform.mean = torch::tensor(mean, torch::kFloat32).view(shape).to(on_device);
    transform.std = torch::tensor(std, torch::kFloat32).view(shape).to(on_device);
  }
  return transform;
}

struct HostData {
  torch::Tensor train_x, train_y, test_x, test_y;  // CPU; x uint8 or float32, y int64
  torch::Tensor val_x, val_y;                      // undefined without a validation split
  std::shared_ptr<const void> keep_alive;          // owns the memory the x tensors view
};

TensorSplit PlaceSplit(const torch::Tensor& x, const torch::Tensor& y,
                       const InputTransform& transform, bool streamed, const HostData& host,
                       const torch::Device& device) {
  torch::Tensor labels = y.to(device, /*non_blocking=*/false, /*copy=*/true);
  if (!streamed) return TensorSplit{transform.Apply(x.to(device)), std::move(labels), nullptr};
  auto split =
      std::make_shared<StreamedSplit>(x, labels, transform, device, kStreamDepth, host.keep_alive);
  return TensorSplit{torch::Tensor(), std::move(labels), std::move(split)};
}

// Resident or streamed by the job's placement and the budget; the choice goes into the notes.
DeviceDataset Place(const DatasetConfig& config, const HostData& host,
                    const std::vector<float>& mean, const std::vector<float>& std,
                    const torch::Device& device) {
  const OwnDataConfig& own = config.own;
  const int64_t values =
      host.train_x.numel() + host.test_x.numel() + (host.val_x.defined() ? host.val_x.numel() : 0);
  // float32 on the device, plus the raw copy while it is converted.
  const int64_t resident_bytes = values * (4 + host.train_x.element_size());
  const int64_t budget = DeviceBudgetBytes(own, device);
  bool streamed = own.placement == Placement::kStreamed;
  std::string why = own.placement == Placement::kAuto ? "" : " (set by the job)";
  if (own.placement == Placement::kAuto) {
    streamed = resident_bytes > budget;
    why = absl::StrFormat(
        ": %s as float32 on the device %s the device budget of %s%s", MiB(resident_bytes),
        streamed ? "exceeds" : "fits", MiB(budget),
        own.device_budget_bytes > 0 ? " (device_budget_bytes)" : " (half its free memory)");
  }
  DeviceDataset data;
  const InputTransform transform = MakeTransform(host.train_x, mean, std, device);
  data.train = PlaceSplit(host.train_x, host.train_y, transform, streamed, host, device);
  data.test = PlaceSplit(host.test_x, host.test_y, transform, streamed, host, device);
  if (host.val_x.defined()) {
    data.val = PlaceSplit(host.val_x, host.val_y, transform, streamed, host, device);
  }
  data.placement = streamed ? "streamed" : "resident";
  data.notes.push_back(absl::StrCat(
      "data placement ", data.placement, why,
      streamed ? absl::StrFormat("; batches are copied from %s on the host, %d ahead",
                                 host.train_x.scalar_type() == torch::kUInt8 ? "uint8 pixels"
                                                                             : "float32 tensors",
                                 kStreamDepth)
               : ""));
  data.scaled = host.train_x.scalar_type() == torch::kUInt8;
  data.mean = mean;
  data.std = std;
  data.augmentation = config.augmentation;
  if (data.augmentation.enabled() || data.augmentation.mixes()) {
    // torchvision pads and rotates with black (0) before Normalize; colour jitter works on the
    // pixels before it.
    SetNormalisation(mean, std, host.train_x.size(1), data.augmentation);
  }
  return data;
}

// Per-channel (dim 1) mean and population std of uint8 `x` / 255, in chunks of rows.
std::pair<std::vector<float>, std::vector<float>> ChannelStats(const torch::Tensor& x) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  torch::Tensor sum = torch::zeros({x.size(1)}, torch::kFloat64);
  torch::Tensor squares = torch::zeros({x.size(1)}, torch::kFloat64);
  for (int64_t start = 0; start < x.size(0); start += kStatsChunkRows) {
    const torch::Tensor chunk =
        x.narrow(0, start, std::min(kStatsChunkRows, x.size(0) - start)).to(torch::kFloat64) /
        255.0;
    sum += chunk.sum(dims);
    squares += (chunk * chunk).sum(dims);
  }
  const double count = static_cast<double>(x.numel() / x.size(1));
  const torch::Tensor mean = sum / count;
  const torch::Tensor std = (squares / count - mean * mean).clamp_min(0).sqrt();
  std::vector<float> m, s;
  for (int64_t c = 0; c < x.size(1); ++c) {
    m.push_back(static_cast<float>(mean[c].item<double>()));
    s.push_back(static_cast<float>(std[c].item<double>()));
  }
  return {m, s};
}

std::string Floats(const std::vector<float>& values) {
  return absl::StrCat(
      "[",
      absl::StrJoin(values, ", ",
                    [](std::string* out, float v) { absl::StrAppendFormat(out, "%.4f", v); }),
      "]");
}

// ---- image_folder ---------------------------------------------------------------------------

torch::Tensor PixelsView(const std::shared_ptr<const DecodedSplit>& split) {
  return torch::from_blob(
      const_cast<uint8_t*>(split->pixels()),
      {split->count(), split->channels(), split->height(), split->width()}, [split](void*) {},
      torch::kUInt8);
}

torch::Tensor LabelsView(const DecodedSplit& split) {
  return torch::from_blob(const_cast<int64_t*>(split.labels()), {split.count()}, torch::kInt64);
}

std::string DecodeNote(absl::string_view name, const ImageFolderSplit& listed,
                       const DecodedSplit& split) {
  std::string note;
  if (split.reused()) {
    note = absl::StrFormat("%s: %d images from the decode cache %s", name, split.count(),
                           split.cache_path());
  } else {
    const double rate =
        split.decode_seconds() > 0 ? listed.files.size() / split.decode_seconds() : 0;
    note = absl::StrFormat(
        "%s: decoded %d images in %.2f s on %d threads: %.0f images/s, %.0f images/s per thread%s",
        name, listed.files.size(), split.decode_seconds(), split.decode_threads(), rate,
        rate / std::max(split.decode_threads(), 1),
        split.cache_path().empty() ? " (no cache directory: not kept)"
                                   : absl::StrCat("; cached in ", split.cache_path()));
  }
  if (listed.other_files > 0) {
    absl::StrAppendFormat(&note, "; %d files without a .jpg/.jpeg/.png name skipped",
                          listed.other_files);
  }
  if (split.skipped() > 0) {
    absl::StrAppendFormat(&note, "; %d bad images skipped (on_bad_image: skip)%s", split.skipped(),
                          split.skipped_errors().empty()
                              ? ""
                              : absl::StrCat(": ", absl::StrJoin(split.skipped_errors(), "; ")));
  }
  return note;
}

}  // namespace

int64_t DeviceBudgetBytes(const OwnDataConfig& config, const torch::Device& device) {
  if (config.device_budget_bytes > 0) return config.device_budget_bytes;
  int64_t free_bytes = 0;
  if (device.is_cuda()) {
    free_bytes = compat::CudaFreeBytes(device.has_index() ? device.index() : 0);
  } else {
    free_bytes = DescribeDevice(device).total_memory_bytes - ReadMemory(device).reserved_bytes;
  }
  return std::max<int64_t>(free_bytes, 0) / 2;
}

absl::Status CheckOwnDataFieldsUnset(const mpsd::v1::DatasetSpec& spec) {
  const auto unused = [&](absl::string_view field) {
    return FieldError(
        field, absl::StrFormat("only image_folder and tensors take it, not %s", spec.name()));
  };
  if (spec.has_image_folder()) {
    return FieldError("image_folder",
                      absl::StrFormat("only image_folder takes it, not %s", spec.name()));
  }
  if (spec.mean_size() > 0) return unused("mean");
  if (spec.std_size() > 0) return unused("std");
  if (!spec.placement().empty()) return unused("placement");
  if (spec.device_budget_bytes() != 0) return unused("device_budget_bytes");
  return absl::OkStatus();
}

absl::Status ResolveImageFolder(const mpsd::v1::DatasetSpec& spec, DatasetConfig& config) {
  if (spec.root().empty()) {
    return FieldError("root",
                      "required: the directory holding train/<class>/ and val/<class>/ "
                      "(or test/<class>/)");
  }
  config.root = spec.root();
  OwnDataConfig& own = config.own;
  if (absl::Status s = ResolveDecodeOptions(spec.image_folder(), own.decode); !s.ok()) return s;
  if (config.validation_from_source) {
    for (const char* dir : {"val", "test"}) {
      std::error_code ec;
      if (!std::filesystem::is_directory(absl::StrCat(config.root, "/", dir), ec)) {
        return FieldError("validation.source",
                          absl::StrFormat("%s/%s: no such directory; with validation.source "
                                          "\"val\" the validation split is val/<class>/ and "
                                          "the test split test/<class>/",
                                          config.root, dir));
      }
    }
  }
  absl::StatusOr<ImageFolderListing> listing =
      ScanImageFolder(config.root, config.validation_from_source);
  if (!listing.ok()) return FieldError("root", listing.status().message());
  if (!own.decode.skip_bad_images) {
    for (const ImageFolderSplit* split : {&listing->train, &listing->test, &listing->val}) {
      for (const ImageFile& file : split->files) {
        if (file.size_bytes < 0) {
          return FieldError("root", absl::StrCat(file.path, ": ", file.error,
                                                 " (image_folder.on_bad_image: skip leaves such "
                                                 "files out)"));
        }
      }
    }
  }
  if (absl::Status s = CheckNumClasses(static_cast<int64_t>(listing->classes.size())); !s.ok()) {
    return FieldError("root", absl::StrCat(listing->train.dir, ": ", s.message()));
  }
  config.num_classes = static_cast<int>(listing->classes.size());
  own.class_names = listing->classes;
  std::error_code ec;
  if (std::filesystem::exists(TargetsPath(listing->train), ec)) {
    if (absl::Status s = ResolveFolderTargets(*listing, config); !s.ok()) return s;
  }
  config.input_shape = {own.decode.channels, own.decode.height, own.decode.width};
  own.train_examples = static_cast<int64_t>(listing->train.files.size());
  if (config.limit_train > 0) own.train_examples = std::min(own.train_examples, config.limit_train);
  return ResolveCommon(spec, config);
}

absl::Status ResolveTensors(const mpsd::v1::DatasetSpec& spec, DatasetConfig& config) {
  if (spec.root().empty()) {
    return FieldError("root", "required: the path of the file torch.save wrote");
  }
  if (spec.has_image_folder()) {
    return FieldError("image_folder", "only image_folder takes it, not tensors");
  }
  config.root = spec.root();
  absl::StatusOr<TensorFile> file = ReadTensorFile(config.root);
  if (!file.ok()) return FieldError("root", file.status().message());
  if (absl::Status s = CheckInputShape(file->input_shape); !s.ok()) {
    return FieldError("root", absl::StrCat(config.root, ": train.x: ", s.message()));
  }
  if (absl::Status s = CheckNumClasses(file->num_classes); !s.ok()) {
    return FieldError("root", absl::StrCat(config.root, ": train.y: ", s.message()));
  }
  config.input_shape = file->input_shape;
  config.num_classes = file->num_classes;
  config.own.class_names = file->class_names;
  config.float_targets = file->float_targets;
  config.target_shape = file->target_shape;
  config.non_binary_target = file->non_binary_target;
  if (config.validation_from_source && !file->val.x.defined()) {
    return FieldError("validation.source",
                      absl::StrFormat("%s has no \"val\" entry ({\"x\": X, \"y\": Y} beside "
                                      "\"train\" and \"test\")",
                                      config.root));
  }
  config.own.train_examples = file->train.x.size(0);
  if (config.limit_train > 0) {
    config.own.train_examples = std::min(config.own.train_examples, config.limit_train);
  }
  return ResolveCommon(spec, config);
}

absl::StatusOr<DeviceDataset> LoadImageFolder(const DatasetConfig& config, uint64_t seed,
                                              const torch::Device& device) {
  absl::StatusOr<ImageFolderListing> listing =
      ScanImageFolder(config.root, config.validation_from_source);
  if (!listing.ok()) return listing.status();
  if (listing->classes != config.own.class_names) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the classes changed since the job was submitted (now %s)",
                        listing->train.dir, absl::StrJoin(listing->classes, ", ")));
  }
  // Float targets (targets.csv), read again: the files read at run time are those checked.
  torch::Tensor train_targets, test_targets, val_targets;
  if (config.float_targets) {
    const std::pair<ImageFolderSplit*, torch::Tensor*> splits[] = {
        {&listing->train, &train_targets},
        {&listing->test, &test_targets},
        {&listing->val, &val_targets}};
    for (const auto& [split, targets] : splits) {
      if (split->dir.empty()) continue;
      absl::StatusOr<torch::Tensor> read = ReadTargetsCsv(*split);
      if (!read.ok()) return read.status();
      if (read->size(1) != config.num_classes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: the targets' width changed since the job was submitted", TargetsPath(*split)));
      }
      *targets = *std::move(read);
      LabelFilesByRow(*split);
    }
  }
  std::vector<std::string> subset_notes;
  if (absl::Status s =
          ApplySubset(MakeSubsetRequest(config, seed, /*train=*/true, config.own.class_names),
                      listing->train.files, subset_notes, config.float_targets);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ApplySubset(MakeSubsetRequest(config, seed, /*train=*/false, config.own.class_names),
                      listing->test.files, subset_notes, config.float_targets);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::shared_ptr<const DecodedSplit>> train =
      LoadDecodedSplit(*listing, listing->train, config.own.decode, config.own.cache_dir);
  if (!train.ok()) return train.status();
  absl::StatusOr<std::shared_ptr<const DecodedSplit>> test =
      LoadDecodedSplit(*listing, listing->test, config.own.decode, config.own.cache_dir);
  if (!test.ok()) return test.status();
  std::shared_ptr<const DecodedSplit> val;
  if (config.validation_from_source) {
    absl::StatusOr<std::shared_ptr<const DecodedSplit>> decoded =
        LoadDecodedSplit(*listing, listing->val, config.own.decode, config.own.cache_dir);
    if (!decoded.ok()) return decoded.status();
    val = *std::move(decoded);
  }

  std::vector<float> mean = config.own.mean, std = config.own.std;
  const bool computed = mean.empty();
  if (computed) {
    for (const double m : (*train)->mean()) mean.push_back(static_cast<float>(m));
    for (const double s : (*train)->std()) std.push_back(std::max(static_cast<float>(s), 1e-6f));
  }
  HostData host;
  host.train_x = PixelsView(*train);
  host.train_y = LabelsView(**train);
  host.test_x = PixelsView(*test);
  host.test_y = LabelsView(**test);
  if (val != nullptr) {
    host.val_x = PixelsView(val);
    host.val_y = LabelsView(*val);
  }
  if (config.float_targets) {  // the decoded rows' labels are their rows in targets.csv
    host.train_y = train_targets.index_select(/*dim=*/0, host.train_y);
    host.test_y = test_targets.index_select(/*dim=*/0, host.test_y);
    if (val != nullptr) host.val_y = val_targets.index_select(/*dim=*/0, host.val_y);
  }
  host.keep_alive = std::make_shared<std::vector<std::shared_ptr<const DecodedSplit>>>(
      std::vector<std::shared_ptr<const DecodedSplit>>{*train, *test, val});
  if (absl::Status s = HoldOutOnHost(config, seed, host.train_x, host.train_y, host.val_x,
                                     host.val_y, subset_notes);
      !s.ok()) {
    return s;
  }
  DeviceDataset data = Place(config, host, mean, std, device);
  data.validation = ValidationName(config, seed, "val/");
  if (!config.float_targets) data.class_names = config.own.class_names;
  data.skipped_images = (*train)->skipped() + (*test)->skipped() + (val ? val->skipped() : 0);
  data.notes.insert(data.notes.begin(),
                    {DecodeNote("train", listing->train, **train),
                     DecodeNote(listing->test.dir.substr(listing->test.dir.rfind('/') + 1),
                                listing->test, **test),
                     absl::StrFormat("normalisation mean %s std %s (%s)", Floats(mean), Floats(std),
                                     !computed ? "given"
                                     : (*train)->cache_path().empty()
                                         ? "of the training images"
                                         : "of the training images, stored with the cache")});
  data.notes.insert(data.notes.begin(), subset_notes.begin(), subset_notes.end());
  return data;
}

absl::StatusOr<DeviceDataset> LoadTensors(const DatasetConfig& config, uint64_t seed,
                                          const torch::Device& device) {
  absl::StatusOr<TensorFile> file = ReadTensorFile(config.root);
  if (!file.ok()) return file.status();
  if (file->input_shape != config.input_shape || file->num_classes != config.num_classes ||
      file->float_targets != config.float_targets) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the examples' shape or the classes changed since the job was submitted", config.root));
  }
  HostData host;
  host.train_x = file->train.x;
  host.train_y = file->train.y;
  host.test_x = file->test.x;
  host.test_y = file->test.y;
  std::vector<std::string> subset_notes;
  if (absl::Status s =
          SubsetTensors(MakeSubsetRequest(config, seed, /*train=*/true, config.own.class_names),
                        host.train_x, host.train_y, subset_notes);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          SubsetTensors(MakeSubsetRequest(config, seed, /*train=*/false, config.own.class_names),
                        host.test_x, host.test_y, subset_notes);
      !s.ok()) {
    return s;
  }
  if (config.validation_from_source) {
    host.val_x = file->val.x;
    host.val_y = file->val.y;
  }
  if (absl::Status s = HoldOutOnHost(config, seed, host.train_x, host.train_y, host.val_x,
                                     host.val_y, subset_notes);
      !s.ok()) {
    return s;
  }
  const auto as_input = [](const torch::Tensor& x) {
    return x.scalar_type() == torch::kUInt8 ? x.contiguous() : x.to(torch::kFloat32).contiguous();
  };
  host.train_x = as_input(host.train_x);
  host.train_y = host.train_y.contiguous();
  host.test_x = as_input(host.test_x);
  host.test_y = host.test_y.contiguous();
  if (host.val_x.defined()) {
    host.val_x = as_input(host.val_x);
    host.val_y = host.val_y.contiguous();
  }
  std::vector<float> mean = config.own.mean, std = config.own.std;
  std::string normalisation = "given";
  if (mean.empty() && host.train_x.scalar_type() == torch::kUInt8) {
    std::tie(mean, std) = ChannelStats(host.train_x);
    for (float& s : std) s = std::max(s, 1e-6f);
    normalisation = "of train.x / 255, computed at load";
  }
  DeviceDataset data = Place(config, host, mean, std, device);
  data.class_names = config.own.class_names;
  data.validation = ValidationName(config, seed, "val entry");
  data.notes.insert(data.notes.begin(),
                    {absl::StrFormat("tensors %s: %d train, %d test examples of shape [%s] %s",
                                     config.root, host.train_x.size(0), host.test_x.size(0),
                                     absl::StrJoin(config.input_shape, ", "),
                                     c10::toString(file->train.x.scalar_type())),
                     mean.empty() ? std::string("normalisation: none (float x used as stored)")
                                  : absl::StrFormat("normalisation mean %s std %s (%s)",
                                                    Floats(mean), Floats(std), normalisation)});
  data.notes.insert(data.notes.begin(), subset_notes.begin(), subset_notes.end());
  return data;
}

}  // namespace mpsd::trainer
