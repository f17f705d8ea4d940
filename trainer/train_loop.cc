// The training loop. Per step it only queues work on the device: the batch is gathered from the
// device-resident dataset by index, and the step's loss and correct count are copied into a
// device buffer that is read back once per group of steps.
#include "trainer/train_loop.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "trainer/augment.h"
#include "trainer/compat.h"
#include "trainer/device.h"

namespace mpsd::trainer {
namespace {

namespace F = torch::nn::functional;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The generator that shuffles the training set: of the device's own kind, so randperm runs on
// the device, and separate from the default generator that dropout draws from, so the order of
// examples depends on the seed alone.
at::Generator MakeShuffleGenerator(const torch::Device& device, uint64_t seed) {
  at::Generator default_generator = at::globalContext().defaultGenerator(device);
  at::Generator generator;
  {
    std::lock_guard<std::mutex> lock(default_generator.mutex());
    generator = default_generator.clone();
  }
  generator.set_current_seed(seed);
  return generator;
}

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

// Keeps each step's loss and correct count on the device and reads a group of steps back in one
// transfer, emitting one `step` event per step. Also sums the epoch's totals from what it read.
class StepReadback {
 public:
  StepReadback(const torch::Device& device, int capacity, int64_t total_steps,
               const EventSink& sink)
      : device_(device),
        capacity_(std::max(capacity, 1)),
        total_steps_(total_steps),
        sink_(sink),
        values_(torch::zeros({capacity_, 2}, torch::TensorOptions().device(device))) {
    for (int i = 0; i < capacity_; ++i) {
      loss_slots_.push_back(values_[i][0]);
      correct_slots_.push_back(values_[i][1]);
    }
    pending_.reserve(capacity_);
  }

  void StartEpoch(int epoch) {
    epoch_ = epoch;
    epoch_loss_sum_ = 0;
    epoch_correct_ = 0;
    epoch_examples_ = 0;
    group_start_ = Clock::now();
  }

  // loss: [] float32, correct: [] int64, both on the device and outside autograd. No sync.
  void Record(const torch::Tensor& loss, const torch::Tensor& correct, int64_t batch_size,
              double learning_rate) {
    const size_t slot = pending_.size();
    loss_slots_[slot].copy_(loss);
    correct_slots_[slot].copy_(correct);
    pending_.push_back(Pending{++steps_, batch_size, learning_rate});
  }

  // True when the pending steps should be read back: the buffer is full, or `interval` has
  // passed since the last read-back. A host clock read; no sync.
  bool due(std::chrono::milliseconds interval) const {
    return static_cast<int>(pending_.size()) == capacity_ ||
           (!pending_.empty() && Clock::now() - group_start_ >= interval);
  }
  int64_t steps() const { return steps_; }
  int64_t total_steps() const { return total_steps_; }
  double epoch_loss() const { return epoch_examples_ > 0 ? epoch_loss_sum_ / epoch_examples_ : 0; }
  double epoch_accuracy() const {
    return epoch_examples_ > 0 ? static_cast<double>(epoch_correct_) / epoch_examples_ : 0;
  }
  int64_t epoch_examples() const { return epoch_examples_; }

  // Copies the pending steps' values to the host (waiting for those steps to finish) and emits
  // their events. No-op when nothing is pending.
  void Flush();

 private:
  struct Pending {
    int64_t step;
    int64_t batch_size;
    double learning_rate;
  };

  // What is shared by the steps read back together.
  struct Group {
    int64_t steps = 0;
    int64_t examples = 0;
    double seconds = 0;  // wall time from the previous read-back (or epoch start) to this one
    int64_t allocated_bytes = 0;
  };

  mpsd::v1::JobEvent StepEvent(const Pending& step, float loss, int64_t correct,
                               const Group& group) const;

  const torch::Device device_;
  const int capacity_;
  const int64_t total_steps_;
  const EventSink& sink_;
  torch::Tensor values_;  // [capacity, 2] float32 on the device: loss, correct count
  std::vector<torch::Tensor> loss_slots_;     // views of values_, one per slot
  std::vector<torch::Tensor> correct_slots_;  // views of values_, one per slot
  std::vector<Pending> pending_;
  int epoch_ = 0;
  int64_t steps_ = 0;
  Clock::time_point group_start_ = Clock::now();
  double epoch_loss_sum_ = 0;  // Σ loss × batch size
  int64_t epoch_correct_ = 0;
  int64_t epoch_examples_ = 0;
};

void StepReadback::Flush() {
  if (pending_.empty()) return;
  Group group;
  group.steps = static_cast<int64_t>(pending_.size());
  const torch::Tensor host = values_.narrow(/*dim=*/0, /*start=*/0, group.steps).to(torch::kCPU);
  group.seconds = SecondsSince(group_start_);
  group_start_ = Clock::now();
  group.allocated_bytes = ReadMemory(device_).allocated_bytes;
  for (const Pending& step : pending_) group.examples += step.batch_size;

  const auto values = host.accessor<float, 2>();
  for (int64_t i = 0; i < group.steps; ++i) {
    const Pending& step = pending_[i];
    const float loss = values[i][0];
    const auto correct = static_cast<int64_t>(values[i][1]);
    epoch_loss_sum_ += static_cast<double>(loss) * step.batch_size;
    epoch_correct_ += correct;
    epoch_examples_ += step.batch_size;
    sink_(StepEvent(step, loss, correct, group));
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
  metrics.set_accuracy(static_cast<float>(correct) / static_cast<float>(step.batch_size));
  metrics.set_learning_rate(step.learning_rate);
  metrics.set_samples_per_second(group.seconds > 0 ? group.examples / group.seconds : 0);
  metrics.set_step_time_ms(group.seconds * 1000.0 / static_cast<double>(group.steps));
  metrics.set_allocated_bytes(group.allocated_bytes);
  metrics.set_batch_size(static_cast<int32_t>(step.batch_size));
  return event;
}

// Everything one call of Train works with.
struct Loop {
  ClassifierImpl& model;
  torch::optim::Optimizer& optimizer;
  const DeviceDataset& data;
  const TrainOptions& options;
  const EventSink& sink;
  const std::atomic<bool>& cancelled;
};

// One optimizer step; returns the batch's mean loss and correct count, still on the device.
std::pair<torch::Tensor, torch::Tensor> TrainStep(const Loop& loop, const torch::Tensor& images,
                                                  const torch::Tensor& labels) {
  compat::ZeroGradToNone(loop.optimizer);
  const torch::Tensor logits = loop.model.forward(images);
  torch::Tensor loss = F::cross_entropy(logits, labels);
  loss.backward();
  loop.optimizer.step();
  torch::Tensor correct = logits.detach().argmax(/*dim=*/1).eq(labels).sum();
  return {loss.detach(), std::move(correct)};
}

double LearningRate(const torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups().front().options().get_lr();
}

absl::Status Cancelled(const StepReadback& readback) {
  return absl::CancelledError(
      absl::StrFormat("cancelled after step %d of %d", readback.steps(), readback.total_steps()));
}

// One pass over the training set in a fresh random order.
absl::Status TrainEpoch(const Loop& loop, int epoch, at::Generator& shuffle,
                        StepReadback& readback) {
  const TensorSplit& train = loop.data.train;
  const int64_t n = train.size();
  const int64_t batch_size = loop.options.batch_size;
  const torch::Tensor order = torch::randperm(
      n, shuffle, torch::TensorOptions().dtype(torch::kInt64).device(train.labels.device()));
  readback.StartEpoch(epoch);
  for (int64_t start = 0; start < n; start += batch_size) {
    if (loop.cancelled.load(std::memory_order_relaxed)) {
      readback.Flush();
      return Cancelled(readback);
    }
    const torch::Tensor index = order.narrow(/*dim=*/0, start, std::min(batch_size, n - start));
    // Training batches only: evaluation never augments. Draws from the shuffle generator, so a
    // seed fixes both the order and the augmentation.
    const torch::Tensor images = Augment(train.images.index_select(/*dim=*/0, index),
                                         loop.data.augmentation, shuffle);
    auto [loss, correct] = TrainStep(loop, images, train.labels.index_select(/*dim=*/0, index));
    readback.Record(loss, correct, index.size(0), LearningRate(loop.optimizer));
    if (readback.due(std::chrono::milliseconds(loop.options.readback_interval_ms))) {
      readback.Flush();
    }
  }
  readback.Flush();
  return absl::OkStatus();
}

void EmitEpoch(const EventSink& sink, int epoch, const StepReadback& readback,
               const EvalResult& test, double epoch_seconds) {
  mpsd::v1::JobEvent event;
  mpsd::v1::EpochMetrics& metrics = *event.mutable_epoch();
  metrics.set_epoch(epoch);
  metrics.set_train_loss(readback.epoch_loss());
  metrics.set_train_accuracy(readback.epoch_accuracy());
  metrics.set_test_loss(test.loss);
  metrics.set_test_accuracy(test.accuracy);
  metrics.set_epoch_time_s(epoch_seconds);
  metrics.set_samples_per_second(
      epoch_seconds > 0 ? static_cast<double>(readback.epoch_examples()) / epoch_seconds : 0);
  sink(std::move(event));
}

}  // namespace

absl::Status Train(ClassifierImpl& model, torch::optim::Optimizer& optimizer,
                   const DeviceDataset& data, const TrainOptions& options, const EventSink& sink,
                   const std::atomic<bool>& cancelled) {
  const Loop loop{model, optimizer, data, options, sink, cancelled};
  const torch::Device device = data.train.labels.device();
  const int64_t steps_per_epoch = (data.train.size() + options.batch_size - 1) / options.batch_size;
  StepReadback readback(device, options.steps_per_readback, steps_per_epoch * options.epochs, sink);
  at::Generator shuffle = MakeShuffleGenerator(device, options.seed);
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    const Clock::time_point start = Clock::now();
    if (absl::Status status = TrainEpoch(loop, epoch, shuffle, readback); !status.ok()) {
      return status;
    }
    const double epoch_seconds = SecondsSince(start);
    absl::StatusOr<EvalResult> test =
        Evaluate(model, data.test, options.eval_batch_size, cancelled);
    if (!test.ok()) return test.status();
    EmitEpoch(sink, epoch, readback, *test, epoch_seconds);
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Evaluate(ClassifierImpl& model, const TensorSplit& split,
                                    int64_t batch_size, const std::atomic<bool>& cancelled) {
  torch::NoGradGuard no_grad;
  EvalModeGuard eval_mode(model);
  const auto on_device = torch::TensorOptions().device(split.labels.device());
  torch::Tensor loss_sum = torch::zeros({}, on_device.dtype(torch::kFloat32));
  torch::Tensor correct = torch::zeros({}, on_device.dtype(torch::kInt64));
  const int64_t n = split.size();
  for (int64_t start = 0; start < n; start += batch_size) {
    if (cancelled.load(std::memory_order_relaxed)) {
      return absl::CancelledError("cancelled during evaluation");
    }
    const int64_t size = std::min(batch_size, n - start);
    const torch::Tensor labels = split.labels.narrow(/*dim=*/0, start, size);
    const torch::Tensor logits = model.forward(split.images.narrow(/*dim=*/0, start, size));
    loss_sum.add_(
        F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kSum)));
    correct.add_(logits.argmax(/*dim=*/1).eq(labels).sum());
  }
  // The one synchronisation of the evaluation.
  const torch::Tensor totals =
      torch::stack({loss_sum, correct.to(torch::kFloat32)}).to(torch::kCPU);
  if (n == 0) return EvalResult{};
  return EvalResult{totals[0].item<double>() / n, totals[1].item<double>() / n};
}

}  // namespace mpsd::trainer
