// Why an error happened, as data: an mpsd.v1.executor.ErrorCause attached to an absl::Status as
// a payload (absl::Status::SetPayload), so that the code that branches on an error (the
// scheduler, the supervisor, the rank group, the trainer's field mapping) reads a typed cause and
// never a message's wording. The payload crosses executor.proto with the status (api/status.h).
//
// Thread-safety: pure functions. Errors: none; a payload that does not parse reads as no cause.
#ifndef MPSD_API_ERROR_CAUSE_H_
#define MPSD_API_ERROR_CAUSE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mpsd/v1/executor.pb.h"

namespace mpsd::api {

using ErrorCause = mpsd::v1::executor::ErrorCause;

// The payload's type URL; its value is the serialized ErrorCause.
inline constexpr absl::string_view kErrorCausePayloadUrl =
    "type.googleapis.com/mpsd.v1.executor.ErrorCause";

// `status` with `cause` attached (replacing any cause it had). An OK status stays OK, without a
// cause (abseil drops payloads of OK statuses).
absl::Status WithCause(absl::Status status, const ErrorCause& cause);
// The same, for a cause of `kind` alone.
absl::Status WithCause(absl::Status status, ErrorCause::Kind kind);
// INVALID_FIELD naming `field` (a dotted path of the job spec, e.g. "train_job.resume_from").
absl::Status WithInvalidField(absl::Status status, absl::string_view field);
// RANK_FAILED naming the peer `rank` (-1: unknown).
absl::Status WithRankFailed(absl::Status status, int rank);

// TRIAL_NOT_FUSABLE naming the offered trial `trial` (an index) and `reason`, the text after
// the trial's name ("trial 2" + reason is the message PlanFusion gives).
absl::Status WithTrialNotFusable(absl::Status status, int trial, absl::string_view reason);

// The cause attached to `status`, if any.
std::optional<ErrorCause> CauseOf(const absl::Status& status);
// Whether `status` carries a cause of `kind`.
bool HasCause(const absl::Status& status, ErrorCause::Kind kind);
// The field an INVALID_FIELD cause names; "" for any other status.
std::string InvalidFieldOf(const absl::Status& status);

}  // namespace mpsd::api

#endif  // MPSD_API_ERROR_CAUSE_H_
