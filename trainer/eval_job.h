// EvalJob: a trained model evaluated on one split of a dataset with the metrics of its task
// (mpsd.proto, EvalJob), by the TrainJob's own evaluation (trainer/train_loop.h, Evaluate), plus a
// confusion matrix for classification. The executor calls these on its own thread; this header
// is torch-free.
#ifndef MPSD_TRAINER_EVAL_JOB_H_
#define MPSD_TRAINER_EVAL_JOB_H_

#include <atomic>

#include "absl/status/status.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {

struct DeviceInventory;  // trainer/device.h

// Checks an EvalJob without touching device memory: `model` names a finished TrainJob of this
// executor (<options.artifacts_dir>/<id>/model.json, trainer/model_export.h) or a model.pt with
// its model.json beside it; the dataset resolves as a TrainJob's does (its files by name and
// size) and fits the model (one example's shape, class indices for classification, the output
// width for float targets); split, batch_size and device are known. The model's training spec is
// resolved again with this dataset (so the dataset gets the same defaults and the model the same
// architecture). INVALID_ARGUMENT naming the field: "eval_job.model: job 12 has no model.json
// …", "eval_job.dataset: one example is [3, 32, 32], but the model (job 12) takes [1, 28, 28]",
// "eval_job.dataset.root: …", "eval_job.split: unknown \"dev\" (expected test, train or val)".
// Reads files only; thread-safe.
absl::Status ValidateEvalJob(const mpsd::v1::EvalJob& job, const DeviceInventory& inventory,
                             const api::Executor::Options& options);

// Runs an EvalJob on the calling thread: loads the dataset onto the device (with the model's
// preprocessing), loads the model's weights (model.pt), evaluates the split in eval mode without
// autograd in batches of batch_size (cancellation checked between batches) and emits `log`
// events and last a `summary` event (eval_split, eval_examples, metrics "<split>_<metric>",
// confusion_matrix, memory figures; also after a failure). Errors: INVALID_ARGUMENT as
// ValidateEvalJob (nothing emitted but the summary), the dataset readers' (NOT_FOUND,
// DATA_LOSS), RESOURCE_EXHAUSTED for out of memory, CANCELLED, INTERNAL for other LibTorch
// failures. Never throws. Not thread-safe with itself (one device owner).
absl::Status RunEvalJob(const mpsd::v1::EvalJob& job, const DeviceInventory& inventory,
                        const api::Executor::Options& options, const EventSink& sink,
                        const std::atomic<bool>& cancelled);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_EVAL_JOB_H_
