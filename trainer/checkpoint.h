// Checkpoints of a training job: what they record, how they are written (atomically, into the
// job's artifact directory), checked cheaply before a job resumes, and restored. Internal to
// trainer/: includes torch.
//
// File format (".pt", a zip archive in PyTorch's own container, caffe2::serialize): two records,
//   mpsd_checkpoint.txt  "key: value" lines (CheckpointInfo), read alone to validate a resume;
//   state.pt             a torch::serialize::OutputArchive with the sub-archives "model"
//                        (parameters and buffers), "optimizer" (torch::optim state), "extra"
//                        (tensors the loop keeps, e.g. the GradScaler's scale) and the RNG states
//                        "rng_cpu", off the CPU "rng_device", and "rng_shuffle" when the loop
//                        has a shuffle generator of its own (at::Generator::get_state).
// Python's torch.save writes the same container but with archive/data.pkl and no
// mpsd_checkpoint.txt; such files are recognised and refused.
#ifndef MPSD_TRAINER_CHECKPOINT_H_
#define MPSD_TRAINER_CHECKPOINT_H_

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::trainer {

// What a checkpoint records besides tensors: where the job stood, and enough of its spec to
// refuse a resume into a job it does not fit.
struct CheckpointInfo {
  // Zoo model name ("convnet") or "torchscript" for a user's TorchScript module.
  std::string model;
  // Trainable scalars of the model.
  int64_t parameters = 0;
  // "adam", "adamw", "sgd".
  std::string optimizer;
  // Dataset name and training examples used (after limit_train).
  std::string dataset;
  int64_t train_examples = 0;
  // Examples per step: with train_examples it fixes the steps per epoch.
  int64_t batch_size = 0;
  // Ranks of a data-parallel job (batch_size is per rank); 1 otherwise and for checkpoints
  // written before it was recorded. A resume must have the same world size.
  int64_t world_size = 1;
  // Epochs finished and optimizer steps taken when the checkpoint was written.
  int epoch = 0;
  int64_t step = 0;
  // Optimizer steps already done in epoch `epoch + 1` (a checkpoint inside an epoch: every_steps,
  // or a stop); 0 at an epoch end and in checkpoints written before it was recorded.
  int64_t epoch_step = 0;
  // The job's seed: its data order, validation split and subsets follow it, so a resume must
  // have the same. Absent in checkpoints written before it was recorded (then not compared).
  std::optional<uint64_t> seed;
  // "fp32", "fp16", "bf16" (informational).
  std::string precision;
  // The job that wrote it and the LibTorch that wrote it (informational).
  std::string job_id;
  std::string torch_version;
};

// Tensors the training loop keeps besides the model and optimizer, by name (e.g. the
// GradScaler's "grad_scaler_scale" [] float32 and "grad_scaler_growth_tracker" [] int32). Names
// must not contain '.'.
using ExtraState = std::map<std::string, torch::Tensor>;

// The file a job's newest checkpoint is always also linked as: <dir>/checkpoint-latest.pt.
inline constexpr char kLatestCheckpointName[] = "checkpoint-latest.pt";
// The file the best epoch's checkpoint is also linked as (CheckpointSpec.keep_best).
inline constexpr char kBestCheckpointName[] = "checkpoint-best.pt";

// Which names a new checkpoint gets, and which older ones go (TrainJob.checkpoint).
struct CheckpointFiles {
  // The newest checkpoint files kept in the directory, the new one included (counting
  // checkpoint-epoch-*.pt and checkpoint-step-*.pt, ordered by their metadata's step); >= 0.
  // 0 keeps none: the new checkpoint survives only as checkpoint-best.pt, and
  // checkpoint-latest.pt is not written.
  int keep_last = 1;
  // Also link the new checkpoint as checkpoint-best.pt (replacing the previous best).
  bool best = false;
};

// Writes a checkpoint of `model`, `optimizer`, `shuffle` (the generator that orders the training
// set; an undefined at::Generator() when the order is a function of seed and epoch), the
// default CPU generator (and the default generator of `device` off the CPU) and
// `extra` into `dir` (created if missing) as checkpoint-epoch-<info.epoch>.pt at an epoch end
// (info.epoch_step 0), else checkpoint-step-<info.step>.pt; then links it as
// checkpoint-latest.pt (keep_last > 0) and checkpoint-best.pt (`files.best`), and removes the
// older checkpoint files beyond files.keep_last. Links are hard links: a file removed under its
// own name stays under checkpoint-best.pt. Each file appears by rename(2) of a finished
// temporary, so a crash never leaves a torn checkpoint under any name. Returns the event payload
// (the path of the kept file: the epoch or step file, or checkpoint-best.pt when keep_last is 0;
// epoch, step, size in bytes). Errors: INTERNAL naming the file for a file-system failure.
// Throws c10::Error for LibTorch failures. Not thread-safe for one `dir`.
absl::StatusOr<mpsd::v1::CheckpointSaved> SaveCheckpoint(
    const std::string& dir, const CheckpointInfo& info, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer, const at::Generator& shuffle, const ExtraState& extra,
    const torch::Device& device, const CheckpointFiles& files = CheckpointFiles());

// The largest metadata (and version) record ReadCheckpointInfo reads, bytes (64 KiB; mpsd
// writes about 300).
inline constexpr uint64_t kMaxCheckpointInfoBytes = uint64_t{64} << 10;

// Reads only the metadata record of `path` (no tensor is loaded, for Validate). Its cost is
// bounded whatever the file holds: the zip's end records, a central directory of at most
// kMaxZipCentralDirectoryBytes (trainer/zip_index.h) and records of at most
// kMaxCheckpointInfoBytes are read, nothing else. Errors (INVALID_ARGUMENT, the message starts
// with the path): missing file, empty or truncated file, not a zip archive, a legacy PyTorch
// pickle (first bytes 0x80 0x02), a Python torch.save archive, an archive without mpsd
// metadata, a directory or metadata record over those limits, malformed metadata. Thread-safe.
absl::StatusOr<CheckpointInfo> ReadCheckpointInfo(const std::string& path);

// OK when a checkpoint written as `saved` can continue a job described by `job` (model,
// parameter count, optimizer, dataset, batch size, train_examples when both are known, and
// saved.epoch <= job_epochs); else INVALID_ARGUMENT saying what differs, without a field path.
absl::Status CheckCompatible(const CheckpointInfo& saved, const CheckpointInfo& job,
                             int job_epochs);

// Restores a checkpoint written by SaveCheckpoint into `model` and `optimizer` (already built
// for the same job, on `device`), the default generators, and `extra` (each tensor read by name,
// left undefined when absent). Returns the checkpoint's metadata and the shuffle generator's
// state in `shuffle_state` (a CPU uint8 tensor for at::Generator::set_state; undefined when the
// checkpoint has none). Errors:
// INVALID_ARGUMENT naming the file for an unreadable or incompatible archive. Throws c10::Error
// for other LibTorch failures.
struct RestoredCheckpoint {
  CheckpointInfo info;
  torch::Tensor shuffle_state;
};
absl::StatusOr<RestoredCheckpoint> LoadCheckpoint(const std::string& path, torch::nn::Module& model,
                                                  torch::optim::Optimizer& optimizer,
                                                  ExtraState& extra, const torch::Device& device);

// The checkpoint file `resume_from` names: a job id (all digits) means that job's newest
// checkpoint, <artifacts_dir>/<id>/checkpoint-latest.pt; anything else is a path. Pure string
// work; does not look at the file.
std::string ResolveResumeFrom(const std::string& resume_from, const std::string& artifacts_dir);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_CHECKPOINT_H_
