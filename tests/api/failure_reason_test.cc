// Tests for api/failure_reason.h: the reason attached to an error wins over the code's.
#include "api/failure_reason.h"

#include <gtest/gtest.h>

namespace mpsd::api {
namespace {

using mpsd::v1::Job;

TEST(FailureReasonTest, CodesStandForTheExecutorsErrors) {
  EXPECT_EQ(FailureReasonOf(absl::OkStatus()), Job::FAILURE_REASON_UNSPECIFIED);
  EXPECT_EQ(FailureReasonOf(absl::InvalidArgumentError("x")), Job::INVALID_SPEC);
  EXPECT_EQ(FailureReasonOf(absl::UnimplementedError("x")), Job::INVALID_SPEC);
  EXPECT_EQ(FailureReasonOf(absl::DataLossError("x")), Job::DATASET_ERROR);
  EXPECT_EQ(FailureReasonOf(absl::NotFoundError("x")), Job::DATASET_ERROR);
  EXPECT_EQ(FailureReasonOf(absl::FailedPreconditionError("x")), Job::DATASET_ERROR);
  EXPECT_EQ(FailureReasonOf(absl::ResourceExhaustedError("x")), Job::OUT_OF_MEMORY);
  EXPECT_EQ(FailureReasonOf(absl::InternalError("x")), Job::INTERNAL);
}

TEST(FailureReasonTest, UnavailableAloneIsNoCrash) {
  // A crash is told, not guessed from the code.
  EXPECT_EQ(FailureReasonOf(absl::UnavailableError("x")), Job::INTERNAL);
}

TEST(FailureReasonTest, AttachedReasonWins) {
  const absl::Status crashed =
      WithFailureReason(absl::UnavailableError("executor crashed"), Job::EXECUTOR_CRASHED);
  EXPECT_EQ(FailureReasonOf(crashed), Job::EXECUTOR_CRASHED);
  EXPECT_EQ(crashed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(crashed.message(), "executor crashed");
  EXPECT_EQ(FailureReasonOf(WithFailureReason(absl::InvalidArgumentError("x"), Job::INTERNAL)),
            Job::INTERNAL);
}

TEST(FailureReasonTest, LastAttachedReasonWins) {
  absl::Status status = WithFailureReason(absl::InternalError("x"), Job::OUT_OF_MEMORY);
  status = WithFailureReason(status, Job::EXECUTOR_CRASHED);
  EXPECT_EQ(FailureReasonOf(status), Job::EXECUTOR_CRASHED);
}

TEST(FailureReasonTest, OkStaysOkWithoutReason) {
  const absl::Status ok = WithFailureReason(absl::OkStatus(), Job::EXECUTOR_CRASHED);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(FailureReasonOf(ok), Job::FAILURE_REASON_UNSPECIFIED);
}

TEST(FailureReasonTest, UnreadablePayloadFallsBackToTheCode) {
  absl::Status status = absl::ResourceExhaustedError("x");
  status.SetPayload(kFailureReasonPayloadUrl, absl::Cord("NOT_A_REASON"));
  EXPECT_EQ(FailureReasonOf(status), Job::OUT_OF_MEMORY);
}

}  // namespace
}  // namespace mpsd::api
