// The daemon's Prometheus metrics (`GET /metrics` on the HTTP listener), kept in a
// prometheus-cpp registry and written with its TextSerializer. Counters of job activity are fed
// by the scheduler's events as they are published; everything GetServerStatus also reports is
// read at scrape time from the same sources it reads, so the two agree.
//
// Names follow Prometheus' conventions (base units: bytes, seconds; `_total` for counters). No
// series carries a job id but mpsd_running_job_info, which has at most one series.
#ifndef MPSD_SERVER_HTTP_METRICS_H_
#define MPSD_SERVER_HTTP_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "mpsd/v1/mpsd.pb.h"
#include "server/http/http_limits.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace mpsd::server {

class Nvml;

// Where the scrape-time values come from. Each function is called on the scraping thread and
// must be thread-safe.
struct MetricsSources {
  // What GetServerStatus answers now (JobService::CurrentStatus).
  std::function<mpsd::v1::ServerStatus()> server_status;
  // Jobs the daemon knows, by (state, kind) (Scheduler::CountJobs).
  std::function<std::map<std::pair<mpsd::v1::Job::State, mpsd::v1::Job::Kind>, int64_t>()>
      job_counts;
  // The running job (for mpsd_running_job_info), or nullopt when none runs.
  std::function<std::optional<mpsd::v1::Job>()> running_job;
  // The executor's device now; nullopt while no executor is ready (the series are then left
  // out rather than waiting for one).
  std::function<std::optional<mpsd::v1::DeviceInfo>()> device;
  // Executor replacements since the daemon started, by reason (crash, per_job,
  // restart_after_jobs, memory, cancel_timeout,
  // user_code_timeout).
  std::function<std::map<std::string, int64_t>()> executor_restarts;
  // The HTTP listener's connections (HttpServer::connection_counts); unset: no such series.
  std::function<HttpConnectionCounts()> http_connections;
};

// Thread-safe: ObserveEvent from the scheduler (under its lock: it only bumps counters),
// Scrape from the HTTP listener's connection threads.
class Metrics {
 public:
  // `version`: mpsd's (the CMake project version), for mpsd_build_info.
  explicit Metrics(std::string version);
  ~Metrics();

  // Before the first Scrape.
  void SetSources(MetricsSources sources);

  // Counts a published event: a job's first event (QUEUED, seq 1) in
  // mpsd_jobs_submitted_total; a step in mpsd_job_steps_total, its batch_size in
  // mpsd_samples_total and its step_time_ms in mpsd_step_duration_seconds.
  void ObserveEvent(const mpsd::v1::Job& job, const mpsd::v1::JobEvent& event);

  // The metrics in Prometheus' text exposition format 0.0.4.
  std::string Scrape();

  // Buckets of mpsd_step_duration_seconds, seconds: 1 ms to 10 s.
  static std::vector<double> StepDurationBuckets();

 private:
  void UpdateFromStatus(const mpsd::v1::ServerStatus& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateRunningJob() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateDevice() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateRestarts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateHttp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string version_;
  const std::shared_ptr<prometheus::Registry> registry_;
  // Families (owned by registry_).
  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Gauge>& queue_paused_;
  prometheus::Family<prometheus::Gauge>& artifacts_bytes_;
  prometheus::Family<prometheus::Counter>& artifacts_deleted_;
  prometheus::Family<prometheus::Counter>& submitted_;
  prometheus::Family<prometheus::Counter>& steps_;
  prometheus::Family<prometheus::Counter>& samples_;
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Gauge>& allocated_;
  prometheus::Family<prometheus::Gauge>& reserved_;
  prometheus::Family<prometheus::Gauge>& utilization_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Gauge>& streams_open_;
  prometheus::Family<prometheus::Counter>& events_stored_;
  prometheus::Family<prometheus::Gauge>& resident_;
  prometheus::Family<prometheus::Gauge>& running_job_info_;
  prometheus::Family<prometheus::Gauge>& http_open_;
  prometheus::Family<prometheus::Counter>& http_refused_;
  prometheus::Family<prometheus::Counter>& http_timed_out_;
  // Series without labels, fed by ObserveEvent (prometheus-cpp's metrics are atomic).
  prometheus::Counter& submitted_total_;
  prometheus::Counter& steps_total_;
  prometheus::Counter& samples_total_;
  prometheus::Histogram& step_duration_seconds_;

  absl::Mutex mu_;
  MetricsSources sources_ ABSL_GUARDED_BY(mu_);
  // Series whose labels change, so that the old one can be removed.
  prometheus::Gauge* build_info_series_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string build_torch_ ABSL_GUARDED_BY(mu_);
  prometheus::Gauge* running_series_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string running_key_ ABSL_GUARDED_BY(mu_);
  // Device series by device label.
  std::map<std::string, prometheus::Gauge*> allocated_series_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> reserved_series_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> utilization_series_ ABSL_GUARDED_BY(mu_);
  // NVML, loaded on the first scrape that sees a CUDA device; nullptr where it is absent.
  std::unique_ptr<Nvml> nvml_ ABSL_GUARDED_BY(mu_);
  bool nvml_tried_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_METRICS_H_
