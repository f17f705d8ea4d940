// Running a TrainJob: the data onto the device, the model and optimizer built, resumed from a
// checkpoint, trained by the loop (trainer/train_loop.h) with checkpoints at epoch ends, the
// finished model saved, the device released and the job's summary emitted. The counterpart of
// trainer/bench.h for TrainJobs; the executor calls it on its own thread. Torch-free.
#ifndef MPSD_TRAINER_RUN_TRAIN_JOB_H_
#define MPSD_TRAINER_RUN_TRAIN_JOB_H_

#include <atomic>

#include "absl/status/status.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {

struct TrainJobConfig;  // trainer/train_job.h

// Runs `job` (from ResolveTrainJob with the job's context: job_id, job_dir, resume_path) to
// its end on the calling thread: loads the dataset onto job.device, seeds torch with job.seed and
// builds the model and optimizer, restores job.resume_path when set (model, optimizer,
// GradScaler; training continues at the epoch and step after the checkpoint's), trains with a
// checkpoint every job.checkpoint_every_epochs epochs into job.job_dir, and saves the finished
// model there as model.pt (TorchScript for a TorchScript model, else a LibTorch archive). Then,
// however the job ended, synchronises, releases the model, optimizer and data, empties the
// caching allocator and emits one `summary` event through `summary_sink` (the job's memory
// before and after, its peaks, and what the events said). Every other event goes to `sink`, as
// it happens. `steps_per_readback` as Executor::Options has it. Checks `cancelled` at every step.
//
// Errors as Executor::Run: INVALID_ARGUMENT for a spec problem found only now (a checkpoint that
// does not fit the loaded data, a schedule without a step), DATA_LOSS / NOT_FOUND naming a
// dataset file, RESOURCE_EXHAUSTED for out of memory, CANCELLED, INTERNAL for any other LibTorch
// error or a file-system failure writing artifacts. Never throws. Not thread-safe with itself
// (one device owner).
absl::Status RunTrainJob(const TrainJobConfig& job, int steps_per_readback, const EventSink& sink,
                         const EventSink& summary_sink, const std::atomic<bool>& cancelled);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_RUN_TRAIN_JOB_H_
