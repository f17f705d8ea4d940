// Metrics: families registered once; scrape-time gauges set from MetricsSources, then the
// registry collected and serialised.
#include "server/http/metrics.h"

#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/http/nvml.h"

namespace mpsd::server {
namespace {

using mpsd::v1::Job;

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// "succeeded", "train_job": the enum names as labels.
std::string StateLabel(Job::State state) { return Lower(Job::State_Name(state)); }
std::string KindLabel(Job::Kind kind) { return Lower(Job::Kind_Name(kind)); }

// The model a job trains, its BenchJob's models joined with commas, or its EvalJob's or
// PredictJob's model.
std::string ModelOf(const Job& job) {
  if (job.spec().has_eval_job()) return job.spec().eval_job().model();
  if (job.spec().has_predict_job()) return job.spec().predict_job().model();
  if (job.spec().has_bench_job()) {
    std::string models;
    for (const std::string& model : job.spec().bench_job().models()) {
      if (!models.empty()) models += ",";
      models += model;
    }
    return models;
  }
  const mpsd::v1::ModelSpec& model = job.spec().train_job().model();
  return model.torchscript().empty() ? model.name() : "torchscript";
}

// A counter that mirrors a total kept elsewhere (the event log's, the supervisor's): raised by
// the difference. The total never falls while the daemon runs.
void RaiseTo(prometheus::Counter& counter, double total) {
  const double delta = total - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

// Sets the gauge of `label` in `series` (added to `family` on first use); removes the series
// of labels not in `values`.
void SetByDevice(prometheus::Family<prometheus::Gauge>& family,
                 std::map<std::string, prometheus::Gauge*>& series,
                 const std::map<std::string, double>& values) {
  for (auto it = series.begin(); it != series.end();) {
    if (values.count(it->first) == 0) {
      family.Remove(it->second);
      it = series.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [device, value] : values) {
    prometheus::Gauge*& gauge = series[device];
    if (gauge == nullptr) gauge = &family.Add({{"device", device}});
    gauge->Set(value);
  }
}

// The CUDA index of a device name: "cuda" → 0, "cuda:1" → 1; nullopt for other devices.
std::optional<unsigned int> CudaIndex(const std::string& device) {
  if (device == "cuda") return 0;
  unsigned int index = 0;
  if (absl::StartsWith(device, "cuda:") && absl::SimpleAtoi(device.substr(5), &index)) {
    return index;
  }
  return std::nullopt;
}

}  // namespace

std::vector<double> Metrics::StepDurationBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

Metrics::Metrics(std::string version)
    : version_(std::move(version)),
      registry_(std::make_shared<prometheus::Registry>()),
      build_info_(prometheus::BuildGauge()
                      .Name("mpsd_build_info")
                      .Help("mpsd's version and the LibTorch version its executor runs; always 1")
                      .Register(*registry_)),
      jobs_(prometheus::BuildGauge()
                .Name("mpsd_jobs")
                .Help("Jobs the daemon knows, by state and kind")
                .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("mpsd_queue_depth")
                       .Help("Jobs waiting to run (QUEUED)")
                       .Register(*registry_)),
      queue_paused_(prometheus::BuildGauge()
                        .Name("mpsd_queue_paused")
                        .Help("1 while the queue is paused (mpsctl pause), else 0")
                        .Register(*registry_)),
      artifacts_bytes_(prometheus::BuildGauge()
                           .Name("mpsd_artifacts_bytes")
                           .Help("Bytes of jobs' artifacts under <state_dir>/artifacts (measured "
                                 "at most every 10 s)")
                           .Register(*registry_)),
      artifacts_deleted_(prometheus::BuildCounter()
                             .Name("mpsd_artifacts_deleted_bytes_total")
                             .Help("Bytes of artifacts deleted (mpsctl rm, mpsctl gc, the "
                                   "artifacts_retention policy) since the daemon started")
                             .Register(*registry_)),
      submitted_(prometheus::BuildCounter()
                     .Name("mpsd_jobs_submitted_total")
                     .Help("Jobs submitted since the daemon started")
                     .Register(*registry_)),
      steps_(prometheus::BuildCounter()
                 .Name("mpsd_job_steps_total")
                 .Help("Training steps (optimizer updates) reported since the daemon started")
                 .Register(*registry_)),
      samples_(prometheus::BuildCounter()
                   .Name("mpsd_samples_total")
                   .Help("Training examples processed since the daemon started")
                   .Register(*registry_)),
      step_duration_(prometheus::BuildHistogram()
                         .Name("mpsd_step_duration_seconds")
                         .Help("Wall time per training step, averaged over each read-back group")
                         .Register(*registry_)),
      allocated_(prometheus::BuildGauge()
                     .Name("mpsd_device_memory_allocated_bytes")
                     .Help("Device memory held by live tensors in the executor (0 on cpu)")
                     .Register(*registry_)),
      reserved_(prometheus::BuildGauge()
                    .Name("mpsd_device_memory_reserved_bytes")
                    .Help("Device memory the executor's caching allocator holds (0 on cpu)")
                    .Register(*registry_)),
      utilization_(prometheus::BuildGauge()
                       .Name("mpsd_device_utilization_ratio")
                       .Help("Fraction of the last sample period a kernel ran (NVML; CUDA only)")
                       .Register(*registry_)),
      restarts_(prometheus::BuildCounter()
                    .Name("mpsd_executor_restarts_total")
                    .Help("Executor processes replaced since the daemon started, by reason")
                    .Register(*registry_)),
      streams_open_(prometheus::BuildGauge()
                        .Name("mpsd_event_streams_open")
                        .Help("StreamEvents calls in progress")
                        .Register(*registry_)),
      events_stored_(prometheus::BuildCounter()
                         .Name("mpsd_events_stored_total")
                         .Help("Job events committed to the store since the daemon started")
                         .Register(*registry_)),
      resident_(prometheus::BuildGauge()
                    .Name("mpsd_process_resident_memory_bytes")
                    .Help("Resident set size of the daemon process (not the executor)")
                    .Register(*registry_)),
      running_job_info_(prometheus::BuildGauge()
                            .Name("mpsd_running_job_info")
                            .Help("The running job's id and model; always 1, absent when idle")
                            .Register(*registry_)),
      http_open_(prometheus::BuildGauge()
                     .Name("mpsd_http_connections_open")
                     .Help("Connections open on the HTTP listener")
                     .Register(*registry_)),
      http_refused_(prometheus::BuildCounter()
                        .Name("mpsd_http_connections_refused_total")
                        .Help("HTTP connections refused over http_limits' connection caps")
                        .Register(*registry_)),
      http_timed_out_(prometheus::BuildCounter()
                          .Name("mpsd_http_requests_timed_out_total")
                          .Help("HTTP connections closed because a request missed "
                                "http_limits.request_timeout_s")
                          .Register(*registry_)),
      submitted_total_(submitted_.Add({})),
      steps_total_(steps_.Add({})),
      samples_total_(samples_.Add({})),
      step_duration_seconds_(step_duration_.Add({}, StepDurationBuckets())) {
  for (const auto& reason : {"crash", "per_job", "restart_after_jobs", "memory", "cancel_timeout",
                             "user_code_timeout"}) {
    restarts_.Add({{"reason", reason}});
  }
}

Metrics::~Metrics() = default;

void Metrics::SetSources(MetricsSources sources) {
  absl::MutexLock lock(&mu_);
  sources_ = std::move(sources);
}

void Metrics::ObserveEvent(const Job& /*job*/, const mpsd::v1::JobEvent& event) {
  if (event.has_state() && event.state().state() == Job::QUEUED && event.seq() == 1) {
    submitted_total_.Increment();
  } else if (event.has_step()) {
    steps_total_.Increment();
    samples_total_.Increment(event.step().batch_size());
    step_duration_seconds_.Observe(event.step().step_time_ms() / 1000.0);
  }
}

std::string Metrics::Scrape() {
  absl::MutexLock lock(&mu_);
  if (sources_.server_status) UpdateFromStatus(sources_.server_status());
  UpdateJobs();
  UpdateRunningJob();
  UpdateDevice();
  UpdateRestarts();
  UpdateHttp();
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

void Metrics::UpdateFromStatus(const mpsd::v1::ServerStatus& status) {
  queue_depth_.Add({}).Set(status.queued_jobs());
  queue_paused_.Add({}).Set(status.queue_paused() ? 1 : 0);
  artifacts_bytes_.Add({}).Set(static_cast<double>(status.artifacts_bytes()));
  RaiseTo(artifacts_deleted_.Add({}), static_cast<double>(status.artifacts_deleted_bytes()));
  streams_open_.Add({}).Set(status.open_streams());
  resident_.Add({}).Set(static_cast<double>(status.rss_bytes()));
  RaiseTo(events_stored_.Add({}), static_cast<double>(status.events_stored()));
}

void Metrics::UpdateJobs() {
  if (!sources_.job_counts) return;
  const auto counts = sources_.job_counts();
  // Every (state, kind) pair, zeros included, so that a rate over a state that empties works.
  for (int s = Job::QUEUED; s <= Job::INTERRUPTED; ++s) {
    for (int k : {Job::TRAIN_JOB, Job::BENCH_JOB, Job::EVAL_JOB, Job::PREDICT_JOB}) {
      const auto state = static_cast<Job::State>(s);
      const auto kind = static_cast<Job::Kind>(k);
      auto it = counts.find({state, kind});
      jobs_.Add({{"state", StateLabel(state)}, {"kind", KindLabel(kind)}})
          .Set(it == counts.end() ? 0 : static_cast<double>(it->second));
    }
  }
}

void Metrics::UpdateRunningJob() {
  std::optional<Job> running;
  if (sources_.running_job) running = sources_.running_job();
  const std::string key = running ? running->id() + "\n" + ModelOf(*running) : "";
  if (key == running_key_) return;
  if (running_series_ != nullptr) running_job_info_.Remove(running_series_);
  running_series_ = nullptr;
  running_key_ = key;
  if (running) {
    running_series_ =
        &running_job_info_.Add({{"job_id", running->id()}, {"model", ModelOf(*running)}});
    running_series_->Set(1);
  }
}

void Metrics::UpdateDevice() {
  std::optional<mpsd::v1::DeviceInfo> device;
  if (sources_.device) device = sources_.device();
  std::map<std::string, double> allocated, reserved, utilization;
  std::string torch;
  if (device) {
    torch = device->torch_version();
    allocated[device->kind()] = static_cast<double>(device->allocated_bytes());
    reserved[device->kind()] = static_cast<double>(device->reserved_bytes());
    if (std::optional<unsigned int> index = CudaIndex(device->kind())) {
      if (!nvml_tried_) {
        nvml_tried_ = true;
        nvml_ = Nvml::Load();
      }
      if (nvml_ != nullptr) {
        if (std::optional<double> ratio = nvml_->Utilization(*index)) {
          utilization[device->kind()] = *ratio;
        }
      }
    }
  }
  SetByDevice(allocated_, allocated_series_, allocated);
  SetByDevice(reserved_, reserved_series_, reserved);
  SetByDevice(utilization_, utilization_series_, utilization);
  // build_info keeps the last torch version known while no executor answers.
  if (build_info_series_ == nullptr || (!torch.empty() && torch != build_torch_)) {
    if (build_info_series_ != nullptr) build_info_.Remove(build_info_series_);
    if (!torch.empty()) build_torch_ = torch;
    build_info_series_ = &build_info_.Add({{"version", version_}, {"torch", build_torch_}});
    build_info_series_->Set(1);
  }
}

void Metrics::UpdateHttp() {
  if (!sources_.http_connections) return;
  const HttpConnectionCounts counts = sources_.http_connections();
  http_open_.Add({}).Set(static_cast<double>(counts.open));
  RaiseTo(http_refused_.Add({}), static_cast<double>(counts.refused));
  RaiseTo(http_timed_out_.Add({}), static_cast<double>(counts.timed_out));
}

void Metrics::UpdateRestarts() {
  if (!sources_.executor_restarts) return;
  for (const auto& [reason, total] : sources_.executor_restarts()) {
    RaiseTo(restarts_.Add({{"reason", reason}}), static_cast<double>(total));
  }
}

}  // namespace mpsd::server
