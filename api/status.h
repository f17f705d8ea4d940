// The one place where absl::Status becomes grpc::Status and back, and where it crosses
// executor.proto (mpsd.v1.executor.Status). The codes are the same numbers in all three
// (absl/status/status.h: "the canonical error codes", grpc's StatusCode); messages pass
// unchanged. Over executor.proto the status's payloads cross too (api/error_cause.h,
// api/failure_reason.h), so a cause attached in mpsd-executor reaches the daemon as data; to
// gRPC clients (ToGrpcStatus) they do not.
#ifndef MPSD_API_STATUS_H_
#define MPSD_API_STATUS_H_

#include <grpcpp/support/status.h>

#include <optional>

#include "absl/status/status.h"
#include "google/rpc/error_details.pb.h"
#include "mpsd/v1/executor.pb.h"

namespace mpsd::api {

// The domain of the google.rpc.ErrorInfo in mpsd's errors.
inline constexpr char kErrorDomain[] = "mpsd";

// An RPC's answer: grpc::Status::OK for OK, else the same code and message (cut to 2 KiB, saying
// how much was cut, so that it fits a client's metadata limit), and in the binary details
// (grpc-status-details-bin) a google.rpc.Status (its code, and the message cut to 512 bytes:
// grpc-go takes an error's text from there when details are present) holding
// one google.rpc.ErrorInfo of
// domain "mpsd": reason the status's ErrorCause kind (api/error_cause.h) where it has one, else
// the code's name ("NOT_FOUND"); metadata "field" for INVALID_FIELD, "rank" for RANK_FAILED,
// "failure_reason" where a Job.FailureReason is attached (api/failure_reason.h). A client
// branches on that, never on the message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The ErrorInfo of domain "mpsd" in a failed call's details; nullopt for OK and for errors mpsd
// did not send (gRPC's own, e.g. a connection it could not make, or another server's).
std::optional<google::rpc::ErrorInfo> MpsdErrorInfo(const grpc::Status& status);

// An RPC's outcome as seen by its caller: the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// A result sent over executor.proto (Validate's answer, Run's last update), and back: code,
// message and every payload.
mpsd::v1::executor::Status ToExecutorStatus(const absl::Status& status);
absl::Status FromExecutorStatus(const mpsd::v1::executor::Status& status);

}  // namespace mpsd::api

#endif  // MPSD_API_STATUS_H_
