// Early stopping on an epoch metric, with the semantics of Keras' EarlyStopping
// (keras.io/api/callbacks/early_stopping: monitor, min_delta, patience, mode) and Lightning's
// EarlyStopping (lightning.ai/docs/pytorch/stable/api/lightning.pytorch.callbacks.EarlyStopping):
// an epoch improves when its value beats the best so far by more than min_delta (mode min:
// value < best - min_delta; max: value > best + min_delta); `patience` evaluated epochs in a
// row without improvement stop training. A NaN never improves. Like Keras' default
// (restore_best_weights=False) the job goes on with the last weights; the best epoch's are kept
// as best.pt. Torch-free; one per job, used by the loop's thread.
#ifndef MPSD_TRAINER_EARLY_STOPPING_H_
#define MPSD_TRAINER_EARLY_STOPPING_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::trainer {

// TrainJob.early_stopping resolved.
struct EarlyStoppingConfig {
  bool enabled = false;
  std::string monitor = "val_loss";  // api/epoch_metric.h: val_*, train_*, test_*
  bool maximize = false;             // mode "max"
  int patience = 3;                  // > 0
  double min_delta = 0;              // >= 0
};

class EarlyStopping {
 public:
  explicit EarlyStopping(EarlyStoppingConfig config) : config_(std::move(config)) {}

  struct Decision {
    bool improved = false;  // the epoch is the new best (keep its model)
    bool stop = false;      // patience ran out: stop after this epoch
  };
  // One evaluated epoch's value of the monitored metric.
  Decision Observe(int epoch, double value);

  int best_epoch() const { return state_.best_epoch; }  // 0 before any improvement
  std::optional<double> best_value() const { return state_.best; }
  const EarlyStoppingConfig& config() const { return config_; }

  // What a checkpoint keeps, so that a resumed job stops at the epoch the uninterrupted one
  // would have.
  struct State {
    std::optional<double> best;
    int best_epoch = 0;
    int waited = 0;  // evaluated epochs since the best
  };
  const State& state() const { return state_; }
  void Restore(const State& state) { state_ = state; }

 private:
  EarlyStoppingConfig config_;
  State state_;
};

// The line to log when early stopping (`config`, enabled) can never end a job of `epochs`
// epochs before its last, else "": its evaluated epochs (every `eval_every_epochs`-th and the
// last, as the training loop evaluates) are too few for a first one and `patience` more without
// improvement before the last ("early stopping cannot end this job early: 1 of its 3 epoch(s)
// is evaluated (eval_every_epochs 5), and patience 2 needs at least 4; the best epoch is still
// kept"). Pure.
std::string EarlyStoppingReachNote(const EarlyStoppingConfig& config, int epochs,
                                   int eval_every_epochs);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_EARLY_STOPPING_H_
