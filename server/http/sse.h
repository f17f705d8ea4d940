// Server-Sent Events over the event log (GET /api/jobs/{id}/events): the text framing of the
// WHATWG HTML standard's "Server-sent events" section (§9.2: `id:`, `data:` lines, a blank line
// ends a message, `:` starts a comment), where the resume point comes from (the after_seq query
// parameter or a reconnecting EventSource's Last-Event-ID header), and a follower that hands a
// blocking HTTP worker the committed events of one job, batch by batch, waiting on the EventLog
// when none is left. The same EventLog and JobStore serve the gRPC StreamEvents: one source of
// truth.
#ifndef MPSD_SERVER_HTTP_SSE_H_
#define MPSD_SERVER_HTTP_SSE_H_

#include <cstdint>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mpsd/v1/mpsd.pb.h"
#include "server/core/event_log.h"

namespace mpsd::server {

// One SSE message: "id: <id>\n", then "data: <line>\n" for each line of `data` ("\r\n", "\r"
// and "\n" all end lines), then "\n". The client's last event ID becomes `id`.
std::string SseMessage(int64_t id, absl::string_view data);

// An SSE comment ": <text>\n\n" (clients ignore it; it keeps proxies and idle-timeouts happy).
// Line breaks in `text` become spaces, so a comment can never inject a field.
std::string SseComment(absl::string_view text);

// "retry: <ms>\n\n": how long an EventSource waits before it reconnects.
std::string SseRetry(int milliseconds);

// The seq after which a stream starts. A Last-Event-ID header (what an EventSource sends when it
// reconnects, carrying the id of the last message it received) wins over the after_seq query
// parameter (which the reconnecting EventSource repeats unchanged from its first request); with
// neither, 0 (replay everything). Each must be a decimal integer >= 0: INVALID_ARGUMENT naming
// "after_seq" or "Last-Event-ID" otherwise. An empty value counts as absent.
absl::StatusOr<int64_t> ResumeAfterSeq(absl::string_view after_seq_param,
                                       absl::string_view last_event_id_header);

// Follows one job's committed events from a seq on, for one HTTP worker thread that blocks in
// Next(). Not thread-safe: one thread calls Next(); the EventLog's writer thread only wakes it.
// Borrows the log, which must outlive the follower.
class EventFollower {
 public:
  // Events read from the store per Next(): bounds the memory of a stream however far behind.
  static constexpr int kDefaultBatch = 256;

  struct Batch {
    // Committed events with seq > the previous batch's last (after_seq at first), ascending, no
    // gap and no duplicate; ends at the job's terminal state event if it is among them.
    std::vector<mpsd::v1::JobEvent> events;
    // The last event of `events` is the job's terminal state event: there is nothing more.
    bool finished = false;
    // The log was closed (daemon shutting down) and has nothing more for this job now.
    bool closed = false;
  };

  EventFollower(EventLog* log, std::string job_id, int64_t after_seq, int batch = kDefaultBatch);
  // Cancels a pending watch (waits for its callback if it is running).
  ~EventFollower();

  EventFollower(const EventFollower&) = delete;
  EventFollower& operator=(const EventFollower&) = delete;

  // Returns the next committed events at once if there are any, else waits up to `timeout`
  // for a commit of this job and returns what it brought (events empty on timeout: the caller
  // may send a heartbeat). The store's errors.
  absl::StatusOr<Batch> Next(absl::Duration timeout);

  // The seq of the last event returned (after_seq before any).
  int64_t last_seq() const { return last_seq_; }

 private:
  // Reads the next batch from the store; `events` empty when there is none.
  absl::StatusOr<Batch> Read();

  // Constant after construction.
  EventLog* const log_;
  const std::string job_id_;
  const int batch_;

  // Touched by Next()'s thread only.
  int64_t last_seq_;
  bool finished_ = false;

  // Set by the EventLog's writer thread.
  absl::Mutex mu_;
  bool committed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_SSE_H_
