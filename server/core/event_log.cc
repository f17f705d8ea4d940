// EventLog: batches events into store transactions on one writer thread, then wakes watchers.
#include "server/core/event_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

// JobStore::Commit's answers about the batch itself (JobStore::Commit: a repeated seq, an
// unknown job, a bad seq), as opposed to the storage failing (a full disk, a lock, I/O).
bool IsRejection(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAlreadyExists ||
         status.code() == absl::StatusCode::kNotFound ||
         status.code() == absl::StatusCode::kInvalidArgument;
}

}  // namespace

EventLog::EventLog(JobStore* store, std::function<void(const absl::Status&)> on_storage_error)
    : store_(store),
      on_storage_error_(std::move(on_storage_error)),
      writer_([this] { WriterLoop(); }) {}

EventLog::~EventLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_.join();
}

void EventLog::Append(const mpsd::v1::Job& job, std::vector<mpsd::v1::JobEvent> events) {
  absl::MutexLock lock(&mu_);
  pending_jobs_[job.id()] = job;
  for (auto& event : events) pending_events_.push_back(std::move(event));
  ++batches_appended_;
}

absl::Status EventLog::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = batches_appended_;
  auto committed = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return batches_done_ >= target || !storage_error_.ok();
  };
  mu_.Await(absl::Condition(&committed));
  return batches_done_ >= target ? absl::OkStatus() : storage_error_;
}

absl::Status EventLog::StorageError() const {
  absl::MutexLock lock(&mu_);
  return storage_error_;
}

absl::StatusOr<std::vector<mpsd::v1::JobEvent>> EventLog::Read(const std::string& job_id,
                                                               int64_t after_seq, int limit) const {
  return store_->ReadEvents(job_id, after_seq, limit);
}

int64_t EventLog::CommittedSeq(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = committed_seq_.find(job_id);
  return it == committed_seq_.end() ? 0 : it->second;
}

void EventLog::SetCommittedSeq(const std::string& job_id, int64_t seq) {
  absl::MutexLock lock(&mu_);
  committed_seq_[job_id] = seq;
}

uint64_t EventLog::Watch(const std::string& job_id, int64_t after_seq,
                         std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  if (closed_) return 0;
  auto it = committed_seq_.find(job_id);
  if (it != committed_seq_.end() && it->second > after_seq) return 0;
  const uint64_t id = next_watch_id_++;
  watchers_.emplace(id, Watcher{job_id, after_seq, std::move(callback)});
  return id;
}

void EventLog::Unwatch(uint64_t watch_id) {
  if (watch_id == 0) return;
  absl::MutexLock lock(&mu_);
  watchers_.erase(watch_id);
  auto not_running = [this, watch_id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !running_watches_.contains(watch_id);
  };
  mu_.Await(absl::Condition(&not_running));
}

void EventLog::WriterLoop() {
  absl::Duration delay = kFirstRetryDelay;
  for (;;) {
    absl::flat_hash_map<std::string, mpsd::v1::Job> jobs;
    std::vector<mpsd::v1::JobEvent> events;
    uint64_t batches;
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || batches_appended_ > batches_done_;
      };
      mu_.Await(absl::Condition(&ready));
      jobs.swap(pending_jobs_);
      events.swap(pending_events_);
      events_committing_ = static_cast<int64_t>(events.size());
      batches = batches_appended_;
      stop = stopping_ && jobs.empty() && events.empty();
    }
    if (stop) return;
    absl::StatusOr<absl::flat_hash_map<std::string, int64_t>> committed = CommitBatch(jobs, events);
    if (committed.ok()) {
      StorageRecovered();
      delay = kFirstRetryDelay;
      Notify(*committed);
    } else if (IsRejection(committed.status())) {
      // The batch itself is wrong (a bug, not the storage): retrying cannot help, and would
      // hold back every event after it.
      spdlog::error("the store rejected {} events; they are dropped: {}", events.size(),
                    committed.status().ToString());
    } else if (!RequeueFailed(std::move(jobs), std::move(events), committed.status(), delay)) {
      delay = std::min(delay * 2, kMaxRetryDelay);
      continue;  // Retried with what was appended meanwhile; nothing is done yet.
    }
    absl::MutexLock lock(&mu_);
    events_committing_ = 0;
    batches_done_ = batches;
  }
}

absl::StatusOr<absl::flat_hash_map<std::string, int64_t>> EventLog::CommitBatch(
    const absl::flat_hash_map<std::string, mpsd::v1::Job>& jobs,
    const std::vector<mpsd::v1::JobEvent>& events) {
  std::vector<mpsd::v1::Job> rows;
  rows.reserve(jobs.size());
  for (const auto& [id, job] : jobs) rows.push_back(job);
  const absl::Time start = absl::Now();
  const absl::Status status = store_->Commit(rows, events);
  RecordCommit(status.ok(), static_cast<int64_t>(events.size()), absl::Now() - start);
  if (!status.ok()) return status;
  absl::flat_hash_map<std::string, int64_t> committed;
  for (const auto& event : events) {
    int64_t& seq = committed[event.job_id()];
    if (event.seq() > seq) seq = event.seq();
  }
  return committed;
}

bool EventLog::RequeueFailed(absl::flat_hash_map<std::string, mpsd::v1::Job> jobs,
                             std::vector<mpsd::v1::JobEvent> events, const absl::Status& error,
                             absl::Duration delay) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    first = storage_error_.ok();
    storage_error_ = error;
    if (stopping_ && stopping_since_ == absl::InfiniteFuture()) stopping_since_ = absl::Now();
    if (stopping_ && absl::Now() - stopping_since_ >= kRetryAtShutdown) {
      std::vector<std::string> ids;
      for (const auto& [id, job] : jobs) ids.push_back(id);
      std::sort(ids.begin(), ids.end());
      spdlog::error(
          "mpsd is stopping and storing events has failed for {}: {} events of "
          "job(s) {} are lost: {}",
          absl::FormatDuration(kRetryAtShutdown), events.size(), absl::StrJoin(ids, ", "),
          error.ToString());
      return true;
    }
    spdlog::error(
        "storing {} events failed; they are kept and retried in {} (nothing is "
        "dropped; submits are refused meanwhile): {}",
        events.size(), absl::FormatDuration(delay), error.ToString());
    // What was appended during the attempt is newer: its rows win, its events follow.
    for (auto& [id, job] : pending_jobs_) jobs[id] = std::move(job);
    pending_jobs_ = std::move(jobs);
    events.insert(events.end(), std::make_move_iterator(pending_events_.begin()),
                  std::make_move_iterator(pending_events_.end()));
    pending_events_ = std::move(events);
    events_committing_ = 0;
  }
  if (first && on_storage_error_) on_storage_error_(error);
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), delay);
      return false;
    }
  }
  // Stopping: retry soon, until kRetryAtShutdown has passed.
  absl::SleepFor(std::min(delay, absl::Milliseconds(500)));
  return false;
}

void EventLog::StorageRecovered() {
  {
    absl::MutexLock lock(&mu_);
    if (storage_error_.ok()) return;
    storage_error_ = absl::OkStatus();
  }
  spdlog::info("storing events works again; everything kept meanwhile is stored");
  if (on_storage_error_) on_storage_error_(absl::OkStatus());
}

void EventLog::Notify(const absl::flat_hash_map<std::string, int64_t>& committed) {
  if (committed.empty()) return;
  std::vector<uint64_t> due;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [job_id, seq] : committed) {
      int64_t& known = committed_seq_[job_id];
      if (seq > known) known = seq;
    }
    for (const auto& [id, watcher] : watchers_) {
      auto it = committed.find(watcher.job_id);
      if (it != committed.end() && it->second > watcher.after_seq) due.push_back(id);
    }
  }
  RunCallbacks(due);
}

void EventLog::RunCallbacks(const std::vector<uint64_t>& watch_ids) {
  for (uint64_t id : watch_ids) {
    std::function<void()> callback;
    {
      absl::MutexLock lock(&mu_);
      auto it = watchers_.find(id);
      if (it == watchers_.end()) continue;  // Unwatched meanwhile.
      callback = std::move(it->second.callback);
      watchers_.erase(it);
      running_watches_.insert(id);
    }
    callback();
    absl::MutexLock lock(&mu_);
    running_watches_.erase(id);
  }
}

void EventLog::Close() {
  Flush().IgnoreError();  // While commits fail: the destructor retries, then gives up.
  std::vector<uint64_t> all;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (const auto& [id, watcher] : watchers_) all.push_back(id);
  }
  RunCallbacks(all);
}

bool EventLog::Closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

void EventLog::RecordCommit(bool ok, int64_t events, absl::Duration took) {
  absl::MutexLock lock(&mu_);
  commit_time_ += took;
  if (!ok) return;
  events_stored_ += events;
  ++commits_;
}

EventLog::Stats EventLog::GetStats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  stats.events_stored = events_stored_;
  stats.commits = commits_;
  stats.commit_time = commit_time_;
  stats.events_pending = static_cast<int64_t>(pending_events_.size()) + events_committing_;
  stats.watches = static_cast<int>(watchers_.size());
  return stats;
}

}  // namespace mpsd::server
