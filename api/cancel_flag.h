// CancelFlag: one job's request to stop. Set by whoever stops the job (the scheduler on CancelJob
// or shutdown; the executor process when its daemon gives up on the job), polled by the training
// loop at step boundaries, and waited for, without polling, by whoever must act on it at once
// (the supervisor's cancel watchdog). Modelled on C++20's std::stop_source / std::stop_callback.
#ifndef MPSD_API_CANCEL_FLAG_H_
#define MPSD_API_CANCEL_FLAG_H_

#include <atomic>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace mpsd::api {

// Thread-safe, except Reset(). Not copyable: the executor borrows it for the length of one job.
class CancelFlag {
 public:
  class Callback;

  CancelFlag() = default;
  CancelFlag(const CancelFlag&) = delete;
  CancelFlag& operator=(const CancelFlag&) = delete;

  // Sets the flag and runs every registered Callback once, on this thread, before it returns.
  // Idempotent: a second call does nothing.
  void Cancel();

  // True once Cancel() was called (and not Reset since).
  bool cancelled() const { return flag_.load(); }

  // The flag itself, for code that polls it at step boundaries (the training loop).
  const std::atomic<bool>& flag() const { return flag_; }

  // Clears the flag for the next job. Only while no job uses it and no Callback is registered.
  void Reset() { flag_.store(false); }

 private:
  std::atomic<bool> flag_{false};
  // Observers register through a const reference (as the executor receives the flag).
  mutable absl::Mutex mu_;
  // Registered and not yet run.
  mutable std::vector<Callback*> callbacks_ ABSL_GUARDED_BY(mu_);
};

// Runs `fn` once when `flag` is cancelled: at once, in the constructor, if it already is; else on
// the thread that calls Cancel(), which may hold its own locks, so `fn` must only record the fact
// and wake someone (it must not block, call Cancel() or destroy a Callback). `fn` runs under the
// flag's lock, which the constructor and destructor take too: do not construct or destroy a
// Callback while holding a lock that `fn` takes. After the destructor returns, `fn` is not
// running and never will. The flag must outlive the Callback.
class CancelFlag::Callback {
 public:
  Callback(const CancelFlag& flag, std::function<void()> fn);
  ~Callback();
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;

 private:
  friend class CancelFlag;

  const CancelFlag& flag_;
  const std::function<void()> fn_;
};

}  // namespace mpsd::api

#endif  // MPSD_API_CANCEL_FLAG_H_
