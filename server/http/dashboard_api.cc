// The dashboard's JSON endpoints: jobs in protobuf's JSON mapping, and metric series.
#include "server/http/dashboard_api.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "api/json_text.h"
#include "google/protobuf/util/json_util.h"
#include "server/core/job_query.h"
#include "server/http/series.h"

namespace mpsd::server {
namespace {

using mpsd::v1::Job;

constexpr int kDefaultMaxPoints = 2000;
constexpr int kMaxMaxPoints = 100000;

// A JSON number; NaN and infinities, which JSON has no spelling for, become null.
std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.9g", value);
}

absl::StatusOr<std::vector<Job::State>> ParseStates(const std::string& text) {
  std::vector<Job::State> states;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    Job::State state;
    if (!Job::State_Parse(absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name)), &state) ||
        state == Job::STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat("state: unknown job state \"", name,
                       "\" (queued, running, succeeded, failed, cancelled, interrupted)"));
    }
    states.push_back(state);
  }
  return states;
}

absl::StatusOr<Job::Kind> ParseKind(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower.empty()) return Job::KIND_UNSPECIFIED;
  if (lower == "trainjob" || lower == "train_job") return Job::TRAIN_JOB;
  if (lower == "benchjob" || lower == "bench_job") return Job::BENCH_JOB;
  if (lower == "sweep") return Job::SWEEP;
  if (lower == "evaljob" || lower == "eval_job") return Job::EVAL_JOB;
  if (lower == "predictjob" || lower == "predict_job") return Job::PREDICT_JOB;
  return absl::InvalidArgumentError(absl::StrCat(
      "kind: unknown job kind \"", text, "\" (TrainJob, BenchJob, EvalJob, PredictJob or Sweep)"));
}

absl::StatusOr<int> ParseInt(const std::string& text, absl::string_view name, int fallback, int min,
                             int max) {
  if (text.empty()) return fallback;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": must be an integer from ", min, " to ", max, ", got \"", text, "\""));
  }
  return value;
}

absl::StatusOr<mpsd::v1::ListJobsRequest> ListRequest(const QueryParam& param) {
  mpsd::v1::ListJobsRequest request;
  absl::StatusOr<std::vector<Job::State>> states = ParseStates(param("state"));
  if (!states.ok()) return states.status();
  for (Job::State state : *states) request.add_states(state);
  absl::StatusOr<Job::Kind> kind = ParseKind(param("kind"));
  if (!kind.ok()) return kind.status();
  request.set_kind(*kind);
  absl::StatusOr<int> page_size = ParseInt(param("page_size"), "page_size", 0, 0, kMaxPageSize);
  if (!page_size.ok()) return page_size.status();
  request.set_page_size(*page_size);
  request.set_page_token(param("page_token"));
  request.set_name(param("name"));
  for (absl::string_view label : absl::StrSplit(param("label"), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(label, absl::MaxSplits('=', 1));
    if (kv.first.empty() || label.find('=') == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("label: expected key=value[,key=value...], got \"", label, "\""));
    }
    (*request.mutable_labels())[kv.first] = kv.second;
  }
  return request;
}

absl::StatusOr<std::vector<SeriesMetric>> ParseMetrics(const std::string& text) {
  std::vector<SeriesMetric> metrics;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<SeriesMetric> metric = FindSeriesMetric(absl::StripAsciiWhitespace(name));
    if (!metric.ok()) return metric.status();
    metrics.push_back(*metric);
  }
  if (metrics.empty()) return absl::InvalidArgumentError("metric: required, e.g. metric=loss");
  return metrics;
}

// `points` as JSON arrays [x, value, time_us], comma-separated.
void AppendPoints(const std::vector<SeriesPoint>& points, std::string* out) {
  for (size_t k = 0; k < points.size(); ++k) {
    absl::StrAppend(out, k ? "," : "", "[", points[k].x, ",", JsonNumber(points[k].value), ",",
                    points[k].time_us, "]");
  }
}

// The `smoothing` parameter: absent, or a weight in [0, 1).
absl::StatusOr<std::optional<double>> ParseSmoothing(const std::string& text) {
  if (text.empty()) return std::optional<double>();
  double weight = 0;
  if (!absl::SimpleAtod(text, &weight) || !(weight >= 0 && weight < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "smoothing: must be a number from 0 to below 1 (an EMA weight), got \"", text, "\""));
  }
  return std::optional<double>(weight);
}

std::string SeriesJson(const std::string& job_id, const SeriesCache::Result& result) {
  std::string out = absl::StrCat("{\"jobId\":", api::JsonString(job_id),
                                 ",\"throughSeq\":", result.through_seq, ",\"series\":[");
  for (size_t i = 0; i < result.series.size(); ++i) {
    const SeriesCache::Series& series = result.series[i];
    absl::StrAppend(&out, i ? "," : "", "{\"metric\":", api::JsonString(series.metric.name),
                    ",\"x\":\"",
                    series.metric.source == SeriesMetric::Source::kStep ? "step" : "epoch",
                    "\",\"rawPoints\":", series.raw_points, ",\"points\":[");
    AppendPoints(series.points, &out);
    out += "]";
    if (series.smoothed_set) {
      absl::StrAppend(&out, ",\"ema\":{\"weight\":", JsonNumber(series.ema_weight),
                      ",\"last\":", absl::StrFormat("%.17g", series.ema_last),
                      ",\"count\":", series.ema_count, "},\"smoothed\":[");
      AppendPoints(series.smoothed, &out);
      out += "]";
    }
    out += "}";
  }
  out += "]}";
  return out;
}

}  // namespace

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

HttpReply ErrorReply(const absl::Status& status) {
  HttpReply reply;
  reply.status = HttpStatusFor(status.code());
  reply.body = absl::StrCat("{\"code\":", api::JsonString(absl::StatusCodeToString(status.code())),
                            ",\"message\":", api::JsonString(status.message()), "}");
  return reply;
}

HttpReply JsonReply(const google::protobuf::Message& message) {
  HttpReply reply;
  const auto status = google::protobuf::util::MessageToJsonString(message, &reply.body);
  if (!status.ok()) {
    return ErrorReply(absl::InternalError(absl::StrCat("JSON: ", status.ToString())));
  }
  return reply;
}

HttpReply ListJobsHandler(const Scheduler& scheduler, const QueryParam& param) {
  absl::StatusOr<mpsd::v1::ListJobsRequest> request = ListRequest(param);
  if (!request.ok()) return ErrorReply(request.status());
  absl::StatusOr<JobQuery> query = QueryForPage(*request);
  if (!query.ok()) return ErrorReply(query.status());
  return JsonReply(PageFrom(*request, scheduler.List(*query)));
}

HttpReply GetJobHandler(const Scheduler& scheduler, const std::string& job_id) {
  absl::StatusOr<Job> job = scheduler.Get(job_id);
  if (!job.ok()) return ErrorReply(job.status());
  return JsonReply(*job);
}

HttpReply SeriesHandler(const Scheduler& scheduler, SeriesCache& cache, const std::string& job_id,
                        const QueryParam& param) {
  absl::StatusOr<Job> job = scheduler.Get(job_id);
  if (!job.ok()) return ErrorReply(job.status());
  absl::StatusOr<std::vector<SeriesMetric>> metrics = ParseMetrics(param("metric"));
  if (!metrics.ok()) return ErrorReply(metrics.status());
  absl::StatusOr<int> max_points =
      ParseInt(param("max_points"), "max_points", kDefaultMaxPoints, 4, kMaxMaxPoints);
  if (!max_points.ok()) return ErrorReply(max_points.status());
  absl::StatusOr<std::optional<double>> smoothing = ParseSmoothing(param("smoothing"));
  if (!smoothing.ok()) return ErrorReply(smoothing.status());
  absl::StatusOr<SeriesCache::Result> result =
      cache.Query(job_id, *metrics, *max_points, *smoothing);
  if (!result.ok()) return ErrorReply(result.status());
  HttpReply reply;
  reply.body = SeriesJson(job_id, *result);
  return reply;
}

}  // namespace mpsd::server
