// When mpsctl resumes a call that broke (a followed event stream, a download, an upload): which
// failures are worth another attempt, how long to wait before it, and when to give up.
#ifndef MPSD_CLIENT_RECONNECT_H_
#define MPSD_CLIENT_RECONNECT_H_

#include <algorithm>

#include <grpcpp/support/status.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mpsd::client {

// One resumable call's retries. The caller counts its attempts (0 for the first) and reports
// progress; the policy gives up once no progress was made for `timeout`
// (CommandOptions.reconnect_timeout). Not thread-safe; a plain value.
class ReconnectPolicy {
 public:
  explicit ReconnectPolicy(absl::Duration timeout, absl::Time start = absl::Now())
      : timeout_(timeout), last_progress_(start) {}

  // Whether a call that ended with `status` broke on the way (UNAVAILABLE: the connection or
  // the daemon went away; INTERNAL: a stream reset by the peer) rather than being answered.
  static bool Broke(const grpc::Status& status) {
    return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
           status.error_code() == grpc::StatusCode::INTERNAL;
  }

  // The wait before the attempt after `attempt`: 1 s after the first, one more second after each
  // later one, at most 5 s.
  static absl::Duration Delay(int attempt) {
    return std::min(absl::Seconds(1) * (attempt + 1), absl::Seconds(5));
  }

  // Sleeps Delay(attempt).
  static void Wait(int attempt) { absl::SleepFor(Delay(attempt)); }

  // An attempt got something (an event, bytes): the timeout counts again from `now`.
  void Progressed(absl::Time now = absl::Now()) { last_progress_ = now; }

  // Whether the last progress is more than the timeout ago.
  bool OutOfTime(absl::Time now = absl::Now()) const { return now - last_progress_ > timeout_; }

  absl::Time last_progress() const { return last_progress_; }
  absl::Duration timeout() const { return timeout_; }

 private:
  absl::Duration timeout_;
  absl::Time last_progress_;
};

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_RECONNECT_H_
