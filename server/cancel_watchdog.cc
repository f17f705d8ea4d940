// CancelWatchdog: a thread that sleeps until the cancel, then until the grace period ends.
#include "server/cancel_watchdog.h"

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
    : grace_(std::move(grace)),
      ask_(std::move(ask)),
      kill_(std::move(kill)),
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
  const absl::Time deadline = absl::Now() + grace_();
  mu_.Unlock();
  ask_();
  mu_.Lock();
  if (mu_.AwaitWithDeadline(absl::Condition(&stopping_), deadline)) {
    mu_.Unlock();
    return;
  }
  killed_ = true;
  mu_.Unlock();
  kill_();
}

}  // namespace mpsd::server
