// TrainJob: a spec resolved into a TrainJobConfig, with every default applied and every name
// looked up, checked against this process's devices and files without touching device memory
// (Executor::Validate for a TrainJob); and what a config implies once the data is loaded: its
// schedule and what its checkpoints record. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_TRAIN_JOB_H_
#define MPSD_TRAINER_TRAIN_JOB_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/executor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/checkpoint.h"
#include "trainer/datasets.h"
#include "trainer/device.h"
#include "trainer/distributed.h"
#include "trainer/early_stopping.h"
#include "trainer/field_checks.h"
#include "trainer/fine_tune.h"
#include "trainer/models.h"
#include "trainer/optimizers.h"
#include "trainer/precision.h"
#include "trainer/profiler.h"
#include "trainer/schedule.h"
#include "trainer/task.h"
#include "trainer/train_loop.h"

namespace mpsd::trainer {

// The fields of a TrainJob: errors read "train_job.<field>: <problem>".
const FieldChecks& TrainJobFields();

// A TrainJob with every default applied and every name looked up.
struct TrainJobConfig {
  // The spec as submitted (paths made absolute by the client), for the finished model's
  // model.json (trainer/model_export.h); nothing else reads it.
  mpsd::v1::TrainJob spec;
  const ModelEntry* model = nullptr;  // borrowed from the registry; nullptr for TorchScript
  ModelConfig model_config;
  // model.weights, freeze / trainable, param_groups (trainer/fine_tune.h).
  FineTuneConfig fine_tune;
  DatasetConfig dataset;
  // What validation assumes the training split holds (NominalTrainExamples): the schedule's
  // total steps are checked with it at submit, and recomputed from the loaded data at run.
  int64_t nominal_train_examples = 0;
  int batch_size = 64;
  int epochs = 1;
  OptimizerConfig optimizer;
  // Without steps; BuildSchedule adds them (and turns warmup_epochs into warmup_steps).
  ScheduleSettings schedule;
  Precision precision = Precision::kFp32;
  // memory_format: channels_last: the convolution weights and the image batches in NHWC (4-D
  // tensors in at::MemoryFormat::ChannelsLast), converted once; image models of the zoo only.
  bool channels_last = false;
  // The CUDA fast path (trainer/graphed_step.h) where the job allows it; false runs the eager
  // loop (no job field sets it: tests/perf/graph_check.cc compares the two).
  bool cuda_graphs = true;
  // TrainJob.cudnn_benchmark: cuDNN's algorithm search for the job's run (CudnnBenchmarkScope,
  // trainer/device.h); false takes cuDNN's heuristics. The executor's own setting is false.
  bool cudnn_benchmark = false;
  int grad_accumulation_steps = 1;
  double grad_clip_norm = 0;  // 0 = off
  // TrainJob.task, loss and label_smoothing (trainer/task.h).
  TaskConfig task;
  bool drop_last = false;
  int eval_every_epochs = 1;
  double divergence_threshold = 0;  // 0 = only non-finite losses diverge
  // TrainJob.nan_policy and max_skipped_steps (train_loop.h).
  NanPolicy nan_policy = NanPolicy::kFail;
  int64_t max_skipped_steps = 0;
  // FaultInjection "nan_loss" (tests): TrainOptions::nan_loss_from / nan_loss_steps; 0 = none.
  int64_t nan_loss_from = 0;
  int64_t nan_loss_steps = 0;
  // TrainJob.evaluate_test with its default applied (kEnd with a validation split).
  EvaluateTest evaluate_test = EvaluateTest::kEveryEpoch;
  EarlyStoppingConfig early_stopping;  // TrainJob.early_stopping; disabled when unset
  uint64_t seed = 0;
  torch::Device device = torch::kCPU;
  // TrainJob.distributed resolved for this process's rank (trainer/distributed.h); `device` is
  // then this rank's (distributed.devices).
  DistributedConfig distributed;
  // TrainJob.profile: the steps LibTorch's profiler records (trainer/profiler.h); off unless set.
  ProfileConfig profile;

  // ---- Checkpoints, resume, the finished model, TorchScript models (trainer/checkpoint.h) ----
  // A user's TorchScript model instead of `model`: the file, and its trainable parameter count
  // measured at validation.
  std::string torchscript_path;
  int64_t torchscript_parameters = 0;
  int checkpoint_every_epochs = 0;     // 0 = not at epoch ends
  int64_t checkpoint_every_steps = 0;  // 0 = not by steps
  int checkpoint_keep_last = 1;        // CheckpointSpec.keep_last (CheckpointFiles)
  // CheckpointSpec.keep_best: the epoch-end checkpoint of every improving epoch, kept as
  // checkpoint-best.pt; monitored as early_stopping says, else val_loss (min).
  bool checkpoint_keep_best = false;
  // The checkpoint to resume from (resume_from resolved, or JobContext::resume_checkpoint);
  // empty = start fresh.
  std::string resume_path;
  // <artifacts_dir>/<job id>/ where checkpoints and the finished model go; empty = nowhere
  // (validation, which has no job id yet, or an executor without an artifacts directory).
  std::string job_dir;
  std::string job_id;
};

// Resolves and checks every field of `spec`: the model (zoo name and preset, or a TorchScript
// file whose forward is tried on one example), the dataset (trainer/datasets.h, its files by
// name and size), the model against the dataset's input, batch size and epochs, the optimizer,
// step options and schedule (the schedule's steps checked with NominalTrainExamples), the
// device of `inventory`, the precision on that device, memory_format, and checkpoint,
// restart_policy and resume_from (a checkpoint's metadata read and checked against the job;
// `options.artifacts_dir` says where checkpoints go), and the image_folder decode cache's
// directory (`options.cache_dir`). INVALID_ARGUMENT whose message starts with the field path
// ("train_job.batch_size: must be > 0, got 0"). Reads files only; thread-safe.
//
// `context`: nullptr to validate a submit; for a run, the job's context, which completes the
// config: job_id, job_dir (<artifacts_dir>/<job_id>/ when both are set) and resume_path
// (context->resume_checkpoint when set, overriding resume_from; checked when the run restores it,
// as it is only then that the loaded data is known). The result is all a run reads
// (RunTrainJob): nothing downstream reads `spec` again or fills in the config.
absl::StatusOr<TrainJobConfig> ResolveTrainJob(const mpsd::v1::TrainJob& spec,
                                               const DeviceInventory& inventory,
                                               const api::Executor::Options& options,
                                               const api::JobContext* context);

// `name` is an epoch metric (api/epoch_metric.h) the resolved job measures every evaluated
// epoch: one of its task's names or its TrainJob.metrics' (as "val_<name>", "test_<name>"), val_*
// only with a validation split, test_* only with evaluate_test every_epoch. INVALID_ARGUMENT
// "<fields' path>.<field>: ..." otherwise. For early_stopping.monitor and for a sweep's
// scheduler.metric (SweepSpec.scheduler, checked against each trial). Pure.
absl::Status CheckEpochMetric(const TrainJobConfig& config, const std::string& name,
                              const FieldChecks& fields, absl::string_view field);

// The job's schedule for a training split of `train_examples`: total steps exactly as the loop
// will take them (StepsPerEpoch × epochs). INVALID_ARGUMENT with a field path for a job with no
// step (drop_last), a onecycle too short for its two phases, a cosine warm-up as long as the job.
absl::StatusOr<Schedule> BuildSchedule(const TrainJobConfig& job, int64_t train_examples);

// What this job's checkpoints record and a checkpoint it resumes from must match;
// `train_examples` is known only once the data is loaded (0 before).
CheckpointInfo JobCheckpointInfo(const TrainJobConfig& job, int64_t train_examples);

// Reads the metadata of job.resume_path (not its tensors) and checks it fits the job.
// INVALID_ARGUMENT on `field` (where the path came from, "resume_from") otherwise.
absl::StatusOr<CheckpointInfo> CheckResumeCheckpoint(const TrainJobConfig& job,
                                                     int64_t train_examples,
                                                     absl::string_view field);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TRAIN_JOB_H_
