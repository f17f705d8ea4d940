// Status conversion: absl, gRPC and executor.proto share the canonical codes.
#include "api/status.h"

#include <cstdint>
#include <string>

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
  return proto;
}

absl::Status FromExecutorStatus(const mpsd::v1::executor::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.code()), status.message());
}

}  // namespace mpsd::api
