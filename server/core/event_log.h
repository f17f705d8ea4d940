// The daemon's path from "a job produced an event" to "every subscriber has it": events are
// queued without blocking the producer, committed to the JobStore in batches by one writer
// thread, and only then announced to watchers. Subscribers read what is committed, so a slow
// subscriber costs a store read, never memory or training time.
#ifndef MPSD_SERVER_CORE_EVENT_LOG_H_
#define MPSD_SERVER_CORE_EVENT_LOG_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mpsd/v1/mpsd.pb.h"
#include "server/core/job_store.h"

namespace mpsd::server {

// Thread-safe. Borrows the store, which must outlive it.
//
// A commit that fails (a full disk, an I/O error, the database locked by another process) is
// retried with backoff (kFirstRetryDelay doubling to kMaxRetryDelay) for as long as it fails,
// with the events appended meanwhile: nothing appended is dropped while mpsd runs, and training
// never waits on storage. While commits fail, StorageError() says why (the daemon turns
// NOT_SERVING and refuses submits) and each attempt is logged at error level. Only at shutdown
// (the destructor), once commits have failed for kRetryAtShutdown more, are the events still
// uncommitted given up, and the log names how many and of which jobs. A batch the store rejects
// for what it holds (ALREADY_EXISTS, NOT_FOUND, INVALID_ARGUMENT: a bug, never the storage) is
// dropped with an error in the log, since no retry could store it.
class EventLog {
 public:
  static constexpr absl::Duration kFirstRetryDelay = absl::Milliseconds(100);
  static constexpr absl::Duration kMaxRetryDelay = absl::Seconds(5);
  static constexpr absl::Duration kRetryAtShutdown = absl::Seconds(10);

  // Counters since construction, for GetServerStatus.
  struct Stats {
    // Events committed, and the transactions that committed them.
    int64_t events_stored = 0;
    int64_t commits = 0;
    // Wall time inside JobStore::Commit, successful or not.
    absl::Duration commit_time;
    // Appended, not yet committed.
    int64_t events_pending = 0;
    // Watches registered and not yet fired or cancelled.
    int watches = 0;
  };

  // `on_storage_error`, when set, runs on the writer thread with the commit's error when
  // commits start failing, and with OK once one succeeds again; it must be quick and must not
  // call the EventLog.
  explicit EventLog(JobStore* store,
                    std::function<void(const absl::Status&)> on_storage_error = nullptr);
  // Commits everything appended, then stops the writer thread.
  ~EventLog();

  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Queues `job` (its row is replaced with this snapshot) and `events` (seq already assigned,
  // ascending per job) for the writer. Never waits for I/O: the caller may be a training loop.
  void Append(const mpsd::v1::Job& job, std::vector<mpsd::v1::JobEvent> events);

  // Blocks until everything appended before the call is committed: OK. While commits fail,
  // returns the store's error at once instead (those events stay queued and are retried).
  absl::Status Flush();

  // OK while commits succeed; the last commit's error while they fail.
  absl::Status StorageError() const;

  // Committed events of `job_id` with seq > after_seq, ascending, at most `limit`.
  absl::StatusOr<std::vector<mpsd::v1::JobEvent>> Read(const std::string& job_id, int64_t after_seq,
                                                       int limit) const;

  // Highest committed seq of a job; 0 if none.
  int64_t CommittedSeq(const std::string& job_id) const;

  // Records the committed seq of a job loaded from the store at start-up.
  void SetCommittedSeq(const std::string& job_id, int64_t seq);

  // One-shot notification: `callback` runs once, on the writer thread, after an event of
  // `job_id` with seq > after_seq is committed. Returns 0, without calling or keeping the
  // callback, if such an event is already committed (read it now); else a watch id.
  // The callback must not call Unwatch on its own id.
  uint64_t Watch(const std::string& job_id, int64_t after_seq, std::function<void()> callback);

  // Cancels a watch. On return its callback is not running and will never run. 0 is ignored.
  void Unwatch(uint64_t watch_id);

  // For shutdown, after the last Append: runs every watcher's callback now, and from then on
  // Watch() returns 0, so that followers read what is left and see Closed().
  void Close();
  bool Closed() const;

  Stats GetStats() const;

 private:
  struct Watcher {
    std::string job_id;
    int64_t after_seq;
    std::function<void()> callback;
  };

  void WriterLoop();
  // Commits one batch; returns the committed seq per job, or the store's error.
  absl::StatusOr<absl::flat_hash_map<std::string, int64_t>> CommitBatch(
      const absl::flat_hash_map<std::string, mpsd::v1::Job>& jobs,
      const std::vector<mpsd::v1::JobEvent>& events);
  // After a failed commit: puts the batch back in front of what was appended since (a job's
  // newer row wins), records the error, and waits `delay` (less when stopping). Returns true
  // when the writer should give the batch up (stopping, and kRetryAtShutdown has passed).
  bool RequeueFailed(absl::flat_hash_map<std::string, mpsd::v1::Job> jobs,
                     std::vector<mpsd::v1::JobEvent> events, const absl::Status& error,
                     absl::Duration delay);
  // Marks storage healthy again after a failure.
  void StorageRecovered();
  void Notify(const absl::flat_hash_map<std::string, int64_t>& committed);
  // Adds one JobStore::Commit call of `events` events to the stats.
  void RecordCommit(bool ok, int64_t events, absl::Duration took);
  // Runs the callbacks of these watches one at a time, skipping those unwatched meanwhile.
  void RunCallbacks(const std::vector<uint64_t>& watch_ids);

  // Constant after construction.
  JobStore* const store_;
  const std::function<void(const absl::Status&)> on_storage_error_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, mpsd::v1::Job> pending_jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<mpsd::v1::JobEvent> pending_events_ ABSL_GUARDED_BY(mu_);
  // Batches handed to the writer so far, and batches it has finished; Flush waits on these.
  uint64_t batches_appended_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // The failing commit's error; OK while commits succeed.
  absl::Status storage_error_ ABSL_GUARDED_BY(mu_);
  // When stopping_ was first seen with a failing commit (the give-up clock).
  absl::Time stopping_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::flat_hash_map<std::string, int64_t> committed_seq_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_watch_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Watches whose callbacks are running now; Unwatch waits until its id is not among them.
  absl::flat_hash_set<uint64_t> running_watches_ ABSL_GUARDED_BY(mu_);
  // Stats::events_pending is pending_events_.size() plus the batch being committed.
  int64_t events_committing_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t events_stored_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration commit_time_ ABSL_GUARDED_BY(mu_);

  std::thread writer_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_EVENT_LOG_H_
