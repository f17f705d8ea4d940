// One thread that calls registered callbacks at the times they ask for. Every open event
// stream keeps its heartbeat clock here, so an idle stream costs an entry in a map, not a
// thread or a timer of its own, and nothing waits inside a gRPC reaction.
#ifndef MPSD_SERVER_CORE_TICKER_H_
#define MPSD_SERVER_CORE_TICKER_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mpsd::server {

// Thread-safe. Callbacks run one at a time on the ticker's own thread.
class Ticker {
 public:
  // Called with the current time; returns when it wants to be called next
  // (absl::InfiniteFuture(): only after it is removed, i.e. never). Must not block for long
  // (every other callback waits behind it) and must not call Remove on its own id.
  using Callback = std::function<absl::Time(absl::Time now)>;

  Ticker();
  // Stops the thread. Every callback must have been removed first.
  ~Ticker();

  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  // Registers `callback` to be called at `first` (or soon after). Returns its id (never 0).
  uint64_t Add(absl::Time first, Callback callback);

  // Unregisters a callback. On return it is not running and will never run again; so this
  // waits while it runs, and the caller must not hold a lock the callback takes. 0 is ignored.
  void Remove(uint64_t id);

  // Callbacks registered now.
  int size() const;

 private:
  struct Entry {
    absl::Time due;
    Callback callback;
  };

  void Loop();
  // Waits until a callback is due (or one was added, or the ticker stops); returns the ids due.
  std::vector<uint64_t> WaitForDue();
  // Runs one due callback unless it was removed meanwhile, and records its next time.
  void RunOne(uint64_t id);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // The id whose callback runs now; 0 when none does. Remove waits until it is not its own.
  uint64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  // Set by Add so that the loop recomputes its next wake-up.
  bool added_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_TICKER_H_
