// Tests of server/access/log_limiter.h: a burst per window, the lines held back counted and
// reported by the next line written, a new window starting afresh.
#include "server/access/log_limiter.h"

#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

TEST(LogLimiterTest, ABurstPerWindowThenTheHeldBackCountComesWithTheNextLine) {
  LogLimiter limiter(3, absl::Seconds(60));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Allow(t0 + absl::Seconds(i)), 0) << i;
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Allow(t0 + absl::Seconds(10)).has_value());
  // The window ends 60 s after its first line: the next line says 5 were held back.
  EXPECT_FALSE(limiter.Allow(t0 + absl::Seconds(59)).has_value());
  EXPECT_EQ(limiter.Allow(t0 + absl::Seconds(60)), 6);
  EXPECT_EQ(limiter.Allow(t0 + absl::Seconds(61)), 0);
  EXPECT_EQ(limiter.Allow(t0 + absl::Seconds(62)), 0);
  EXPECT_FALSE(limiter.Allow(t0 + absl::Seconds(63)).has_value());
}

}  // namespace
}  // namespace mpsd::server
