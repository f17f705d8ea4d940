// What the running job's executor process uses, sampled by the daemon for the dashboard
// (GET /api/jobs/{id}/resources): its CPU use and resident memory from Linux's /proc (utime +
// stime of /proc/PID/stat over the wall time between samples, in percent of one core; VmRSS of
// /proc/PID/status) and the GPU utilisation from NVML where the library is present (server/http/
// nvml.h). Nothing is stored: the samples live in memory while the daemon runs. Where /proc is
// absent (macOS) a sample has no CPU or memory figure.
#ifndef MPSD_SERVER_HTTP_RESOURCES_H_
#define MPSD_SERVER_HTTP_RESOURCES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/http/nvml.h"

namespace mpsd::server {

// One sample. Plain value.
struct ResourceSample {
  // Microseconds since the Unix epoch.
  int64_t time_us = 0;
  // CPU time the executor used since the previous sample over the wall time between them, in
  // percent of one core (200 = two cores busy); nullopt for a job's first sample or without /proc.
  std::optional<double> cpu_percent;
  // Resident memory, bytes; nullopt without /proc.
  std::optional<int64_t> rss_bytes;
  // NVML's utilisation of GPU 0 in [0, 1]; nullopt without NVML.
  std::optional<double> gpu_utilization;
};

// Samples every `interval` on its own thread while running_job() names a job and
// executor_pid() a process. Keeps the last `max_samples` samples of each of the last `max_jobs`
// jobs sampled. Thread-safe; the functions are called from the sampling thread and must stay
// valid until the sampler is destroyed (which stops and joins the thread).
class ResourceSampler {
 public:
  struct Options {
    std::function<std::string()> running_job;
    std::function<int()> executor_pid;
    absl::Duration interval = absl::Seconds(1);
    size_t max_samples = 7200;
    size_t max_jobs = 16;
  };

  explicit ResourceSampler(Options options);
  ~ResourceSampler();

  ResourceSampler(const ResourceSampler&) = delete;
  ResourceSampler& operator=(const ResourceSampler&) = delete;

  // The samples of `job_id`, oldest first; empty for a job never sampled (or dropped).
  std::vector<ResourceSample> SamplesOf(const std::string& job_id) const;

 private:
  void Run();
  void SampleOnce();

  const Options options_;
  absl::Notification stop_;
  // Sampling thread only.
  std::string last_job_;
  int last_pid_ = 0;
  double last_cpu_s_ = -1;
  absl::Time last_time_;
  std::unique_ptr<Nvml> nvml_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::deque<ResourceSample>> samples_ ABSL_GUARDED_BY(mu_);
  // Job ids, oldest first.
  std::list<std::string> order_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_RESOURCES_H_
