// Job ids: the daemon names each job by the decimal form of its row in the job store ("1", "2",
// …). The one place that knows what a job id looks like, for the server (job store, scheduler),
// the trainer (TrainJob.resume_from) and the client (job files).
#ifndef MPSD_API_JOB_ID_H_
#define MPSD_API_JOB_ID_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace mpsd::api {

// True when `text` reads as a job id: one or more decimal digits ("12"). TrainJob.resume_from
// takes either: digits name a job (its newest checkpoint), anything else is a file path.
bool IsJobId(absl::string_view text);

// The row id that `id` names, when `id` is its canonical decimal form ("1", "17"); nullopt for
// anything else ("", "0", "01", "+1", "-1", "x", beyond int64), which names no job.
std::optional<int64_t> ParseJobId(absl::string_view id);

}  // namespace mpsd::api

#endif  // MPSD_API_JOB_ID_H_
