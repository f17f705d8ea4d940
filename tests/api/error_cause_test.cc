// Tests for api/error_cause.h and the payloads' way across executor.proto and to clients
// (api/status.h): a cause attached in one process is read, as data, in the other.
#include "api/error_cause.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "api/failure_reason.h"
#include "api/status.h"

namespace mpsd::api {
namespace {

// What the daemon reads after mpsd-executor sent `status` over executor.proto: through the
// message's bytes, as the socket carries them.
absl::Status ThroughExecutorProto(const absl::Status& status) {
  const std::string bytes = ToExecutorStatus(status).SerializeAsString();
  mpsd::v1::executor::Status received;
  EXPECT_TRUE(received.ParseFromString(bytes));
  return FromExecutorStatus(received);
}

TEST(ErrorCauseTest, NoCauseUnlessAttached) {
  EXPECT_FALSE(CauseOf(absl::InternalError("x")).has_value());
  EXPECT_FALSE(HasCause(absl::InternalError("x"), ErrorCause::EXECUTOR_STOPPING));
  EXPECT_EQ(InvalidFieldOf(absl::InvalidArgumentError("train_job.epochs: must be > 0")), "");
}

TEST(ErrorCauseTest, AnOkStatusCarriesNone) {
  EXPECT_FALSE(CauseOf(WithCause(absl::OkStatus(), ErrorCause::EXECUTOR_STOPPING)).has_value());
}

TEST(ErrorCauseTest, KindFieldAndRankAreRead) {
  const absl::Status stopping =
      WithCause(absl::UnavailableError("any words"), ErrorCause::EXECUTOR_STOPPING);
  EXPECT_TRUE(HasCause(stopping, ErrorCause::EXECUTOR_STOPPING));
  EXPECT_FALSE(HasCause(stopping, ErrorCause::CANCEL_NOT_HONOURED));
  EXPECT_EQ(stopping.message(), "any words");

  const absl::Status field =
      WithInvalidField(absl::InvalidArgumentError("whatever"), "train_job.resume_from");
  EXPECT_EQ(InvalidFieldOf(field), "train_job.resume_from");

  const absl::Status rank = WithRankFailed(absl::InternalError("all_reduce broke"), 3);
  ASSERT_TRUE(CauseOf(rank).has_value());
  EXPECT_EQ(CauseOf(rank)->kind(), ErrorCause::RANK_FAILED);
  EXPECT_EQ(CauseOf(rank)->rank(), 3);
}

TEST(ErrorCauseTest, ALaterCauseReplacesTheEarlier) {
  const absl::Status status = WithInvalidField(
      WithCause(absl::InvalidArgumentError("x"), ErrorCause::EXECUTOR_STOPPING), "a.b");
  EXPECT_EQ(CauseOf(status)->kind(), ErrorCause::INVALID_FIELD);
}

TEST(ErrorCauseTest, CausesAndFailureReasonsCrossExecutorProto) {
  absl::Status sent = WithRankFailed(absl::InternalError("all_reduce failed on rank 1 of 2"), 1);
  sent = WithFailureReason(sent, mpsd::v1::Job::EXECUTOR_CRASHED);
  const absl::Status received = ThroughExecutorProto(sent);
  EXPECT_EQ(received.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(received.message(), sent.message());
  ASSERT_TRUE(CauseOf(received).has_value());
  EXPECT_EQ(CauseOf(received)->kind(), ErrorCause::RANK_FAILED);
  EXPECT_EQ(CauseOf(received)->rank(), 1);
  EXPECT_EQ(FailureReasonOf(received), mpsd::v1::Job::EXECUTOR_CRASHED);
  EXPECT_EQ(received, sent);  // abseil compares payloads too
}

TEST(ErrorCauseTest, ClientsGetAnErrorInfoWithTheCause) {
  const grpc::Status field = ToGrpcStatus(
      WithInvalidField(absl::InvalidArgumentError("after_seq: must be >= 0"), "after_seq"));
  std::optional<google::rpc::ErrorInfo> info = MpsdErrorInfo(field);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->domain(), "mpsd");
  EXPECT_EQ(info->reason(), "INVALID_FIELD");
  EXPECT_EQ(info->metadata().at("field"), "after_seq");

  info = MpsdErrorInfo(ToGrpcStatus(absl::NotFoundError("job 9 not found")));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->reason(), "NOT_FOUND");

  info = MpsdErrorInfo(ToGrpcStatus(WithFailureReason(absl::UnavailableError("executor crashed"),
                                                      mpsd::v1::Job::EXECUTOR_CRASHED)));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->metadata().at("failure_reason"), "EXECUTOR_CRASHED");
}

// An error that quotes a long input must still fit the client's metadata limit (8 KiB for all
// trailers by default): the message is cut, says so, and is not sent a second time.
TEST(ErrorCauseTest, ALongMessageIsCutAndSentOnce) {
  const std::string root(20000, 'x');
  const grpc::Status sent = ToGrpcStatus(WithInvalidField(
      absl::InvalidArgumentError("train_job.dataset.root: " + root + " does not exist"),
      "train_job.dataset.root"));
  EXPECT_LE(sent.error_message().size(), 2100u);
  EXPECT_THAT(sent.error_message(), ::testing::StartsWith("train_job.dataset.root: xxx"));
  EXPECT_THAT(sent.error_message(), ::testing::HasSubstr("more bytes)"));
  // The details repeat at most the message's first 512 bytes (for grpc-go, which reads them).
  EXPECT_LT(sent.error_details().size(), 700u);
  ASSERT_TRUE(MpsdErrorInfo(sent).has_value());
  EXPECT_EQ(MpsdErrorInfo(sent)->metadata().at("field"), "train_job.dataset.root");
  // A short one passes unchanged.
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("job 9 not found")).error_message(),
            "job 9 not found");
}

TEST(ErrorCauseTest, GrpcsOwnErrorsCarryNoMpsdErrorInfo) {
  // What a client sees when no connection could be made: gRPC's status, no details.
  EXPECT_FALSE(MpsdErrorInfo(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                          "failed to connect to all addresses"))
                   .has_value());
  EXPECT_FALSE(MpsdErrorInfo(grpc::Status::OK).has_value());
  // Details that are not a google.rpc.Status (another server's bytes).
  EXPECT_FALSE(MpsdErrorInfo(grpc::Status(grpc::StatusCode::INTERNAL, "x", "\xff\xff not a proto"))
                   .has_value());
}

}  // namespace
}  // namespace mpsd::api
