// An epoch metric by name ("val_loss", "train_accuracy", "val_r2", "val_<user metric>"), read
// from an EpochMetrics event: the names TrainJob.early_stopping.monitor, checkpoint.keep_best and
// SweepSpec.scheduler.metric take. One reader for the trainer (early stopping, best epoch) and
// the daemon (a sweep's scheduler), so that both read the same value.
#ifndef MPSD_API_EPOCH_METRIC_H_
#define MPSD_API_EPOCH_METRIC_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::api {

// The value of the metric `name` in `epoch`, or nullopt when the epoch did not measure it (an
// evaluation eval_every_epochs skipped, a job without a validation split, a name the job does
// not report). A job with a metrics map (multilabel, regression, TrainJob.metrics) is read from
// the map alone; a classification job without one from the fixed fields (train_loss,
// train_accuracy, val_loss, val_accuracy when set, test_loss and test_accuracy when
// `evaluated`). Pure; thread-safe.
std::optional<double> EpochMetricValue(const std::string& name,
                                       const mpsd::v1::EpochMetrics& epoch);

// Which way the epoch metric `name` improves, by its name: true (larger is better) for names
// ending in _accuracy, _f1 or _r2; false for _loss, _mse or _mae; nullopt for any other name (a
// job's own metric, val_top2: only its author knows). The one rule behind the defaults of
// early_stopping.mode and sweep.scheduler.mode and mpsctl sweep's ranking. Pure; thread-safe.
std::optional<bool> HigherIsBetter(absl::string_view name);

// "" when the mode written for `name` ("min" or "max", `maximize`) agrees with HigherIsBetter
// (or the name has no direction), else why not, for the mode field's error: "max for val_loss,
// where lower is better: write min, or leave mode out for the default". A minimised accuracy
// or a maximised loss would keep the worst epoch as the best and stop a job that improves. Pure;
// thread-safe.
std::string ModeContradiction(absl::string_view name, bool maximize);

}  // namespace mpsd::api

#endif  // MPSD_API_EPOCH_METRIC_H_
