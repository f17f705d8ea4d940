// The live dashboard on mpsd's HTTP listener (`--http-listen`): the page at GET / (embedded
// assets, server/http/dashboard_assets.h), and its data endpoints, usable by other dashboards too:
//   GET  /api/whoami                  {"name": token name, "role": viewer|submitter|admin}
//   GET  /api/jobs                    ListJobsResponse (JSON mapping; ?state=&kind=&page_size=)
//   GET  /api/jobs/{id}               Job
//   GET  /api/jobs/{id}/events        Server-Sent Events, one JobEvent (JSON) per message
//   GET  /api/jobs/{id}/series        downsampled metric series (server/http/dashboard_api.h)
//   GET  /api/jobs/{id}/artifacts     ListArtifactsResponse: the job's files, size and SHA-256
//   GET  /api/jobs/{id}/artifacts/NAME  one of them, as an attachment (a model, a checkpoint, a
//                                     profiler trace); NAME as ListArtifacts names it
//   GET  /api/jobs/{id}/resources     the executor's CPU %, resident memory and GPU utilisation
//                                     while the job ran (server/http/resources.h), sampled each
//                                     second by this daemon: {"jobId", "samples": [[time_us,
//                                     cpu_percent, rss_bytes, gpu_utilization], ...]} (null where
//                                     not measured); empty for jobs this daemon did not run
//   POST /api/jobs/{id}/cancel        CancelJob: admin, or the submitter of the job
// The page and its assets need no token (they hold no data); everything under /api/ needs one
// (viewer, except cancel). The HTTP side reads the scheduler and the same EventLog and JobStore
// the gRPC StreamEvents reads: one source of truth.
//
// Events (GET /api/jobs/{id}/events?after_seq=N[&omit_steps_through=S]): replays the committed
// events with seq > N, then follows live, and ends after the job's terminal state event. Each
// message is "id: <seq>" plus "data: <JobEvent JSON>". A reconnecting EventSource sends
// Last-Event-ID, which wins over after_seq, so it resumes with no gap and no duplicate. An idle
// stream gets a comment (": heartbeat RUNNING") every heartbeat interval. A stream that starts at
// or after a finished job's terminal event is answered 204 (an EventSource stops reconnecting).
// omit_steps_through=S leaves out step events with seq <= S (a client that drew them from the
// series endpoint, whose throughSeq was S). When mpsd shuts down, streams of unfinished jobs end
// without a terminal event; clients reconnect with Last-Event-ID.
#ifndef MPSD_SERVER_HTTP_DASHBOARD_H_
#define MPSD_SERVER_HTTP_DASHBOARD_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "server/core/scheduler.h"
#include "server/http/http_server.h"
#include "server/http/resources.h"
#include "server/http/series_cache.h"

namespace mpsd::server {

struct DashboardOptions {
  // An event stream that sent nothing for this long gets a heartbeat comment.
  absl::Duration heartbeat_interval = absl::Seconds(15);
  // The series cache (server/http/series_cache.h).
  SeriesCache::Options series;
  // Where jobs' artifacts are: <artifacts_dir>/<job id>/ (server/core/artifacts.h). Empty: the
  // artifact routes answer NOT_FOUND.
  std::string artifacts_dir;
  // The running executor's pid (0: none); empty: no resource sampling.
  std::function<int()> executor_pid;
};

// The dashboard's routes and what they keep between requests (the series cache). Thread-safe:
// handlers run on the HTTP server's workers. Borrows the scheduler, which must outlive it.
class Dashboard {
 public:
  Dashboard(Scheduler* scheduler, const DashboardOptions& options);

  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // Registers the page and the endpoints above on `http` (before it starts). `this` must
  // outlive the HTTP server's serving (shut it down first).
  void Register(HttpServer* http);

 private:
  // Constant after construction.
  Scheduler* const scheduler_;
  const DashboardOptions options_;

  SeriesCache series_;
  // Null without options.executor_pid. Destroyed (its thread joined) before the scheduler goes.
  std::unique_ptr<ResourceSampler> resources_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_DASHBOARD_H_
