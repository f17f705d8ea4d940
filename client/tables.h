// Tables of jobs side by side: `mpsctl sweep` (a sweep's trials ranked by a metric) and
// `mpsctl compare` (the spec keys that differ and the final metrics), each rendered as an
// aligned text table, GitHub markdown, CSV or JSON by client/text_table.h.
#ifndef MPSD_CLIENT_TABLES_H_
#define MPSD_CLIENT_TABLES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/text_table.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::client {

// The metrics `mpsctl sweep --metric` ranks by, each with its direction (accuracy and
// samples/s: highest first; losses and times: lowest first).
std::vector<std::string> SweepMetrics();

// One row per trial, best `metric` first (trials without a value for it last, in trial
// order): TRIAL, JOB, one column per swept path, STATE, VAL_ACC, VAL_LOSS, TEST_ACC,
// TEST_LOSS, TRAIN_LOSS, SAMPLES/S, S/EPOCH, PEAK_MEM (bytes allocated at the peak), TIME_S;
// where a trial kept a best epoch (early_stopping, checkpoint.keep_best) also BEST_EPOCH and
// its monitored value, headed BEST_<MONITOR> (BEST_VAL_LOSS) where every such trial monitored
// the same metric, else BEST_VALUE (the VAL_ and TEST_ columns are the final epoch's).
// STATE is format.h's StateCell (EARLY_STOPPED for a trial the sweep's scheduler stopped).
// Metrics come from the trial's summary once it finished, else from its newest epoch; one
// never measured is "-". `metric` "auto" (or empty): val_accuracy when a trial has a
// validation split, else test_accuracy (regression: val_r2 / test_r2; multilabel: val_macro_f1 /
// test_macro_f1). `mode` "max" ranks highest first, "min" lowest first; "auto" (or empty): the
// metric's known direction (accuracies, F1, R² and samples/s up; losses, MSE, MAE and times
// down). `metric` may also be a column's header, in any case (VAL_ACC, val_acc, samples/s).
// `metric` best_value (or BEST_VALUE, BEST_<MONITOR>) ranks by each trial's best epoch's value,
// in the monitored metric's direction; INVALID_ARGUMENT when no trial kept a best epoch or the
// trials monitored different metrics.
// Equal accuracies are ordered by the same split's loss, lowest first (val_accuracy by
// val_loss, test_accuracy by test_loss); other ties keep trial order. INVALID_ARGUMENT naming
// --metric for a metric neither in SweepMetrics() nor measured by a trial, or a job's own
// metric (val_<name>) with mode auto; naming --mode for another mode.
// JSON keys: rank, trial, job_id (text), each swept path as it is, state, val_accuracy,
// val_loss, best_epoch, best_value, test_accuracy, test_loss, train_loss, samples_per_second,
// epoch_time_s, peak_allocated_bytes, time_s. `exact`: numbers in the shortest form that reads back
// the same double (for csv and json) instead of 4 significant digits. `ranked_by`, when given, is
// set to what the rows are ordered by ("val_accuracy, highest first (each trial's final value)",
// and "; ties by val_loss, lowest first" where that decided an order, and how many trials had
// no value of it: those come last with rank "-"), for a line beside the table.
absl::StatusOr<TextTable> SweepTable(const std::vector<mpsd::v1::Job>& trials, std::string metric,
                                     bool exact = false, const std::string& mode = "auto",
                                     std::string* ranked_by = nullptr);

// Every set field of the request as "path" -> value text: request-level fields by name
// ("priority", "labels.project", "after"), spec fields without the spec's own name
// ("optimizer.learning_rate", "batch_size"); lists joined with ",". Sweep specs are left out.
std::map<std::string, std::string> FlattenSpec(const mpsd::v1::SubmitJobRequest& request);

// KEY, then one column per job ("job 12"): first `kind` and each spec key whose effective value
// differs between the jobs (defaults applied: api/effective_spec.h, so an unset learning_rate
// equals an explicit 0.001 for adam; "-" where a job has no value; request_id, unique per job,
// left out), then the final metrics (state,
// test_accuracy, test_loss, final_train_loss, samples_per_second, total_time_s).
TextTable CompareTable(const std::vector<mpsd::v1::Job>& jobs);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_TABLES_H_
