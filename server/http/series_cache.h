// Metric series of jobs, kept between requests so that a chart of a long job costs a store read
// of the events since the last request, not of all of them: GET /api/jobs/{id}/series of a
// 1,000,000-step job reads its events once, then answers from memory. Derived from the event log
// (events are append-only, so what was read stays true); the store remains the one source.
#ifndef MPSD_SERVER_HTTP_SERIES_CACHE_H_
#define MPSD_SERVER_HTTP_SERIES_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
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
    // Points the metric has in all (before downsampling).
    int64_t raw_points = 0;
    std::vector<SeriesPoint> points;
  };
  struct Result {
    // The highest seq read: every event up to it is reflected in the points.
    int64_t through_seq = 0;
    std::vector<Series> series;
  };

  SeriesCache(EventLog* log, const Options& options);

  // The committed events of `job_id` (all of them, up to what is committed now) as `metrics`,
  // each downsampled to at most max_points (MetricSeries::Downsampled). Requests for the same
  // job are served one at a time; other jobs' in parallel. The store's errors.
  absl::StatusOr<Result> Query(const std::string& job_id,
                               const std::vector<SeriesMetric>& metrics, int max_points);

  // Memory held now, bytes (approximately).
  size_t bytes() const;

 private:
  struct Entry {
    absl::Mutex mu;
    int64_t through_seq ABSL_GUARDED_BY(mu) = 0;
    // By metric name.
    absl::flat_hash_map<std::string, std::unique_ptr<MetricSeries>> series ABSL_GUARDED_BY(mu);
    size_t bytes ABSL_GUARDED_BY(mu) = 0;
  };

  std::shared_ptr<Entry> EntryFor(const std::string& job_id);
  // Brings `entry` up to what is committed, adding the metrics it lacks.
  absl::Status Update(const std::string& job_id, Entry& entry,
                      const std::vector<SeriesMetric>& metrics)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(entry.mu);
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
