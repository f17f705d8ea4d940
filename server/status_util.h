// The one place where absl::Status becomes grpc::Status (the codes are the same numbers).
#ifndef MPSD_SERVER_STATUS_UTIL_H_
#define MPSD_SERVER_STATUS_UTIL_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace mpsd::server {

// An UNAVAILABLE message that does not start with "mpsd" gets "mpsd: " in front (see the proto's
// service comment: how clients tell the daemon's UNAVAILABLE from no connection).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace mpsd::server

#endif  // MPSD_SERVER_STATUS_UTIL_H_
