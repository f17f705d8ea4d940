// The one place where absl::Status becomes grpc::Status and back, and where it crosses
// executor.proto (mpsd.v1.executor.Status). The codes are the same numbers in all three
// (absl/status/status.h: "the canonical error codes", grpc's StatusCode); messages pass
// unchanged. Of the status payloads only the failure reason (api/failure_reason.h) crosses
// executor.proto (its Status.reason); none crosses gRPC.
#ifndef MPSD_API_STATUS_H_
#define MPSD_API_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "mpsd/v1/executor.pb.h"

namespace mpsd::api {

// An RPC's answer: grpc::Status::OK for OK, else the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// An RPC's outcome as seen by its caller: the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// A result sent over executor.proto (Validate's answer, Run's last update), and back.
mpsd::v1::executor::Status ToExecutorStatus(const absl::Status& status);
absl::Status FromExecutorStatus(const mpsd::v1::executor::Status& status);

}  // namespace mpsd::api

#endif  // MPSD_API_STATUS_H_
