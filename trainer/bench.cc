// BenchJob: resolving the spec into a plan of rows, and timing each row on its device.
#include "trainer/bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/job_id.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "trainer/compat/autocast.h"
#include "trainer/compat/errors.h"
#include "trainer/compat/optim.h"
#include "trainer/device.h"
#include "trainer/field_checks.h"
#include "trainer/graphed_step.h"
#include "trainer/job_summary.h"
#include "trainer/log.h"
#include "trainer/model_export.h"
#include "trainer/models.h"
#include "trainer/models/torchscript.h"
#include "trainer/optimizers.h"
#include "trainer/precision.h"
#include "trainer/state_dict.h"

namespace mpsd::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using mpsd::v1::BenchRow;
using mpsd::v1::JobEvent;

constexpr int kDefaultWarmupIters = 5;
constexpr int kDefaultIters = 20;
// min_time_ms beyond an hour per row is a typo, not a benchmark.
constexpr double kMaxMinTimeMs = 3600.0 * 1000.0;
constexpr int kMaxCpuThreads = 4096;
// Iterations per row: a million timed steps of the smallest model take minutes; more is a typo.
constexpr int kMaxIters = 1'000'000;
constexpr int kMaxWarmupIters = 100'000;
// Rows of one job (models × batch sizes × devices × modes × precisions × memory formats): each
// is a stored event and a line of the summary, which every answer about the job carries.
constexpr int64_t kMaxRows = 1'000;
constexpr char kInference[] = "inference";
constexpr char kTrainStep[] = "train_step";
constexpr char kContiguous[] = "contiguous";
constexpr char kChannelsLast[] = "channels_last";

// One entry of BenchJob.models: a zoo model, a TorchScript file, or a finished job's model.
struct BenchModel {
  std::string label;                  // the rows' `model`: "resnet18", "tinynet.pt", "job 12 …"
  const ModelEntry* entry = nullptr;  // the zoo's; nullptr for a TorchScript file
  std::string torchscript;            // the TorchScript file (torch.jit.save)
  std::string state_dict;             // a finished zoo job's weights (model.state_dict.pt)
  InputKind input_kind = InputKind::kAny;
};

// A BenchJob with every default applied and every name looked up.
struct BenchPlan {
  std::vector<BenchModel> models;
  std::vector<ModelConfig> model_configs;  // one per model
  std::vector<int> batch_sizes;
  std::vector<torch::Device> devices;  // the cpu first
  std::vector<std::string> modes;
  std::vector<std::string> precisions;
  std::vector<std::string> memory_formats;
  int warmup_iters = kDefaultWarmupIters;
  int iters = kDefaultIters;
  double min_time_ms = 0;
  std::optional<int> cpu_threads;
  uint64_t seed = 0;
  // train_step rows' optimizer (BenchJob.optimizer, TrainJob's defaults).
  OptimizerConfig optimizer;
  // 1-based row that throws an out-of-memory error (fault injection); 0 = none.
  int64_t oom_at_row = 0;
};

// One row to measure.
struct RowSpec {
  int64_t index = 0;  // 1-based, in run order
  const BenchModel* model = nullptr;
  const ModelConfig* model_config = nullptr;
  int batch_size = 0;
  std::string mode;
  std::string precision;
  std::string memory_format;
  torch::Device device = torch::kCPU;
};

const FieldChecks& Fields() {
  static const FieldChecks* const fields = new FieldChecks("bench_job");
  return *fields;
}

absl::Status FieldError(absl::string_view field, absl::string_view problem) {
  return Fields().Error(field, problem);
}

std::string Expected(const std::vector<std::string>& names) {
  return absl::StrCat("(expected ", absl::StrJoin(names, ", "), ")");
}

// Looks up `name` in `known`; the error names the field and the choices.
absl::Status CheckChoice(absl::string_view field, const std::string& name,
                         const std::vector<std::string>& known) {
  if (std::find(known.begin(), known.end(), name) != known.end()) return absl::OkStatus();
  return FieldError(field, absl::StrFormat("unknown \"%s\" %s", name, Expected(known)));
}

// Each value once, in first-seen order; `fallback` when `values` is empty.
std::vector<std::string> Distinct(const google::protobuf::RepeatedPtrField<std::string>& values,
                                  const std::string& fallback) {
  std::vector<std::string> out;
  for (const std::string& value : values) {
    if (std::find(out.begin(), out.end(), value) == out.end()) out.push_back(value);
  }
  if (out.empty()) out.push_back(fallback);
  return out;
}

// A TorchScript file as models[i]: its forward tried on one example of `input_shape`.
absl::StatusOr<BenchModel> TorchScriptModel(const std::string& path, int i,
                                            const ModelConfig& config) {
  if (config.input_shape.empty()) {
    return FieldError(Indexed("models", i),
                      absl::StrFormat("%s: a TorchScript model needs bench_job.input_shape (one "
                                      "example, e.g. [3, 224, 224])",
                                      path));
  }
  absl::StatusOr<int64_t> parameters =
      CheckTorchScriptModel(path, config.input_shape, config.num_classes);
  if (!parameters.ok()) return FieldError(Indexed("models", i), parameters.status().message());
  BenchModel model;
  model.torchscript = path;
  model.input_kind = config.input_shape.size() == 3 ? InputKind::kImage : InputKind::kAny;
  return model;
}

// object[key], or an empty value when it is missing.
const google::protobuf::Value& Member(const google::protobuf::Struct& object,
                                      const std::string& key) {
  static const google::protobuf::Value* const kMissing = new google::protobuf::Value();
  const auto it = object.fields().find(key);
  return it == object.fields().end() ? *kMissing : it->second;
}

// A finished TrainJob of this daemon as models[i]: its model.json (trainer/model_export.h) says
// which model, its input shape and classes; a zoo model runs with the job's state dict, a
// TorchScript job's model.pt as it was saved.
absl::StatusOr<BenchModel> JobModel(const std::string& job_id, int i,
                                    const std::string& artifacts_dir, ModelConfig& config) {
  const std::string field = Indexed("models", i);
  if (artifacts_dir.empty()) {
    return FieldError(field, "this executor has no artifacts directory to find job models in");
  }
  const std::filesystem::path dir = std::filesystem::path(artifacts_dir) / job_id;
  std::ifstream in(dir / kModelJsonFile);
  if (!in) {
    return FieldError(field, absl::StrFormat("job %s has no %s: not a TrainJob of this daemon "
                                             "that finished",
                                             job_id, kModelJsonFile));
  }
  std::stringstream text;
  text << in.rdbuf();
  google::protobuf::Struct card;
  if (!google::protobuf::util::JsonStringToMessage(text.str(), &card).ok()) {
    return FieldError(field, absl::StrCat((dir / kModelJsonFile).string(), ": not JSON"));
  }
  const google::protobuf::Struct& model_part = Member(card, "model").struct_value();
  config.input_shape.clear();
  for (const auto& v :
       Member(Member(card, "input").struct_value(), "shape").list_value().values()) {
    config.input_shape.push_back(static_cast<int64_t>(v.number_value()));
  }
  config.num_classes = static_cast<int64_t>(Member(model_part, "num_classes").number_value());
  const google::protobuf::Value& name = Member(model_part, "name");
  if (config.input_shape.empty() || config.num_classes < 1 ||
      !(name.has_null_value() || name.has_string_value())) {
    return FieldError(field, absl::StrCat((dir / kModelJsonFile).string(),
                                          ": no model.name, model.num_classes or input.shape"));
  }
  if (name.has_null_value()) {
    absl::StatusOr<BenchModel> model = TorchScriptModel((dir / "model.pt").string(), i, config);
    if (model.ok()) model->label = absl::StrFormat("job %s (torchscript)", job_id);
    return model;
  }
  BenchModel model;
  model.entry = FindModel(name.string_value());
  if (model.entry == nullptr) {
    return FieldError(field, absl::StrFormat("job %s's model \"%s\" is not in this executor's "
                                             "zoo",
                                             job_id, name.string_value()));
  }
  config.preset = Member(model_part, "preset").string_value();
  if (absl::Status s = CheckModelConfig(*model.entry, config); !s.ok()) {
    return FieldError(field, s.message());
  }
  model.state_dict = (dir / kStateDictFile).string();
  model.input_kind = model.entry->input_kind;
  model.label = absl::StrFormat("job %s (%s)", job_id, name.string_value());
  return model;
}

absl::Status ResolveModels(const mpsd::v1::BenchJob& job, const std::string& artifacts_dir,
                           BenchPlan& plan) {
  const std::string known =
      absl::StrCat(KnownNames(ModelNames()), ", a TorchScript file (.pt) or a finished job's id");
  if (job.models().empty()) return FieldError("models", "at least one model required " + known);
  const std::vector<int64_t> input_shape(job.input_shape().begin(), job.input_shape().end());
  if (!input_shape.empty()) {
    if (absl::Status s = CheckInputShape(input_shape); !s.ok()) {
      return FieldError("input_shape", s.message());
    }
  }
  if (job.has_num_classes()) {
    if (absl::Status s = CheckNumClasses(job.num_classes()); !s.ok()) {
      return FieldError("num_classes", s.message());
    }
  }
  for (int i = 0; i < job.models_size(); ++i) {
    const std::string& name = job.models(i);
    const ModelEntry* entry = FindModel(name);
    ModelConfig config;
    config.input_shape = input_shape;
    config.num_classes = job.has_num_classes() ? job.num_classes() : 1;
    absl::StatusOr<BenchModel> model;
    if (entry != nullptr) {
      if (input_shape.empty()) config.input_shape = entry->natural_input_shape;
      if (!job.has_num_classes()) config.num_classes = entry->natural_num_classes;
      if (absl::Status s = CheckModelConfig(*entry, config); !s.ok()) {
        return FieldError(Indexed("models", i), s.message());
      }
      model = BenchModel{name, entry, "", "", entry->input_kind};
    } else if (api::IsJobId(name)) {
      model = JobModel(name, i, artifacts_dir, config);
    } else if (absl::EndsWith(name, ".pt") || absl::StrContains(name, "/")) {
      model = TorchScriptModel(name, i, config);
      if (model.ok()) model->label = std::filesystem::path(name).filename().string();
    } else {
      return FieldError(Indexed("models", i),
                        absl::StrFormat("unknown model \"%s\" %s", name, known));
    }
    if (!model.ok()) return model.status();
    plan.models.push_back(*std::move(model));
    plan.model_configs.push_back(std::move(config));
  }
  return absl::OkStatus();
}

absl::Status ResolveBatchSizes(const mpsd::v1::BenchJob& job, BenchPlan& plan) {
  if (job.batch_sizes().empty()) return FieldError("batch_sizes", "at least one required");
  for (int i = 0; i < job.batch_sizes_size(); ++i) {
    const int batch_size = job.batch_sizes(i);
    if (absl::Status s = Fields().Positive(Indexed("batch_sizes", i), batch_size); !s.ok()) {
      return s;
    }
    plan.batch_sizes.push_back(batch_size);
  }
  return absl::OkStatus();
}

// "all" adds every available device; each device once, the cpu first, the rest as named.
absl::Status ResolveDevices(const mpsd::v1::BenchJob& job, const DeviceInventory& inventory,
                            BenchPlan& plan) {
  std::vector<std::string> names(job.devices().begin(), job.devices().end());
  if (names.empty()) names.push_back("all");
  std::vector<torch::Device> devices;
  auto add = [&devices](const torch::Device& device) {
    if (std::none_of(devices.begin(), devices.end(), [&](const torch::Device& d) {
          return DeviceString(d) == DeviceString(device);
        })) {
      devices.push_back(device);
    }
  };
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "all") {
      add(torch::kCPU);
      for (int cuda = 0; cuda < inventory.cuda_device_count; ++cuda) {
        add(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(cuda)));
      }
      if (inventory.mps_available) add(torch::Device(torch::kMPS));
      continue;
    }
    if (names[i].empty() || names[i] == "auto") {
      return FieldError(
          Indexed("devices", i),
          "name a device (cpu, cuda, cuda:N, mps) or \"all\", got \"" + names[i] + "\"");
    }
    absl::StatusOr<torch::Device> device = ResolveDevice(names[i], inventory);
    if (!device.ok()) return FieldError(Indexed("devices", i), device.status().message());
    add(*device);
  }
  std::stable_partition(devices.begin(), devices.end(),
                        [](const torch::Device& d) { return d.is_cpu(); });
  plan.devices = std::move(devices);
  return absl::OkStatus();
}

absl::Status ResolveKinds(const mpsd::v1::BenchJob& job, BenchPlan& plan) {
  const std::string& mode = job.mode();
  if (mode.empty() || mode == kInference) {
    plan.modes = {kInference};
  } else if (mode == kTrainStep) {
    plan.modes = {kTrainStep};
  } else if (mode == "both") {
    plan.modes = {kInference, kTrainStep};
  } else {
    return FieldError("mode", absl::StrFormat("unknown \"%s\" %s", mode,
                                              Expected({kInference, kTrainStep, "both"})));
  }
  plan.precisions = Distinct(job.precisions(), "fp32");
  for (int i = 0; i < job.precisions_size(); ++i) {
    if (absl::Status s = CheckChoice(Indexed("precisions", i), job.precisions(i), PrecisionNames());
        !s.ok()) {
      return s;
    }
  }
  plan.memory_formats = Distinct(job.memory_formats(), kContiguous);
  for (int i = 0; i < job.memory_formats_size(); ++i) {
    if (absl::Status s = CheckChoice(Indexed("memory_formats", i), job.memory_formats(i),
                                     {kContiguous, kChannelsLast});
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ResolveCounts(const mpsd::v1::BenchJob& job, BenchPlan& plan) {
  if (job.has_warmup_iters()) {
    if (absl::Status s = Fields().InRange("warmup_iters", job.warmup_iters(), 0, kMaxWarmupIters);
        !s.ok()) {
      return s;
    }
    plan.warmup_iters = job.warmup_iters();
  }
  if (job.has_iters()) {
    if (absl::Status s = Fields().InRange("iters", job.iters(), 1, kMaxIters); !s.ok()) return s;
    plan.iters = job.iters();
  }
  if (!(job.min_time_ms() >= 0 && job.min_time_ms() <= kMaxMinTimeMs)) {
    return FieldError("min_time_ms",
                      absl::StrFormat("must be in [0, %d], got %g",
                                      static_cast<int64_t>(kMaxMinTimeMs), job.min_time_ms()));
  }
  plan.min_time_ms = job.min_time_ms();
  if (job.has_cpu_threads()) {
    if (absl::Status s = Fields().InRange("cpu_threads", job.cpu_threads(), 1, kMaxCpuThreads);
        !s.ok()) {
      return s;
    }
    plan.cpu_threads = job.cpu_threads();
  }
  plan.seed = job.seed();
  return absl::OkStatus();
}

// "oom" is the bench's own fault (a row runs out of memory and is recorded); the executor's
// faults (trainer/fault_injection.h: abort, segfault, allocate_unbounded, hang) apply to bench
// rows too, and the executor injects them.
absl::Status ResolveFaultInjection(const mpsd::v1::BenchJob& job, bool allow, BenchPlan& plan) {
  if (!job.has_fault_injection()) return absl::OkStatus();
  const mpsd::v1::FaultInjection& fault = job.fault_injection();
  if (!allow) {
    return FieldError("fault_injection",
                      "accepted only when mpsd runs with --enable-fault-injection (for tests)");
  }
  const std::vector<std::string> kinds = {"oom", "abort", "segfault", "allocate_unbounded", "hang"};
  if (std::find(kinds.begin(), kinds.end(), fault.kind()) == kinds.end()) {
    return FieldError("fault_injection.kind",
                      absl::StrFormat("expected oom, abort, segfault, allocate_unbounded or hang, "
                                      "got \"%s\"",
                                      fault.kind()));
  }
  if (fault.at_step() < 0) {
    return FieldError(
        "fault_injection.at_step",
        absl::StrFormat("must be >= 0 (0 = 1; a 1-based row), got %d", fault.at_step()));
  }
  if (fault.kind() == "oom") plan.oom_at_row = std::max<int64_t>(fault.at_step(), 1);
  return absl::OkStatus();
}

absl::StatusOr<BenchPlan> ResolveBenchJob(const mpsd::v1::BenchJob& job,
                                          const DeviceInventory& inventory,
                                          bool allow_fault_injection,
                                          const std::string& artifacts_dir) {
  BenchPlan plan;
  for (const absl::Status& s :
       {ResolveModels(job, artifacts_dir, plan), ResolveBatchSizes(job, plan),
        ResolveDevices(job, inventory, plan), ResolveKinds(job, plan), ResolveCounts(job, plan),
        ResolveFaultInjection(job, allow_fault_injection, plan)}) {
    if (!s.ok()) return s;
  }
  absl::StatusOr<OptimizerConfig> optimizer =
      ResolveOptimizer(job.optimizer(), Fields().Sub("optimizer"));
  if (!optimizer.ok()) return optimizer.status();
  plan.optimizer = *optimizer;
  const int64_t rows =
      static_cast<int64_t>(plan.models.size()) * static_cast<int64_t>(plan.batch_sizes.size()) *
      static_cast<int64_t>(plan.devices.size()) * static_cast<int64_t>(plan.modes.size()) *
      static_cast<int64_t>(plan.precisions.size()) *
      static_cast<int64_t>(plan.memory_formats.size());
  if (rows > kMaxRows) {
    return FieldError(
        "batch_sizes",
        absl::StrFormat(
            "the job would measure %d rows (models × batch_sizes × devices × modes × precisions × "
            "memory_formats); at most %d",
            rows, kMaxRows));
  }
  return plan;
}

// Every row of `plan`, in run order.
std::vector<RowSpec> ListRows(const BenchPlan& plan) {
  std::vector<RowSpec> rows;
  for (size_t m = 0; m < plan.models.size(); ++m) {
    for (const int batch_size : plan.batch_sizes) {
      for (const std::string& mode : plan.modes) {
        for (const std::string& precision : plan.precisions) {
          for (const std::string& memory_format : plan.memory_formats) {
            for (const torch::Device& device : plan.devices) {
              RowSpec row;
              row.index = static_cast<int64_t>(rows.size()) + 1;
              row.model = &plan.models[m];
              row.model_config = &plan.model_configs[m];
              row.batch_size = batch_size;
              row.mode = mode;
              row.precision = precision;
              row.memory_format = memory_format;
              row.device = device;
              rows.push_back(std::move(row));
            }
          }
        }
      }
    }
  }
  return rows;
}

// ---- Measuring one row ------------------------------------------------------------------------

std::optional<c10::ScalarType> AutocastType(const std::string& precision) {
  if (precision == "fp16") return c10::ScalarType::Half;
  if (precision == "bf16") return c10::ScalarType::BFloat16;
  return std::nullopt;
}

// Why the row cannot run on its device; "" when it can.
std::string Unsupported(const RowSpec& row) {
  const std::optional<c10::ScalarType> autocast = AutocastType(row.precision);
  if (autocast) {
    std::string reason = compat::AutocastUnsupportedReason(row.device.type(), *autocast);
    if (!reason.empty()) return reason;
  }
  if (row.memory_format == kChannelsLast && row.model->input_kind != InputKind::kImage) {
    return absl::StrFormat("channels_last is for image models; %s takes %s", row.model->label,
                           FormatShape(row.model_config->input_shape));
  }
  return "";
}

// Sets torch's intra-op threads for the guard's lifetime (cpu rows with cpu_threads set).
class CpuThreadsGuard {
 public:
  explicit CpuThreadsGuard(std::optional<int> threads) : previous_(torch::get_num_threads()) {
    if (threads) torch::set_num_threads(*threads);
    changed_ = threads.has_value();
  }
  ~CpuThreadsGuard() {
    if (changed_) torch::set_num_threads(previous_);
  }
  CpuThreadsGuard(const CpuThreadsGuard&) = delete;
  CpuThreadsGuard& operator=(const CpuThreadsGuard&) = delete;

 private:
  const int previous_;
  bool changed_ = false;
};

// numpy.percentile's default ("linear"): interpolates between the two nearest ranks of the
// sorted `values`; p in [0, 1].
double Percentile(const std::vector<double>& sorted, double p) {
  const double position = p * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (position - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

void SetTimes(std::vector<double> times_ms, BenchRow& row) {
  double sum = 0;
  for (const double t : times_ms) sum += t;
  std::sort(times_ms.begin(), times_ms.end());
  row.set_iters(static_cast<int32_t>(times_ms.size()));
  row.set_median_ms(Percentile(times_ms, 0.5));
  row.set_p10_ms(Percentile(times_ms, 0.1));
  row.set_p90_ms(Percentile(times_ms, 0.9));
  row.set_mean_ms(sum / static_cast<double>(times_ms.size()));
  row.set_samples_per_second(row.median_ms() > 0 ? row.batch_size() * 1000.0 / row.median_ms() : 0);
}

// The row's model on the CPU: the zoo's (with a finished job's weights), or the TorchScript
// file loaded. INVALID_ARGUMENT naming the file when it changed since validation.
absl::StatusOr<std::shared_ptr<ClassifierImpl>> BuildModel(const RowSpec& spec) {
  const BenchModel& m = *spec.model;
  if (m.entry == nullptr) {
    absl::StatusOr<std::shared_ptr<TorchScriptClassifierImpl>> script =
        LoadTorchScriptClassifier(m.torchscript, torch::kCPU, "bench_job.models");
    if (!script.ok()) return script.status();
    return std::shared_ptr<ClassifierImpl>(*std::move(script));
  }
  std::shared_ptr<ClassifierImpl> model = m.entry->make(*spec.model_config);
  if (!m.state_dict.empty()) {
    absl::StatusOr<NamedTensors> weights = ReadStateDict(m.state_dict);
    if (!weights.ok()) return weights.status();
    absl::StatusOr<StateDictLoad> loaded = LoadStateDict(*model, *weights, /*strict=*/true);
    if (!loaded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(m.state_dict, ": ", loaded.status().message()));
    }
  }
  return model;
}

// Builds the row's model and inputs, warms up and times; fills the row's figures. The model,
// optimizer and inputs are released on return (or when a LibTorch error unwinds). CANCELLED
// when `cancelled` turned true before an iteration. Throws c10::Error.
absl::Status MeasureRow(const BenchPlan& plan, const RowSpec& spec,
                        const std::atomic<bool>& cancelled, BenchRow& row) {
  const torch::Device device = spec.device;
  torch::manual_seed(plan.seed);
  absl::StatusOr<std::shared_ptr<ClassifierImpl>> built = BuildModel(spec);
  if (!built.ok()) return built.status();
  std::shared_ptr<ClassifierImpl> model = *std::move(built);
  row.set_parameters(CountParameters(*model));
  model->to(device);
  const bool channels_last = spec.memory_format == kChannelsLast;
  if (channels_last) ToChannelsLast(*model);

  std::vector<int64_t> shape = {spec.batch_size};
  shape.insert(shape.end(), spec.model_config->input_shape.begin(),
               spec.model_config->input_shape.end());
  torch::Tensor inputs = torch::randn(shape, torch::TensorOptions().device(device));
  if (channels_last) inputs = ChannelsLastStrides(inputs);
  const torch::Tensor labels =
      torch::randint(spec.model_config->num_classes, {spec.batch_size},
                     torch::TensorOptions().dtype(torch::kLong).device(device));
  if (plan.oom_at_row == spec.index) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "out of memory (injected by fault_injection at row ",
                     spec.index, ")");
  }

  const std::optional<c10::ScalarType> autocast = AutocastType(spec.precision);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<GraphedStep> graphed;
  torch::Tensor index;
  std::function<void()> iteration;
  if (spec.mode == kTrainStep) {
    model->train();
    // The TrainJob's step: its optimizer, and its whole step in one CUDA graph where a TrainJob
    // of these settings would capture it (train_loop.cc), the batch gathered from the resident
    // inputs by index as there.
    optimizer = MakeOptimizer(model->parameters(), plan.optimizer);
    GraphedStepRequest request;
    request.device = device;
    request.optimizer = plan.optimizer.kind;
    request.precision =
        ParsePrecision(spec.precision, Fields(), "precisions").value_or(Precision::kFp32);
    request.loss_scaling = request.precision == Precision::kFp16;
    const std::string reason = GraphedStepUnsupportedReason(request);
    if (reason.empty()) {
      GraphedStepOptions options;
      options.optimizer = plan.optimizer.kind;
      options.precision = request.precision;
      options.batch_size = spec.batch_size;
      options.schedule = TabulateSchedule(std::nullopt, plan.optimizer.learning_rate,
                                          plan.optimizer.momentum, /*total_steps=*/1);
      graphed =
          std::make_unique<GraphedStep>(*model, *optimizer, inputs, labels, std::move(options));
      index =
          torch::arange(spec.batch_size, torch::TensorOptions().dtype(torch::kLong).device(device));
      row.set_step("cuda_graph");
      iteration = [&] { graphed->Step(index); };
    } else {
      row.set_step("eager");
      if (device.is_cuda()) row.set_step_note(reason);
      iteration = [&] {
        compat::ZeroGradToNone(*optimizer);
        torch::Tensor logits;
        {
          std::optional<compat::AutocastGuard> guard;
          if (autocast) guard.emplace(device.type(), *autocast);
          logits = model->forward(inputs);
        }
        // The loss in float32, as autocast's policy (and the TrainJob's step) has it.
        torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), labels).backward();
        optimizer->step();
      };
    }
  } else {
    model->eval();
    iteration = [&] {
      c10::InferenceMode inference_mode;
      std::optional<compat::AutocastGuard> guard;
      if (autocast) guard.emplace(device.type(), *autocast);
      model->forward(inputs);
    };
  }

  for (int i = 0; i < plan.warmup_iters; ++i) {
    if (cancelled.load()) return absl::CancelledError("cancelled");
    iteration();
  }
  std::vector<double> times_ms;
  double total_ms = 0;
  while (static_cast<int>(times_ms.size()) < plan.iters || total_ms < plan.min_time_ms) {
    if (cancelled.load()) return absl::CancelledError("cancelled");
    Synchronize(device);
    const Clock::time_point start = Clock::now();
    iteration();
    Synchronize(device);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    times_ms.push_back(ms);
    total_ms += ms;
  }
  SetTimes(std::move(times_ms), row);
  // Read while the row's tensors are alive: MPS keeps no peak, only what is allocated now.
  row.set_peak_memory_bytes(ReadMemory(device).peak_allocated_bytes);
  return absl::OkStatus();
}

BenchRow RowHeader(const RowSpec& spec) {
  BenchRow row;
  row.set_model(spec.model->label);
  row.set_batch_size(spec.batch_size);
  row.set_device(DeviceString(spec.device));
  row.set_precision(spec.precision);
  row.set_mode(spec.mode);
  row.set_memory_format(spec.memory_format);
  return row;
}

void MarkFailed(BenchRow& row, BenchRow::Status status, std::string message) {
  row.set_status(status);
  row.set_message(std::move(message));
  // Figures of a row that did not finish are not results.
  row.clear_median_ms();
  row.clear_p10_ms();
  row.clear_p90_ms();
  row.clear_mean_ms();
  row.clear_samples_per_second();
  row.clear_peak_memory_bytes();
  row.clear_iters();
}

// Measures one row; LibTorch errors become OUT_OF_MEMORY or ERROR rows, after which the
// device's cached memory is returned. CANCELLED when cancelled mid-row.
absl::StatusOr<BenchRow> RunRow(const BenchPlan& plan, const RowSpec& spec,
                                const std::atomic<bool>& cancelled) {
  BenchRow row = RowHeader(spec);
  if (std::string why = Unsupported(spec); !why.empty()) {
    MarkFailed(row, BenchRow::UNSUPPORTED, std::move(why));
    return row;
  }
  bool failed = false;
  try {
    CpuThreadsGuard threads(spec.device.is_cpu() ? plan.cpu_threads : std::nullopt);
    row.set_cpu_threads(spec.device.is_cpu() ? torch::get_num_threads() : 0);
    ResetPeakMemory(spec.device);
    if (absl::Status s = MeasureRow(plan, spec, cancelled, row); !s.ok()) return s;
    row.set_status(BenchRow::OK);
  } catch (const c10::Error& e) {
    failed = true;
    MarkFailed(row, compat::IsOutOfMemory(e) ? BenchRow::OUT_OF_MEMORY : BenchRow::ERROR,
               e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    failed = true;
    MarkFailed(row, BenchRow::OUT_OF_MEMORY, "out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    failed = true;
    MarkFailed(row, BenchRow::ERROR, e.what());
  }
  if (failed) {
    try {
      Synchronize(spec.device);
      EmptyCache(spec.device);
    } catch (const c10::Error& e) {
      Log(LogLevel::kWarning,
          absl::StrCat("bench: cleanup after a failed row: ", e.what_without_backtrace()));
    }
  }
  return row;
}

// The cpu row measured for the same model, batch size, mode, precision and memory format.
const BenchRow* CpuRowFor(const std::vector<BenchRow>& rows, const BenchRow& row) {
  for (const BenchRow& r : rows) {
    if (r.device() == "cpu" && r.model() == row.model() && r.batch_size() == row.batch_size() &&
        r.mode() == row.mode() && r.precision() == row.precision() &&
        r.memory_format() == row.memory_format()) {
      return &r;
    }
  }
  return nullptr;
}

void SetSpeedup(const std::vector<BenchRow>& earlier, BenchRow& row) {
  if (row.device() == "cpu" || row.status() != BenchRow::OK || row.median_ms() <= 0) return;
  const BenchRow* cpu = CpuRowFor(earlier, row);
  if (cpu == nullptr || cpu->status() != BenchRow::OK) return;
  row.set_speedup_vs_cpu(cpu->median_ms() / row.median_ms());
}

void EmitLog(const EventSink& sink, mpsd::v1::LogLine::Level level, std::string text) {
  Log(level == mpsd::v1::LogLine::WARNING ? LogLevel::kWarning : LogLevel::kInfo, text);
  JobEvent event;
  event.mutable_log()->set_level(level);
  event.mutable_log()->set_text(std::move(text));
  sink(std::move(event));
}

std::string DeviceList(const std::vector<torch::Device>& devices) {
  std::vector<std::string> names;
  for (const torch::Device& device : devices) names.push_back(DeviceString(device));
  return absl::StrJoin(names, ", ");
}

std::string PlanLine(const BenchPlan& plan, size_t rows) {
  std::vector<std::string> models;
  for (const BenchModel& model : plan.models) models.push_back(model.label);
  return absl::StrFormat(
      "bench: %d rows: models %s, batch sizes %s, devices %s, %s, %s, %s; %d warm-up + %d "
      "timed iterations per row%s",
      rows, absl::StrJoin(models, ", "), absl::StrJoin(plan.batch_sizes, ", "),
      DeviceList(plan.devices), absl::StrJoin(plan.modes, ", "),
      absl::StrJoin(plan.precisions, ", "), absl::StrJoin(plan.memory_formats, ", "),
      plan.warmup_iters, plan.iters,
      plan.min_time_ms > 0 ? absl::StrFormat(" (at least %g ms)", plan.min_time_ms) : "");
}

// Runs every row, emitting each; the rows done so far are in `rows` even when cancelled.
absl::Status RunRows(const BenchPlan& plan, const EventSink& sink,
                     const std::atomic<bool>& cancelled, std::vector<BenchRow>& rows) {
  for (const RowSpec& spec : ListRows(plan)) {
    absl::StatusOr<BenchRow> row = RunRow(plan, spec, cancelled);
    if (!row.ok()) return row.status();
    SetSpeedup(rows, *row);
    if (row->status() != BenchRow::OK) {
      EmitLog(sink, mpsd::v1::LogLine::WARNING,
              absl::StrFormat("bench: %s batch %d on %s: %s: %s", row->model(), row->batch_size(),
                              row->device(), BenchRow::Status_Name(row->status()), row->message()));
    }
    rows.push_back(*row);
    JobEvent event;
    *event.mutable_bench_row() = *std::move(row);
    sink(std::move(event));
  }
  return absl::OkStatus();
}

// Adds the rows to the summary, then synchronises and empties every device and records the
// accelerator's memory after (its peak allocated: the most of any of its rows).
void FinishSummary(const BenchPlan& plan, std::vector<torch::Device>::const_iterator accelerator,
                   std::vector<BenchRow> rows, mpsd::v1::JobSummary& summary) {
  int64_t peak = 0;
  for (BenchRow& row : rows) {
    if (row.device() != "cpu") peak = std::max(peak, row.peak_memory_bytes());
    *summary.add_bench_rows() = std::move(row);
  }
  try {
    for (const torch::Device& device : plan.devices) {
      Synchronize(device);
      EmptyCache(device);
    }
    if (accelerator != plan.devices.end()) {
      SetMemoryAfter(ReadMemory(*accelerator), *summary.mutable_memory());
      summary.mutable_memory()->set_peak_allocated_bytes(peak);
    }
  } catch (const c10::Error& e) {
    Log(LogLevel::kWarning,
        absl::StrCat("bench: cleanup at the end: ", e.what_without_backtrace()));
  }
}

}  // namespace

absl::Status ValidateBenchJob(const mpsd::v1::BenchJob& job, const DeviceInventory& inventory,
                              bool allow_fault_injection, const std::string& artifacts_dir) {
  return ResolveBenchJob(job, inventory, allow_fault_injection, artifacts_dir).status();
}

absl::Status RunBenchJob(const mpsd::v1::BenchJob& job, const DeviceInventory& inventory,
                         bool allow_fault_injection, const std::string& artifacts_dir,
                         const EventSink& sink, const std::atomic<bool>& cancelled) {
  absl::StatusOr<BenchPlan> plan =
      ResolveBenchJob(job, inventory, allow_fault_injection, artifacts_dir);
  if (!plan.ok()) return plan.status();
  const Clock::time_point start = Clock::now();
  at::init_num_threads();  // this thread may not be the one that created the executor

  // The memory figures are those of the first accelerator, if any.
  const auto accelerator = std::find_if(plan->devices.begin(), plan->devices.end(),
                                        [](const torch::Device& d) { return !d.is_cpu(); });
  mpsd::v1::JobSummary summary;
  summary.set_device(DeviceList(plan->devices));
  if (accelerator != plan->devices.end()) {
    SetMemoryBefore(ReadMemory(*accelerator), *summary.mutable_memory());
  }
  const std::vector<RowSpec> specs = ListRows(*plan);
  EmitLog(sink, mpsd::v1::LogLine::INFO, PlanLine(*plan, specs.size()));

  std::vector<BenchRow> rows;
  absl::Status status;
  {
    const CudnnBenchmarkScope cudnn(job.cudnn_benchmark());
    status = RunRows(*plan, sink, cancelled, rows);
  }

  FinishSummary(*plan, accelerator, std::move(rows), summary);
  summary.set_total_time_s(std::chrono::duration<double>(Clock::now() - start).count());
  JobEvent event;
  *event.mutable_summary() = std::move(summary);
  sink(std::move(event));
  return status;
}

}  // namespace mpsd::trainer
