// Tests for client/reconnect.h: the one retry policy of follow, download and upload.
#include "client/reconnect.h"

#include <gtest/gtest.h>

namespace mpsd::client {
namespace {

TEST(ReconnectPolicyTest, WaitsOneSecondMoreEachAttemptUpToFive) {
  EXPECT_EQ(ReconnectPolicy::Delay(0), absl::Seconds(1));
  EXPECT_EQ(ReconnectPolicy::Delay(1), absl::Seconds(2));
  EXPECT_EQ(ReconnectPolicy::Delay(3), absl::Seconds(4));
  EXPECT_EQ(ReconnectPolicy::Delay(4), absl::Seconds(5));
  EXPECT_EQ(ReconnectPolicy::Delay(40), absl::Seconds(5));
}

TEST(ReconnectPolicyTest, GivesUpOnlyAfterTheTimeoutWithoutProgress) {
  const absl::Time start = absl::FromUnixSeconds(1700000000);
  ReconnectPolicy policy(absl::Seconds(120), start);
  EXPECT_FALSE(policy.OutOfTime(start + absl::Seconds(120)));
  EXPECT_TRUE(policy.OutOfTime(start + absl::Seconds(121)));
  policy.Progressed(start + absl::Seconds(100));
  EXPECT_EQ(policy.last_progress(), start + absl::Seconds(100));
  EXPECT_FALSE(policy.OutOfTime(start + absl::Seconds(220)));
  EXPECT_TRUE(policy.OutOfTime(start + absl::Seconds(221)));
  const ReconnectPolicy never(absl::ZeroDuration(), start);
  EXPECT_FALSE(never.OutOfTime(start));
  EXPECT_TRUE(never.OutOfTime(start + absl::Milliseconds(1)));
}

TEST(ReconnectPolicyTest, RetriesABrokenConnectionNotAnAnswer) {
  EXPECT_TRUE(ReconnectPolicy::Broke(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone")));
  EXPECT_TRUE(ReconnectPolicy::Broke(grpc::Status(grpc::StatusCode::INTERNAL, "reset")));
  EXPECT_FALSE(ReconnectPolicy::Broke(grpc::Status::OK));
  EXPECT_FALSE(ReconnectPolicy::Broke(grpc::Status(grpc::StatusCode::NOT_FOUND, "no job")));
  EXPECT_FALSE(ReconnectPolicy::Broke(grpc::Status(grpc::StatusCode::DATA_LOSS, "chunk")));
  EXPECT_FALSE(ReconnectPolicy::Broke(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "")));
}

}  // namespace
}  // namespace mpsd::client
