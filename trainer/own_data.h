// The user's own data: the image_folder and tensors datasets of the registry (trainer/datasets.h).
// Validation reads the folder's listing (trainer/image_folder.h) or the tensors file
// (trainer/tensor_file.h); loading decodes through the cache (trainer/dataset_cache.h), computes
// the normalisation when the spec gives none, and places the data: resident on the device when
// it fits the device budget, else streamed from the host (trainer/streamed_split.h).
// Thread-safety: free functions without shared state, safe to call from any thread; two loads
// of one folder may run at once (the decode cache's writes are atomic renames,
// trainer/dataset_cache.h). The loaded DeviceDataset is owned by the caller.
// Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_OWN_DATA_H_
#define MPSD_TRAINER_OWN_DATA_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/datasets.h"

namespace mpsd::trainer {

// DatasetInfo::resolve of image_folder: image_folder.* (image_size required), mean/std,
// placement, device_budget_bytes, and the folder's listing (classes, examples); files that
// cannot be stat'ed fail here when on_bad_image is "fail". With train/targets.csv the images
// have float targets instead of their class (TrainJob.task multilabel or regression): one row
// per image of each split's targets.csv, "<path relative to the split's directory>,<v1>,...,
// <vD>" (a first line whose second field is not a number is a header), every image one row,
// D values each, finite; errors name the file and the line. Errors are INVALID_ARGUMENT starting
// with the field path ("train_job.dataset.image_folder.image_size: …", "train_job.dataset.root:
// <root>/val: class \"cat\" of the training split has no directory here").
absl::Status ResolveImageFolder(const mpsd::v1::DatasetSpec& spec, DatasetConfig& config);
// DatasetInfo::resolve of tensors: reads and checks the file (ReadTensorFile) for its shape and
// classes; errors "train_job.dataset.root: <ReadTensorFile's message>".
absl::Status ResolveTensors(const mpsd::v1::DatasetSpec& spec, DatasetConfig& config);
// For the other datasets: INVALID_ARGUMENT when a field only these two take is set.
absl::Status CheckOwnDataFieldsUnset(const mpsd::v1::DatasetSpec& spec);

// DatasetInfo::load of each. Both splits get the same normalisation: the spec's mean/std, else
// those of the training split (image_folder: stored in its cache; tensors: uint8 x only). The
// training split is resident or streamed as DatasetSpec.placement and the budget say (the
// test split follows it); DeviceDataset.notes say which and why. Errors: the folder's or file's
// (DATA_LOSS naming a bad image under on_bad_image: fail; NOT_FOUND for files gone since
// validation), INVALID_ARGUMENT for data that changed since validation and no longer fits the
// job. Throws c10::Error for device failures.
absl::StatusOr<DeviceDataset> LoadImageFolder(const DatasetConfig& config, uint64_t seed,
                                              const torch::Device& device);
absl::StatusOr<DeviceDataset> LoadTensors(const DatasetConfig& config, uint64_t seed,
                                          const torch::Device& device);

// The bytes "auto" may place on `device`: config.device_budget_bytes, or half of what the
// device has free now (CUDA: driver free + the caching allocator's unused blocks; cpu and mps:
// system memory less what the allocator holds).
int64_t DeviceBudgetBytes(const OwnDataConfig& config, const torch::Device& device);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_OWN_DATA_H_
