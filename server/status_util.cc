#include "server/status_util.h"

#include <string>

namespace mpsd::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  // gRPC's clients report a connection they could not make as UNAVAILABLE too; the daemon's own
  // UNAVAILABLE always names mpsd first, so that a client can tell the two apart.
  if (status.code() == absl::StatusCode::kUnavailable && message.rfind("mpsd", 0) != 0) {
    message = "mpsd: " + message;
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::move(message));
}

}  // namespace mpsd::server
