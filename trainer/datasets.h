// Datasets the executor can train on, decoded once into tensors that stay on the device for the
// whole job, so the training loop batches by index and does no per-example work on the host.
// The registry knows, for each dataset, its shape, how to check its files at submit and how to
// load itself; ResolveDataset is the dataset part of a TrainJob's validation. Internal to
// trainer/: includes torch.
#ifndef MPSD_TRAINER_DATASETS_H_
#define MPSD_TRAINER_DATASETS_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/augment.h"
#include "trainer/dataset_cache.h"
#include "trainer/subset.h"

namespace mpsd::trainer {

class StreamedSplit;  // trainer/streamed_split.h

// One split on the device.
struct TensorSplit {
  // [N, ...input_shape] float32; images normalised per channel. Undefined when `streamed`.
  torch::Tensor images;
  // [N] int64 on the device, each in [0, num_classes); float targets (DatasetConfig
  // ::float_targets): [N] or [N, D] float32.
  torch::Tensor labels;
  // Set when the inputs stay on the host and each batch is copied to the device as the loop
  // asks for it (image_folder and tensors data beyond the device budget).
  std::shared_ptr<StreamedSplit> streamed;
  // Resize and CenterCrop of every evaluation batch (AugmentationSpec.resize, center_crop);
  // the training split's batches get them through DeviceDataset::augmentation instead.
  Preprocessing preprocess;
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

struct DeviceDataset {
  TensorSplit train;
  TensorSplit test;
  // DatasetSpec.validation's split (held out of train, or the dataset's own); size 0 without.
  TensorSplit val;
  // How `val` was made, for the summary ("fraction 0.1 of train (seed 1)", "val/"); "" without.
  std::string validation;
  // What the training loop applies to each gathered training batch (never to evaluation).
  AugmentationOptions augmentation;
  // image_folder and tensors (trainer/own_data.h): the class names (index = class; may be
  // empty), "resident" or "streamed", images left out by on_bad_image: skip, and lines for the
  // job's log (decode rate, cache reuse, the placement and why).
  std::vector<std::string> class_names;
  std::string placement;
  int64_t skipped_images = 0;
  std::vector<std::string> notes;
  // Training examples per class as loaded, index = class (LoadDataset counts them).
  std::vector<int64_t> train_class_counts;
  // The preprocessing the inputs got, for the finished model's model.json: pixels scaled to
  // [0, 1] (uint8 / 255) when `scaled`, then (x - mean[c]) / std[c] per channel (one value per
  // channel, or one for all); mean and std empty = not normalised (synthetic, float tensors).
  bool scaled = false;
  std::vector<float> mean, std;
};

struct DatasetConfig;

// One registry entry. Entries live for the whole process and are safe to use from any thread.
struct DatasetInfo {
  absl::string_view name;  // "cifar10"; its default root: api::DefaultDatasetRoot(name)
  // One example without the batch dimension ([C, H, W] for images) and the class count;
  // synthetic's come from its spec instead.
  std::vector<int64_t> input_shape;
  int num_classes = 10;
  // Examples in the published training and test splits (60 000 and 10 000 for (fashion-)mnist);
  // 0 for synthetic, whose spec sets them.
  int64_t train_examples = 0;
  int64_t test_examples = 0;
  // Per-channel normalisation after scaling pixels to [0, 1]: (x - mean[c]) / std[c]. One value
  // per channel; empty for synthetic (drawn already standard normal).
  std::vector<float> mean;
  std::vector<float> std;
  // Checks without reading the data that `root` holds the dataset's files; errors name the
  // directory or the file (NOT_FOUND, DATA_LOSS, FAILED_PRECONDITION). nullptr: no files.
  absl::Status (*check_files)(const std::string& root) = nullptr;
  // Loads both splits of `config` onto `device` (see LoadDataset).
  absl::StatusOr<DeviceDataset> (*load)(const DatasetConfig& config, uint64_t seed,
                                        const torch::Device& device) = nullptr;
  // Datasets whose shape, classes and files come from the spec (image_folder, tensors:
  // trainer/own_data.h): checks the spec's fields and the files and fills `config` (input_shape,
  // num_classes, own). nullptr: the fields above apply.
  absl::Status (*resolve)(const mpsd::v1::DatasetSpec& spec, DatasetConfig& config) = nullptr;
};

// The registry: nullptr for an unknown name.
const DatasetInfo* FindDataset(absl::string_view name);
// Known names in registry order ("fashion-mnist", "mnist", "cifar10", "synthetic",
// "image_folder", "tensors").
std::vector<std::string> DatasetNames();

// Where image_folder and tensors data lives while training (DatasetSpec.placement).
enum class Placement { kAuto, kResident, kStreamed };

// The settings of image_folder and tensors (trainer/own_data.h).
struct OwnDataConfig {
  ImageDecodeOptions decode;     // image_folder only
  std::vector<float> mean, std;  // given; empty = computed (or none for float tensors)
  Placement placement = Placement::kAuto;
  int64_t device_budget_bytes = 0;  // 0 = half the device's free memory
  std::vector<std::string> class_names;
  // Training examples found at validation (after limit_train).
  int64_t train_examples = 0;
  // Where image_folder keeps its decode cache; "" = none (decoded into memory every time).
  // ResolveTrainJob sets it from Executor::Options::cache_dir.
  std::string cache_dir;
};

// A DatasetSpec with every default applied and every name looked up.
struct DatasetConfig {
  const DatasetInfo* info = nullptr;  // borrowed from the registry
  std::string root;                   // empty for synthetic
  int64_t limit_train = 0;            // 0 = all
  int64_t limit_test = 0;
  // Which examples the limits keep, and whether a class they leave out fails the job
  // (trainer/subset.h).
  SubsetMode subset = SubsetMode::kStratified;
  bool allow_missing_classes = false;
  // DatasetSpec.validation: the fraction of the (limited) training split held out, 0 = none;
  // or the dataset's own validation split (image_folder's val/, a tensors file's "val").
  double validation_fraction = 0;
  bool validation_from_source = false;
  bool has_validation() const { return validation_fraction > 0 || validation_from_source; }
  // One example, e.g. [3, 32, 32], and the class count: the dataset's, or synthetic's spec.
  std::vector<int64_t> input_shape;
  // What the model sees: input_shape after the augmentation's resize and center_crop (set by
  // ResolveDataset; empty = input_shape).
  std::vector<int64_t> model_input_shape;
  const std::vector<int64_t>& ModelInputShape() const {
    return model_input_shape.empty() ? input_shape : model_input_shape;
  }
  int num_classes = 10;
  // tensors only: y holds float targets (TrainJob.task multilabel or regression) instead of
  // class indices. num_classes is then the targets' width (D of [N, D]; 1 for [N]); subsets and
  // validation splits draw uniformly (one stratum), and no class counts are kept.
  bool float_targets = false;
  // float targets: y's shape without N ([] for [N], [D] for [N, D]), and the first target that
  // is neither 0 nor 1 ("train.y[4, 1]: 0.5"), empty when all are (what multilabel needs).
  std::vector<int64_t> target_shape;
  std::string non_binary_target;
  // synthetic only: examples per split, limits already applied.
  int64_t synthetic_train = 0;
  int64_t synthetic_test = 0;
  AugmentationOptions augmentation;
  OwnDataConfig own;  // image_folder and tensors only
};

// Checks every field of `spec` and the dataset's files (by name and size only; nothing is
// decoded), applying the defaults the proto documents. Errors are INVALID_ARGUMENT whose message
// starts with the field path: "train_job.dataset.name: unknown dataset …",
// "train_job.dataset.root: <the file error>", "train_job.dataset.limit_train: must be >= 0 …",
// "train_job.dataset.synthetic.input_shape: …", "train_job.dataset.augmentation
// .random_crop_padding: …". Reads the file system only; thread-safe.
absl::StatusOr<DatasetConfig> ResolveDataset(const mpsd::v1::DatasetSpec& spec);

// The training examples `config` will load if its files are the published ones: the dataset's
// train_examples (synthetic: its spec's; image_folder and tensors: the examples counted at
// validation), after limit_train. A TrainJob's schedule is checked
// with it at submit, before the files are decoded.
int64_t NominalTrainExamples(const DatasetConfig& config);

// INVALID_ARGUMENT naming train_job.dataset.validation.fraction when it holds out no example of
// those NominalTrainExamples starts from (rounded as the split rounds it), or all of them:
// "0.0001 of 480 training examples holds out 0, which leaves the validation split empty". OK
// without a fraction. Pure.
absl::Status CheckValidationFraction(const DatasetConfig& config);

// What ChooseSubset (trainer/subset.h) needs for one split of `config`: its limit, the subset
// mode, `seed`, the classes (`class_names` may be empty) and the field an error names.
SubsetRequest MakeSubsetRequest(const DatasetConfig& config, uint64_t seed, bool train,
                                std::vector<std::string> class_names = {});

// Holds config.validation_fraction of data.train out into data.val (SplitValidation of
// trainer/subset.h, with `seed`), on the device: one read-back of the labels. A no-op without a
// fraction. INVALID_ARGUMENT as SplitValidation; the note goes into data.notes.
absl::Status HoldOutValidation(const DatasetConfig& config, uint64_t seed, DeviceDataset& data);

// Loads `config` (from ResolveDataset) onto `device`. For file datasets only the raw bytes cross
// to the device; conversion and normalisation run there. limit_train and limit_test keep the
// examples ChooseSubset picks with `seed` (a class left out is INVALID_ARGUMENT naming it, see
// trainer/subset.h); the notes say what was kept. synthetic draws its inputs (standard
// normal) and labels (uniform over the classes) on the device from a generator seeded with
// `seed`, so a seed gives the same data on one device. Errors are the readers', naming the file
// (NOT_FOUND for a file gone since validation, DATA_LOSS for a corrupt one). Throws c10::Error
// for device failures (e.g. out of memory); the caller's firewall converts.
absl::StatusOr<DeviceDataset> LoadDataset(const DatasetConfig& config, uint64_t seed,
                                          const torch::Device& device);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_DATASETS_H_
