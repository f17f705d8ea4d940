// The LibTorch executor: validates TrainJobs against the devices and files this process has,
// runs them through the training loop, and is the exception firewall between LibTorch and the
// rest of mpsd (no exception leaves this file).
#include "trainer/executor.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/bench.h"
#include "trainer/compat.h"
#include "trainer/datasets.h"
#include "trainer/device.h"
#include "trainer/fault_injection.h"
#include "trainer/log.h"
#include "trainer/models.h"
#include "trainer/train_loop.h"

namespace mpsd::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using mpsd::v1::JobEvent;

constexpr int kDefaultBatchSize = 64;
constexpr int kDefaultEpochs = 1;
constexpr double kDefaultLearningRate = 1e-3;
constexpr absl::string_view kDefaultOptimizer = "adam";

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- Exception firewall -----------------------------------------------------------------------

absl::Status StatusFromTorchError(const c10::Error& e) {
  const std::string message = e.what_without_backtrace();
  if (compat::IsOutOfMemory(e)) return absl::ResourceExhaustedError(message);
  return absl::InternalError(absl::StrCat("LibTorch error: ", message));
}

// Runs `fn` (returning absl::Status) and converts anything it throws.
template <typename Fn>
absl::Status CatchTorchErrors(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const c10::Error& e) {
    return StatusFromTorchError(e);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("unexpected exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("unexpected exception of unknown type");
  }
}

// ---- Validation -------------------------------------------------------------------------------

// A TrainJob with every default applied and every name looked up.
struct TrainJobConfig {
  const ModelEntry* model = nullptr;
  ModelConfig model_config;
  DatasetConfig dataset;
  int batch_size = kDefaultBatchSize;
  int epochs = kDefaultEpochs;
  double learning_rate = kDefaultLearningRate;
  uint64_t seed = 0;
  torch::Device device = torch::kCPU;
};

absl::Status FieldError(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("train_job.", field, ": ", problem));
}

std::string Known(const std::vector<std::string>& names) {
  return absl::StrCat("(known: ", absl::StrJoin(names, ", "), ")");
}

absl::StatusOr<const ModelEntry*> ResolveModel(const mpsd::v1::ModelSpec& spec) {
  if (spec.name().empty()) return FieldError("model.name", "required " + Known(ModelNames()));
  const ModelEntry* model = FindModel(spec.name());
  if (model == nullptr) {
    return FieldError("model.name",
                      absl::StrFormat("unknown model \"%s\" %s", spec.name(), Known(ModelNames())));
  }
  return model;
}

// Fills config.model_config once the dataset is known: its input shape, its classes unless
// model.num_classes sets more, and the preset. The message for a model that cannot take the
// dataset's images names the model, the shape and the dataset.
absl::Status ResolveModelConfig(const mpsd::v1::ModelSpec& spec, TrainJobConfig& config) {
  const ModelEntry& model = *config.model;
  const DatasetConfig& dataset = config.dataset;
  ModelConfig& model_config = config.model_config;
  model_config.input_shape = dataset.input_shape;
  model_config.num_classes = dataset.num_classes;
  if (spec.has_num_classes()) {
    if (absl::Status s = CheckNumClasses(spec.num_classes()); !s.ok()) {
      return FieldError("model.num_classes", s.message());
    }
    if (spec.num_classes() < dataset.num_classes) {
      return FieldError("model.num_classes",
                        absl::StrFormat("must be at least the %d classes of dataset %s, got %d",
                                        dataset.num_classes, dataset.info->name,
                                        spec.num_classes()));
    }
    model_config.num_classes = spec.num_classes();
  }
  if (absl::Status s = CheckPreset(model, spec.preset()); !s.ok()) {
    return FieldError("model.preset", s.message());
  }
  model_config.preset = spec.preset();
  if (absl::Status s = CheckModelConfig(model, model_config); !s.ok()) {
    return FieldError("model.name",
                      absl::StrFormat("%s (the input of dataset %s)", s.message(),
                                      dataset.info->name));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> PositiveOr(absl::string_view field, bool has_value, int value,
                               int default_value) {
  if (!has_value) return default_value;
  if (value <= 0) return FieldError(field, absl::StrFormat("must be > 0, got %d", value));
  return value;
}

// The learning rate of the (only) optimizer, adam.
absl::StatusOr<double> ResolveOptimizer(const mpsd::v1::OptimizerSpec& spec) {
  if (!spec.name().empty() && spec.name() != kDefaultOptimizer) {
    return FieldError("optimizer.name",
                      absl::StrFormat("unknown optimizer \"%s\" %s", spec.name(), Known({"adam"})));
  }
  if (!spec.has_learning_rate()) return kDefaultLearningRate;
  const double lr = spec.learning_rate();
  if (!(lr > 0)) {
    return FieldError("optimizer.learning_rate", absl::StrCat("must be > 0, got ", lr));
  }
  if (!std::isfinite(lr)) {
    return FieldError("optimizer.learning_rate", absl::StrCat("must be finite, got ", lr));
  }
  return lr;
}

absl::StatusOr<TrainJobConfig> ResolveTrainJob(const mpsd::v1::TrainJob& spec,
                                               const DeviceInventory& inventory) {
  TrainJobConfig config;
  absl::StatusOr<const ModelEntry*> model = ResolveModel(spec.model());
  if (!model.ok()) return model.status();
  config.model = *model;
  absl::StatusOr<DatasetConfig> dataset = ResolveDataset(spec.dataset());
  if (!dataset.ok()) return dataset.status();
  config.dataset = *std::move(dataset);
  if (absl::Status s = ResolveModelConfig(spec.model(), config); !s.ok()) return s;
  absl::StatusOr<int> batch_size =
      PositiveOr("batch_size", spec.has_batch_size(), spec.batch_size(), kDefaultBatchSize);
  if (!batch_size.ok()) return batch_size.status();
  config.batch_size = *batch_size;
  absl::StatusOr<int> epochs =
      PositiveOr("epochs", spec.has_epochs(), spec.epochs(), kDefaultEpochs);
  if (!epochs.ok()) return epochs.status();
  config.epochs = *epochs;
  absl::StatusOr<double> learning_rate = ResolveOptimizer(spec.optimizer());
  if (!learning_rate.ok()) return learning_rate.status();
  config.learning_rate = *learning_rate;
  config.seed = spec.seed();
  absl::StatusOr<torch::Device> device = ResolveDevice(spec.device(), inventory);
  if (!device.ok()) return FieldError("device", device.status().message());
  config.device = *device;
  return config;
}

// ---- Model listing ----------------------------------------------------------------------------

absl::Status CheckListModelsRequest(const mpsd::v1::ListModelsRequest& request) {
  if (!request.input_shape().empty()) {
    const std::vector<int64_t> shape(request.input_shape().begin(), request.input_shape().end());
    if (absl::Status s = CheckInputShape(shape); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("input_shape: ", s.message()));
    }
  }
  if (request.has_num_classes()) {
    if (absl::Status s = CheckNumClasses(request.num_classes()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("num_classes: ", s.message()));
    }
  }
  return absl::OkStatus();
}

// `entry` at the request's shape and classes, or at its natural ones.
mpsd::v1::ModelInfo DescribeModel(const ModelEntry& entry,
                                  const mpsd::v1::ListModelsRequest& request) {
  ModelConfig config;
  config.input_shape =
      request.input_shape().empty()
          ? entry.natural_input_shape
          : std::vector<int64_t>(request.input_shape().begin(), request.input_shape().end());
  config.num_classes =
      request.has_num_classes() ? request.num_classes() : entry.natural_num_classes;
  mpsd::v1::ModelInfo info;
  info.set_name(std::string(entry.name));
  info.set_description(std::string(entry.description));
  for (const int64_t dim : config.input_shape) info.add_input_shape(dim);
  info.set_num_classes(static_cast<int32_t>(config.num_classes));
  for (const absl::string_view preset : entry.presets) info.add_presets(std::string(preset));
  if (absl::Status s = CheckModelConfig(entry, config); s.ok()) {
    info.set_parameters(entry.parameters(config));
  } else {
    info.set_unsupported(std::string(s.message()));
  }
  return info;
}

// ---- Summary ----------------------------------------------------------------------------------

// Builds a job's summary from the events it emitted (so the summary agrees with what clients
// saw) plus what only the executor knows: data sizes, parameters, memory.
class SummaryBuilder {
 public:
  explicit SummaryBuilder(std::string device) { summary_.set_device(std::move(device)); }

  void Observe(const JobEvent& event) {
    if (event.has_step()) ObserveStep(event.step());
    if (event.has_epoch()) ObserveEpoch(event.epoch());
  }

  mpsd::v1::JobSummary& summary() { return summary_; }

  void SetMemoryBefore(const DeviceMemory& before) {
    summary_.mutable_memory()->set_allocated_before_bytes(before.allocated_bytes);
    summary_.mutable_memory()->set_reserved_before_bytes(before.reserved_bytes);
  }

  void SetMemoryAfter(const DeviceMemory& after) {
    summary_.mutable_memory()->set_allocated_after_bytes(after.allocated_bytes);
    summary_.mutable_memory()->set_reserved_after_bytes(after.reserved_bytes);
    device_peak_bytes_ = after.peak_allocated_bytes;
  }

  // With no epoch finished, final_train_loss is the last step's loss.
  mpsd::v1::JobSummary Build(double total_seconds) {
    summary_.set_total_time_s(total_seconds);
    if (!epoch_seconds_.empty()) {
      std::vector<double> sorted = epoch_seconds_;
      std::sort(sorted.begin(), sorted.end());
      const size_t mid = sorted.size() / 2;
      summary_.set_median_epoch_time_s(
          sorted.size() % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2);
    } else {
      summary_.set_final_train_loss(last_step_loss_);
    }
    summary_.set_samples_per_second(train_seconds_ > 0 ? train_examples_ / train_seconds_ : 0);
    // The device's own peak where it keeps one (CUDA); else the most seen at any read-back.
    mpsd::v1::MemoryStats& m = *summary_.mutable_memory();
    m.set_peak_allocated_bytes(std::max({device_peak_bytes_, max_step_allocated_,
                                         m.allocated_before_bytes(), m.allocated_after_bytes()}));
    return summary_;
  }

 private:
  void ObserveStep(const mpsd::v1::StepMetrics& step) {
    summary_.set_steps(summary_.steps() + 1);
    last_step_loss_ = step.loss();
    // Each step of a read-back group carries the group's mean step time.
    train_seconds_ += step.step_time_ms() / 1000.0;
    train_examples_ += step.batch_size();
    max_step_allocated_ = std::max(max_step_allocated_, step.allocated_bytes());
  }

  void ObserveEpoch(const mpsd::v1::EpochMetrics& epoch) {
    summary_.set_epochs(epoch.epoch());
    summary_.set_final_train_loss(epoch.train_loss());
    summary_.set_test_loss(epoch.test_loss());
    summary_.set_test_accuracy(epoch.test_accuracy());
    epoch_seconds_.push_back(epoch.epoch_time_s());
  }

  mpsd::v1::JobSummary summary_;
  std::vector<double> epoch_seconds_;
  double train_seconds_ = 0;
  int64_t train_examples_ = 0;
  float last_step_loss_ = 0;
  int64_t max_step_allocated_ = 0;
  int64_t device_peak_bytes_ = 0;
};

// Waits for the device, returns the caching allocator's free blocks to the driver and records
// what is left. Runs after the job's tensors went out of scope.
absl::Status ReleaseDevice(const torch::Device& device, SummaryBuilder& summary) {
  return CatchTorchErrors([&] {
    Synchronize(device);
    EmptyCache(device);
    summary.SetMemoryAfter(ReadMemory(device));
    return absl::OkStatus();
  });
}

void EmitLog(const EventSink& sink, std::string text) {
  Log(LogLevel::kInfo, text);
  JobEvent event;
  event.mutable_log()->set_level(mpsd::v1::LogLine::INFO);
  event.mutable_log()->set_text(std::move(text));
  sink(std::move(event));
}

// ---- The executor -----------------------------------------------------------------------------

class TorchExecutor final : public Executor {
 public:
  TorchExecutor(const Options& options, DeviceInventory inventory)
      : options_(options),
        inventory_(std::move(inventory)),
        cpu_threads_(torch::get_num_threads()) {}

  absl::Status Validate(const mpsd::v1::SubmitJobRequest& spec) const override {
    if (spec.has_bench_job()) {
      return CatchTorchErrors([&] {
        return ValidateBenchJob(spec.bench_job(), inventory_, options_.allow_fault_injection);
      });
    }
    return CatchTorchErrors([&] { return ResolveJob(spec).status(); });
  }

  absl::Status Run(const JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
                   const EventSink& sink, const std::atomic<bool>& cancelled) override;

  mpsd::v1::DeviceInfo GetDevice() const override;

  absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(
      const mpsd::v1::ListModelsRequest& request) const override {
    if (absl::Status s = CheckListModelsRequest(request); !s.ok()) return s;
    mpsd::v1::ListModelsResponse response;
    for (const ModelEntry& entry : Models()) *response.add_models() = DescribeModel(entry, request);
    return response;
  }

 private:
  absl::StatusOr<TrainJobConfig> ResolveJob(const mpsd::v1::SubmitJobRequest& spec) const;

  // Loads the data, builds the model and optimizer and trains. They are released on return.
  absl::Status TrainInScope(const TrainJobConfig& job, const EventSink& sink,
                            const std::atomic<bool>& cancelled, SummaryBuilder& summary) const;

  // Constant after construction.
  const Options options_;
  const DeviceInventory inventory_;
  const int cpu_threads_;

  std::atomic<int64_t> jobs_run_{0};
};

absl::StatusOr<TrainJobConfig> TorchExecutor::ResolveJob(
    const mpsd::v1::SubmitJobRequest& spec) const {
  // Fault injection (tests only): rejected unless the daemon allows it.
  if (absl::Status s = CheckFaultInjection(spec, options_.allow_fault_injection); !s.ok()) {
    return s;
  }
  switch (spec.spec_case()) {
    case mpsd::v1::SubmitJobRequest::kTrainJob:
      return ResolveTrainJob(spec.train_job(), inventory_);
    case mpsd::v1::SubmitJobRequest::kBenchJob:  // Validate and Run handle it (trainer/bench.h)
      return absl::InvalidArgumentError("spec: a BenchJob is not a TrainJob");
    default:
      return absl::InvalidArgumentError("spec: no job given (set train_job or bench_job)");
  }
}

absl::Status TorchExecutor::TrainInScope(const TrainJobConfig& job, const EventSink& sink,
                                         const std::atomic<bool>& cancelled,
                                         SummaryBuilder& summary) const {
  const Clock::time_point load_start = Clock::now();
  absl::StatusOr<DeviceDataset> data =
      LoadDataset(job.dataset, job.seed, job.device);
  if (!data.ok()) return data.status();
  const double load_seconds = SecondsSince(load_start);
  summary.summary().set_train_examples(data->train.size());
  summary.summary().set_test_examples(data->test.size());
  summary.summary().set_data_load_time_s(load_seconds);
  EmitLog(sink, absl::StrFormat("loaded %s: %d train, %d test examples in %.2f s on %s",
                                job.dataset.info->name, data->train.size(), data->test.size(),
                                load_seconds, DeviceString(job.device)));

  torch::manual_seed(job.seed);
  std::shared_ptr<ClassifierImpl> model = job.model->make(job.model_config);
  model->to(job.device);
  summary.summary().set_parameters(CountParameters(*model));
  torch::optim::Adam optimizer(
      model->parameters(),
      torch::optim::AdamOptions(job.learning_rate).betas(std::make_tuple(0.9, 0.999)).eps(1e-8));
  EmitLog(sink, absl::StrFormat("training %s (%d parameters): adam lr %g, batch size %d, "
                                "%d epoch(s), seed %d",
                                job.model->name, summary.summary().parameters(), job.learning_rate,
                                job.batch_size, job.epochs, job.seed));

  TrainOptions options;
  options.batch_size = job.batch_size;
  options.epochs = job.epochs;
  options.seed = job.seed;
  options.steps_per_readback = options_.steps_per_readback;
  return Train(*model, optimizer, *data, options, sink, cancelled);
}

absl::Status TorchExecutor::Run(const JobContext& context,
                                const mpsd::v1::SubmitJobRequest& spec, const EventSink& sink,
                                const std::atomic<bool>& cancelled) {
  (void)context;  // checkpoints and finished models: TrainJob issue
  if (spec.has_bench_job()) {
    if (absl::Status s = Validate(spec); !s.ok()) return s;
    jobs_run_.fetch_add(1, std::memory_order_relaxed);
    // "oom" is a bench row's own fault (trainer/bench.h); the others are the executor's.
    const EventSink bench_sink =
        spec.bench_job().fault_injection().kind() == "oom"
            ? sink
            : WithFaultInjection(spec, DeviceString(inventory_.preferred), sink);
    return CatchTorchErrors([&] {
      return RunBenchJob(spec.bench_job(), inventory_, options_.allow_fault_injection,
                         bench_sink, cancelled);
    });
  }
  absl::StatusOr<TrainJobConfig> job;
  if (absl::Status s = CatchTorchErrors([&] { return (job = ResolveJob(spec)).status(); });
      !s.ok()) {
    return s;
  }
  jobs_run_.fetch_add(1, std::memory_order_relaxed);
  const Clock::time_point start = Clock::now();
  const torch::Device device = job->device;
  SummaryBuilder summary(DeviceString(device));
  // Fault injection (tests only; validated above): the fault fires from inside the sink.
  const EventSink faulty = WithFaultInjection(spec, DeviceString(device), sink);
  const EventSink observed = [&](JobEvent event) {
    summary.Observe(event);
    faulty(std::move(event));
  };

  const absl::Status status = CatchTorchErrors([&] {
    at::init_num_threads();  // this thread may not be the one that created the executor
    ResetPeakMemory(device);
    summary.SetMemoryBefore(ReadMemory(device));
    return TrainInScope(*job, observed, cancelled, summary);
  });
  if (!status.ok()) Log(LogLevel::kWarning, absl::StrCat("job ended: ", status.ToString()));

  const absl::Status cleanup = ReleaseDevice(device, summary);
  const absl::Status emitted = CatchTorchErrors([&] {
    JobEvent event;
    *event.mutable_summary() = summary.Build(SecondsSince(start));
    sink(std::move(event));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return cleanup.ok() ? emitted : cleanup;
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
    const DeviceMemory memory = ReadMemory(inventory_.preferred);
    info.set_allocated_bytes(memory.allocated_bytes);
    info.set_reserved_bytes(memory.reserved_bytes);
    return absl::OkStatus();
  });
  if (!status.ok()) Log(LogLevel::kWarning, absl::StrCat("GetDevice: ", status.ToString()));
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const Options& options) {
  if (options.cpu_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cpu_threads: must be >= 0, got %d", options.cpu_threads));
  }
  if (options.steps_per_readback <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("steps_per_readback: must be > 0, got %d", options.steps_per_readback));
  }
  DeviceInventory inventory;
  const absl::Status status = CatchTorchErrors([&] {
    if (options.cpu_threads > 0) torch::set_num_threads(options.cpu_threads);
    inventory = ProbeDevices();
    return absl::OkStatus();
  });
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("LibTorch failed to start: ", status.message()));
  }
  Log(LogLevel::kInfo,
      absl::StrFormat("executor: LibTorch %s, devices: %s, auto = %s", TORCH_VERSION,
                      absl::StrJoin(inventory.available, ", "), DeviceString(inventory.preferred)));
  return std::make_unique<TorchExecutor>(options, std::move(inventory));
}

}  // namespace mpsd::trainer
