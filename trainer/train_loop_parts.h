// The training loop's parts that a loop over several models reuses (trainer/fused_train.h): the
// shuffle seed of an epoch, the step read-back that turns each step's device values into `step`
// events, an epoch's evaluations and its `epoch` event payload. Train (trainer/train_loop.h) is
// built from them; behaviour is Train's. Internal to trainer/: includes torch.
//
// Thread-safety: none of these is shared between threads; a StepReadback belongs to one loop.
#ifndef MPSD_TRAINER_TRAIN_LOOP_PARTS_H_
#define MPSD_TRAINER_TRAIN_LOOP_PARTS_H_

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/datasets.h"
#include "trainer/divergence.h"
#include "trainer/models.h"
#include "trainer/task.h"
#include "trainer/torch_executor.h"
#include "trainer/train_loop.h"

namespace mpsd::trainer {

// The shuffle seed of epoch `epoch` (1-based): SplitMix64 of the job's seed and the epoch, so
// each epoch's order depends on (seed, epoch) alone and a resumed job needs no generator state.
// The epoch's order is torch::randperm(N) drawn from a generator of the data's device seeded
// with it (Train's TrainEpoch).
uint64_t EpochSeed(uint64_t seed, int epoch);

// Keeps each step's loss and correct count on the device and reads a group of steps back in one
// transfer, emitting one `step` event per step. Also sums the epoch's totals from what it read.
class StepReadback {
 public:
  using Clock = std::chrono::steady_clock;

  StepReadback(const torch::Device& device, int capacity, int64_t total_steps,
               const LoopPosition& start, DivergenceCheck divergence, const EventSink& sink,
               int64_t labels_per_example)
      : device_(device),
        labels_per_example_(labels_per_example),
        capacity_(std::max(capacity, 1)),
        total_steps_(total_steps),
        sink_(sink),
        divergence_(std::move(divergence)),
        values_(torch::zeros({capacity_, 2}, torch::TensorOptions().device(device))),
        steps_(start.step) {
    divergence_.Restore(start.divergence);
    for (int i = 0; i < capacity_; ++i) {
      loss_slots_.push_back(values_[i][0]);
      correct_slots_.push_back(values_[i][1]);
    }
    pending_.reserve(capacity_);
  }

  // `resume`: the epoch is continued from a checkpoint's position (its figures so far).
  void StartEpoch(int epoch, const LoopPosition* resume) {
    epoch_ = epoch;
    epoch_loss_sum_ = resume != nullptr ? resume->epoch_loss_sum : 0;
    epoch_correct_ = resume != nullptr ? resume->epoch_correct : 0;
    epoch_examples_ = resume != nullptr ? resume->epoch_examples : 0;
    epoch_skipped_ = resume != nullptr ? resume->epoch_skipped : 0;
    epoch_steps_ = resume != nullptr ? resume->epoch_steps : 0;
    seconds_before_ = resume != nullptr ? resume->epoch_seconds : 0;
    epoch_start_ = group_start_ = Clock::now();
  }

  // loss: [] float32, correct: [] int64, both on the device and outside autograd. No sync.
  // loss_scale: fp16's scale for the step (0 without scaling); skipped: fp16 skipped it.
  void Record(const torch::Tensor& loss, const torch::Tensor& correct, int64_t batch_size,
              double learning_rate, double loss_scale, bool skipped) {
    const size_t slot = pending_.size();
    loss_slots_[slot].copy_(loss);
    correct_slots_[slot].copy_(correct);
    pending_.push_back(Pending{++steps_, batch_size, learning_rate, loss_scale, skipped});
    ++epoch_steps_;
  }

  // For a loop that reads several read-backs' values in one transfer (the batched fused step,
  // trainer/fused_train.cc): records a step whose loss and correct count the caller keeps on the
  // device itself and hands over, read back, to FlushFrom. A read-back fed this way must be
  // flushed with FlushFrom only (Flush would read its own, unwritten, slots). No sync.
  void RecordDeferred(int64_t batch_size, double learning_rate) {
    pending_.push_back(Pending{++steps_, batch_size, learning_rate, 0, false});
    ++epoch_steps_;
  }
  int pending() const { return static_cast<int>(pending_.size()); }

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
    return epoch_examples_ > 0 ? static_cast<double>(epoch_correct_) /
                                     static_cast<double>(epoch_examples_ * labels_per_example_)
                               : 0;
  }
  int64_t epoch_examples() const { return epoch_examples_; }
  int64_t epoch_skipped() const { return epoch_skipped_; }
  int64_t epoch_steps() const { return epoch_steps_; }
  // Training-pass time of the epoch, a resumed epoch's time before the resume included.
  double epoch_seconds() const { return seconds_before_ + SecondsSince(epoch_start_); }
  // Where training stands; only with nothing pending (after Flush).
  LoopPosition Position() const {
    LoopPosition position;
    position.epoch = epoch_;
    position.step = steps_;
    position.epoch_steps = epoch_steps_;
    position.epoch_loss_sum = epoch_loss_sum_;
    position.epoch_correct = epoch_correct_;
    position.epoch_examples = epoch_examples_;
    position.epoch_skipped = epoch_skipped_;
    position.epoch_seconds = epoch_seconds();
    position.divergence = divergence_.state();
    return position;
  }
  // A step read back so far diverged (DivergenceCheck); its error, naming the step.
  bool diverged() const { return divergence_.diverged(); }
  absl::Status DivergedError() const { return divergence_.Error(total_steps_); }

  // Copies the pending steps' values to the host (waiting for those steps to finish) and emits
  // their events, checking each loss for divergence on the way: the events end with the first
  // diverged step (the steps queued after it ran, but are not reported; the job fails). No-op
  // when nothing is pending.
  void Flush();
  // Flush with the pending steps' values already on the host: `host` [pending(), 2] float32 on
  // the CPU, row i the i-th pending step's loss and correct count (RecordDeferred).
  void FlushFrom(const torch::Tensor& host);

 private:
  static double SecondsSince(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  struct Pending {
    int64_t step;
    int64_t batch_size;
    double learning_rate;
    double loss_scale;
    bool skipped;
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
  const int64_t labels_per_example_;  // what `correct` counts per example (TaskLoss)
  const int capacity_;
  const int64_t total_steps_;
  const EventSink& sink_;
  DivergenceCheck divergence_;
  torch::Tensor values_;  // [capacity, 2] float32 on the device: loss, correct count
  std::vector<torch::Tensor> loss_slots_;     // views of values_, one per slot
  std::vector<torch::Tensor> correct_slots_;  // views of values_, one per slot
  std::vector<Pending> pending_;
  int epoch_ = 0;
  int64_t steps_;  // optimizer steps recorded, counted from the job's first (resumed: start_step)
  Clock::time_point group_start_ = Clock::now();
  double epoch_loss_sum_ = 0;  // Σ loss × batch size
  int64_t epoch_correct_ = 0;
  int64_t epoch_examples_ = 0;
  int64_t epoch_skipped_ = 0;
  int64_t epoch_steps_ = 0;  // recorded in this epoch (a resumed epoch's included)
  double seconds_before_ = 0;
  Clock::time_point epoch_start_ = Clock::now();
};

// What an epoch's evaluation measured; nullopt where a split was not evaluated.
struct EpochEvaluation {
  std::optional<EvalResult> val;
  std::optional<EvalResult> test;
};

// The end-of-epoch evaluations `epoch` asks for, as Train runs them: validation on eval epochs
// (every options.eval_every_epochs-th and the last) when data.val has labels, test as
// options.evaluate_test says; each with Evaluate (options.eval_batch_size,
// options.data_parallel, `task`). CANCELLED once `cancelled` is set.
absl::StatusOr<EpochEvaluation> EvaluateEpochSplits(ClassifierImpl& model,
                                                    const DeviceDataset& data,
                                                    const TrainOptions& options,
                                                    const TaskLoss& task, int epoch,
                                                    const std::atomic<bool>& cancelled);

// evaluate_test: end on an epoch after which training ends early (early stopping): the test
// split evaluated into `epoch` (test_loss, test_accuracy, test_<metric>; `evaluated` set) with
// Evaluate as EvaluateEpochSplits runs it, unless `epoch` was evaluated already or
// options.evaluate_test is not kEnd. Used by Train and by each fused trial. CANCELLED once
// `cancelled` is set; Evaluate's errors.
absl::Status EvaluateTestOnEarlyEnd(ClassifierImpl& model, const DeviceDataset& data,
                                    const TrainOptions& options, const TaskLoss& task,
                                    const std::atomic<bool>& cancelled,
                                    mpsd::v1::EpochMetrics& epoch);

// The epoch's event payload; `evaluation`'s nullopts were not evaluated this epoch.
mpsd::v1::EpochMetrics EpochMetricsOf(int epoch, const StepReadback& readback,
                                      const EpochEvaluation& evaluation, double epoch_seconds,
                                      double learning_rate, const TaskLoss& task);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TRAIN_LOOP_PARTS_H_
