// Tests for api/cancel_flag.h: the flag, and callbacks that run exactly once or never.
#include "api/cancel_flag.h"

#include <thread>

#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace mpsd::api {
namespace {

TEST(CancelFlagTest, SetByCancelClearedByReset) {
  CancelFlag flag;
  EXPECT_FALSE(flag.cancelled());
  EXPECT_FALSE(flag.flag().load());
  flag.Cancel();
  EXPECT_TRUE(flag.cancelled());
  EXPECT_TRUE(flag.flag().load());
  flag.Cancel();  // idempotent
  EXPECT_TRUE(flag.cancelled());
  flag.Reset();
  EXPECT_FALSE(flag.cancelled());
}

TEST(CancelFlagTest, CallbackRunsOnceOnCancel) {
  CancelFlag flag;
  int runs = 0;
  CancelFlag::Callback callback(flag, [&] { ++runs; });
  EXPECT_EQ(runs, 0);
  flag.Cancel();
  EXPECT_EQ(runs, 1);
  flag.Cancel();
  EXPECT_EQ(runs, 1);
}

TEST(CancelFlagTest, CallbackOnACancelledFlagRunsAtOnce) {
  CancelFlag flag;
  flag.Cancel();
  int runs = 0;
  CancelFlag::Callback callback(flag, [&] { ++runs; });
  EXPECT_EQ(runs, 1);
}

TEST(CancelFlagTest, DestroyedCallbackNeverRuns) {
  CancelFlag flag;
  int runs = 0;
  {
    CancelFlag::Callback callback(flag, [&] { ++runs; });
  }
  CancelFlag::Callback other(flag, [&] { runs += 10; });
  flag.Cancel();
  EXPECT_EQ(runs, 10);
}

TEST(CancelFlagTest, WakesAWaiterOnAnotherThread) {
  CancelFlag flag;
  absl::Mutex mu;
  bool seen = false;
  CancelFlag::Callback callback(flag, [&] {
    absl::MutexLock lock(&mu);
    seen = true;
  });
  absl::Notification waiting;
  bool woke = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    waiting.Notify();
    mu.Await(absl::Condition(&seen));  // no timeout: only the callback can end this wait
    woke = true;
  });
  waiting.WaitForNotification();
  flag.Cancel();
  waiter.join();
  EXPECT_TRUE(woke);
}

}  // namespace
}  // namespace mpsd::api
