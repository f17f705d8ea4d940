// SeriesCache: per-job metric series, read incrementally from the event log, LRU-bounded.
#include "server/http/series_cache.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

namespace {

// The key of a track: the metric's name, with "~weight" when smoothed.
std::string TrackKey(const std::string& name, std::optional<double> smoothing) {
  if (!smoothing) return name;
  return absl::StrCat(name, "~", absl::StrFormat("%.17g", *smoothing));
}

}  // namespace

SeriesCache::Track SeriesCache::NewTrack(const SeriesMetric& metric,
                                         std::optional<double> smoothing) const {
  Track track{metric, std::nullopt,
              std::make_unique<MetricSeries>(options_.raw_limit, options_.block)};
  if (smoothing) track.ema.emplace(*smoothing);
  return track;
}

namespace {

// Feeds `event`'s point of `track`'s metric, smoothed when the track is.
template <typename Track>
void Feed(Track& track, const mpsd::v1::JobEvent& event) {
  std::optional<SeriesPoint> point = PointOf(track.metric, event);
  if (!point) return;
  if (track.ema) point->value = track.ema->Add(point->value);
  track.series->Add(*point);
}

}  // namespace

absl::Status SeriesCache::Rebuild(const std::string& job_id, Entry& entry) {
  api::AttemptMarks marks;
  absl::StatusOr<int64_t> through =
      ReadRange(*log_, job_id, 0, 0, [&](const mpsd::v1::JobEvent& event) { marks.Add(event); });
  if (!through.ok()) return through.status();
  for (auto& [key, track] : entry.tracks) {
    track = NewTrack(track.metric,
                     track.ema ? std::optional<double>(track.ema->weight()) : std::nullopt);
  }
  absl::StatusOr<int64_t> read =
      // Runs here, under entry.mu, which the analysis cannot follow into a lambda.
      ReadRange(*log_, job_id, 0, *through,
                [&](const mpsd::v1::JobEvent& event) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                  if (!api::IsStepOrEpoch(event) || marks.Superseded(event)) return;
                  for (auto& [key, track] : entry.tracks) Feed(track, event);
                });
  if (!read.ok()) return read.status();
  entry.marks = std::move(marks);
  entry.through_seq = *through;
  return absl::OkStatus();
}

absl::Status SeriesCache::Update(const std::string& job_id, Entry& entry,
                                 const std::vector<SeriesMetric>& metrics,
                                 std::optional<double> smoothing) {
  // Tracks new to this entry are read from the start up to where the others are.
  std::vector<std::string> added_keys;
  // The lambdas below run here, under entry.mu, which the analysis cannot follow into them.
  auto want = [&](const SeriesMetric& metric, std::optional<double> weight)
                  ABSL_NO_THREAD_SAFETY_ANALYSIS {
                    std::string key = TrackKey(metric.name, weight);
                    auto [it, inserted] = entry.tracks.try_emplace(key);
                    if (!inserted) return;
                    it->second = NewTrack(metric, weight);
                    added_keys.push_back(std::move(key));
                  };
  for (const SeriesMetric& metric : metrics) {
    want(metric, std::nullopt);
    if (smoothing) want(metric, smoothing);
  }
  // Addresses only once every track is in: an insertion may move the map's elements (a
  // flat_hash_map has no pointer stability).
  std::vector<Track*> added;
  for (const std::string& key : added_keys) added.push_back(&entry.tracks.at(key));
  if (!added.empty() && entry.through_seq > 0) {
    absl::StatusOr<int64_t> read =
        ReadRange(*log_, job_id, 0, entry.through_seq,
                  [&](const mpsd::v1::JobEvent& event) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                    if (!api::IsStepOrEpoch(event) || entry.marks.Superseded(event)) return;
                    for (Track* track : added) Feed(*track, event);
                  });
    if (!read.ok()) return read.status();
  }
  // Then every track follows the events committed since, unless one of them starts a new
  // attempt: the points it supersedes are already in the tracks, so they are built again.
  bool resumed = false;
  absl::StatusOr<int64_t> read =
      ReadRange(*log_, job_id, entry.through_seq, 0,
                [&](const mpsd::v1::JobEvent& event) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                  if (resumed || !api::IsStepOrEpoch(event)) return;
                  if (entry.marks.Add(event)) {
                    resumed = true;
                    return;
                  }
                  for (auto& [key, track] : entry.tracks) Feed(track, event);
                });
  if (!read.ok()) return read.status();
  entry.through_seq = *read;
  if (resumed) {
    if (absl::Status status = Rebuild(job_id, entry); !status.ok()) return status;
  }
  entry.bytes = 0;
  for (auto& [key, track] : entry.tracks) entry.bytes += track.series->bytes();
  return absl::OkStatus();
}

absl::StatusOr<SeriesCache::Result> SeriesCache::Query(const std::string& job_id,
                                                       const std::vector<SeriesMetric>& metrics,
                                                       int max_points,
                                                       std::optional<double> smoothing) {
  std::shared_ptr<Entry> entry = EntryFor(job_id);
  Result result;
  size_t bytes;
  {
    absl::MutexLock lock(&entry->mu);
    if (absl::Status status = Update(job_id, *entry, metrics, smoothing); !status.ok()) {
      return status;
    }
    result.through_seq = entry->through_seq;
    for (const SeriesMetric& metric : metrics) {
      const Track& track = entry->tracks.at(TrackKey(metric.name, std::nullopt));
      Series series;
      series.metric = metric;
      series.raw_points = track.series->count();
      series.points = track.series->Downsampled(max_points);
      if (smoothing) {
        const Track& smoothed = entry->tracks.at(TrackKey(metric.name, smoothing));
        series.smoothed_set = true;
        series.smoothed = smoothed.series->Downsampled(max_points);
        series.ema_weight = smoothed.ema->weight();
        series.ema_last = smoothed.ema->last();
        series.ema_count = smoothed.ema->count();
      }
      result.series.push_back(std::move(series));
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
