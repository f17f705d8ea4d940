// The LibTorch executor: dispatches each job spec to its kind (TrainJob: trainer/train_job.h and
// trainer/run_train_job.h; BenchJob: trainer/bench.h; EvalJob: trainer/eval_job.h;
// PredictJob: trainer/predict_job.h), applies the job's context, and keeps every
// LibTorch call behind the exception firewall (trainer/torch_errors.h).
#include "trainer/torch_executor.h"

#include <sched.h>
#include <torch/csrc/jit/runtime/print_handler.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/effective_spec.h"
#include "api/error_cause.h"
#include "trainer/bench.h"
#include "trainer/device.h"
#include "trainer/eval_job.h"
#include "trainer/fault_injection.h"
#include "trainer/fused_train.h"
#include "trainer/input_limits.h"
#include "trainer/log.h"
#include "trainer/models.h"
#include "trainer/predict_job.h"
#include "trainer/run_train_job.h"
#include "trainer/torch_errors.h"
#include "trainer/train_job.h"

namespace mpsd::trainer {
namespace {

class TorchExecutor final : public Executor {
 public:
  TorchExecutor(const Options& options, DeviceInventory inventory)
      : options_(options),
        inventory_(std::move(inventory)),
        cpu_threads_(torch::get_num_threads()) {}

  absl::Status Validate(const mpsd::v1::SubmitJobRequest& submitted) const override {
    const mpsd::v1::SubmitJobRequest spec = api::EffectiveSpec(submitted);
    if (spec.has_bench_job()) {
      return CatchTorchErrors([&] {
        return ValidateBenchJob(spec.bench_job(), inventory_, options_.allow_fault_injection,
                                options_.artifacts_dir);
      });
    }
    if (spec.has_eval_job()) return ValidateEvalJob(spec.eval_job(), inventory_, options_);
    if (spec.has_predict_job()) {
      return ValidatePredictJob(spec.predict_job(), inventory_, options_);
    }
    return CatchTorchErrors([&]() -> absl::Status {
      absl::StatusOr<TrainJobConfig> config = ResolveJob(spec, nullptr);
      if (!config.ok() || !submitted.sweep().has_scheduler()) return config.status();
      // A trial validated with its sweep's scheduler: the metric it stops trials by must be
      // one this trial reports every epoch (server/core/trial_stopping.h applies it).
      return CheckEpochMetric(*config, submitted.sweep().scheduler().metric(),
                              FieldChecks("sweep.scheduler"), "metric");
    });
  }

  absl::Status Run(const JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
                   const EventSink& sink, const CancelFlag& cancel) override;

  absl::StatusOr<std::vector<int>> PlanFusion(const std::vector<mpsd::v1::SubmitJobRequest>& specs,
                                              int max_trials) const override;

  std::vector<absl::Status> RunFused(const std::vector<api::TrialRun>& trials,
                                     const api::FusionOptions& options) override;

  mpsd::v1::DeviceInfo GetDevice() const override;

  absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(
      const mpsd::v1::ListModelsRequest& request) const override {
    return trainer::ListModels(request);
  }

 private:
  // The TrainJob of `spec` resolved (fault injection checked first); `context` as
  // ResolveTrainJob takes it (nullptr: validation).
  absl::StatusOr<TrainJobConfig> ResolveJob(const mpsd::v1::SubmitJobRequest& spec,
                                            const JobContext* context) const;

  absl::Status RunBench(const mpsd::v1::SubmitJobRequest& spec, const EventSink& sink,
                        const std::atomic<bool>& cancelled);
  absl::Status RunEval(const mpsd::v1::SubmitJobRequest& spec, const EventSink& sink,
                       const std::atomic<bool>& cancelled);
  absl::Status RunTrain(const JobContext& context, const mpsd::v1::SubmitJobRequest& spec,
                        const EventSink& sink, const std::atomic<bool>& cancelled);

  // Constant after construction.
  const Options options_;
  const DeviceInventory inventory_;
  const int cpu_threads_;

  std::atomic<int64_t> jobs_run_{0};
};

absl::StatusOr<TrainJobConfig> TorchExecutor::ResolveJob(const mpsd::v1::SubmitJobRequest& spec,
                                                         const JobContext* context) const {
  // Fault injection (tests only): rejected unless the daemon allows it.
  if (absl::Status s = CheckFaultInjection(spec, options_.allow_fault_injection); !s.ok()) {
    return s;
  }
  switch (spec.spec_case()) {
    case mpsd::v1::SubmitJobRequest::kTrainJob:
      return ResolveTrainJob(spec.train_job(), inventory_, options_, context);
    case mpsd::v1::SubmitJobRequest::kBenchJob:  // Validate and Run handle it (trainer/bench.h)
      return absl::InvalidArgumentError("spec: a BenchJob is not a TrainJob");
    case mpsd::v1::SubmitJobRequest::kEvalJob:  // Validate and Run handle it (trainer/eval_job.h)
      return absl::InvalidArgumentError("spec: an EvalJob is not a TrainJob");
    case mpsd::v1::SubmitJobRequest::kPredictJob:  // Validate and Run (trainer/predict_job.h)
      return absl::InvalidArgumentError("spec: a PredictJob is not a TrainJob");
    default:
      return absl::InvalidArgumentError(
          "spec: no job given (set train_job, bench_job, eval_job or predict_job)");
  }
}

absl::Status TorchExecutor::Run(const JobContext& context,
                                const mpsd::v1::SubmitJobRequest& submitted, const EventSink& sink,
                                const CancelFlag& cancel) {
  const mpsd::v1::SubmitJobRequest spec = api::EffectiveSpec(submitted);
  const std::atomic<bool>& cancelled = cancel.flag();  // polled at step boundaries
  if (spec.has_bench_job()) return RunBench(spec, sink, cancelled);
  if (spec.has_eval_job()) return RunEval(spec, sink, cancelled);
  if (spec.has_predict_job()) {
    jobs_run_.fetch_add(1, std::memory_order_relaxed);
    return RunPredictJob(spec.predict_job(), inventory_, options_, sink, cancelled);
  }
  return RunTrain(context, spec, sink, cancelled);
}

absl::Status TorchExecutor::RunBench(const mpsd::v1::SubmitJobRequest& spec, const EventSink& sink,
                                     const std::atomic<bool>& cancelled) {
  if (absl::Status s = Validate(spec); !s.ok()) return s;
  jobs_run_.fetch_add(1, std::memory_order_relaxed);
  // "oom" is a bench row's own fault (trainer/bench.h); the others are the executor's.
  const EventSink bench_sink =
      spec.bench_job().fault_injection().kind() == "oom"
          ? sink
          : WithFaultInjection(spec, DeviceString(inventory_.preferred), sink);
  return CatchTorchErrors([&] {
    return RunBenchJob(spec.bench_job(), inventory_, options_.allow_fault_injection,
                       options_.artifacts_dir, bench_sink, cancelled);
  });
}

absl::Status TorchExecutor::RunEval(const mpsd::v1::SubmitJobRequest& spec, const EventSink& sink,
                                    const std::atomic<bool>& cancelled) {
  jobs_run_.fetch_add(1, std::memory_order_relaxed);
  return RunEvalJob(spec.eval_job(), inventory_, options_, sink, cancelled);
}

absl::Status TorchExecutor::RunTrain(const JobContext& context,
                                     const mpsd::v1::SubmitJobRequest& spec, const EventSink& sink,
                                     const std::atomic<bool>& cancelled) {
  absl::StatusOr<TrainJobConfig> job;
  if (absl::Status s =
          CatchTorchErrors([&] { return (job = ResolveJob(spec, &context)).status(); });
      !s.ok()) {
    return s;
  }
  jobs_run_.fetch_add(1, std::memory_order_relaxed);
  // Fault injection (tests only; validated above): the fault fires from inside the sink, never
  // at the summary.
  const EventSink faulty = WithFaultInjection(spec, DeviceString(job->device), sink);
  return RunTrainJob(*job, options_.steps_per_readback, faulty, sink, cancelled);
}

absl::StatusOr<std::vector<int>> TorchExecutor::PlanFusion(
    const std::vector<mpsd::v1::SubmitJobRequest>& submitted, int max_trials) const {
  std::vector<mpsd::v1::SubmitJobRequest> specs;
  for (const mpsd::v1::SubmitJobRequest& spec : submitted) {
    specs.push_back(api::EffectiveSpec(spec));
  }
  if (specs.size() < 2 || max_trials < 2) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "fewer than 2 trials to fuse (%d given, at most %d)", specs.size(), max_trials));
  }
  // Free device memory against which the trials' estimates are counted; no cap on the CPU.
  int64_t free_bytes = -1;
  if (!inventory_.preferred.is_cpu()) {
    const absl::Status read = CatchTorchErrors([&] {
      const int64_t total = DescribeDevice(inventory_.preferred).total_memory_bytes;
      if (total > 0) free_bytes = total - ReadMemory(inventory_.preferred).reserved_bytes;
      return absl::OkStatus();
    });
    if (!read.ok()) free_bytes = -1;
  }
  // Why trial `index` cannot join trial 0's run, as the text after its name (" differs in
  // train_job.batch_size", ": model vgg11 has no fused form yet"), or "" when it can.
  auto why_not = [&](size_t index, int64_t& bytes) -> std::string {
    const mpsd::v1::SubmitJobRequest& spec = specs[index];
    if (!spec.has_train_job()) return " is not a TrainJob";
    absl::StatusOr<TrainJobConfig> job;
    if (absl::Status s =
            CatchTorchErrors([&] { return (job = ResolveJob(spec, nullptr)).status(); });
        !s.ok()) {
      return absl::StrCat(" does not validate: ", s.message());
    }
    if (std::string refusal = FusionRefusal(*job); !refusal.empty()) {
      return absl::StrCat(": ", refusal);
    }
    if (index > 0) {
      if (std::string field = FusionDifference(specs[0].train_job(), spec.train_job());
          !field.empty()) {
        return absl::StrCat(" differs in train_job.", field);
      }
    }
    bytes = job->device.is_cpu() ? 0 : FusedTrialBytes(*job);
    return "";
  };
  // "trial 2 differs in train_job.batch_size", with the trial's index and reason as data
  // (TRIAL_NOT_FUSABLE), which the scheduler names by job id.
  const auto not_fusable = [](size_t index, const std::string& reason) {
    return api::WithTrialNotFusable(
        absl::FailedPreconditionError(absl::StrCat("trial ", index, reason)),
        static_cast<int>(index), reason);
  };
  int64_t used = 0;
  int64_t bytes = 0;
  if (std::string refusal = why_not(0, bytes); !refusal.empty()) return not_fusable(0, refusal);
  used += bytes;
  std::vector<int> plan = {0};
  std::optional<absl::Status> skipped;  // why the first trial left out was
  for (size_t index = 1; index < specs.size() && static_cast<int>(plan.size()) < max_trials;
       ++index) {
    if (std::string refusal = why_not(index, bytes); !refusal.empty()) {
      if (!skipped.has_value()) skipped = not_fusable(index, refusal);
      continue;
    }
    if (free_bytes >= 0 && used + bytes > free_bytes) {
      if (!skipped.has_value()) {
        skipped = absl::FailedPreconditionError(
            absl::StrFormat("%d trials of about %d MiB each fit the device's %d MiB free",
                            plan.size(), bytes >> 20, free_bytes >> 20));
      }
      break;
    }
    used += bytes;
    plan.push_back(static_cast<int>(index));
  }
  if (plan.size() < 2) {
    return skipped.value_or(absl::FailedPreconditionError("fewer than 2 trials can be fused"));
  }
  if (skipped.has_value()) {
    Log(LogLevel::kInfo, absl::StrFormat("fusing %d of %d trials; left out first: %s", plan.size(),
                                         specs.size(), skipped->message()));
  }
  return plan;
}

std::vector<absl::Status> TorchExecutor::RunFused(const std::vector<api::TrialRun>& submitted,
                                                  const api::FusionOptions& options) {
  std::vector<api::TrialRun> trials = submitted;
  for (api::TrialRun& trial : trials) trial.spec = api::EffectiveSpec(std::move(trial.spec));
  // Each trial resolved with its own context; a trial that does not resolve or cannot fuse
  // (a resume checkpoint from its context) makes the run fall back to one trial after another.
  std::vector<TrainJobConfig> jobs;
  std::string fallback;
  for (const api::TrialRun& trial : trials) {
    absl::StatusOr<TrainJobConfig> job;
    if (absl::Status s =
            CatchTorchErrors([&] { return (job = ResolveJob(trial.spec, &trial.job)).status(); });
        !s.ok()) {
      fallback = absl::StrCat("job ", trial.job.job_id, ": ", s.message());
      break;
    }
    if (std::string refusal = FusionRefusal(*job); !refusal.empty()) {
      fallback = absl::StrCat("job ", trial.job.job_id, ": ", refusal);
      break;
    }
    if (!jobs.empty()) {
      if (std::string field =
              FusionDifference(trials.front().spec.train_job(), trial.spec.train_job());
          !field.empty()) {
        fallback = absl::StrCat("job ", trial.job.job_id, " differs in train_job.", field);
        break;
      }
    }
    jobs.push_back(*std::move(job));
  }
  if (trials.size() < 2 || !fallback.empty()) {
    Log(LogLevel::kInfo, absl::StrCat("fused run: the trials run one after another: ",
                                      fallback.empty() ? "fewer than 2" : fallback));
    return Executor::RunFused(trials, options);
  }
  std::vector<FusedTrial> fused;
  for (size_t k = 0; k < trials.size(); ++k) {
    fused.push_back(
        FusedTrial{&jobs[k], trials[k].sink, &trials[k].cancelled->flag(), trials[k].done});
  }
  jobs_run_.fetch_add(static_cast<int64_t>(trials.size()), std::memory_order_relaxed);
  return RunFusedTrainJobs(fused, options.shared_data_order, options_.steps_per_readback);
}

mpsd::v1::DeviceInfo TorchExecutor::GetDevice() const {
  mpsd::v1::DeviceInfo info;
  for (const std::string& name : inventory_.available) info.add_available(name);
  info.set_torch_version(TORCH_VERSION);
  info.set_cpu_threads(cpu_threads_);
  info.set_jobs_run(jobs_run_.load(std::memory_order_relaxed));
  const absl::Status status = CatchTorchErrors([&] {
    const DeviceDescription description = DescribeDevice(inventory_.preferred);
    info.set_kind(description.kind);
    info.set_name(description.name);
    info.set_total_memory_bytes(description.total_memory_bytes);
    const api::MemoryFigures memory = ReadMemory(inventory_.preferred);
    info.set_allocated_bytes(memory.allocated_bytes);
    info.set_reserved_bytes(memory.reserved_bytes);
    return absl::OkStatus();
  });
  if (!status.ok()) Log(LogLevel::kWarning, absl::StrCat("GetDevice: ", status.ToString()));
  return info;
}

}  // namespace

int AvailableCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

absl::StatusOr<std::unique_ptr<Executor>> CreateTorchExecutor(const Executor::Options& options) {
  if (options.cpu_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cpu_threads: must be >= 0, got %d", options.cpu_threads));
  }
  if (options.steps_per_readback <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("steps_per_readback: must be > 0, got %d", options.steps_per_readback));
  }
  if (absl::Status s = api::CheckInputLimits(options.input_limits, "input_limits"); !s.ok()) {
    return s;
  }
  // Every reader of a file a job names applies them (trainer/input_limits.h).
  SetInputLimits(options.input_limits);
  // A TorchScript model's print() goes to the log, escaped (trainer::Log), and at most
  // kMaxPrintBytes of it per executor: a model printing in every step would otherwise fill the
  // daemon's log with whatever it likes.
  torch::jit::setPrintHandler([](const std::string& text) {
    constexpr int64_t kMaxPrintBytes = 64 << 10;
    static std::atomic<int64_t> printed{0};
    const int64_t before = printed.fetch_add(static_cast<int64_t>(text.size()));
    if (before >= kMaxPrintBytes) return;
    if (before + static_cast<int64_t>(text.size()) > kMaxPrintBytes) {
      Log(LogLevel::kWarning, absl::StrCat("TorchScript print: ", text.substr(0, 256),
                                           " (further print() output of models is dropped: ",
                                           kMaxPrintBytes, " bytes per executor)"));
      return;
    }
    Log(LogLevel::kInfo, absl::StrCat("TorchScript print: ", text));
  });
  // cpu_threads 0: one intra-op thread per CPU this process may run on. LibTorch's own default
  // counts physical cores as its cpuinfo sees them, which is 1 on many 2-vCPU virtual machines
  // (and half the CPUs where cores run two hardware threads); PyTorch's default was the same.
  const int cpu_threads = options.cpu_threads > 0 ? options.cpu_threads : AvailableCpuCount();
  DeviceInventory inventory;
  const absl::Status status = CatchTorchErrors([&] {
    torch::set_num_threads(cpu_threads);
    inventory = ProbeDevices();
    // cuDNN's heuristics (torch.backends.cudnn.benchmark = False) unless a job asks for the
    // search (TrainJob/BenchJob.cudnn_benchmark, CudnnBenchmarkScope for its run).
    at::globalContext().setBenchmarkCuDNN(false);
    return absl::OkStatus();
  });
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("LibTorch failed to start: ", status.message()));
  }
  const std::string threads =
      options.cpu_threads > 0
          ? absl::StrFormat("%d CPU thread(s) (cpu_threads)", torch::get_num_threads())
          : absl::StrFormat("%d CPU thread(s), one per CPU this process may use (cpu_threads 0)",
                            torch::get_num_threads());
  Log(LogLevel::kInfo, absl::StrFormat("executor: LibTorch %s, devices: %s, auto = %s, %s",
                                       TORCH_VERSION, absl::StrJoin(inventory.available, ", "),
                                       DeviceString(inventory.preferred), threads));
  return std::make_unique<TorchExecutor>(options, std::move(inventory));
}

}  // namespace mpsd::trainer
