// LogLimiter: how many warnings of one kind a daemon writes while someone repeats the same bad
// request (a wrong token sent in a loop must not fill the disk or bury other lines). At most
// `burst` lines per `window`; the lines held back are counted, and the first line let through
// after them says how many there were.
#ifndef MPSD_SERVER_ACCESS_LOG_LIMITER_H_
#define MPSD_SERVER_ACCESS_LOG_LIMITER_H_

#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mpsd::server {

// Thread-safe. A plain value besides its lock; owns nothing.
class LogLimiter {
 public:
  LogLimiter(int burst, absl::Duration window) : burst_(burst), window_(window) {}

  // Whether a line may be written at `now`: nullopt when it is held back; else the number of
  // lines held back since the last one written (0 when none), which that line should mention.
  std::optional<int64_t> Allow(absl::Time now) {
    absl::MutexLock lock(&mu_);
    if (now - window_start_ >= window_) {
      window_start_ = now;
      written_ = 0;
    }
    if (written_ >= burst_) {
      ++suppressed_;
      return std::nullopt;
    }
    ++written_;
    const int64_t held_back = suppressed_;
    suppressed_ = 0;
    return held_back;
  }

 private:
  const int burst_;
  const absl::Duration window_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_ACCESS_LOG_LIMITER_H_
