// The training loop: shuffles on the device, runs each optimizer step (schedule, accumulation,
// mixed precision, clipping), reads per-step metrics back in groups (no host↔device sync per
// step except fp16's skip decision), and evaluates. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_TRAIN_LOOP_H_
#define MPSD_TRAINER_TRAIN_LOOP_H_

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/datasets.h"
#include "trainer/distributed.h"
#include "trainer/divergence.h"
#include "trainer/grad_scaler.h"
#include "trainer/models.h"
#include "trainer/optimizers.h"
#include "trainer/precision.h"
#include "trainer/profiler.h"
#include "trainer/schedule.h"
#include "trainer/task.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {

// Called after an epoch's `epoch` event with the epoch (1-based) and the optimizer steps done so
// far (checkpoints save here); an error stops the training and Train returns it.
using EpochEndHook = std::function<absl::Status(int epoch, int64_t steps_done)>;

// When Train evaluates the test split (TrainJob.evaluate_test).
enum class EvaluateTest { kEveryEpoch, kEnd, kNever };

// What a step with a NaN or infinite training loss does (TrainJob.nan_policy): end training
// (DIVERGED), or leave the weights and optimizer state as they were and go on.
enum class NanPolicy { kFail, kSkipStep };

// Where training stands at a step boundary, every step before it read back: what a checkpoint
// keeps so that a resumed job continues the epoch in progress exactly (the rest of its batches
// in the same order, its train_loss / train_accuracy over all its steps, its time) and counts
// skipped steps and the last finite loss on.
struct LoopPosition {
  int epoch = 1;            // the epoch in progress, 1-based (an epoch end: the next one)
  int64_t step = 0;         // optimizer steps done in the job
  int64_t epoch_steps = 0;  // of them, in `epoch`: 0 at its start, up to its steps per epoch
  // The epoch's running figures over its epoch_steps (skipped steps left out).
  double epoch_loss_sum = 0;  // Σ loss × examples
  int64_t epoch_correct = 0;
  int64_t epoch_examples = 0;
  int64_t epoch_skipped = 0;  // steps skipped for a non-finite loss (nan_policy skip_step)
  double epoch_seconds = 0;   // training-pass wall time so far
  DivergenceCheck::State divergence;
};

// When Train offers a checkpoint (TrainOptions::on_checkpoint).
enum class CheckpointMoment {
  kEpochEnd,  // after an epoch's event and on_epoch_end; position: the next epoch's start
  kSteps,     // after a step that is a multiple of checkpoint_every_steps (not an epoch's last)
  kStopping,  // `cancelled` stopped training: at the step boundary where it stopped
};
// Called with where training stands; an error stops training and Train returns it.
using CheckpointHook =
    std::function<absl::Status(const LoopPosition& position, CheckpointMoment moment)>;

// Called with each epoch's metrics (its evaluations done) before its `epoch` event is emitted;
// returns true to end training after this epoch (early stopping: trainer/early_stopping.h). An
// error stops the training and Train returns it.
using AfterEvaluationHook = std::function<absl::StatusOr<bool>(const mpsd::v1::EpochMetrics&)>;

struct TrainOptions {
  // The schedule's learning rate × scales[i] is parameter group i's (TrainJob.param_groups;
  // empty = 1 for every group).
  std::vector<double> learning_rate_scales;
  // Examples per batch (forward pass); the last batch of an epoch may be smaller unless
  // drop_last.
  int64_t batch_size = 64;
  int epochs = 1;
  // Seeds the generator that shuffles the training set (on the device): epoch e's order depends
  // only on (seed, e), so a resumed job shuffles as the uninterrupted one would.
  uint64_t seed = 0;
  // Steps whose loss and correct count are read back from the device in one transfer. Larger
  // means fewer syncs and later step events; 1 syncs every step.
  int steps_per_readback = 32;
  // A group is also read back once this much wall time has passed since the last read-back,
  // so that slow steps (CPU, big models) still stream promptly. Costs at most one sync per
  // interval. Not for a distributed job: its ranks read back by count, at the same steps, so
  // that a diverged step stops them all at once.
  int readback_interval_ms = 500;
  // Examples per forward pass when evaluating. A TrainJob's is its batch_size
  // (MakeTrainOptions), so that evaluating needs no more device memory than a training step.
  int64_t eval_batch_size = 1000;
  // Batches whose gradients are summed into one optimizer step; each batch's loss is divided by
  // it. A partial group at an epoch's end makes one step of its own (see StepsPerEpoch).
  int grad_accumulation_steps = 1;
  // Drop each epoch's last partial batch.
  bool drop_last = false;
  // Clip the gradients' global L2 norm to this before each step (on the device); <= 0 = off.
  double grad_clip_norm = 0;
  // The task, its loss and metrics (trainer/task.h): classification's CrossEntropyLoss with
  // task.label_smoothing by default. For multilabel and regression, epoch events carry their
  // metrics in EpochMetrics.metrics too, and step events' accuracy is over labels (multilabel)
  // or 0 (regression).
  TaskConfig task;
  // memory_format: channels_last (the model's weights and the resident images already NHWC):
  // batches that arrive in NCHW (streamed from the host, or augmented) are converted too.
  bool channels_last = false;
  // Evaluate (the validation split, and the test split with kEveryEpoch) after every N-th
  // epoch and after the last one.
  int eval_every_epochs = 1;
  // kEveryEpoch: the test split as eval_every_epochs says; kEnd: after the last epoch only;
  // kNever: not at all (the epoch events' `evaluated` is then false).
  EvaluateTest evaluate_test = EvaluateTest::kEveryEpoch;
  // The forward passes' precision (trainer/precision.h).
  Precision precision = Precision::kFp32;
  // What `optimizer` is (MakeOptimizer's config.kind): how OneCycleLR's momentum is set, and
  // whether the CUDA graph's fused update applies.
  OptimizerKind optimizer = OptimizerKind::kAdam;
  // The learning rate (and momentum) of each step, set on the optimizer's parameter groups
  // before the step; nullopt leaves the optimizer's learning rate alone.
  std::optional<Schedule> schedule;
  // fp16's loss scaler, owned by the caller (so that it can checkpoint it); required when
  // precision is fp16, unused otherwise.
  GradScaler* grad_scaler = nullptr;
  // Resuming: the first epoch to run (1-based) and the optimizer steps already done (the
  // schedule continues from there, step events count on from start_step + 1).
  int start_epoch = 1;
  int64_t start_step = 0;
  // Resuming from a checkpoint's LoopPosition, which may lie inside an epoch: when set, it
  // replaces start_epoch and start_step; the epoch in progress skips its first epoch_steps
  // steps (their batches, in the epoch's order) and its figures include theirs.
  std::optional<LoopPosition> resume;
  // Offer a checkpoint (CheckpointMoment::kSteps) after every N-th optimizer step; 0 = never.
  // Reads the pending steps back first (one synchronisation per checkpoint).
  int64_t checkpoint_every_steps = 0;
  // May be empty. Called at epoch ends, every checkpoint_every_steps steps and when cancelled
  // (with every step that ran read back; on the CUDA graph path the optimizer state exported).
  CheckpointHook on_checkpoint;
  // Runs after each epoch's event; may be empty.
  EpochEndHook on_epoch_end;
  // May be empty. When it stops training, Train returns OK after that epoch's event and
  // on_epoch_end; with evaluate_test kEnd, the test split is evaluated in that epoch.
  AfterEvaluationHook after_evaluation;
  // On CUDA, capture the whole step in one CUDA graph when the job allows it
  // (trainer/graphed_step.h: adam/adamw, fp32, one batch per step, no clipping or augmentation).
  bool cuda_graphs = true;
  // A data-parallel job's process group (trainer/distributed.h), borrowed; nullptr for one
  // process. Then each epoch's permutation is this rank's shard (DataParallel::Shard), every
  // step's gradients are averaged across ranks after the last micro-batch's backward (so
  // clipping sees the global norm), and the step's loss, correct count and examples are summed
  // across ranks: step and epoch events carry the global figures. Evaluate reduces the same
  // way. The CUDA graph is not used. The training set must be device-resident.
  DataParallel* data_parallel = nullptr;
  // A step whose training loss is NaN, infinite or (when > 0) above this ends Train with
  // DivergenceCheck::Error (trainer/divergence.h: ABORTED, failure reason DIVERGED) once its
  // group is read back; its step event is the last one emitted.
  double divergence_threshold = 0;
  // kSkipStep: a step whose loss is NaN or infinite changes neither the weights, the
  // optimizer's state nor the model's buffers: the step runs, and its update is undone on the
  // device by torch::where on the step's loss (no synchronisation; the step's tensors are copied
  // first). The read-back then counts it (step event `skipped`, epoch `skipped_steps`) and
  // leaves it out of the epoch's figures; beyond max_skipped_steps such steps in the job, the
  // step diverges. Adam/AdamW's step count (kept on the host by LibTorch, for bias correction)
  // is taken back when the step is read back, so the steps between use a count one higher.
  // fp16's GradScaler skips such a step itself. Not on the CUDA graph (the step runs eagerly).
  NanPolicy nan_policy = NanPolicy::kFail;
  int64_t max_skipped_steps = 0;
  // Tests (FaultInjection "nan_loss"): steps [nan_loss_from, nan_loss_from + nan_loss_steps)
  // compute their loss times NaN before backward; 0 = none; nan_loss_steps 0 = every step from
  // nan_loss_from. Eager steps only.
  int64_t nan_loss_from = 0;
  int64_t nan_loss_steps = 0;
  // TrainJob.profile's recorder, borrowed; nullptr = no profiling. Called around every
  // optimizer step (BeforeStep / AfterStep); each recorded step is one "ProfilerStep#<step>"
  // range. The caller calls Finish after Train.
  StepProfiler* profiler = nullptr;
};

// Trains `model` (already on the data's device, in train mode) with `optimizer` for epochs
// start_epoch..epochs over data.train, evaluating on data.val (when it has examples) as
// eval_every_epochs says and on data.test as evaluate_test says; epoch events carry val_loss /
// val_accuracy and test_loss / test_accuracy (with `evaluated`) of what was evaluated. Per
// optimizer step: sets the schedule's learning rate, runs grad_accumulation_steps batches
// (forward under autocast for fp16/bf16, loss scaled for fp16), unscales, clips, steps (fp16:
// unless a gradient is inf/NaN). Emits, through `sink`, one `step` event per optimizer step (in
// groups of steps_per_readback, and at each epoch's end) and one `epoch` event per epoch. Only
// fp16 synchronises every step (GradScaler's skip decision); otherwise the device is read back
// once per group. Checks `cancelled` before every step and evaluation batch and then returns
// CANCELLED, after emitting the events of every step that ran. A diverged step (see
// divergence_threshold) ends it with ABORTED carrying the failure reason DIVERGED. INVALID_ARGUMENT
// for options that do not fit together (fp16 without a grad_scaler, an epoch without a step).
// Throws c10::Error for LibTorch failures (the executor's firewall converts them).
absl::Status Train(ClassifierImpl& model, torch::optim::Optimizer& optimizer,
                   const DeviceDataset& data, const TrainOptions& options, const EventSink& sink,
                   const std::atomic<bool>& cancelled);

struct EvalResult {
  double loss = 0;      // mean loss over the examples (the task's; cross-entropy by default)
  double accuracy = 0;  // fraction classified correctly (multilabel: of labels); in [0, 1]
  // multilabel and regression: every metric by name, loss and accuracy included (TaskMetrics,
  // trainer/task.h); empty for classification.
  TaskMetrics metrics;
  // Classification with confusion_classes K > 0: examples per (true class t, argmax class p) at
  // [t * K + p], row-major [K, K]; empty otherwise.
  std::vector<int64_t> confusion;
};

// Evaluates `model` on `split` in eval mode without autograd, accumulating on the device and
// synchronising once; leaves the model in train mode. CANCELLED if `cancelled` turns true.
// With `data_parallel`, `split` is this rank's shard (DataParallel::ShardSplit) and the loss
// sum, correct count and examples are summed across ranks before the division: every rank
// returns the whole set's figures. `task`: the job's loss and metrics; nullptr = classification
// with unweighted cross-entropy. `confusion_classes` K > 0 (classification, one process only):
// also counts the confusion matrix on the device (a bincount of t * K + p per batch, read back
// with the other sums); every label must lie in [0, K) and the logits have K columns.
absl::StatusOr<EvalResult> Evaluate(ClassifierImpl& model, const TensorSplit& split,
                                    int64_t batch_size, const std::atomic<bool>& cancelled,
                                    DataParallel* data_parallel = nullptr,
                                    const TaskLoss* task = nullptr, int64_t confusion_classes = 0);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TRAIN_LOOP_H_
