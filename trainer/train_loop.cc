// The training loop. Per step it only queues work on the device: the batch is gathered from the
// device-resident dataset by index, and the step's loss and correct count are copied into a
// device buffer that is read back once per group of steps.
#include "trainer/train_loop.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/augment.h"
#include "trainer/compat/autocast.h"
#include "trainer/compat/optim.h"
#include "trainer/device.h"
#include "trainer/divergence.h"
#include "trainer/graphed_step.h"
#include "trainer/models.h"
#include "trainer/streamed_split.h"
#include "trainer/train_loop_parts.h"

namespace mpsd::trainer {
namespace {

namespace F = torch::nn::functional;

}  // namespace

// The shuffle seed of epoch `epoch` (1-based): SplitMix64 of the job's seed and the epoch, so
// each epoch's order depends on (seed, epoch) alone and a resumed job needs no generator state.
uint64_t EpochSeed(uint64_t seed, int epoch) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(epoch);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

namespace {

// Puts a model in eval mode for a scope, and back in train mode however the scope ends.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(ClassifierImpl& model) : model_(model) { model_.eval(); }
  ~EvalModeGuard() { model_.train(); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  ClassifierImpl& model_;
};

}  // namespace

void StepReadback::Flush() {
  if (pending_.empty()) return;
  FlushFrom(values_.narrow(/*dim=*/0, /*start=*/0, static_cast<int64_t>(pending_.size()))
                .to(torch::kCPU));
}

void StepReadback::FlushFrom(const torch::Tensor& host) {
  if (pending_.empty()) return;
  Group group;
  group.steps = static_cast<int64_t>(pending_.size());
  TORCH_CHECK(host.dim() == 2 && host.size(0) >= group.steps && host.size(1) == 2 &&
                  host.scalar_type() == torch::kFloat32 && host.device().is_cpu(),
              "StepReadback::FlushFrom: expected [", group.steps, ", 2] float32 on the CPU, got ",
              host.sizes());
  group.seconds = SecondsSince(group_start_);
  group_start_ = Clock::now();
  group.allocated_bytes = ReadMemory(device_).allocated_bytes;
  for (const Pending& step : pending_) group.examples += step.batch_size;

  const auto values = host.accessor<float, 2>();
  for (int64_t i = 0; i < group.steps; ++i) {
    Pending& step = pending_[i];
    const float loss = values[i][0];
    const auto correct = static_cast<int64_t>(values[i][1]);
    const DivergenceCheck::Verdict verdict =
        divergence_.Observe(step.step, epoch_, loss, step.learning_rate);
    if (verdict == DivergenceCheck::Verdict::kSkipped) {
      // The step made no update; its figures are not the model's.
      step.skipped = true;
      ++epoch_skipped_;
    } else {
      epoch_loss_sum_ += static_cast<double>(loss) * step.batch_size;
      epoch_correct_ += correct;
      epoch_examples_ += step.batch_size;
    }
    sink_(StepEvent(step, loss, correct, group));
    if (verdict == DivergenceCheck::Verdict::kDiverged) break;
  }
  pending_.clear();
}

mpsd::v1::JobEvent StepReadback::StepEvent(const Pending& step, float loss, int64_t correct,
                                           const Group& group) const {
  mpsd::v1::JobEvent event;
  mpsd::v1::StepMetrics& metrics = *event.mutable_step();
  metrics.set_epoch(epoch_);
  metrics.set_step(step.step);
  metrics.set_total_steps(total_steps_);
  metrics.set_loss(loss);
  metrics.set_accuracy(static_cast<float>(correct) /
                       static_cast<float>(step.batch_size * labels_per_example_));
  metrics.set_learning_rate(step.learning_rate);
  metrics.set_samples_per_second(group.seconds > 0 ? group.examples / group.seconds : 0);
  metrics.set_step_time_ms(group.seconds * 1000.0 / static_cast<double>(group.steps));
  metrics.set_allocated_bytes(group.allocated_bytes);
  metrics.set_batch_size(static_cast<int32_t>(step.batch_size));
  metrics.set_loss_scale(static_cast<float>(step.loss_scale));
  metrics.set_skipped(step.skipped);
  return event;
}

namespace {

// Everything one call of Train works with.
struct Loop {
  ClassifierImpl& model;
  torch::optim::Optimizer& optimizer;
  const DeviceDataset& data;
  const TrainOptions& options;
  const EventSink& sink;
  const std::atomic<bool>& cancelled;
  const TaskLoss& task;
  // The whole step in one CUDA graph (trainer/graphed_step.h), or nullptr to run eagerly.
  GraphedStep* graphed = nullptr;
};

// The learning rate of the next step: the schedule's (also set on the optimizer, with the
// momentum where it cycles), else the optimizer's own.
double ApplySchedule(const Loop& loop, int64_t step) {
  if (!loop.options.schedule.has_value()) {
    return loop.optimizer.param_groups().front().options().get_lr();
  }
  const double learning_rate = loop.options.schedule->LearningRate(step);
  SetLearningRate(loop.optimizer, learning_rate, loop.options.learning_rate_scales);
  if (const std::optional<double> momentum = loop.options.schedule->Momentum(step)) {
    SetMomentum(loop.optimizer, loop.options.optimizer, *momentum);
  }
  return learning_rate;
}

// What one optimizer step leaves on the device, and fp16's decision.
struct StepResult {
  torch::Tensor loss;     // [] float32: mean loss over the step's examples
  torch::Tensor correct;  // [] int64
  int64_t examples = 0;
  double loss_scale = 0;
  bool skipped = false;
};

// Forward (under autocast for fp16/bf16), loss and backward of one batch; adds the batch's
// loss × size and correct count to `result`.
// `poison`: the loss is multiplied by NaN (TrainOptions::nan_loss_from, tests only).
void ForwardBackward(const Loop& loop, const torch::Tensor& images, const torch::Tensor& labels,
                     bool poison, StepResult& result) {
  const TrainOptions& options = loop.options;
  torch::Tensor logits;
  if (options.precision == Precision::kFp32) {
    logits = loop.model.forward(images);
  } else {
    const compat::AutocastGuard autocast(
        images.device().type(),
        options.precision == Precision::kFp16 ? torch::kHalf : torch::kBFloat16);
    logits = loop.model.forward(images);
  }
  logits = logits.to(torch::kFloat32);  // the loss in float32, as autocast's policy has it
  torch::Tensor loss = loop.task.Loss(logits, labels);
  if (poison) loss = loss * std::numeric_limits<double>::quiet_NaN();
  torch::Tensor scaled = loss / static_cast<double>(options.grad_accumulation_steps);
  if (options.precision == Precision::kFp16) scaled = options.grad_scaler->Scale(scaled);
  scaled.backward();
  const int64_t size = labels.size(0);
  torch::Tensor loss_sum = loss.detach() * static_cast<double>(size);
  torch::Tensor correct = loop.task.Correct(logits, labels);
  result.loss = result.loss.defined() ? result.loss + loss_sum : loss_sum;
  result.correct = result.correct.defined() ? result.correct + correct : correct;
  result.examples += size;
}

// Unscale (fp16), clip, then step (fp16: unless a gradient is inf/NaN) and update the scale.
void OptimizerStep(const Loop& loop, StepResult& result) {
  const TrainOptions& options = loop.options;
  GradScaler* scaler = options.precision == Precision::kFp16 ? options.grad_scaler : nullptr;
  if (scaler != nullptr) {
    result.loss_scale = scaler->scale();
    scaler->Unscale(loop.optimizer);
  }
  if (options.grad_clip_norm > 0) ClipGradNorm(Gradients(loop.optimizer), options.grad_clip_norm);
  if (scaler != nullptr) {
    result.skipped = !scaler->Step(loop.optimizer);
    scaler->Update();
  } else {
    loop.optimizer.step();
  }
}

// Sums the step's loss × examples and correct count across ranks (every rank runs as many
// examples per step: DataParallel::Shard gives them equal shards).
void ReduceStepMetrics(DataParallel& data_parallel, StepResult& result) {
  torch::Tensor sums = data_parallel.AllReduceSum(
      torch::stack({result.loss.to(torch::kFloat32), result.correct.to(torch::kFloat32)}));
  result.loss = sums[0];
  result.correct = sums[1].to(torch::kInt64);
  result.examples *= data_parallel.world_size();
}

// nan_policy skip_step: copies of the model's buffers (BatchNorm's running statistics) from
// before the forward pass, put back when the step is skipped. The forward pass changes them
// before the loss can say whether the step counts; the parameters and the optimizer's state are
// left alone by not stepping.
class SavedBuffers {
 public:
  explicit SavedBuffers(ClassifierImpl& model) : model_(model) {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& buffer : model_.buffers()) buffers_.push_back(buffer.clone());
  }

  void Restore() {
    torch::NoGradGuard no_grad;
    size_t b = 0;
    for (const torch::Tensor& buffer : model_.buffers()) {
      if (b >= buffers_.size()) break;
      buffer.detach().copy_(buffers_[b++]);
    }
  }

 private:
  ClassifierImpl& model_;
  std::vector<torch::Tensor> buffers_;
};

// The eager step skips the update of a step whose loss is not finite: nan_policy skip_step,
// except where fp16's GradScaler skips such steps itself.
bool SkipsNonFinite(const TrainOptions& options) {
  return options.nan_policy == NanPolicy::kSkipStep && options.precision != Precision::kFp16;
}

// One optimizer step over the batches [first, first + count) of the epoch's `order`.
// Augmentation draws from the device's default generator, as the graphed step does inside its
// graph (and as dropout does); torch::manual_seed(seed) seeds it, so a seed fixes both the order
// and the augmentation.
StepResult TrainStep(const Loop& loop, const torch::Tensor& order, int64_t first, int64_t count,
                     bool poison) {
  const TensorSplit& train = loop.data.train;
  const int64_t n = order.size(0);  // a distributed rank's shard is shorter than the set
  const int64_t batch_size = loop.options.batch_size;
  compat::ZeroGradToNone(loop.optimizer);
  std::optional<SavedBuffers> buffers;
  if (SkipsNonFinite(loop.options)) buffers.emplace(loop.model);
  StepResult result;
  for (int64_t batch = first; batch < first + count; ++batch) {
    const int64_t start = batch * batch_size;
    const torch::Tensor index = order.narrow(/*dim=*/0, start, std::min(batch_size, n - start));
    // The streamed split yields the same rows in the same order (its pass follows `order`).
    const torch::Tensor gathered =
        train.streamed != nullptr ? train.streamed->Next() : GatherRows(train.images, index);
    // Training batches only: evaluation never augments.
    at::Generator augment_generator = at::globalContext().defaultGenerator(gathered.device());
    torch::Tensor images = Augment(gathered, loop.data.augmentation, augment_generator);
    torch::Tensor targets = train.labels.index_select(/*dim=*/0, index);
    if (loop.data.augmentation.mixes()) {
      MixedBatch mixed = MixBatch(images, targets, loop.task.config().outputs,
                                  loop.data.augmentation, augment_generator);
      images = std::move(mixed.images);
      targets = std::move(mixed.targets);
    }
    if (loop.options.channels_last && images.dim() == 4) {
      images = ChannelsLastStrides(images);  // no-op when already NHWC
    }
    ForwardBackward(loop, images, targets, poison, result);
  }
  DataParallel* data_parallel = loop.options.data_parallel;
  // DDP's no_sync for every micro-batch but the last: one all-reduce per optimizer step.
  if (data_parallel != nullptr) data_parallel->AllReduceGradients(loop.model.parameters());
  // skip_step decides on the job's loss (summed across ranks first, so that every rank skips
  // the same steps), read before the update: one synchronisation per step, as PyTorch's
  // GradScaler reads its found_inf. An update undone later on the device would leave Adam's
  // step count (kept on the host, in its bias correction) wrong until the loss was read back,
  // and the steps in between would depend on when that was.
  const bool reduce_first = buffers.has_value() && data_parallel != nullptr;
  if (reduce_first) ReduceStepMetrics(*data_parallel, result);
  if (buffers.has_value() && !torch::isfinite(result.loss).item<bool>()) {
    buffers->Restore();
  } else {
    OptimizerStep(loop, result);
  }
  if (data_parallel != nullptr && !reduce_first) ReduceStepMetrics(*data_parallel, result);
  result.loss = result.loss / static_cast<double>(result.examples);
  return result;
}

// The optimizer step over batches [first, first + accumulation) of the epoch's `order`: one
// replay of the CUDA graph (one batch per step; augmentation and the learning rate drawn and
// read on the device), else the eager step.
StepResult RunStep(const Loop& loop, const torch::Tensor& order, int64_t first, int64_t batches,
                   bool poison) {
  if (loop.graphed == nullptr) {
    const int64_t accumulation = loop.options.grad_accumulation_steps;
    return TrainStep(loop, order, first, std::min(accumulation, batches - first), poison);
  }
  const int64_t batch_size = loop.options.batch_size;
  const int64_t start = first * batch_size;
  const int64_t size = std::min(batch_size, order.size(0) - start);
  StepResult step;
  std::tie(step.loss, step.correct) = loop.graphed->Step(order.narrow(/*dim=*/0, start, size));
  step.examples = size;
  return step;
}

// RunStep inside the profiler's "ProfilerStep#<step>" range (torch.profiler's step marks).
StepResult RunProfiledStep(const Loop& loop, const torch::Tensor& order, int64_t first,
                           int64_t batches, int64_t step, bool poison) {
  const std::string name = "ProfilerStep#" + std::to_string(step);
  RECORD_USER_SCOPE(name);
  return RunStep(loop, order, first, batches, poison);
}

// TrainOptions::nan_loss_from: whether step `step` (1-based) gets a NaN loss.
bool Poisoned(const TrainOptions& options, int64_t step) {
  return options.nan_loss_from > 0 && step >= options.nan_loss_from &&
         (options.nan_loss_steps <= 0 || step < options.nan_loss_from + options.nan_loss_steps);
}

// Reads back what is pending and offers a checkpoint at the step boundary: the divergence error
// if a step read back diverged, else the hook's status.
absl::Status OfferCheckpoint(const Loop& loop, StepReadback& readback, CheckpointMoment moment) {
  readback.Flush();
  if (readback.diverged()) return readback.DivergedError();
  if (!loop.options.on_checkpoint) return absl::OkStatus();
  if (loop.graphed != nullptr) loop.graphed->ExportState();
  return loop.options.on_checkpoint(readback.Position(), moment);
}

absl::Status Cancelled(const StepReadback& readback) {
  return absl::CancelledError(
      absl::StrFormat("cancelled after step %d of %d", readback.steps(), readback.total_steps()));
}

// One pass over the training set in the epoch's random order; `resume` (a checkpoint's position
// inside this epoch) skips the steps it had done.
absl::Status TrainEpoch(const Loop& loop, int epoch, at::Generator& shuffle, StepReadback& readback,
                        const LoopPosition* resume) {
  const TensorSplit& train = loop.data.train;
  const int64_t batch_size = loop.options.batch_size;
  const int64_t accumulation = loop.options.grad_accumulation_steps;
  readback.StartEpoch(epoch, resume);
  shuffle.set_current_seed(EpochSeed(loop.options.seed, epoch));
  torch::Tensor order =
      torch::randperm(train.size(), shuffle,
                      torch::TensorOptions().dtype(torch::kInt64).device(train.labels.device()));
  if (loop.options.data_parallel != nullptr) {
    order = loop.options.data_parallel->Shard(order, loop.options.drop_last);
  }
  const int64_t n = order.size(0);
  const int64_t batches =
      loop.options.drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
  const int64_t first_batch =
      std::min(batches, resume != nullptr ? resume->epoch_steps * accumulation : 0);
  const int64_t end = std::min(n, batches * batch_size);
  if (train.streamed != nullptr && first_batch * batch_size < end) {
    // The epoch's batches, copied ahead from the host in this order (one read-back of `order`).
    train.streamed->StartPass(
        order.narrow(/*dim=*/0, first_batch * batch_size, end - first_batch * batch_size),
        batch_size);
  }
  const int64_t every = loop.options.checkpoint_every_steps;
  for (int64_t first = first_batch; first < batches; first += accumulation) {
    if (loop.cancelled.load(std::memory_order_relaxed)) {
      if (absl::Status s = OfferCheckpoint(loop, readback, CheckpointMoment::kStopping); !s.ok()) {
        return s;
      }
      return Cancelled(readback);
    }
    const double learning_rate = ApplySchedule(loop, readback.steps());
    const int64_t step_number = readback.steps() + 1;
    const bool poison = Poisoned(loop.options, step_number);
    StepProfiler* profiler = loop.options.profiler;
    if (profiler != nullptr) profiler->BeforeStep(step_number);
    const StepResult step = profiler != nullptr && profiler->Records(step_number)
                                ? RunProfiledStep(loop, order, first, batches, step_number, poison)
                                : RunStep(loop, order, first, batches, poison);
    readback.Record(step.loss, step.correct, step.examples, learning_rate, step.loss_scale,
                    step.skipped);
    // A distributed job reads back by count only: every rank then sees a diverged step at the
    // same step and stops there together, none left waiting in the next step's all-reduce.
    const std::chrono::milliseconds interval =
        loop.options.data_parallel != nullptr
            ? std::chrono::milliseconds(std::chrono::hours(24 * 365))  // never by time
            : std::chrono::milliseconds(loop.options.readback_interval_ms);
    if (readback.due(interval)) {
      readback.Flush();
      if (readback.diverged()) return readback.DivergedError();
    }
    if (profiler != nullptr) {
      if (absl::Status written = profiler->AfterStep(step_number); !written.ok()) return written;
    }
    // An epoch's last step is checkpointed at the epoch's end, after its evaluation.
    if (every > 0 && step_number % every == 0 && first + accumulation < batches) {
      if (absl::Status s = OfferCheckpoint(loop, readback, CheckpointMoment::kSteps); !s.ok()) {
        return s;
      }
    }
  }
  readback.Flush();
  return readback.diverged() ? readback.DivergedError() : absl::OkStatus();
}

}  // namespace

namespace {

// The metrics map of multilabel and regression, and of any job with the user's metrics
// (EpochMetrics.metrics): "<split>_<metric>".
void AddTaskMetrics(const TaskLoss& task, const StepReadback& readback,
                    const EpochEvaluation& evaluation, mpsd::v1::EpochMetrics& metrics) {
  if (task.config().kind == TaskKind::kClassification && !task.has_metrics()) return;
  auto& map = *metrics.mutable_metrics();
  map["train_loss"] = readback.epoch_loss();
  if (task.has_accuracy()) map["train_accuracy"] = readback.epoch_accuracy();
  const std::pair<const char*, const std::optional<EvalResult>*> splits[] = {
      {"val_", &evaluation.val}, {"test_", &evaluation.test}};
  for (const auto& [prefix, result] : splits) {
    if (!result->has_value()) continue;
    for (const auto& [name, value] : (*result)->metrics) map[absl::StrCat(prefix, name)] = value;
  }
}

}  // namespace

// The epoch's event payload; `evaluation`'s nullopts were not evaluated this epoch.
mpsd::v1::EpochMetrics EpochMetricsOf(int epoch, const StepReadback& readback,
                                      const EpochEvaluation& evaluation, double epoch_seconds,
                                      double learning_rate, const TaskLoss& task) {
  const std::optional<EvalResult>& test = evaluation.test;
  mpsd::v1::EpochMetrics metrics;
  metrics.set_epoch(epoch);
  metrics.set_train_loss(readback.epoch_loss());
  metrics.set_train_accuracy(readback.epoch_accuracy());
  metrics.set_evaluated(test.has_value());
  if (test.has_value()) {
    metrics.set_test_loss(test->loss);
    metrics.set_test_accuracy(test->accuracy);
  }
  if (evaluation.val.has_value()) {
    metrics.set_val_loss(evaluation.val->loss);
    metrics.set_val_accuracy(evaluation.val->accuracy);
  }
  metrics.set_epoch_time_s(epoch_seconds);
  metrics.set_samples_per_second(
      epoch_seconds > 0 ? static_cast<double>(readback.epoch_examples()) / epoch_seconds : 0);
  metrics.set_learning_rate(learning_rate);
  metrics.set_skipped_steps(readback.epoch_skipped());
  AddTaskMetrics(task, readback, evaluation, metrics);
  return metrics;
}

namespace {

// The CUDA-graph step when the job allows one (GraphedStepUnsupportedReason), else nullptr; a log
// event says which and why. total_steps: the job's optimizer steps, for the schedule's table.
std::unique_ptr<GraphedStep> MaybeCaptureStep(ClassifierImpl& model,
                                              torch::optim::Optimizer& optimizer,
                                              const DeviceDataset& data,
                                              const TrainOptions& options, int64_t total_steps,
                                              int64_t first_step, const EventSink& sink) {
  GraphedStepRequest request;
  request.device = data.train.labels.device();
  request.optimizer = options.optimizer;
  request.precision = options.precision;
  request.grad_accumulation_steps = options.grad_accumulation_steps;
  request.loss_scaling = options.precision == Precision::kFp16;
  request.augmentation = data.augmentation.enabled() || data.augmentation.mixes();
  request.cycles_momentum = options.schedule.has_value() && options.schedule->Momentum(0);
  std::string reason = GraphedStepUnsupportedReason(request);
  // The graph gathers its batches from the device-resident images.
  if (reason.empty() && data.train.streamed != nullptr) {
    reason = "the training set is streamed from the host";
  }
  if (reason.empty() && !options.cuda_graphs) reason = "CUDA graphs turned off";
  if (reason.empty() && !options.task.custom_loss_path.empty()) {
    reason = "a TorchScript loss (loss.torchscript: the graph captures the built-in losses only)";
  }
  if (reason.empty() && options.data_parallel != nullptr) {
    reason = "distributed: gradients are all-reduced between backward and step";
  }
  if (reason.empty() && options.nan_policy == NanPolicy::kSkipStep) {
    reason = "nan_policy skip_step (each step's loss is read before its update)";
  }
  if (reason.empty() && options.nan_loss_from > 0) reason = "fault injection nan_loss";
  std::unique_ptr<GraphedStep> graphed;
  if (reason.empty()) {
    const torch::optim::OptimizerOptions& group = optimizer.param_groups().front().options();
    const double momentum = options.optimizer == OptimizerKind::kSgd
                                ? static_cast<const torch::optim::SGDOptions&>(group).momentum()
                                : 0.0;
    GraphedStepOptions graph_options;
    graph_options.optimizer = options.optimizer;
    graph_options.precision = options.precision;
    graph_options.batch_size = options.batch_size;
    graph_options.tail_batch_size = options.drop_last ? 0 : data.train.size() % options.batch_size;
    graph_options.task = options.task;
    graph_options.grad_clip_norm = options.grad_clip_norm;
    graph_options.augmentation = data.augmentation;
    graph_options.schedule =
        TabulateSchedule(options.schedule, group.get_lr(), momentum, total_steps);
    graph_options.first_step = first_step;
    graphed = std::make_unique<GraphedStep>(model, optimizer, data.train.images, data.train.labels,
                                            std::move(graph_options));
  }
  if (request.device.is_cuda()) {
    const int64_t tail = options.drop_last ? 0 : data.train.size() % options.batch_size;
    mpsd::v1::JobEvent event;
    event.mutable_log()->set_level(mpsd::v1::LogLine::INFO);
    event.mutable_log()->set_text(
        graphed != nullptr
            ? absl::StrFormat(
                  "training step captured in one CUDA graph (%s, %s%s%s%s, %s, learning "
                  "rate from the schedule's table on the device)%s",
                  OptimizerName(request.optimizer), PrecisionName(request.precision),
                  options.grad_clip_norm > 0 ? ", clipping" : "",
                  options.channels_last ? ", channels_last" : "",
                  request.augmentation ? ", augmentation" : "", CudnnChoiceName(),
                  tail > 0 ? absl::StrFormat("; the last partial batch (%d examples) "
                                             "in a second graph sharing its memory",
                                             tail)
                           : "")
            : "training step runs eagerly: " + reason);
    sink(std::move(event));
  }
  return graphed;
}

// The end-of-epoch evaluations `epoch` asks for (EvaluateEpochSplits).
absl::StatusOr<EpochEvaluation> EvaluateEpoch(const Loop& loop, int epoch) {
  return EvaluateEpochSplits(loop.model, loop.data, loop.options, loop.task, epoch, loop.cancelled);
}

absl::Status CheckOptions(const TrainOptions& options, const DeviceDataset& data,
                          int64_t steps_per_epoch) {
  if (options.precision == Precision::kFp16 && options.grad_scaler == nullptr) {
    return absl::InvalidArgumentError("fp16 training needs a grad_scaler");
  }
  if (steps_per_epoch < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("an epoch has no optimizer step (batch size %d, drop_last %s)",
                        options.batch_size, options.drop_last ? "true" : "false"));
  }
  if (options.data_parallel != nullptr && data.train.streamed != nullptr) {
    return absl::InvalidArgumentError(
        "distributed: the training set is streamed from the host; a distributed job needs it "
        "resident on the device");
  }
  if (options.grad_accumulation_steps < 1 || options.eval_every_epochs < 1 ||
      options.start_epoch < 1) {
    return absl::InvalidArgumentError(
        "grad_accumulation_steps, eval_every_epochs and start_epoch must be >= 1");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Train(ClassifierImpl& model, torch::optim::Optimizer& optimizer,
                   const DeviceDataset& data, const TrainOptions& options, const EventSink& sink,
                   const std::atomic<bool>& cancelled) {
  const torch::Device device = data.train.labels.device();
  const int64_t steps_per_epoch = StepsPerEpoch(
      options.data_parallel != nullptr
          ? ShardSize(data.train.size(), options.data_parallel->world_size(), options.drop_last)
          : data.train.size(),
      options.batch_size, options.drop_last, options.grad_accumulation_steps);
  if (absl::Status s = CheckOptions(options, data, steps_per_epoch); !s.ok()) return s;
  LoopPosition start;
  if (options.resume.has_value()) {
    start = *options.resume;
  } else {
    start.epoch = options.start_epoch;
    start.step = options.start_step;
  }
  if (start.epoch_steps < 0 || start.epoch_steps > steps_per_epoch ||
      start.step < start.epoch_steps) {
    return absl::InvalidArgumentError(
        absl::StrFormat("resuming at step %d of epoch %d, which has %d step(s)", start.epoch_steps,
                        start.epoch, steps_per_epoch));
  }
  std::unique_ptr<GraphedStep> graphed = MaybeCaptureStep(
      model, optimizer, data, options, steps_per_epoch * options.epochs, start.step, sink);
  const TaskLoss task(options.task, device);
  const Loop loop{model, optimizer, data, options, sink, cancelled, task, graphed.get()};
  StepReadback readback(
      device, options.steps_per_readback, steps_per_epoch * options.epochs, start,
      DivergenceCheck(options.divergence_threshold, options.nan_policy == NanPolicy::kSkipStep,
                      options.max_skipped_steps),
      sink, task.labels_per_example());
  // The shuffle generator is the device's own kind, so randperm runs there, and separate from
  // the default generator that dropout draws from, so the order depends on the seed alone.
  at::Generator shuffle = MakeDeviceGenerator(device, options.seed);
  for (int epoch = start.epoch; epoch <= options.epochs; ++epoch) {
    const LoopPosition* resume =
        epoch == start.epoch && options.resume.has_value() ? &start : nullptr;
    if (absl::Status status = TrainEpoch(loop, epoch, shuffle, readback, resume); !status.ok()) {
      return status;
    }
    const double epoch_seconds = readback.epoch_seconds();
    absl::StatusOr<EpochEvaluation> evaluation = EvaluateEpoch(loop, epoch);
    if (absl::IsCancelled(evaluation.status())) {
      // Every step of the epoch ran: a resume evaluates it and goes on.
      if (absl::Status s = OfferCheckpoint(loop, readback, CheckpointMoment::kStopping); !s.ok()) {
        return s;
      }
    }
    if (!evaluation.ok()) return evaluation.status();
    const double learning_rate = options.schedule.has_value()
                                     ? options.schedule->LearningRate(readback.steps())
                                     : optimizer.param_groups().front().options().get_lr();
    mpsd::v1::JobEvent event;
    *event.mutable_epoch() =
        EpochMetricsOf(epoch, readback, *evaluation, epoch_seconds, learning_rate, task);
    bool stop = false;
    if (options.after_evaluation) {
      absl::StatusOr<bool> stopping = options.after_evaluation(event.epoch());
      if (!stopping.ok()) return stopping.status();
      stop = *stopping;
    }
    // evaluate_test: end means the epoch training ends after, also when it ends early.
    if (stop) {
      if (absl::Status s =
              EvaluateTestOnEarlyEnd(model, data, options, task, cancelled, *event.mutable_epoch());
          !s.ok()) {
        return s;
      }
    }
    sink(std::move(event));
    if (graphed != nullptr) graphed->ExportState();  // the optimizer's state, for checkpoints
    if (options.on_epoch_end) {
      if (absl::Status s = options.on_epoch_end(epoch, readback.steps()); !s.ok()) return s;
    }
    if (options.on_checkpoint) {
      LoopPosition next = readback.Position();  // the next epoch's start
      next.epoch = epoch + 1;
      next.epoch_steps = 0;
      next.epoch_loss_sum = 0;
      next.epoch_correct = next.epoch_examples = next.epoch_skipped = 0;
      next.epoch_seconds = 0;
      if (absl::Status s = options.on_checkpoint(next, CheckpointMoment::kEpochEnd); !s.ok()) {
        return s;
      }
    }
    if (stop) break;
  }
  return absl::OkStatus();
}

absl::Status EvaluateTestOnEarlyEnd(ClassifierImpl& model, const DeviceDataset& data,
                                    const TrainOptions& options, const TaskLoss& task,
                                    const std::atomic<bool>& cancelled,
                                    mpsd::v1::EpochMetrics& epoch) {
  if (options.evaluate_test != EvaluateTest::kEnd || epoch.evaluated()) return absl::OkStatus();
  absl::StatusOr<EvalResult> test =
      Evaluate(model, data.test, options.eval_batch_size, cancelled, options.data_parallel, &task);
  if (!test.ok()) return test.status();
  epoch.set_evaluated(true);
  epoch.set_test_loss(test->loss);
  epoch.set_test_accuracy(test->accuracy);
  for (const auto& [name, value] : test->metrics) {
    (*epoch.mutable_metrics())[absl::StrCat("test_", name)] = value;
  }
  return absl::OkStatus();
}

absl::StatusOr<EpochEvaluation> EvaluateEpochSplits(ClassifierImpl& model,
                                                    const DeviceDataset& data,
                                                    const TrainOptions& options,
                                                    const TaskLoss& task, int epoch,
                                                    const std::atomic<bool>& cancelled) {
  const bool last = epoch == options.epochs;
  const bool eval_epoch = epoch % options.eval_every_epochs == 0 || last;
  bool test = false;
  switch (options.evaluate_test) {
    case EvaluateTest::kEveryEpoch:
      test = eval_epoch;
      break;
    case EvaluateTest::kEnd:
      test = last;
      break;
    case EvaluateTest::kNever:
      break;
  }
  EpochEvaluation evaluation;
  const auto evaluate = [&](const TensorSplit& split) {
    return Evaluate(model, split, options.eval_batch_size, cancelled, options.data_parallel, &task);
  };
  // defined(), not size() > 0: a distributed rank's shard may be empty, and every rank must
  // take part in the evaluation's all-reduce.
  if (eval_epoch && data.val.labels.defined()) {
    absl::StatusOr<EvalResult> val = evaluate(data.val);
    if (!val.ok()) return val.status();
    evaluation.val = *val;
  }
  if (test) {
    absl::StatusOr<EvalResult> result = evaluate(data.test);
    if (!result.ok()) return result.status();
    evaluation.test = *result;
  }
  return evaluation;
}

// Calls `visit(inputs, targets)` for `split`'s examples in order, `batch_size` at a time: the
// streamed split's pass, else slices of the resident tensors. CANCELLED when `cancelled` is set
// before a batch. Both evaluations (classification's and the other tasks') walk a split so.
absl::Status ForEachEvalBatch(
    const TensorSplit& split, int64_t batch_size, const std::atomic<bool>& cancelled,
    const std::function<void(const torch::Tensor&, const torch::Tensor&)>& visit) {
  const int64_t n = split.size();
  if (split.streamed != nullptr && n > 0) {
    split.streamed->StartPass(torch::arange(n, torch::TensorOptions().dtype(torch::kInt64)),
                              batch_size);
  }
  for (int64_t start = 0; start < n; start += batch_size) {
    if (cancelled.load(std::memory_order_relaxed)) {
      return absl::CancelledError("cancelled during evaluation");
    }
    const int64_t size = std::min(batch_size, n - start);
    const torch::Tensor targets = split.labels.narrow(/*dim=*/0, start, size);
    visit(Preprocess(split.streamed != nullptr ? split.streamed->Next()
                                               : split.images.narrow(/*dim=*/0, start, size),
                     split.preprocess),
          targets);
  }
  return absl::OkStatus();
}

namespace {

// The user's metrics over one evaluation (TaskLoss::MetricSums), summed on the device; a no-op
// for a task without them. Reduce sums them across ranks (every rank calls it, an empty shard
// with zeros) before Finish reads them back.
class UserMetricSums {
 public:
  UserMetricSums(const TaskLoss& task, const torch::Device& device) : task_(task) {
    if (task_.has_metrics()) sums_ = task_.ZeroMetricSums(device);
  }
  void Add(const torch::Tensor& logits, const torch::Tensor& targets) {
    if (sums_.defined()) sums_.add_(task_.MetricSums(logits, targets));
  }
  void Reduce(DataParallel* data_parallel) {
    if (sums_.defined() && data_parallel != nullptr) sums_ = data_parallel->AllReduceSum(sums_);
  }
  void Finish(int64_t examples, TaskMetrics& metrics) const {
    if (sums_.defined()) task_.FinishMetrics(sums_, examples, metrics);
  }

 private:
  const TaskLoss& task_;
  torch::Tensor sums_;  // [M] on the device; undefined without user metrics
};

}  // namespace

// Evaluate for multilabel and regression: the task's sums (TaskLoss::EvalSums) over the split,
// read back once.
absl::StatusOr<EvalResult> EvaluateTask(ClassifierImpl& model, const TensorSplit& split,
                                        int64_t batch_size, const std::atomic<bool>& cancelled,
                                        DataParallel* data_parallel, const TaskLoss& task) {
  torch::NoGradGuard no_grad;
  EvalModeGuard eval_mode(model);
  torch::Tensor sums;
  UserMetricSums user(task, split.labels.device());
  const int64_t n = split.size();
  const absl::Status walked = ForEachEvalBatch(
      split, batch_size, cancelled, [&](const torch::Tensor& inputs, const torch::Tensor& targets) {
        const torch::Tensor logits = model.forward(inputs);
        const torch::Tensor batch = task.EvalSums(logits, targets);
        sums = sums.defined() ? sums + batch : batch;
        user.Add(logits, targets);
      });
  if (!walked.ok()) return walked;
  int64_t examples = n;
  if (data_parallel != nullptr) {
    // Every rank takes part, an empty shard with zeros of the same length.
    if (!sums.defined()) {
      const torch::Tensor probe = task.EvalSums(
          torch::zeros({1, task.config().outputs}, split.labels.options().dtype(torch::kFloat32)),
          torch::zeros({1, task.config().outputs}, split.labels.options().dtype(torch::kFloat32)));
      sums = torch::zeros_like(probe);
    }
    torch::Tensor all = data_parallel->AllReduceSum(
        torch::cat({sums, torch::full({1}, static_cast<double>(n), sums.options())}));
    sums = all.narrow(/*dim=*/0, 0, all.size(0) - 1);
    examples = static_cast<int64_t>(all[all.size(0) - 1].item<double>());
  }
  user.Reduce(data_parallel);
  if (examples == 0 || !sums.defined()) return EvalResult{};
  EvalResult result;
  result.metrics = task.Finish(sums, examples);
  user.Finish(examples, result.metrics);
  result.loss = result.metrics["loss"];
  if (auto it = result.metrics.find("accuracy"); it != result.metrics.end()) {
    result.accuracy = it->second;
  }
  return result;
}

absl::StatusOr<EvalResult> Evaluate(ClassifierImpl& model, const TensorSplit& split,
                                    int64_t batch_size, const std::atomic<bool>& cancelled,
                                    DataParallel* data_parallel, const TaskLoss* task,
                                    int64_t confusion_classes) {
  if (task != nullptr && task->config().kind != TaskKind::kClassification) {
    return EvaluateTask(model, split, batch_size, cancelled, data_parallel, *task);
  }
  torch::NoGradGuard no_grad;
  EvalModeGuard eval_mode(model);
  const auto on_device = torch::TensorOptions().device(split.labels.device());
  torch::Tensor loss_sum = torch::zeros({}, on_device.dtype(torch::kFloat32));
  torch::Tensor correct = torch::zeros({}, on_device.dtype(torch::kInt64));
  // Class weights: the weighted mean Σ w[y] ℓ / Σ w[y], as CrossEntropyLoss's reduction "mean".
  const TaskConfig* weighted =
      task != nullptr && !task->config().class_weights.empty() ? &task->config() : nullptr;
  torch::Tensor class_weights, weight_sum;
  if (weighted != nullptr) {
    class_weights = torch::tensor(weighted->class_weights, torch::kFloat64)
                        .to(on_device.dtype(torch::kFloat32));
    weight_sum = torch::zeros({}, on_device.dtype(torch::kFloat32));
  }
  // The confusion matrix's counts, [K * K] int64 on the device (bincount's dtype).
  torch::Tensor confusion;
  if (confusion_classes > 0) {
    confusion =
        torch::zeros({confusion_classes * confusion_classes}, on_device.dtype(torch::kInt64));
  }
  std::optional<UserMetricSums> user;
  if (task != nullptr) user.emplace(*task, split.labels.device());
  const int64_t n = split.size();
  const absl::Status walked = ForEachEvalBatch(
      split, batch_size, cancelled, [&](const torch::Tensor& images, const torch::Tensor& labels) {
        const torch::Tensor logits = model.forward(images);
        if (user.has_value()) user->Add(logits, labels);
        F::CrossEntropyFuncOptions sum = F::CrossEntropyFuncOptions().reduction(torch::kSum);
        if (task != nullptr && task->custom()) {  // the user's mean loss, weighted by size
          loss_sum.add_(task->Loss(logits, labels).detach() * labels.size(0));
        } else if (weighted != nullptr) {
          loss_sum.add_(F::cross_entropy(logits, labels, sum.weight(class_weights)));
          weight_sum.add_(class_weights.index_select(/*dim=*/0, labels).sum());
        } else {
          loss_sum.add_(F::cross_entropy(logits, labels, sum));
        }
        const torch::Tensor predicted = logits.argmax(/*dim=*/1);
        correct.add_(predicted.eq(labels).sum());
        if (confusion.defined()) {
          confusion.add_(torch::bincount(labels * confusion_classes + predicted, /*weights=*/{},
                                         /*minlength=*/confusion_classes * confusion_classes));
        }
      });
  if (!walked.ok()) return walked;
  // The one synchronisation of the evaluation.
  torch::Tensor totals = torch::stack({loss_sum, correct.to(torch::kFloat32)});
  int64_t examples = n;
  if (data_parallel != nullptr) {
    totals = data_parallel->AllReduceSum(torch::cat(
        {totals, torch::full({1}, static_cast<double>(n), on_device.dtype(torch::kFloat32))}));
  }
  totals = totals.to(torch::kCPU);
  if (data_parallel != nullptr) examples = static_cast<int64_t>(totals[2].item<double>());
  if (user.has_value()) user->Reduce(data_parallel);
  if (examples == 0) return EvalResult{};
  EvalResult result{
      totals[0].item<double>() / examples, totals[1].item<double>() / examples, {}, {}};
  if (weighted != nullptr) {
    torch::Tensor weights = weight_sum.reshape({1});
    if (data_parallel != nullptr) weights = data_parallel->AllReduceSum(weights);
    const double total_weight = weights.to(torch::kCPU).item<double>();
    result.loss = total_weight > 0 ? totals[0].item<double>() / total_weight : 0;
  }
  if (confusion.defined()) {
    const torch::Tensor counts = confusion.to(torch::kCPU).contiguous();
    result.confusion.assign(counts.data_ptr<int64_t>(),
                            counts.data_ptr<int64_t>() + counts.numel());
  }
  if (user.has_value() && task->has_metrics()) {
    // As the other tasks' maps: every metric measured, by name.
    result.metrics["loss"] = result.loss;
    result.metrics["accuracy"] = result.accuracy;
    user->Finish(examples, result.metrics);
  }
  return result;
}

}  // namespace mpsd::trainer
