// Metric series of jobs, kept between requests so that a chart of a long job costs a store read
// of the events since the last request, not of all of them: GET /api/jobs/{id}/series of a
// 1,000,000-step job reads its events once, then answers from memory. Derived from the event log
// (events are append-only, so what was read stays true); the store remains the one source.
#ifndef MPSD_SERVER_HTTP_SERIES_CACHE_H_
#define MPSD_SERVER_HTTP_SERIES_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/event_log.h"
#include "server/http/series.h"

namespace mpsd::server {

// Thread-safe. Borrows the log, which must outlive the cache.
class SeriesCache {
 public:
  struct Options {
    // Least recently used jobs are dropped beyond this much memory, bytes.
    size_t max_bytes = size_t{128} << 20;
    // MetricSeries' raw_limit and block: up to raw_limit points a series is kept whole.
    int raw_limit = 100000;
    int block = 64;
  };

  struct Series {
    SeriesMetric metric;
    // Points the metric has in all (before downsampling; one per step or epoch: the latest
    // attempt's, AttemptMarks).
    int64_t raw_points = 0;
    std::vector<SeriesPoint> points;
    // With a smoothing weight: the metric's Ema over every point (not over the downsampled
    // ones), downsampled as its own series, and the average's state after the last point.
    bool smoothed_set = false;
    std::vector<SeriesPoint> smoothed;
    double ema_weight = 0;
    double ema_last = 0;
    int64_t ema_count = 0;
  };
  struct Result {
    // The highest seq read: every event up to it is reflected in the points.
    int64_t through_seq = 0;
    std::vector<Series> series;
  };

  SeriesCache(EventLog* log, const Options& options);

  // The committed events of `job_id` (all of them, up to what is committed now) as `metrics`,
  // each downsampled to at most max_points (MetricSeries::Downsampled), one point per x (the
  // latest attempt's after a resume: AttemptMarks); with `smoothing` (a weight in [0, 1)) each
  // also smoothed (Ema over all its points). Requests for the same job are served one at a
  // time; other jobs' in parallel. The store's errors.
  absl::StatusOr<Result> Query(const std::string& job_id, const std::vector<SeriesMetric>& metrics,
                               int max_points, std::optional<double> smoothing = std::nullopt);

  // Memory held now, bytes (approximately).
  size_t bytes() const;

 private:
  // One series the entry follows: a metric's points, or (with an Ema) its smoothed points.
  struct Track {
    SeriesMetric metric;
    std::optional<Ema> ema;
    std::unique_ptr<MetricSeries> series;
  };
  struct Entry {
    absl::Mutex mu;
    int64_t through_seq ABSL_GUARDED_BY(mu) = 0;
    // Where the events read so far went back to an earlier step (resumes).
    api::AttemptMarks marks ABSL_GUARDED_BY(mu);
    // By metric name, and "name~weight" for smoothed series (TrackKey).
    absl::flat_hash_map<std::string, Track> tracks ABSL_GUARDED_BY(mu);
    size_t bytes ABSL_GUARDED_BY(mu) = 0;
  };

  std::shared_ptr<Entry> EntryFor(const std::string& job_id);
  // Brings `entry` up to what is committed, adding the tracks it lacks. A new resume among the
  // new events rebuilds the entry from the store (Rebuild).
  absl::Status Update(const std::string& job_id, Entry& entry,
                      const std::vector<SeriesMetric>& metrics, std::optional<double> smoothing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(entry.mu);
  // Every track of `entry` again from all committed events, in two passes: the attempts first,
  // then the points no later attempt superseded.
  absl::Status Rebuild(const std::string& job_id, Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(entry.mu);
  Track NewTrack(const SeriesMetric& metric, std::optional<double> smoothing) const;
  // Records the entry's size and drops least recently used entries beyond max_bytes.
  void Account(const std::string& job_id, size_t bytes);

  // Constant after construction.
  EventLog* const log_;
  const Options options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  // Job ids, most recently used first, and each entry's last recorded size.
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> sizes_ ABSL_GUARDED_BY(mu_);
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_SERIES_CACHE_H_
