// The dashboard's JSON endpoints as plain functions from a request's parts to a response, so
// that they are independent of the HTTP library (server/http/dashboard.cc wires them to routes):
//   GET  /api/jobs                 ListJobsResponse in protobuf's JSON mapping
//   GET  /api/jobs/{id}            Job in protobuf's JSON mapping
//   GET  /api/jobs/{id}/series     step or epoch metric series, downsampled (server/http/series.h)
//   POST /api/jobs/{id}/cancel     Job after CancelJob
// Errors are JSON {"code": "NOT_FOUND", "message": "..."} with the HTTP status google.rpc.Code
// maps that code to (google/rpc/code.proto: INVALID_ARGUMENT 400, NOT_FOUND 404, ...).
#ifndef MPSD_SERVER_HTTP_DASHBOARD_API_H_
#define MPSD_SERVER_HTTP_DASHBOARD_API_H_

#include <functional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "server/core/event_log.h"
#include "server/core/scheduler.h"
#include "server/http/series_cache.h"

namespace mpsd::server {

// What a handler answers. Plain value.
struct HttpReply {
  int status = 200;
  // Without parameters; the sender adds "; charset=utf-8".
  std::string content_type = "application/json";
  std::string body;
};

// Looks a query parameter up by name; "" when absent.
using QueryParam = std::function<std::string(absl::string_view name)>;

// The HTTP status google.rpc.Code's documentation gives for `code` (OK 200, CANCELLED 499,
// INVALID_ARGUMENT / FAILED_PRECONDITION / OUT_OF_RANGE 400, UNAUTHENTICATED 401,
// PERMISSION_DENIED 403, NOT_FOUND 404, ALREADY_EXISTS / ABORTED 409, RESOURCE_EXHAUSTED 429,
// UNIMPLEMENTED 501, UNAVAILABLE 503, DEADLINE_EXCEEDED 504, others 500).
int HttpStatusFor(absl::StatusCode code);

// {"code": "<CODE>", "message": "<message>"} with HttpStatusFor(status.code()).
HttpReply ErrorReply(const absl::Status& status);

// `message` in protobuf's JSON mapping (MessageToJsonString, lowerCamelCase names, int64 as
// strings, enums by name), status 200.
HttpReply JsonReply(const google::protobuf::Message& message);

// GET /api/jobs: query parameters `state` (comma-separated state names, case-insensitive:
// queued,running), `kind` (TrainJob, BenchJob or Sweep, or the enum names), `page_size`,
// `page_token`, `name` (a glob on the job's name), `label` (key=value[,key=value...], "=" as %3D
// in a URL; all must match), as ListJobsRequest. INVALID_ARGUMENT naming the parameter for a bad
// value.
HttpReply ListJobsHandler(const Scheduler& scheduler, const QueryParam& param);

// GET /api/jobs/{id}. NOT_FOUND for an unknown id.
HttpReply GetJobHandler(const Scheduler& scheduler, const std::string& job_id);

// GET /api/jobs/{id}/series?metric=loss,learning_rate&max_points=2000[&smoothing=0.6]: the
// job's committed events (through `cache`, which reads only what was committed since its last
// request) as, per metric (FindSeriesMetric's names), its points downsampled to at most
// max_points (default 2000, 4 to 100000; server/http/series.h says what is kept), one point per
// step or epoch (after a resume, the latest attempt's: AttemptMarks):
//   {"jobId": "3", "throughSeq": 1234,
//    "series": [{"metric": "loss", "x": "step", "rawPoints": 100000,
//                "points": [[step, value, time_us], ...],
//                "ema": {"weight": 0.6, "last": 0.41, "count": 100000},
//                "smoothed": [[step, smoothed value, time_us], ...]}]}
// "ema" and "smoothed" only with `smoothing` (an EMA weight in [0, 1)): TensorBoard's debiased
// EMA (Ema in series.h) over every point of the series, server-side, so that a long series'
// curve is the full-resolution smoothing, not the smoothing of its min/max/last thinning;
// "smoothed" is that curve downsampled as its own series (its points' x may differ from
// "points"' x), "last" and "count" the average's state after the last point, from which a
// client continues it over the events after throughSeq.
// throughSeq is the highest seq read: every step event up to it is in the points (or was
// downsampled away), so a client follows the events after it. Errors: NOT_FOUND (job),
// INVALID_ARGUMENT naming metric, max_points or smoothing, the store's.
HttpReply SeriesHandler(const Scheduler& scheduler, SeriesCache& cache, const std::string& job_id,
                        const QueryParam& param);

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_DASHBOARD_API_H_
