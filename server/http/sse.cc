// SSE framing, the resume point, and the follower of a job's committed events.
#include "server/http/sse.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/job_state.h"
#include "server/core/scheduler.h"

namespace mpsd::server {
namespace {

absl::StatusOr<int64_t> ParseSeq(absl::string_view text, absl::string_view name) {
  int64_t seq = 0;
  if (!absl::SimpleAtoi(text, &seq) || seq < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": must be an integer >= 0 (an event's seq)"));
  }
  return seq;
}

}  // namespace

std::string SseMessage(int64_t id, absl::string_view data) {
  std::string out = absl::StrCat("id: ", id, "\n");
  size_t start = 0;
  while (true) {
    size_t end = data.find_first_of("\r\n", start);
    absl::StrAppend(&out, "data: ", data.substr(start, end - start), "\n");
    if (end == absl::string_view::npos) break;
    start = end + 1;
    if (data[end] == '\r' && start < data.size() && data[start] == '\n') ++start;
  }
  out += "\n";
  return out;
}

std::string SseComment(absl::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  return absl::StrCat(": ", line, "\n\n");
}

std::string SseRetry(int milliseconds) { return absl::StrCat("retry: ", milliseconds, "\n\n"); }

absl::StatusOr<int64_t> ResumeAfterSeq(absl::string_view after_seq_param,
                                       absl::string_view last_event_id_header) {
  if (!last_event_id_header.empty()) return ParseSeq(last_event_id_header, "Last-Event-ID");
  if (!after_seq_param.empty()) return ParseSeq(after_seq_param, "after_seq");
  return 0;
}

EventFollower::EventFollower(EventLog* log, std::string job_id, int64_t after_seq, int batch)
    : log_(log), job_id_(std::move(job_id)), batch_(batch), last_seq_(after_seq) {}

EventFollower::~EventFollower() = default;

absl::StatusOr<EventFollower::Batch> EventFollower::Read() {
  Batch batch;
  if (finished_) {
    batch.finished = true;
    return batch;
  }
  // Closed() before the read: the log closes only after its last commit, so a closed log whose
  // read comes back empty has nothing more for this job (as in EventStreamReactor).
  const bool closed = log_->Closed();
  absl::StatusOr<std::vector<mpsd::v1::JobEvent>> events = log_->Read(job_id_, last_seq_, batch_);
  if (!events.ok()) return events.status();
  for (mpsd::v1::JobEvent& event : *events) {
    last_seq_ = event.seq();
    const bool terminal = event.has_state() && api::IsTerminal(event.state().state());
    batch.events.push_back(std::move(event));
    if (terminal) {
      finished_ = batch.finished = true;
      break;
    }
  }
  batch.closed = closed && batch.events.empty();
  return batch;
}

absl::StatusOr<EventFollower::Batch> EventFollower::Next(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<Batch> batch = Read();
    if (!batch.ok() || !batch->events.empty() || batch->finished || batch->closed) return batch;
    {
      absl::MutexLock lock(&mu_);
      committed_ = false;
    }
    const uint64_t watch = log_->Watch(job_id_, last_seq_, [this] {
      absl::MutexLock lock(&mu_);
      committed_ = true;
    });
    if (watch == 0) continue;  // Committed (or closed) since the read: read again.
    bool woken;
    {
      absl::MutexLock lock(&mu_);
      woken = mu_.AwaitWithDeadline(absl::Condition(&committed_), deadline);
    }
    // Returns once the callback cannot run any more, so `this` is safe to leave.
    log_->Unwatch(watch);
    if (!woken) return Batch{};
  }
}

}  // namespace mpsd::server
