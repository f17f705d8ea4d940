// SeriesCache: per-job metric series, read incrementally from the event log, LRU-bounded.
#include "server/http/series_cache.h"

#include <algorithm>
#include <utility>

namespace mpsd::server {
namespace {

// Events read from the store per batch.
constexpr int kReadBatch = 4096;

// Feeds committed events of `job_id` with after < seq <= through (0: no bound) to `add`;
// returns the highest seq read (`after` when none).
template <typename Add>
absl::StatusOr<int64_t> ReadRange(EventLog& log, const std::string& job_id, int64_t after,
                                  int64_t through, Add add) {
  for (;;) {
    absl::StatusOr<std::vector<mpsd::v1::JobEvent>> events = log.Read(job_id, after, kReadBatch);
    if (!events.ok()) return events.status();
    for (const mpsd::v1::JobEvent& event : *events) {
      if (through > 0 && event.seq() > through) return after;
      add(event);
      after = event.seq();
    }
    if (events->size() < static_cast<size_t>(kReadBatch)) return after;
  }
}

}  // namespace

SeriesCache::SeriesCache(EventLog* log, const Options& options) : log_(log), options_(options) {}

std::shared_ptr<SeriesCache::Entry> SeriesCache::EntryFor(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Entry>& entry = entries_[job_id];
  if (entry == nullptr) entry = std::make_shared<Entry>();
  return entry;
}

absl::Status SeriesCache::Update(const std::string& job_id, Entry& entry,
                                 const std::vector<SeriesMetric>& metrics) {
  // Metrics new to this entry are read from the start up to where the others are.
  std::vector<std::pair<const SeriesMetric*, MetricSeries*>> added;
  for (const SeriesMetric& metric : metrics) {
    std::unique_ptr<MetricSeries>& series = entry.series[metric.name];
    if (series != nullptr) continue;
    series = std::make_unique<MetricSeries>(options_.raw_limit, options_.block);
    added.emplace_back(&metric, series.get());
  }
  if (!added.empty() && entry.through_seq > 0) {
    absl::StatusOr<int64_t> read =
        ReadRange(*log_, job_id, 0, entry.through_seq, [&](const mpsd::v1::JobEvent& event) {
          for (auto& [metric, series] : added) {
            if (std::optional<SeriesPoint> point = PointOf(*metric, event)) series->Add(*point);
          }
        });
    if (!read.ok()) return read.status();
  }
  // Then every metric of the entry follows the events committed since.
  std::vector<std::pair<SeriesMetric, MetricSeries*>> all;
  for (auto& [name, series] : entry.series) all.emplace_back(*FindSeriesMetric(name), series.get());
  absl::StatusOr<int64_t> read =
      ReadRange(*log_, job_id, entry.through_seq, 0, [&](const mpsd::v1::JobEvent& event) {
        if (!event.has_step() && !event.has_epoch()) return;
        for (auto& [metric, series] : all) {
          if (std::optional<SeriesPoint> point = PointOf(metric, event)) series->Add(*point);
        }
      });
  if (!read.ok()) return read.status();
  entry.through_seq = *read;
  entry.bytes = 0;
  for (auto& [name, series] : entry.series) entry.bytes += series->bytes();
  return absl::OkStatus();
}

absl::StatusOr<SeriesCache::Result> SeriesCache::Query(const std::string& job_id,
                                                       const std::vector<SeriesMetric>& metrics,
                                                       int max_points) {
  std::shared_ptr<Entry> entry = EntryFor(job_id);
  Result result;
  size_t bytes;
  {
    absl::MutexLock lock(&entry->mu);
    if (absl::Status status = Update(job_id, *entry, metrics); !status.ok()) return status;
    result.through_seq = entry->through_seq;
    for (const SeriesMetric& metric : metrics) {
      const MetricSeries& series = *entry->series[metric.name];
      result.series.push_back({metric, series.count(), series.Downsampled(max_points)});
    }
    bytes = entry->bytes;
  }
  Account(job_id, bytes);
  return result;
}

void SeriesCache::Account(const std::string& job_id, size_t bytes) {
  absl::MutexLock lock(&mu_);
  lru_.remove(job_id);
  lru_.push_front(job_id);
  size_t& size = sizes_[job_id];
  total_bytes_ = total_bytes_ - size + bytes;
  size = bytes;
  // The entry just used stays, however large; a request in flight on a dropped entry keeps it
  // alive (shared_ptr) and its result is still right.
  while (total_bytes_ > options_.max_bytes && lru_.size() > 1) {
    const std::string victim = lru_.back();
    lru_.pop_back();
    total_bytes_ -= sizes_[victim];
    sizes_.erase(victim);
    entries_.erase(victim);
  }
}

size_t SeriesCache::bytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

}  // namespace mpsd::server
