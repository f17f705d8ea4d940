// A TrainJob spec resolved into a TrainJobConfig (train_job.h). Each setting parses itself
// (optimizers.h, schedule.h, precision.h, datasets.h, models.h); this file puts them together
// and checks what spans several of them.
#include "trainer/train_job.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/epoch_metric.h"
#include "api/error_cause.h"
#include "api/field_text.h"
#include "trainer/compat/autocast.h"
#include "trainer/models/torchscript.h"
#include "trainer/torch_errors.h"

namespace mpsd::trainer {
namespace {

constexpr int kDefaultBatchSize = 64;
constexpr int kDefaultEpochs = 1;
constexpr Interval kLabelSmoothingInterval = {0, true, 1, false};  // [0, 1)

absl::Status FieldError(absl::string_view field, absl::string_view problem) {
  return TrainJobFields().Error(field, problem);
}

absl::StatusOr<const ModelEntry*> ResolveModel(const mpsd::v1::ModelSpec& spec) {
  if (spec.name().empty()) {
    return FieldError("model.name", "required " + KnownNames(ModelNames()));
  }
  const ModelEntry* model = FindModel(spec.name());
  if (model == nullptr) {
    return FieldError("model.name", absl::StrFormat("unknown model \"%s\" %s", spec.name(),
                                                    KnownNames(ModelNames())));
  }
  return model;
}

// The dataset's input shape and classes, or model.num_classes when it sets at least as many.
absl::Status ResolveClasses(const mpsd::v1::ModelSpec& spec, TrainJobConfig& config) {
  const DatasetConfig& dataset = config.dataset;
  config.model_config.input_shape = dataset.ModelInputShape();
  config.model_config.num_classes = dataset.num_classes;
  if (!spec.has_num_classes()) return absl::OkStatus();
  // Float targets' width must equal the outputs: ResolveTask says so, naming the task.
  if (spec.num_classes() < dataset.num_classes && !dataset.float_targets) {
    return FieldError("model.num_classes",
                      absl::StrFormat("must be at least the %d classes of dataset %s, got %d",
                                      dataset.num_classes, dataset.info->name, spec.num_classes()));
  }
  config.model_config.num_classes = spec.num_classes();
  return absl::OkStatus();
}

// Fills config.model_config once the dataset is known: its input shape, its classes unless
// model.num_classes sets more, and the preset. The message for a model that cannot take the
// dataset's images names the model, the shape and the dataset.
absl::Status ResolveModelConfig(const mpsd::v1::ModelSpec& spec, TrainJobConfig& config) {
  const ModelEntry& model = *config.model;
  if (spec.has_num_classes()) {
    if (absl::Status s = CheckNumClasses(spec.num_classes()); !s.ok()) {
      return FieldError("model.num_classes", s.message());
    }
  }
  if (absl::Status s = ResolveClasses(spec, config); !s.ok()) return s;
  if (absl::Status s = CheckPreset(model, spec.preset()); !s.ok()) {
    return FieldError("model.preset", s.message());
  }
  config.model_config.preset = spec.preset();
  if (spec.has_dropout()) {
    if (!(spec.dropout() >= 0 && spec.dropout() < 1)) {
      return FieldError("model.dropout",
                        absl::StrFormat("must be in [0, 1), got %g", spec.dropout()));
    }
    config.model_config.dropout = spec.dropout();
  }
  if (absl::Status s = CheckModelConfig(model, config.model_config); !s.ok()) {
    return FieldError("model.name", absl::StrFormat("%s (the input of dataset %s)", s.message(),
                                                    config.dataset.info->name));
  }
  return absl::OkStatus();
}

// The TorchScript model of `spec` (its forward tried on one example of the dataset's shape).
absl::Status ResolveTorchScript(const mpsd::v1::ModelSpec& spec, TrainJobConfig& config) {
  if (!spec.name().empty() || !spec.preset().empty()) {
    return FieldError("model.torchscript", "set either model.name (and preset) or torchscript");
  }
  if (spec.has_dropout()) {
    return FieldError("model.dropout", "applies to the zoo's models, not to a torchscript model");
  }
  if (absl::Status s = ResolveClasses(spec, config); !s.ok()) return s;
  absl::StatusOr<int64_t> parameters = CheckTorchScriptModel(
      spec.torchscript(), config.model_config.input_shape, config.model_config.num_classes);
  if (!parameters.ok()) return FieldError("model.torchscript", parameters.status().message());
  config.torchscript_path = spec.torchscript();
  config.torchscript_parameters = *parameters;
  return absl::OkStatus();
}

// The model (a zoo name, or a TorchScript file: trainer/models/torchscript.h) and the dataset.
absl::Status ResolveModelAndData(const mpsd::v1::TrainJob& spec, TrainJobConfig& config) {
  const bool torchscript = !spec.model().torchscript().empty();
  if (!torchscript) {
    absl::StatusOr<const ModelEntry*> model = ResolveModel(spec.model());
    if (!model.ok()) return model.status();
    config.model = *model;
  }
  absl::StatusOr<DatasetConfig> dataset = ResolveDataset(spec.dataset());
  if (!dataset.ok()) return dataset.status();
  config.dataset = *std::move(dataset);
  return torchscript ? ResolveTorchScript(spec.model(), config)
                     : ResolveModelConfig(spec.model(), config);
}

// batch_size and epochs.
absl::Status ResolveBatching(const mpsd::v1::TrainJob& spec, TrainJobConfig& config) {
  const FieldChecks& fields = TrainJobFields();
  absl::StatusOr<int> batch_size =
      fields.PositiveOr("batch_size", spec.has_batch_size(), spec.batch_size(), kDefaultBatchSize);
  if (!batch_size.ok()) return batch_size.status();
  config.batch_size = *batch_size;
  absl::StatusOr<int> epochs =
      fields.PositiveOr("epochs", spec.has_epochs(), spec.epochs(), kDefaultEpochs);
  if (!epochs.ok()) return epochs.status();
  // Each epoch is stored events and a row of every epoch table; beyond this it is a typo.
  constexpr int kMaxEpochs = 100'000;
  if (absl::Status s = fields.InRange("epochs", *epochs, 1, kMaxEpochs); !s.ok()) return s;
  config.epochs = *epochs;
  return absl::OkStatus();
}

// grad_accumulation_steps, grad_clip_norm, label_smoothing, drop_last, eval_every_epochs,
// divergence_threshold.
absl::Status ResolveStepOptions(const mpsd::v1::TrainJob& spec, TrainJobConfig& config) {
  const FieldChecks& fields = TrainJobFields();
  absl::StatusOr<int> accumulation =
      fields.PositiveOr("grad_accumulation_steps", spec.has_grad_accumulation_steps(),
                        spec.grad_accumulation_steps(), 1);
  if (!accumulation.ok()) return accumulation.status();
  config.grad_accumulation_steps = *accumulation;
  if (spec.has_grad_clip_norm()) {
    config.grad_clip_norm = spec.grad_clip_norm();
    if (absl::Status s = fields.PositiveFinite("grad_clip_norm", config.grad_clip_norm); !s.ok()) {
      return s;
    }
  }
  // Stored by ResolveTask (config.task.label_smoothing).
  if (absl::Status s =
          fields.InRange("label_smoothing", spec.label_smoothing(), kLabelSmoothingInterval);
      !s.ok()) {
    return s;
  }
  config.drop_last = spec.drop_last();
  absl::StatusOr<int> eval_every = fields.PositiveOr(
      "eval_every_epochs", spec.has_eval_every_epochs(), spec.eval_every_epochs(), 1);
  if (!eval_every.ok()) return eval_every.status();
  config.eval_every_epochs = *eval_every;
  const std::string& evaluate_test = spec.evaluate_test();
  if (evaluate_test.empty()) {
    config.evaluate_test =
        config.dataset.has_validation() ? EvaluateTest::kEnd : EvaluateTest::kEveryEpoch;
  } else if (evaluate_test == "every_epoch") {
    config.evaluate_test = EvaluateTest::kEveryEpoch;
  } else if (evaluate_test == "end") {
    config.evaluate_test = EvaluateTest::kEnd;
  } else if (evaluate_test == "never") {
    config.evaluate_test = EvaluateTest::kNever;
  } else {
    return fields.Error("evaluate_test", absl::StrFormat("unknown value \"%s\" (known: "
                                                         "every_epoch, end, never)",
                                                         evaluate_test));
  }
  if (spec.has_divergence_threshold()) {
    config.divergence_threshold = spec.divergence_threshold();
    if (absl::Status s = fields.PositiveFinite("divergence_threshold", config.divergence_threshold);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Batching, the optimizer, the step options, then the schedule on the optimizer's learning
// rate, checked with the nominal split.
absl::Status ResolveOptimization(const mpsd::v1::TrainJob& spec, TrainJobConfig& config) {
  if (absl::Status s = ResolveBatching(spec, config); !s.ok()) return s;
  absl::StatusOr<OptimizerConfig> optimizer =
      ResolveOptimizer(spec.optimizer(), TrainJobFields().Sub("optimizer"));
  if (!optimizer.ok()) return optimizer.status();
  config.optimizer = *optimizer;
  if (absl::Status s = ResolveStepOptions(spec, config); !s.ok()) return s;
  absl::StatusOr<ScheduleSettings> schedule = ResolveSchedule(
      spec.schedule(), config.optimizer.learning_rate, TrainJobFields().Sub("schedule"));
  if (!schedule.ok()) return schedule.status();
  config.schedule = *schedule;
  if (absl::Status s = CheckValidationFraction(config.dataset); !s.ok()) return s;
  config.nominal_train_examples = NominalTrainExamples(config.dataset);
  return BuildSchedule(config, config.nominal_train_examples).status();
}

// The precision of the spec, on the job's device.
absl::Status ResolvePrecision(absl::string_view name, TrainJobConfig& config) {
  absl::StatusOr<Precision> precision = ParsePrecision(name, TrainJobFields(), "precision");
  if (!precision.ok()) return precision.status();
  config.precision = *precision;
  if (config.precision == Precision::kFp32) return absl::OkStatus();
  const std::string reason = compat::AutocastUnsupportedReason(
      config.device.type(), config.precision == Precision::kFp16 ? torch::kHalf : torch::kBFloat16);
  if (reason.empty()) return absl::OkStatus();
  return FieldError("precision", absl::StrFormat("%s cannot run on device %s: %s", name,
                                                 DeviceString(config.device), reason));
}

// The device (a distributed job's rank: its entry of distributed.devices), the distributed
// block, the precision and the memory format.
absl::Status ResolveDeviceSettings(const mpsd::v1::TrainJob& spec, const DeviceInventory& inventory,
                                   int local_rank, TrainJobConfig& config) {
  absl::StatusOr<torch::Device> device = ResolveDevice(spec.device(), inventory);
  if (!device.ok()) return FieldError("device", device.status().message());
  config.device = *device;
  config.cudnn_benchmark = spec.cudnn_benchmark();
  absl::StatusOr<DistributedConfig> distributed =
      ResolveDistributed(spec, local_rank, inventory, TrainJobFields(), config.device);
  if (!distributed.ok()) return distributed.status();
  config.distributed = *distributed;
  if (absl::Status s = ResolvePrecision(spec.precision(), config); !s.ok()) return s;
  const std::string& format = spec.memory_format();
  if (format.empty() || format == "contiguous") return absl::OkStatus();
  if (format != "channels_last") {
    return FieldError(
        "memory_format",
        absl::StrFormat("must be \"contiguous\" or \"channels_last\", got \"%s\"", format));
  }
  // NHWC is a layout of 4-D tensors: batches of [C, H, W] images into the zoo's conv models.
  if (config.model == nullptr) {
    return FieldError("memory_format",
                      "channels_last is for the zoo's image models, not a TorchScript model");
  }
  if (config.model->input_kind != InputKind::kImage ||
      config.model_config.input_shape.size() != 3) {
    return FieldError(
        "memory_format",
        absl::StrFormat("channels_last is for image models taking [C, H, W]; %s "
                        "takes %s",
                        config.model->name, FormatShape(config.model_config.input_shape)));
  }
  config.channels_last = true;
  return absl::OkStatus();
}

// checkpoint, restart_policy and resume_from. After early_stopping and the dataset (keep_best's
// monitor).
absl::Status ResolveCheckpoints(const mpsd::v1::TrainJob& spec, const std::string& artifacts_dir,
                                TrainJobConfig& config) {
  const FieldChecks fields = TrainJobFields().Sub("checkpoint");
  const mpsd::v1::CheckpointSpec& c = spec.checkpoint();
  if (absl::Status s = fields.AtLeast("every_epochs", c.every_epochs(), 0); !s.ok()) return s;
  if (absl::Status s = fields.AtLeast("every_steps", c.every_steps(), 0); !s.ok()) return s;
  const int keep_last = c.has_keep_last() ? c.keep_last() : 1;
  if (absl::Status s = fields.AtLeast("keep_last", keep_last, 0); !s.ok()) return s;
  const std::string& policy = spec.restart_policy();
  if (!policy.empty() && policy != "none" && policy != "resume") {
    return FieldError("restart_policy",
                      absl::StrFormat("unknown policy \"%s\" (known: none, resume)", policy));
  }
  const bool periodic = c.every_epochs() > 0 || c.every_steps() > 0;
  if (keep_last == 0 && policy == "resume") {
    return fields.Error("keep_last",
                        "0 keeps no checkpoint to resume from, which "
                        "restart_policy: resume needs; keep at least 1");
  }
  if (keep_last == 0 && periodic && !c.keep_best()) {
    return fields.Error("keep_last",
                        "0 keeps none of the checkpoints every_epochs / "
                        "every_steps write; keep at least 1, or set keep_best");
  }
  if (c.keep_best() && !config.early_stopping.enabled && !config.dataset.has_validation()) {
    return fields.Error("keep_best",
                        "needs a metric to pick the best epoch by: early_stopping (its monitor) "
                        "or a validation split (dataset.validation; val_loss is then used)");
  }
  if ((periodic || c.keep_best()) && artifacts_dir.empty()) {
    return fields.Error(c.every_epochs() > 0  ? "every_epochs"
                        : c.every_steps() > 0 ? "every_steps"
                                              : "keep_best",
                        "this executor has no artifacts directory to write checkpoints to");
  }
  config.checkpoint_every_epochs = c.every_epochs();
  config.checkpoint_every_steps = c.every_steps();
  config.checkpoint_keep_last = keep_last;
  config.checkpoint_keep_best = c.keep_best();
  if (spec.resume_from().empty()) return absl::OkStatus();
  config.resume_path = ResolveResumeFrom(spec.resume_from(), artifacts_dir);
  if (config.resume_path != spec.resume_from() && artifacts_dir.empty()) {
    return FieldError("resume_from", "a job id needs the executor's artifacts directory");
  }
  return CheckResumeCheckpoint(config, /*train_examples=*/0, "resume_from").status();
}

// nan_policy, max_skipped_steps, and the fault injection that plants NaN losses (checked by
// CheckFaultInjection before).
absl::Status ResolveNanPolicy(const mpsd::v1::TrainJob& spec, TrainJobConfig& config) {
  const std::string& policy = spec.nan_policy();
  if (policy == "skip_step") {
    config.nan_policy = NanPolicy::kSkipStep;
  } else if (!policy.empty() && policy != "fail") {
    return FieldError("nan_policy",
                      absl::StrFormat("unknown policy \"%s\" (known: fail, skip_step)", policy));
  }
  if (spec.has_max_skipped_steps()) {
    if (config.nan_policy != NanPolicy::kSkipStep) {
      return FieldError("max_skipped_steps", "only with nan_policy: skip_step");
    }
    if (absl::Status s = TrainJobFields().AtLeast("max_skipped_steps", spec.max_skipped_steps(), 0);
        !s.ok()) {
      return s;
    }
  }
  constexpr int kDefaultMaxSkippedSteps = 10;
  config.max_skipped_steps =
      spec.has_max_skipped_steps() ? spec.max_skipped_steps() : kDefaultMaxSkippedSteps;
  if (spec.fault_injection().kind() == "nan_loss") {
    config.nan_loss_from = std::max<int64_t>(spec.fault_injection().at_step(), 1);
    config.nan_loss_steps = spec.fault_injection().steps();
  }
  return absl::OkStatus();
}

// profile: start_step within the job's steps (counted with NominalTrainExamples), steps in
// [1, kMaxProfileSteps]; the trace goes into the job's artifacts directory.
absl::Status ResolveProfile(const mpsd::v1::TrainJob& spec, const std::string& artifacts_dir,
                            TrainJobConfig& config) {
  if (!spec.has_profile()) return absl::OkStatus();
  constexpr int kMaxProfileSteps = 100;  // a CUDA step's trace is about 1 MB
  const FieldChecks fields = TrainJobFields().Sub("profile");
  const mpsd::v1::ProfileSpec& profile = spec.profile();
  const int64_t start = profile.has_start_step() ? profile.start_step() : 1;
  const int64_t steps = profile.has_steps() ? profile.steps() : 5;
  if (absl::Status s = fields.InRange("steps", steps, 1, kMaxProfileSteps); !s.ok()) return s;
  absl::StatusOr<Schedule> schedule = BuildSchedule(config, config.nominal_train_examples);
  if (!schedule.ok()) return schedule.status();
  const int64_t total = schedule->config().total_steps;
  if (start < 1 || start > total) {
    return fields.Error(
        "start_step",
        absl::StrFormat("must be in [1, %d] (the job's %d epoch(s) × %d "
                        "step(s)), got %d",
                        total, config.epochs, schedule->config().steps_per_epoch, start));
  }
  if (artifacts_dir.empty()) {
    return fields.Error("", "this executor has no artifacts directory to write the trace to");
  }
  config.profile.start_step = start;
  config.profile.steps = steps;
  return absl::OkStatus();
}

// The field a Schedule::Create error belongs to.
std::string ScheduleErrorField(const TrainJobConfig& job, const absl::Status& status) {
  if (job.schedule.config.kind == ScheduleKind::kCosine) {
    return job.schedule.warmup_epochs >= 0 ? "schedule.warmup_epochs" : "schedule.warmup_steps";
  }
  if (const std::string field = api::InvalidFieldOf(status); !field.empty()) {
    return absl::StrCat("schedule.", field);
  }
  return "schedule.name";
}

// Where a run's artifacts go, and a checkpoint chosen by the scheduler (restart_policy: resume).
void PlaceJob(const api::JobContext& context, const std::string& artifacts_dir,
              TrainJobConfig& config) {
  config.job_id = context.job_id;
  if (!artifacts_dir.empty() && !context.job_id.empty()) {
    config.job_dir = (std::filesystem::path(artifacts_dir) / context.job_id).string();
  }
  if (!context.resume_checkpoint.empty()) config.resume_path = context.resume_checkpoint;
}

// The epoch metrics a job of `task` measures: each split's loss and accuracy; multilabel's
// macro_f1 (val and test); regression's mse, mae and r2 (val and test) and no accuracy; the
// user's metrics (val and test).
std::vector<std::string> MonitorNames(const TaskConfig& config) {
  const TaskKind task = config.kind;
  std::vector<std::string> names = {"val_loss", "train_loss", "test_loss"};
  if (task != TaskKind::kRegression) {
    names.insert(names.end(), {"val_accuracy", "train_accuracy", "test_accuracy"});
  }
  const std::vector<std::string> extra =
      task == TaskKind::kMultilabel   ? std::vector<std::string>{"macro_f1"}
      : task == TaskKind::kRegression ? std::vector<std::string>{"mse", "mae", "r2"}
                                      : std::vector<std::string>{};
  for (const char* split : {"val_", "test_"}) {
    for (const std::string& metric : extra) names.push_back(absl::StrCat(split, metric));
    for (const UserMetricConfig& metric : config.metrics) {
      names.push_back(absl::StrCat(split, metric.name));
    }
  }
  return names;
}

}  // namespace

absl::Status CheckEpochMetric(const TrainJobConfig& config, const std::string& name,
                              const FieldChecks& fields, absl::string_view field) {
  const std::vector<std::string> known = MonitorNames(config.task);
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    const std::optional<std::string> near = api::ClosestName(name, known);
    return fields.Error(
        field, absl::StrFormat("unknown epoch metric \"%s\"%s %s", name,
                               near.has_value() ? absl::StrCat(" (did you mean \"", *near, "\"?)")
                                                : std::string(),
                               KnownNames(known)));
  }
  if (absl::StartsWith(name, "val_") && !config.dataset.has_validation()) {
    return fields.Error(field, absl::StrFormat("%s is measured only with a validation split "
                                               "(dataset.validation: fraction or source)",
                                               name));
  }
  if (absl::StartsWith(name, "test_") && config.evaluate_test != EvaluateTest::kEveryEpoch) {
    return fields.Error(field, absl::StrFormat("%s is measured every epoch only with "
                                               "evaluate_test: every_epoch (better: a "
                                               "validation split, dataset.validation)",
                                               name));
  }
  return absl::OkStatus();
}

namespace {

// early_stopping: a monitor the job measures every evaluated epoch, its mode, patience > 0,
// min_delta >= 0. After the dataset (validation) and evaluate_test are resolved.
absl::Status ResolveEarlyStopping(const mpsd::v1::TrainJob& spec, TrainJobConfig& config) {
  if (!spec.has_early_stopping()) return absl::OkStatus();
  const FieldChecks fields = TrainJobFields().Sub("early_stopping");
  const mpsd::v1::EarlyStoppingSpec& e = spec.early_stopping();
  EarlyStoppingConfig c;
  c.enabled = true;
  if (!e.monitor().empty()) c.monitor = e.monitor();
  if (absl::Status s = CheckEpochMetric(config, c.monitor, fields, "monitor"); !s.ok()) return s;
  if (e.mode().empty()) {
    const std::optional<bool> higher = api::HigherIsBetter(c.monitor);
    if (!higher.has_value()) {
      return fields.Error("mode", absl::StrFormat("required for %s, a metric of the job's own: "
                                                  "\"max\" where larger is better, else \"min\"",
                                                  c.monitor));
    }
    c.maximize = *higher;
  } else if (e.mode() == "min" || e.mode() == "max") {
    c.maximize = e.mode() == "max";
    if (std::string why = api::ModeContradiction(c.monitor, c.maximize); !why.empty()) {
      return fields.Error("mode", why);
    }
  } else {
    return fields.Error("mode",
                        absl::StrFormat("must be \"min\" or \"max\", got \"%s\"", e.mode()));
  }
  absl::StatusOr<int> patience =
      fields.PositiveOr("patience", e.has_patience(), e.patience(), c.patience);
  if (!patience.ok()) return patience.status();
  c.patience = *patience;
  if (absl::Status s = fields.NonNegativeFinite("min_delta", e.min_delta()); !s.ok()) return s;
  c.min_delta = e.min_delta();
  config.early_stopping = c;
  return absl::OkStatus();
}

// model.weights, strict, freeze, trainable, param_groups (trainer/fine_tune.h). For a zoo model
// they are tried at submit on the model built on the CPU (the weights file read and loaded, every
// prefix matched); a TorchScript model's names are checked when the job runs. The CUDA graph
// path (one learning rate, every parameter trained) is left for the eager loop.
absl::Status ResolveFineTuning(const mpsd::v1::TrainJob& spec, TrainJobConfig& config) {
  absl::StatusOr<FineTuneConfig> fine_tune =
      ResolveFineTune(spec, config.optimizer, TrainJobFields());
  if (!fine_tune.ok()) return fine_tune.status();
  config.fine_tune = *std::move(fine_tune);
  if (!config.fine_tune.enabled()) return absl::OkStatus();
  if (config.fine_tune.freezes() || !config.fine_tune.param_groups.empty()) {
    config.cuda_graphs = false;
  }
  if (config.model == nullptr) return absl::OkStatus();
  return CatchTorchErrors([&] {
    torch::NoGradGuard no_grad;
    std::shared_ptr<ClassifierImpl> model = config.model->make(config.model_config);
    std::vector<std::string> notes;
    absl::StatusOr<ParameterGroups> groups =
        PrepareFineTune(config.fine_tune, config.optimizer, *model, TrainJobFields(), notes);
    return groups.ok() ? absl::OkStatus() : groups.status();
  });
}

}  // namespace

const FieldChecks& TrainJobFields() {
  static const FieldChecks* const fields = new FieldChecks("train_job");
  return *fields;
}

absl::StatusOr<TrainJobConfig> ResolveTrainJob(const mpsd::v1::TrainJob& spec,
                                               const DeviceInventory& inventory,
                                               const api::Executor::Options& options,
                                               const api::JobContext* context) {
  const std::string& artifacts_dir = options.artifacts_dir;
  TrainJobConfig config;
  config.spec = spec;
  if (absl::Status s = ResolveModelAndData(spec, config); !s.ok()) return s;
  absl::StatusOr<TaskConfig> task =
      ResolveTask(spec, config.dataset, config.model_config.num_classes, TrainJobFields());
  if (!task.ok()) return task.status();
  config.task = *std::move(task);
  if (!config.task.custom_loss_path.empty()) {
    // The user's loss tried on a probe batch, on the CPU (at submit, nothing touches the device).
    absl::StatusOr<torch::jit::Module> loss = LoadTorchScriptLoss(config.task, torch::kCPU);
    if (!loss.ok()) return FieldError("loss.torchscript", loss.status().message());
  }
  for (const UserMetricConfig& metric : config.task.metrics) {
    absl::StatusOr<torch::jit::Module> module =
        LoadTorchScriptMetric(config.task, metric.path, torch::kCPU);
    if (!module.ok()) {
      return api::WithInvalidField(
          absl::InvalidArgumentError(absl::StrCat(metric.field, ": ", module.status().message())),
          metric.field);
    }
  }
  if (absl::Status s = ResolveOptimization(spec, config); !s.ok()) return s;
  if (absl::Status s = ResolveEarlyStopping(spec, config); !s.ok()) return s;
  if (absl::Status s = ResolveFineTuning(spec, config); !s.ok()) return s;
  config.seed = spec.seed();
  const int local_rank = context != nullptr ? context->local_rank : 0;
  if (absl::Status s = ResolveDeviceSettings(spec, inventory, local_rank, config); !s.ok()) {
    return s;
  }
  if (absl::Status s = ResolveCheckpoints(spec, artifacts_dir, config); !s.ok()) return s;
  if (absl::Status s = ResolveNanPolicy(spec, config); !s.ok()) return s;
  if (absl::Status s = ResolveProfile(spec, artifacts_dir, config); !s.ok()) return s;
  if (context != nullptr) PlaceJob(*context, artifacts_dir, config);
  config.dataset.own.cache_dir = options.cache_dir;  // image_folder's decode cache
  return config;
}

absl::StatusOr<Schedule> BuildSchedule(const TrainJobConfig& job, int64_t train_examples) {
  ScheduleConfig config = job.schedule.config;
  // A distributed rank steps through its shard (batch_size is per rank, as in DDP).
  train_examples = ShardSize(train_examples, job.distributed.world_size, job.drop_last);
  config.steps_per_epoch =
      StepsPerEpoch(train_examples, job.batch_size, job.drop_last, job.grad_accumulation_steps);
  config.total_steps = config.steps_per_epoch * job.epochs;
  if (config.steps_per_epoch == 0) {
    return FieldError("drop_last", absl::StrFormat("the %d training examples make no full batch "
                                                   "of %d, so an epoch would have no step",
                                                   train_examples, job.batch_size));
  }
  // Every step is one stored event (about 100 bytes) and one point of each chart.
  constexpr int64_t kMaxTotalSteps = 100'000'000;
  if (config.total_steps > kMaxTotalSteps) {
    return FieldError(
        "epochs",
        absl::StrFormat("%d epoch(s) × %d step(s) per epoch is %d steps; at most %d steps in all",
                        job.epochs, config.steps_per_epoch, config.total_steps, kMaxTotalSteps));
  }
  if (job.schedule.warmup_epochs >= 0) {
    config.warmup_steps = std::llround(job.schedule.warmup_epochs * config.steps_per_epoch);
  }
  absl::StatusOr<Schedule> schedule = Schedule::Create(config);
  if (schedule.ok()) return schedule;
  const std::string steps = absl::StrFormat(
      " (%d epoch(s) × %d step(s) per epoch: %d training examples, batch size %d, "
      "grad_accumulation_steps %d%s)",
      job.epochs, config.steps_per_epoch, train_examples, job.batch_size,
      job.grad_accumulation_steps, job.drop_last ? ", drop_last" : "");
  return FieldError(ScheduleErrorField(job, schedule.status()),
                    absl::StrCat(schedule.status().message(), steps));
}

CheckpointInfo JobCheckpointInfo(const TrainJobConfig& job, int64_t train_examples) {
  CheckpointInfo info;
  info.model = job.model != nullptr ? std::string(job.model->name) : "torchscript";
  info.parameters =
      job.model != nullptr ? job.model->parameters(job.model_config) : job.torchscript_parameters;
  info.optimizer = OptimizerName(job.optimizer.kind);
  info.dataset = std::string(job.dataset.info->name);
  info.train_examples = train_examples;
  info.batch_size = job.batch_size;
  info.world_size = job.distributed.world_size;
  info.seed = job.seed;
  info.precision = PrecisionName(job.precision);
  info.job_id = job.job_id;
  info.torch_version = TORCH_VERSION;
  return info;
}

absl::StatusOr<CheckpointInfo> CheckResumeCheckpoint(const TrainJobConfig& job,
                                                     int64_t train_examples,
                                                     absl::string_view field) {
  absl::StatusOr<CheckpointInfo> saved = ReadCheckpointInfo(job.resume_path);
  if (!saved.ok()) return FieldError(field, saved.status().message());
  if (absl::Status s = CheckCompatible(*saved, JobCheckpointInfo(job, train_examples), job.epochs);
      !s.ok()) {
    return FieldError(field, absl::StrCat(job.resume_path, ": ", s.message()));
  }
  return saved;
}

}  // namespace mpsd::trainer
