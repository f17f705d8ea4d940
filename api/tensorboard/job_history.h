// One job's metrics as TensorBoard scalars and hyperparameters: the tags mpsd writes (listed in
// docs/metrics-export.md), the job's stored events folded into one value per step and epoch, and
// a whole job written as one event file. Used by `mpsctl export` (client/) and by the daemon's
// live writer (server/core/tensorboard_writer.h), so both write the same file.
#ifndef MPSD_API_TENSORBOARD_JOB_HISTORY_H_
#define MPSD_API_TENSORBOARD_JOB_HISTORY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "api/attempts.h"
#include "api/tensorboard/event_file.h"
#include "google/protobuf/struct.pb.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::tensorboard {

// Tags "train/<field>" of StepMetrics' measured values (loss, accuracy, learning_rate,
// samples_per_second, step_time_ms, allocated_bytes, batch_size; loss_scale and skipped (0/1)
// only with loss scaling).
std::vector<TaggedValue> StepScalars(const mpsd::v1::StepMetrics& step);
// Tags "epoch/<field>": epoch, train_loss, train_accuracy, learning_rate, epoch_time_s,
// samples_per_second; test_loss and test_accuracy only when evaluated; val_loss and
// val_accuracy only when set; and "epoch/<name>" for each other entry of its metrics map (a
// task's val_mse, the user's val_top2).
std::vector<TaggedValue> EpochScalars(const mpsd::v1::EpochMetrics& epoch);
// Tags "final/<field>" of the summary: train_loss, total_time_s, samples_per_second, and each of
// test_loss, test_accuracy, val_loss, val_accuracy, best_epoch, best_value when measured.
std::vector<TaggedValue> SummaryScalars(const mpsd::v1::JobSummary& summary);

// The job's hyperparameters for the HParams plugin: every set field of the spec's train_job or
// bench_job under its dotted path ("batch_size", "optimizer.learning_rate", "model.name"),
// numbers as numbers, bools as bools, enums and strings as strings, a repeated field as its
// values joined by ","; "labels.<key>" for each label; and, from the summary when it has them,
// the settings as resolved ("optimizer.name", "schedule.name", "precision", "device"). Pure.
std::map<std::string, google::protobuf::Value> HParamsOf(const mpsd::v1::SubmitJobRequest& spec,
                                                         const mpsd::v1::JobSummary* summary);

// The HParams plugin's session status for a job state: SUCCEEDED → success, FAILED,
// CANCELLED and INTERRUPTED → failure, else running.
hparams::Status SessionStatusOf(mpsd::v1::Job::State state);

// A job's folder (TensorBoard's run) under an export or tensorboard_dir: its name when it has
// one (a character other than [A-Za-z0-9._-] replaced by '_', so that a name never leaves the
// directory; "." and ".." become "_"), else its id; "<name>-<id>" when `with_id`.
std::string RunName(const mpsd::v1::Job& job, bool with_id);

inline double WallTimeOf(const mpsd::v1::JobEvent& event) {
  return static_cast<double>(event.time().seconds()) + event.time().nanos() * 1e-9;
}

// A job's stored events (in seq order), folded: one StepMetrics per step and one EpochMetrics
// per epoch, the latest attempt's by api/attempts.h's rule: when a step starts a new attempt (a
// resume from a checkpoint, a restart), the steps from it on and the epochs from its epoch on are
// dropped before it is kept, so that a value the later attempt never reached does not linger.
// Not thread-safe.
class JobHistory {
 public:
  struct Step {
    mpsd::v1::StepMetrics metrics;
    double wall_time = 0;
  };
  struct Epoch {
    mpsd::v1::EpochMetrics metrics;
    double wall_time = 0;
    // The newest step when the epoch ended: the epoch's point on TensorBoard's step axis, so
    // that every tag's steps grow together (W&B's TensorBoard sync needs that).
    int64_t step = 0;
  };

  // Returns true when the event started a new attempt (see above).
  bool Add(const mpsd::v1::JobEvent& event);

  const std::map<int64_t, Step>& steps() const { return steps_; }
  const std::map<int32_t, Epoch>& epochs() const { return epochs_; }
  const std::optional<mpsd::v1::JobSummary>& summary() const { return summary_; }
  // Of the first event; of the newest state change.
  double start_time() const { return start_time_; }
  double state_time() const { return state_time_; }
  mpsd::v1::Job::State state() const { return state_; }
  int64_t last_step() const { return steps_.empty() ? 0 : steps_.rbegin()->first; }

 private:
  api::AttemptMarks marks_;
  std::map<int64_t, Step> steps_;
  std::map<int32_t, Epoch> epochs_;
  std::optional<mpsd::v1::JobSummary> summary_;
  double start_time_ = 0;
  double state_time_ = 0;
  mpsd::v1::Job::State state_ = mpsd::v1::Job::STATE_UNSPECIFIED;
};

// Writes `history` into `writer`: the session start with `hparams`, every step's and epoch's
// scalars in step order, the summary's "final/" scalars, and a session end once the job reached
// a terminal state. Errors are the writer's.
absl::Status WriteHistory(const JobHistory& history,
                          const std::map<std::string, google::protobuf::Value>& hparams,
                          EventFileWriter* writer);

}  // namespace mpsd::tensorboard

#endif  // MPSD_API_TENSORBOARD_JOB_HISTORY_H_
