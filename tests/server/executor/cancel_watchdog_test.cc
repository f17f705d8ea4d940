// Tests of server/executor/cancel_watchdog.cc: nothing happens without a cancel, a cancel is passed
// on once, and only a job that outlives the grace period after it is killed.
#include "server/executor/cancel_watchdog.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

TEST(CancelWatchdogTest, WithoutACancelNothingHappens) {
  api::CancelFlag cancelled;
  std::atomic<int> asked{0}, killed{0};
  CancelWatchdog watchdog(
      cancelled, absl::ZeroDuration(), [&] { ++asked; }, [&] { ++killed; });
  EXPECT_FALSE(watchdog.Stop());
  EXPECT_FALSE(watchdog.Stop());  // idempotent
  cancelled.Cancel();             // after Stop: nobody listens
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(killed, 0);
}

TEST(CancelWatchdogTest, CancelIsPassedOnOnceAndAJobThatEndsIsNotKilled) {
  api::CancelFlag cancelled;
  absl::Notification asked;
  std::atomic<int> asks{0}, killed{0};
  CancelWatchdog watchdog(
      cancelled, absl::Hours(1),
      [&] {
        ++asks;
        asked.Notify();
      },
      [&] { ++killed; });
  cancelled.Cancel();
  cancelled.Cancel();
  ASSERT_TRUE(asked.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_FALSE(watchdog.Stop());  // the job ended within the grace period
  EXPECT_EQ(asks, 1);
  EXPECT_EQ(killed, 0);
}

TEST(CancelWatchdogTest, AJobThatOutlivesTheGracePeriodIsKilled) {
  api::CancelFlag cancelled;
  absl::Time asked_at, killed_at;
  absl::Notification killed;
  const absl::Duration grace = absl::Milliseconds(100);
  CancelWatchdog watchdog(
      cancelled, grace, [&] { asked_at = absl::Now(); },
      [&] {
        killed_at = absl::Now();
        killed.Notify();
      });
  const absl::Time cancelled_at = absl::Now();
  cancelled.Cancel();
  ASSERT_TRUE(killed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(watchdog.Stop());
  EXPECT_GE(asked_at, cancelled_at);
  EXPECT_GE(killed_at - cancelled_at, grace);  // never before the grace period is over
}

TEST(CancelWatchdogTest, AFlagCancelledBeforehandIsPassedOnAtOnce) {
  api::CancelFlag cancelled;
  cancelled.Cancel();
  absl::Notification asked;
  CancelWatchdog watchdog(
      cancelled, absl::Hours(1), [&] { asked.Notify(); }, [] {});
  EXPECT_TRUE(asked.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_FALSE(watchdog.Stop());
}

}  // namespace
}  // namespace mpsd::server
