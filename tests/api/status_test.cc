// Tests for api/status.h: codes and messages survive every conversion both ways.
#include "api/status.h"

#include <gtest/gtest.h>

#include "api/failure_reason.h"
#include "google/rpc/status.pb.h"

namespace mpsd::api {
namespace {

TEST(StatusTest, OkIsOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_TRUE(FromExecutorStatus(ToExecutorStatus(absl::OkStatus())).ok());
  EXPECT_EQ(ToExecutorStatus(absl::OkStatus()).code(), 0);
}

TEST(StatusTest, GrpcKeepsCodeAndMessage) {
  const grpc::Status grpc = ToGrpcStatus(absl::NotFoundError("job 9 not found"));
  EXPECT_EQ(grpc.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(grpc.error_message(), "job 9 not found");
  const absl::Status back = FromGrpcStatus(grpc);
  EXPECT_EQ(back, absl::NotFoundError("job 9 not found"));
  // The details' google.rpc.Status says it too (grpc-go reads the text from there), cut short.
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(grpc.error_details()));
  EXPECT_EQ(details.message(), "job 9 not found");
  const grpc::Status long_message =
      ToGrpcStatus(absl::InvalidArgumentError(std::string(5000, 'x')));
  ASSERT_TRUE(details.ParseFromString(long_message.error_details()));
  EXPECT_EQ(details.message(), std::string(512, 'x') + "... (4488 more bytes)");
}

TEST(StatusTest, EveryCanonicalCodeRoundTrips) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), "m");
    EXPECT_EQ(static_cast<int>(ToGrpcStatus(status).error_code()), code);
    EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(status)), status);
    EXPECT_EQ(ToExecutorStatus(status).code(), code);
    EXPECT_EQ(FromExecutorStatus(ToExecutorStatus(status)), status);
  }
}

TEST(StatusTest, ExecutorStatusKeepsMessage) {
  const mpsd::v1::executor::Status proto =
      ToExecutorStatus(absl::DataLossError("train-images-idx3-ubyte: truncated"));
  EXPECT_EQ(proto.code(), static_cast<int>(absl::StatusCode::kDataLoss));
  EXPECT_EQ(proto.message(), "train-images-idx3-ubyte: truncated");
}

// The scheduler reads a job's reason from the status: one attached in the executor process must
// survive the trip over executor.proto (a DIVERGED job would otherwise read as INTERNAL).
TEST(StatusTest, ExecutorStatusCarriesAnAttachedFailureReason) {
  const absl::Status diverged =
      WithFailureReason(absl::AbortedError("loss nan at step 3"), mpsd::v1::Job::DIVERGED);
  const absl::Status back = FromExecutorStatus(ToExecutorStatus(diverged));
  EXPECT_EQ(back.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(back.message(), "loss nan at step 3");
  EXPECT_EQ(FailureReasonOf(back), mpsd::v1::Job::DIVERGED);
}

}  // namespace
}  // namespace mpsd::api
