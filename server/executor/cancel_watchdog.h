// CancelWatchdog: acts on one running job's cancel flag. Once the flag is set it passes the
// cancel on (`ask`), again every `retry` until the job's process acknowledges it, and if the
// job has not ended `grace` later it has the job's process killed (`kill`). It sleeps on a
// condition the flag's callback and Stop() wake; it polls only while a cancel is not yet
// acknowledged. The grace may be decided when the cancel comes (e.g. from the job's measured
// step time).
#ifndef MPSD_SERVER_EXECUTOR_CANCEL_WATCHDOG_H_
#define MPSD_SERVER_EXECUTOR_CANCEL_WATCHDOG_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/cancel_flag.h"

namespace mpsd::server {

// RAII: watches from construction until Stop() or destruction, on a thread of its own, which
// runs `ask` and `kill` (`kill` at most once, only after `ask`). The owner calls Stop() when the
// job has ended. Borrows `cancelled`, which must outlive it. Thread-safe.
class CancelWatchdog {
 public:
  struct Options {
    // The grace, decided when the cancel is seen (on the watchdog's thread, before `ask`).
    std::function<absl::Duration()> grace;
    // Passes the cancel on; true when the job's process has it (it knows the job). A cancel that
    // reaches a process still starting the job would be lost: `ask` returns false then, and is
    // called again `retry` later, until it returns true, Stop(), or the grace ends.
    std::function<bool()> ask;
    std::function<void()> kill;
    absl::Duration retry = absl::Milliseconds(20);
  };
  CancelWatchdog(const api::CancelFlag& cancelled, Options options);
  // `ask` runs once: a cancel it passes on is taken as acknowledged.
  CancelWatchdog(const api::CancelFlag& cancelled, absl::Duration grace, std::function<void()> ask,
                 std::function<void()> kill);
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

  // Asks until acknowledged; false when Stop() or `deadline` came first.
  bool AskUntilAcknowledged(absl::Time deadline);

  // Constant after construction.
  const Options options_;

  absl::Mutex mu_;
  bool cancel_seen_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool killed_ ABSL_GUARDED_BY(mu_) = false;

  // Sets cancel_seen_ on the cancelling thread; declared after mu_, which it locks.
  api::CancelFlag::Callback on_cancel_;
  std::thread thread_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_EXECUTOR_CANCEL_WATCHDOG_H_
