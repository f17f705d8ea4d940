// ErrorCause as a status payload (error_cause.h).
#include "api/error_cause.h"

#include <string>
#include <utility>

#include "absl/strings/cord.h"

namespace mpsd::api {

absl::Status WithCause(absl::Status status, const ErrorCause& cause) {
  status.SetPayload(kErrorCausePayloadUrl, absl::Cord(cause.SerializeAsString()));
  return status;
}

absl::Status WithCause(absl::Status status, ErrorCause::Kind kind) {
  ErrorCause cause;
  cause.set_kind(kind);
  return WithCause(std::move(status), cause);
}

absl::Status WithInvalidField(absl::Status status, absl::string_view field) {
  ErrorCause cause;
  cause.set_kind(ErrorCause::INVALID_FIELD);
  cause.set_field(std::string(field));
  return WithCause(std::move(status), cause);
}

absl::Status WithRankFailed(absl::Status status, int rank) {
  ErrorCause cause;
  cause.set_kind(ErrorCause::RANK_FAILED);
  cause.set_rank(rank);
  return WithCause(std::move(status), cause);
}

absl::Status WithTrialNotFusable(absl::Status status, int trial, absl::string_view reason) {
  ErrorCause cause;
  cause.set_kind(ErrorCause::TRIAL_NOT_FUSABLE);
  cause.set_trial(trial);
  cause.set_reason(std::string(reason));
  return WithCause(std::move(status), cause);
}

std::optional<ErrorCause> CauseOf(const absl::Status& status) {
  auto payload = status.GetPayload(kErrorCausePayloadUrl);  // absl::optional<absl::Cord>
  if (!payload.has_value()) return std::nullopt;
  ErrorCause cause;
  if (!cause.ParseFromString(std::string(*payload))) return std::nullopt;
  return cause;
}

bool HasCause(const absl::Status& status, ErrorCause::Kind kind) {
  std::optional<ErrorCause> cause = CauseOf(status);
  return cause.has_value() && cause->kind() == kind;
}

std::string InvalidFieldOf(const absl::Status& status) {
  std::optional<ErrorCause> cause = CauseOf(status);
  if (!cause.has_value() || cause->kind() != ErrorCause::INVALID_FIELD) return "";
  return cause->field();
}

}  // namespace mpsd::api
