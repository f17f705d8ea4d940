// CancelWatchdog: a thread that sleeps until the cancel, then until the grace period ends.
#include "server/executor/cancel_watchdog.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace mpsd::server {

CancelWatchdog::CancelWatchdog(const api::CancelFlag& cancelled, absl::Duration grace,
                               std::function<void()> ask, std::function<void()> kill)
    : CancelWatchdog(
          cancelled, [grace] { return grace; }, std::move(ask), std::move(kill)) {}

CancelWatchdog::CancelWatchdog(const api::CancelFlag& cancelled,
                               std::function<absl::Duration()> grace, std::function<void()> ask,
                               std::function<void()> kill)
    : CancelWatchdog(cancelled, Options{std::move(grace),
                                        [ask = std::move(ask)] {
                                          ask();
                                          return true;
                                        },
                                        std::move(kill)}) {}

CancelWatchdog::CancelWatchdog(const api::CancelFlag& cancelled, Options options)
    : options_(std::move(options)),
      on_cancel_(cancelled,
                 [this] {
                   absl::MutexLock lock(&mu_);
                   cancel_seen_ = true;
                 }),
      thread_([this] { Watch(); }) {}

CancelWatchdog::~CancelWatchdog() { Stop(); }

bool CancelWatchdog::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  return killed_;
}

void CancelWatchdog::Watch() {
  mu_.Lock();
  auto cancel_or_stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancel_seen_ || stopping_;
  };
  mu_.Await(absl::Condition(&cancel_or_stop));
  if (stopping_) {
    mu_.Unlock();
    return;
  }
  // The grace period starts with the request, however long passing it on takes.
  const absl::Time deadline = absl::Now() + options_.grace();
  mu_.Unlock();
  const bool acknowledged = AskUntilAcknowledged(deadline);
  mu_.Lock();
  if (stopping_ || (acknowledged && mu_.AwaitWithDeadline(absl::Condition(&stopping_), deadline))) {
    mu_.Unlock();
    return;
  }
  killed_ = true;
  mu_.Unlock();
  options_.kill();
}

bool CancelWatchdog::AskUntilAcknowledged(absl::Time deadline) {
  for (;;) {
    if (options_.ask()) return true;
    absl::MutexLock lock(&mu_);
    const absl::Time next = std::min(absl::Now() + options_.retry, deadline);
    if (mu_.AwaitWithDeadline(absl::Condition(&stopping_), next)) return false;
    if (absl::Now() >= deadline) return false;
  }
}

}  // namespace mpsd::server
