// Job.FailureReason as a status payload.
#include "api/failure_reason.h"

#include <string>

#include "absl/strings/cord.h"

namespace mpsd::api {
namespace {

using mpsd::v1::Job;

// What Executor::Run's error codes stand for when no reason is attached.
Job::FailureReason ReasonForCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return Job::FAILURE_REASON_UNSPECIFIED;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnimplemented:
      return Job::INVALID_SPEC;
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      return Job::DATASET_ERROR;
    case absl::StatusCode::kResourceExhausted:
      return Job::OUT_OF_MEMORY;
    default:
      return Job::INTERNAL;
  }
}

}  // namespace

absl::Status WithFailureReason(absl::Status status, Job::FailureReason reason) {
  status.SetPayload(kFailureReasonPayloadUrl, absl::Cord(Job::FailureReason_Name(reason)));
  return status;
}

Job::FailureReason FailureReasonOf(const absl::Status& status) {
  if (status.ok()) return Job::FAILURE_REASON_UNSPECIFIED;
  const auto payload = status.GetPayload(kFailureReasonPayloadUrl);
  Job::FailureReason reason = Job::FAILURE_REASON_UNSPECIFIED;
  if (payload.has_value() && Job::FailureReason_Parse(std::string(*payload), &reason) &&
      reason != Job::FAILURE_REASON_UNSPECIFIED) {
    return reason;
  }
  return ReasonForCode(status.code());
}

}  // namespace mpsd::api
