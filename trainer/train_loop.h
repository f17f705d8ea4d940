// The training loop: shuffles on the device, steps the optimizer, reads per-step metrics back
// in groups (never one host↔device sync per step), and evaluates after every epoch. Internal to
// trainer/: includes torch.
#ifndef MPSD_TRAINER_TRAIN_LOOP_H_
#define MPSD_TRAINER_TRAIN_LOOP_H_

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/datasets.h"
#include "trainer/executor.h"
#include "trainer/models.h"

namespace mpsd::trainer {

// Where training stands at the end of an epoch, for TrainOptions::on_epoch_end.
struct EpochEnd {
  int epoch = 0;     // 1-based, the epoch just finished
  int64_t step = 0;  // optimizer steps taken since the job started (resumed jobs included)
  // The generator that orders the training set; its state is the next epoch's.
  at::Generator shuffle;
};

struct TrainOptions {
  // Examples per optimizer step; the last batch of an epoch may be smaller.
  int64_t batch_size = 64;
  int epochs = 1;
  // Seeds the generator that shuffles the training set each epoch (on the device).
  uint64_t seed = 0;
  // Steps whose loss and correct count are read back from the device in one transfer. Larger
  // means fewer syncs and later step events; 1 syncs every step.
  int steps_per_readback = 32;
  // A group is also read back once this much wall time has passed since the last read-back,
  // so that slow steps (CPU, big models) still stream promptly. Costs at most one sync per
  // interval.
  int readback_interval_ms = 500;
  // Examples per forward pass when evaluating.
  int64_t eval_batch_size = 1000;

  // ---- Resume and checkpoints (trainer/checkpoint.h) ----
  // Epochs finished and optimizer steps taken before this call (a resumed job): the loop runs
  // epochs start_epoch + 1 .. epochs and numbers its steps from start_step + 1.
  int start_epoch = 0;
  int64_t start_step = 0;
  // The shuffle generator's state to continue from (at::Generator::get_state of a checkpoint,
  // a CPU uint8 tensor); undefined = a generator seeded with `seed`.
  torch::Tensor shuffle_state;
  // Called after each epoch's `epoch` event, at a step boundary where the default generators
  // hold what the next epoch starts from. A non-OK status stops training with that status.
  std::function<absl::Status(const EpochEnd&)> on_epoch_end;
};

// Trains `model` (already on the data's device, in train mode) with `optimizer` for
// options.epochs passes over data.train, evaluating on data.test after each. Emits, through
// `sink`, one `step` event per step (in groups of steps_per_readback, and at each epoch's end)
// and one `epoch` event per epoch. Checks `cancelled` before every step and evaluation batch and
// then returns CANCELLED, after emitting the events of every step that ran. Throws c10::Error
// for LibTorch failures (the executor's firewall converts them).
absl::Status Train(ClassifierImpl& model, torch::optim::Optimizer& optimizer,
                   const DeviceDataset& data, const TrainOptions& options, const EventSink& sink,
                   const std::atomic<bool>& cancelled);

struct EvalResult {
  double loss = 0;      // mean cross-entropy over the examples
  double accuracy = 0;  // fraction classified correctly, in [0, 1]
};

// Evaluates `model` on `split` in eval mode without autograd, accumulating on the device and
// synchronising once; leaves the model in train mode. CANCELLED if `cancelled` turns true.
absl::StatusOr<EvalResult> Evaluate(ClassifierImpl& model, const TensorSplit& split,
                                    int64_t batch_size, const std::atomic<bool>& cancelled);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TRAIN_LOOP_H_
