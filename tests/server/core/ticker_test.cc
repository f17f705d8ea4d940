// Tests server/core/ticker.cc: callbacks at the times they ask for, and Remove's guarantee.
#include "server/core/ticker.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

TEST(TickerTest, CallsAtTheRequestedTimes) {
  Ticker ticker;
  std::atomic<int> calls{0};
  absl::Notification third;
  const absl::Time start = absl::Now();
  const uint64_t id = ticker.Add(start + absl::Milliseconds(50), [&](absl::Time now) {
    if (++calls == 3) third.Notify();
    return now + absl::Milliseconds(50);
  });
  EXPECT_NE(id, 0u);
  ASSERT_TRUE(third.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));  // never early
  ticker.Remove(id);
  EXPECT_EQ(ticker.size(), 0);
}

TEST(TickerTest, ALaterAddDoesNotDelayAnEarlierOne) {
  Ticker ticker;
  absl::Notification late_added, early_called;
  const uint64_t late =
      ticker.Add(absl::Now() + absl::Hours(1), [](absl::Time) { return absl::InfiniteFuture(); });
  const uint64_t early = ticker.Add(absl::Now() + absl::Milliseconds(20), [&](absl::Time) {
    early_called.Notify();
    return absl::InfiniteFuture();
  });
  EXPECT_TRUE(early_called.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ticker.Remove(late);
  ticker.Remove(early);
}

TEST(TickerTest, RemoveWaitsForARunningCallbackAndNothingRunsAfterIt) {
  Ticker ticker;
  absl::Notification entered, release;
  std::atomic<bool> removed{false};
  std::atomic<bool> ran_after_remove{false};
  const uint64_t id = ticker.Add(absl::Now(), [&](absl::Time now) {
    if (removed) ran_after_remove = true;
    if (!entered.HasBeenNotified()) entered.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(30));
    return now;  // again at once, were it not removed
  });
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  std::atomic<bool> remove_returned{false};
  std::thread remover([&] {
    ticker.Remove(id);
    removed = true;
    remove_returned = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(remove_returned);  // the callback still runs
  release.Notify();
  remover.join();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(ran_after_remove);
  ticker.Remove(0);  // ignored
}

}  // namespace
}  // namespace mpsd::server
