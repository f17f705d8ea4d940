// Why a job failed, carried with the error as data: Executor::Run's status may carry a
// Job.FailureReason as a status payload (abseil's absl::Status::SetPayload), so that the
// scheduler need not guess it from a status code.
#ifndef MPSD_API_FAILURE_REASON_H_
#define MPSD_API_FAILURE_REASON_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::api {

// The payload's type URL; its value is the reason's enum name ("EXECUTOR_CRASHED").
inline constexpr absl::string_view kFailureReasonPayloadUrl =
    "type.googleapis.com/mpsd.v1.Job.FailureReason";

// `status` with `reason` attached (replacing any reason it had). An OK status stays OK, without
// a reason (abseil drops payloads of OK statuses).
absl::Status WithFailureReason(absl::Status status, mpsd::v1::Job::FailureReason reason);

// The reason a job that ended with `status` failed: the one attached by WithFailureReason, else
// the one Executor::Run's error codes stand for (api/executor.h): INVALID_ARGUMENT and
// UNIMPLEMENTED → INVALID_SPEC; DATA_LOSS, NOT_FOUND and FAILED_PRECONDITION → DATASET_ERROR;
// RESOURCE_EXHAUSTED → OUT_OF_MEMORY; any other error → INTERNAL. FAILURE_REASON_UNSPECIFIED for
// OK.
mpsd::v1::Job::FailureReason FailureReasonOf(const absl::Status& status);

}  // namespace mpsd::api

#endif  // MPSD_API_FAILURE_REASON_H_
