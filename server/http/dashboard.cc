// The dashboard's routes on cpp-httplib: the embedded page, the JSON endpoints
// (server/http/dashboard_api.h) and the SSE event stream (server/http/sse.h).
#include "server/http/dashboard.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "api/job_state.h"
#include "google/protobuf/util/json_util.h"
#include "httplib.h"
#include "server/access/auth.h"
#include "server/core/artifacts.h"
#include "server/http/dashboard_api.h"
#include "server/http/dashboard_assets.h"
#include "server/http/sse.h"
#include "zlib.h"

namespace mpsd::server {
namespace {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;

// How often a waiting stream looks at HttpServer::stopping().
constexpr absl::Duration kStopPoll = absl::Milliseconds(500);
// What an EventSource waits before reconnecting, milliseconds.
constexpr int kRetryMs = 1000;

// Headers every answer carries: no sniffing, no framing by other sites, no referrer leaks, and a
// content security policy that allows nothing but this origin (the page loads only from mpsd).
void SecurityHeaders(httplib::Response& response) {
  response.set_header("X-Content-Type-Options", "nosniff");
  response.set_header("X-Frame-Options", "DENY");
  response.set_header("Referrer-Policy", "no-referrer");
  response.set_header("Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data:; style-src 'self' "
                      "'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'");
}

// Bodies smaller than this go out as they are.
constexpr size_t kGzipMinBytes = 1400;

// `body` as a gzip stream (RFC 1952) at zlib's default level; nullopt if zlib fails.
std::optional<std::string> Gzip(const std::string& body) {
  z_stream zs{};
  // 15 + 16: the largest window, with a gzip header and trailer.
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return std::nullopt;
  }
  std::string out(deflateBound(&zs, body.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  zs.avail_in = static_cast<uInt>(body.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return std::nullopt;
  return out;
}

// Sends `reply`, gzipped when the client accepts it. The content type carries a charset: for
// "application/json" alone cpp-httplib would compress the body itself, with brotli at its
// slowest quality whenever a browser accepts br (seconds for the 1,000-job list).
void Send(const HttpReply& reply, const httplib::Request& request, httplib::Response& response) {
  SecurityHeaders(response);
  response.status = reply.status;
  response.set_header("Cache-Control", "no-store");
  response.set_header("Vary", "Accept-Encoding");
  const std::string type = reply.content_type + "; charset=utf-8";
  if (reply.body.size() >= kGzipMinBytes &&
      request.get_header_value("Accept-Encoding").find("gzip") != std::string::npos) {
    if (std::optional<std::string> gzipped = Gzip(reply.body)) {
      response.set_header("Content-Encoding", "gzip");
      response.set_content(*gzipped, type.c_str());
      return;
    }
  }
  response.set_content(reply.body, type.c_str());
}

QueryParam ParamsOf(const httplib::Request& request) {
  return [&request](absl::string_view name) {
    return request.get_param_value(std::string(name).c_str());
  };
}

void ServeAsset(const httplib::Request& request, httplib::Response& response) {
  SecurityHeaders(response);
  const DashboardAsset* asset = FindDashboardAsset(request.path);
  if (asset == nullptr) {
    response.status = 404;
    response.set_content("not found\n", "text/plain; charset=utf-8");
    return;
  }
  // Revalidated on every load (no-cache), answered 304 while unchanged: a new mpsd serves its
  // own page at once.
  response.set_header("Cache-Control", "no-cache");
  response.set_header("ETag", std::string(asset->etag));
  if (request.get_header_value("If-None-Match") == asset->etag) {
    response.status = 304;
    return;
  }
  response.set_content(asset->body.data(), asset->body.size(),
                       std::string(asset->content_type).c_str());
}

std::string EventJson(const JobEvent& event) {
  std::string json;
  // JobEvent has no field the JSON printer can fail on; an empty body would still frame.
  (void)google::protobuf::util::MessageToJsonString(event, &json);
  return json;
}

// One SSE response: owns the follower that the provider pulls from, on the worker's thread.
struct EventStream {
  EventStream(Scheduler* scheduler, const HttpServer* http, const std::string& job_id,
              int64_t after_seq, int64_t omit_steps_through, absl::Duration heartbeat_interval)
      : scheduler(scheduler),
        http(http),
        follower(&scheduler->events(), job_id, after_seq),
        job_id(job_id),
        omit_steps_through(omit_steps_through),
        heartbeat_interval(heartbeat_interval),
        last_sent(absl::Now()) {}

  // cpp-httplib's chunked content provider: sends what is committed, or waits for it (up to
  // kStopPoll), and a heartbeat comment when idle for the interval. Returns false to abort.
  bool Provide(httplib::DataSink& sink) {
    if (!started) {
      started = true;
      if (!Write(sink, SseRetry(kRetryMs))) return false;
    }
    if (http->stopping()) {
      sink.done();
      return true;
    }
    absl::StatusOr<EventFollower::Batch> batch =
        follower.Next(std::min(kStopPoll, last_sent + heartbeat_interval - absl::Now()));
    if (!batch.ok()) {
      Write(sink, SseComment(absl::StrCat("error: ", batch.status().message())));
      sink.done();
      return true;
    }
    std::string out;
    for (const JobEvent& event : batch->events) {
      if (event.has_step() && event.seq() <= omit_steps_through) continue;
      out += SseMessage(event.seq(), EventJson(event));
    }
    if (out.empty() && absl::Now() - last_sent >= heartbeat_interval) {
      out = SseComment(
          absl::StrCat("heartbeat ", Job::State_Name(scheduler->HeartbeatOf(job_id).state())));
    }
    if (!out.empty() && !Write(sink, out)) return false;
    if (batch->finished || batch->closed) sink.done();
    return true;
  }

  bool Write(httplib::DataSink& sink, const std::string& text) {
    last_sent = absl::Now();
    return sink.write(text.data(), text.size());
  }

  Scheduler* const scheduler;
  const HttpServer* const http;
  EventFollower follower;
  const std::string job_id;
  const int64_t omit_steps_through;
  const absl::Duration heartbeat_interval;
  absl::Time last_sent;
  bool started = false;
};

void ServeEvents(Scheduler* scheduler, const HttpServer* http, absl::Duration heartbeat_interval,
                 const httplib::Request& request, httplib::Response& response) {
  const std::string job_id = request.matches[1];
  absl::StatusOr<Job> job = scheduler->Get(job_id);
  if (!job.ok()) return Send(ErrorReply(job.status()), request, response);
  absl::StatusOr<int64_t> after_seq = ResumeAfterSeq(request.get_param_value("after_seq"),
                                                     request.get_header_value("Last-Event-ID"));
  if (!after_seq.ok()) return Send(ErrorReply(after_seq.status()), request, response);
  int64_t omit = 0;
  const std::string omit_text = request.get_param_value("omit_steps_through");
  if (!omit_text.empty() && (!absl::SimpleAtoi(omit_text, &omit) || omit < 0)) {
    return Send(ErrorReply(absl::InvalidArgumentError(
                    "omit_steps_through: must be an integer >= 0 (a series' throughSeq)")),
                request, response);
  }
  if (*after_seq > job->last_seq()) {
    return Send(ErrorReply(absl::OutOfRangeError(
                    absl::StrCat("after_seq: ", *after_seq, " is beyond job ", job_id,
                                 "'s last event (seq ", job->last_seq(), ")"))),
                request, response);
  }
  SecurityHeaders(response);
  if (api::IsTerminal(job->state()) && *after_seq >= job->last_seq()) {
    response.status = 204;  // Nothing after the terminal event: an EventSource stops here.
    return;
  }
  response.set_header("Cache-Control", "no-store");
  response.set_header("X-Accel-Buffering", "no");  // Proxies (nginx) must not buffer a stream.
  auto stream =
      std::make_shared<EventStream>(scheduler, http, job_id, *after_seq, omit, heartbeat_interval);
  // Exactly "text/event-stream" (SSE is UTF-8 by definition): cpp-httplib compresses every
  // other text/* type for a browser that accepts gzip or br, and a compressor holds the stream's
  // messages back until it ends.
  response.set_chunked_content_provider(
      "text/event-stream",
      [stream](size_t /*offset*/, httplib::DataSink& sink) { return stream->Provide(sink); });
}

std::string ArtifactsDirOf(const std::string& artifacts_dir, const std::string& job_id) {
  return (std::filesystem::path(artifacts_dir) / job_id).string();
}

void ServeArtifactList(Scheduler* scheduler, const std::string& artifacts_dir,
                       const httplib::Request& request, httplib::Response& response) {
  const std::string job_id = request.matches[1];
  absl::StatusOr<Job> job = scheduler->Get(job_id);
  if (!job.ok()) return Send(ErrorReply(job.status()), request, response);
  mpsd::v1::ListArtifactsResponse list;
  if (!artifacts_dir.empty()) {
    absl::StatusOr<std::vector<mpsd::v1::Artifact>> artifacts =
        ListArtifacts(ArtifactsDirOf(artifacts_dir, job_id));
    if (!artifacts.ok()) return Send(ErrorReply(artifacts.status()), request, response);
    for (mpsd::v1::Artifact& artifact : *artifacts) *list.add_artifacts() = std::move(artifact);
  }
  Send(JsonReply(list), request, response);
}

// One artifact, streamed from the file in 1 MiB pieces (a checkpoint may be GiBs), as an
// attachment named after the file.
void ServeArtifact(Scheduler* scheduler, const std::string& artifacts_dir,
                   const httplib::Request& request, httplib::Response& response) {
  const std::string job_id = request.matches[1];
  absl::StatusOr<Job> job = scheduler->Get(job_id);
  if (!job.ok()) return Send(ErrorReply(job.status()), request, response);
  if (artifacts_dir.empty()) {
    return Send(ErrorReply(absl::NotFoundError("name: this mpsd keeps no artifacts")), request,
                response);
  }
  absl::StatusOr<std::string> path =
      ResolveArtifact(ArtifactsDirOf(artifacts_dir, job_id), std::string(request.matches[2]));
  if (!path.ok()) return Send(ErrorReply(path.status()), request, response);
  auto file = std::make_shared<std::ifstream>(*path, std::ios::binary);
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(*path, error);
  if (!*file || error) {
    return Send(ErrorReply(absl::InternalError(absl::StrCat("cannot read artifact ", *path))),
                request, response);
  }
  SecurityHeaders(response);
  response.set_header("Cache-Control", "no-store");
  std::string filename = std::filesystem::path(*path).filename().string();
  // Artifact names are checked paths; quotes and controls would still break the header.
  for (char& c : filename) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = '_';
  }
  response.set_header("Content-Disposition",
                      absl::StrCat("attachment; filename=\"", filename, "\""));
  response.set_content_provider(
      static_cast<size_t>(size), "application/octet-stream",
      [file](size_t offset, size_t length, httplib::DataSink& sink) {
        std::string buffer(std::min<size_t>(length, size_t{1} << 20), '\0');
        file->seekg(static_cast<std::streamoff>(offset));
        file->read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        const std::streamsize got = file->gcount();
        if (got <= 0) return false;
        return sink.write(buffer.data(), static_cast<size_t>(got));
      });
}

void ServeWhoami(const HttpCaller& caller, const httplib::Request& request,
                 httplib::Response& response) {
  HttpReply reply;
  // Token names are [A-Za-z0-9._-] (server/access/auth.h): nothing to escape.
  reply.body = absl::StrCat(R"({"name":")", caller.name, R"(","role":")",
                            std::string(RoleName(caller.role)), R"("})");
  Send(reply, request, response);
}

void ServeCancel(Scheduler* scheduler, const HttpCaller& caller, const httplib::Request& request,
                 httplib::Response& response) {
  const std::string job_id = request.matches[1];
  absl::StatusOr<Job> job = scheduler->Get(job_id);
  if (!job.ok()) return Send(ErrorReply(job.status()), request, response);
  // Admin tokens may cancel any job, submitter tokens the jobs they submitted (Job.submitted_by
  // is the submitting token's name), as CancelJob on gRPC.
  absl::Status allowed =
      CanCancel(Principal{caller.name, caller.role}, job->submitted_by(), job_id);
  if (!allowed.ok()) return Send(ErrorReply(allowed), request, response);
  absl::StatusOr<Job> cancelled = scheduler->Cancel(job_id);
  if (!cancelled.ok()) return Send(ErrorReply(cancelled.status()), request, response);
  Send(JsonReply(*cancelled), request, response);
}

}  // namespace

Dashboard::Dashboard(Scheduler* scheduler, const DashboardOptions& options)
    : scheduler_(scheduler), options_(options), series_(&scheduler->events(), options.series) {
  if (options.executor_pid) {
    ResourceSampler::Options sampler;
    sampler.running_job = [scheduler] { return scheduler->GetQueueStats().running_job_id; };
    sampler.executor_pid = options.executor_pid;
    resources_ = std::make_unique<ResourceSampler>(std::move(sampler));
  }
}

namespace {

// A JSON number, or null for nullopt and non-finite values.
template <typename T>
std::string JsonOrNull(const std::optional<T>& value) {
  if (!value || !std::isfinite(static_cast<double>(*value))) return "null";
  return absl::StrFormat("%.6g", static_cast<double>(*value));
}

void ServeResources(Scheduler* scheduler, const ResourceSampler* sampler,
                    const httplib::Request& request, httplib::Response& response) {
  const std::string job_id = request.matches[1];
  absl::StatusOr<Job> job = scheduler->Get(job_id);
  if (!job.ok()) return Send(ErrorReply(job.status()), request, response);
  HttpReply reply;
  reply.body = absl::StrCat("{\"jobId\":\"", job_id, "\",\"samples\":[");
  const std::vector<ResourceSample> samples =
      sampler != nullptr ? sampler->SamplesOf(job_id) : std::vector<ResourceSample>();
  for (size_t i = 0; i < samples.size(); ++i) {
    const ResourceSample& s = samples[i];
    absl::StrAppend(&reply.body, i ? "," : "", "[", s.time_us, ",", JsonOrNull(s.cpu_percent), ",",
                    s.rss_bytes ? absl::StrCat(*s.rss_bytes) : "null", ",",
                    JsonOrNull(s.gpu_utilization), "]");
  }
  reply.body += "]}";
  Send(reply, request, response);
}

}  // namespace

void Dashboard::Register(HttpServer* http) {
  auto asset = [](const HttpCaller&, const httplib::Request& request, httplib::Response& response) {
    ServeAsset(request, response);
  };
  http->Get("/", asset, /*public_route=*/true);
  http->Get("/assets/[A-Za-z0-9._-]+", asset, /*public_route=*/true);
  http->Get("/api/whoami",
            [](const HttpCaller& caller, const httplib::Request& request,
               httplib::Response& response) { ServeWhoami(caller, request, response); });
  Scheduler* scheduler = scheduler_;
  http->Get("/api/jobs", [scheduler](const HttpCaller&, const httplib::Request& request,
                                     httplib::Response& response) {
    Send(ListJobsHandler(*scheduler, ParamsOf(request)), request, response);
  });
  http->Get("/api/jobs/([0-9]+)", [scheduler](const HttpCaller&, const httplib::Request& request,
                                              httplib::Response& response) {
    Send(GetJobHandler(*scheduler, request.matches[1]), request, response);
  });
  http->Get("/api/jobs/([0-9]+)/series", [this](const HttpCaller&, const httplib::Request& request,
                                                httplib::Response& response) {
    Send(SeriesHandler(*scheduler_, series_, request.matches[1], ParamsOf(request)), request,
         response);
  });
  const absl::Duration heartbeat = options_.heartbeat_interval;
  http->Get("/api/jobs/([0-9]+)/events",
            [scheduler, http, heartbeat](const HttpCaller&, const httplib::Request& request,
                                         httplib::Response& response) {
              ServeEvents(scheduler, http, heartbeat, request, response);
            });
  const ResourceSampler* sampler = resources_.get();
  http->Get("/api/jobs/([0-9]+)/resources",
            [scheduler, sampler](const HttpCaller&, const httplib::Request& request,
                                 httplib::Response& response) {
              ServeResources(scheduler, sampler, request, response);
            });
  const std::string artifacts_dir = options_.artifacts_dir;
  http->Get("/api/jobs/([0-9]+)/artifacts",
            [scheduler, artifacts_dir](const HttpCaller&, const httplib::Request& request,
                                       httplib::Response& response) {
              ServeArtifactList(scheduler, artifacts_dir, request, response);
            });
  http->Get("/api/jobs/([0-9]+)/artifacts/(.+)",
            [scheduler, artifacts_dir](const HttpCaller&, const httplib::Request& request,
                                       httplib::Response& response) {
              ServeArtifact(scheduler, artifacts_dir, request, response);
            });
  http->Post("/api/jobs/([0-9]+)/cancel",
             [scheduler](const HttpCaller& caller, const httplib::Request& request,
                         httplib::Response& response) {
               ServeCancel(scheduler, caller, request, response);
             });
}

}  // namespace mpsd::server
