// Status conversion: absl, gRPC and executor.proto share the canonical codes.
#include "api/status.h"

#include <cstdint>
#include <string>
#include <utility>

#include "api/failure_reason.h"

namespace mpsd::api {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

mpsd::v1::executor::Status ToExecutorStatus(const absl::Status& status) {
  mpsd::v1::executor::Status proto;
  proto.set_code(static_cast<int32_t>(status.code()));
  proto.set_message(std::string(status.message()));
  // Only an attached reason travels: the receiver derives the others from the code again.
  if (status.GetPayload(kFailureReasonPayloadUrl).has_value()) {
    proto.set_reason(FailureReasonOf(status));
  }
  return proto;
}

absl::Status FromExecutorStatus(const mpsd::v1::executor::Status& status) {
  absl::Status result(static_cast<absl::StatusCode>(status.code()), status.message());
  if (status.reason() != mpsd::v1::Job::FAILURE_REASON_UNSPECIFIED) {
    return WithFailureReason(std::move(result), status.reason());
  }
  return result;
}

}  // namespace mpsd::api
