// CancelWatchdog: acts on one running job's cancel flag. Once the flag is set it passes the
// cancel on (`ask`), and if the job has not ended `grace` later it has the job's process
// killed (`kill`). It sleeps on a condition the flag's callback and Stop() wake, never polling.
// The grace may be decided when the cancel comes (e.g. from the job's measured step time).
#ifndef MPSD_SERVER_CANCEL_WATCHDOG_H_
#define MPSD_SERVER_CANCEL_WATCHDOG_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/cancel_flag.h"

namespace mpsd::server {

// RAII: watches from construction until Stop() or destruction, on a thread of its own, which
// runs `ask` and `kill` (each at most once, `kill` only after `ask`). The owner calls Stop()
// when the job has ended. Borrows `cancelled`, which must outlive it. Thread-safe.
class CancelWatchdog {
 public:
  CancelWatchdog(const api::CancelFlag& cancelled, absl::Duration grace, std::function<void()> ask,
                 std::function<void()> kill);
  // As above, with the grace that `grace` returns when the cancel is seen (on the watchdog's
  // thread, before `ask`).
  CancelWatchdog(const api::CancelFlag& cancelled, std::function<absl::Duration()> grace,
                 std::function<void()> ask, std::function<void()> kill);
  // Stop().
  ~CancelWatchdog();
  CancelWatchdog(const CancelWatchdog&) = delete;
  CancelWatchdog& operator=(const CancelWatchdog&) = delete;

  // Ends the watch: waits for a running `ask` or `kill` to return and joins the thread.
  // Returns true if `kill` ran. Idempotent.
  bool Stop();

 private:
  void Watch();

  // Constant after construction.
  const std::function<absl::Duration()> grace_;
  const std::function<void()> ask_;
  const std::function<void()> kill_;

  absl::Mutex mu_;
  bool cancel_seen_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool killed_ ABSL_GUARDED_BY(mu_) = false;

  // Sets cancel_seen_ on the cancelling thread; declared after mu_, which it locks.
  api::CancelFlag::Callback on_cancel_;
  std::thread thread_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CANCEL_WATCHDOG_H_
