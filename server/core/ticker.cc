// Ticker: a map of due times, one thread sleeping until the earliest.
#include "server/core/ticker.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/time/clock.h"

namespace mpsd::server {

Ticker::Ticker() : thread_([this] { Loop(); }) {}

Ticker::~Ticker() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

uint64_t Ticker::Add(absl::Time first, Callback callback) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{first, std::move(callback)});
  added_ = true;
  return id;
}

void Ticker::Remove(uint64_t id) {
  if (id == 0) return;
  absl::MutexLock lock(&mu_);
  entries_.erase(id);
  auto not_running = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ != id; };
  mu_.Await(absl::Condition(&not_running));
}

int Ticker::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

void Ticker::Loop() {
  for (;;) {
    std::vector<uint64_t> due = WaitForDue();
    if (due.empty()) return;  // stopping
    for (uint64_t id : due) RunOne(id);
  }
}

std::vector<uint64_t> Ticker::WaitForDue() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (stopping_) return {};
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    std::vector<uint64_t> due;
    for (const auto& [id, entry] : entries_) {
      if (entry.due <= now) {
        due.push_back(id);
      } else {
        next = std::min(next, entry.due);
      }
    }
    if (!due.empty()) return due;
    added_ = false;
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || added_; };
    mu_.AwaitWithDeadline(absl::Condition(&woken), next);
  }
}

void Ticker::RunOne(uint64_t id) {
  Callback callback;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;  // Removed meanwhile.
    callback = it->second.callback;
    running_ = id;
  }
  const absl::Time next = callback(absl::Now());
  absl::MutexLock lock(&mu_);
  running_ = 0;
  auto it = entries_.find(id);
  if (it != entries_.end()) it->second.due = next;
}

}  // namespace mpsd::server
