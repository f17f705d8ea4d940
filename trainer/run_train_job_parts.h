// The pieces of running a TrainJob (trainer/run_train_job.h) that a run of several fused trials
// (trainer/fused_train.h) shares, so that each trial's log lines, model.pt and summary are
// exactly an unfused job's. Internal to trainer/: includes torch. Not thread-safe with the job
// they serve (they call its sink); otherwise free functions without state.
#ifndef MPSD_TRAINER_RUN_TRAIN_JOB_PARTS_H_
#define MPSD_TRAINER_RUN_TRAIN_JOB_PARTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/datasets.h"
#include "trainer/models.h"
#include "trainer/schedule.h"
#include "trainer/torch_executor.h"
#include "trainer/train_job.h"

namespace mpsd::trainer {

// Logs `text` (trainer/log.h) and emits it as an INFO `log` event through `sink`.
void EmitLog(const EventSink& sink, std::string text);

// What RunTrainJob records once `job`'s data is loaded (in `load_seconds`): the example counts,
// the validation split, the load time, class names and counts, placement and skipped images in
// `summary`; the loader's notes and the "loaded <dataset>: ..." line (and on MPS, the fallback
// setting) as log events.
void RecordLoadedData(const TrainJobConfig& job, const DeviceDataset& data, double load_seconds,
                      const EventSink& sink, mpsd::v1::JobSummary& summary);

// The log line at a job's start: "training <model> (<parameters> parameters): <optimizer>,
// schedule ..., seed ...".
std::string DescribeTraining(const TrainJobConfig& job, const Schedule& schedule,
                             int64_t parameters);

// Writes `model` as <job.job_dir>/<file_name> (atomically) and returns the path: a zoo model as
// a LibTorch archive (torch::load into the same zoo model reads it) with the class names as
// "class_names", a TorchScript model as TorchScript. INTERNAL for a file-system failure.
absl::StatusOr<std::string> SaveModelFile(const TrainJobConfig& job, ClassifierImpl& model,
                                          const std::vector<std::string>& class_names,
                                          const std::string& file_name);

// The finished model as <job.job_dir>/model.pt and what travels with it (model.json, the state
// dict, the check: trainer/model_export.h), named in `summary`, with a log line through `sink`.
// A no-op without job.job_dir. Errors as SaveModelFile and WriteModelArtifacts.
absl::Status SaveFinishedModel(const TrainJobConfig& job, ClassifierImpl& model,
                               const DeviceDataset& data, const EventSink& sink,
                               mpsd::v1::JobSummary& summary);

// One evaluated epoch for TrainJob.early_stopping or checkpoint.keep_best (`stopping` built
// with their monitor): the monitored value (api/epoch_metric.h) observed; a new best recorded
// in `summary` (best_epoch, best_value) and, with `save_best` and a job_dir, `model` saved as
// best.pt and named there (best_model_path). When early stopping's patience runs out (and
// early_stopping is enabled: keep_best alone never stops) the returned decision's `stop` is
// true, summary's stop_reason "early_stopped" and `stop_note` the line to log after the
// epoch's event ("early stopping after epoch 4: val_loss did not improve by more than 0 for 3
// evaluated epoch(s); best epoch 1 (val_loss 0.31)"). An epoch that did not measure the
// monitor decides nothing. Errors: SaveModelFile's. Used by the unfused loop's hook and by
// each fused trial.
absl::StatusOr<EarlyStopping::Decision> ObserveBestEpoch(
    const TrainJobConfig& job, EarlyStopping& stopping, ClassifierImpl& model,
    const std::vector<std::string>& class_names, bool save_best,
    const mpsd::v1::EpochMetrics& epoch, mpsd::v1::JobSummary& summary, std::string& stop_note);

// The summary's stop_reason for a job that ended with `status`, unless one is set (early
// stopping sets its own): "epochs_completed", "diverged" or "cancelled"; none for other errors.
void SetStopReason(const absl::Status& status, mpsd::v1::JobSummary& summary);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_RUN_TRAIN_JOB_PARTS_H_
