// The LibTorch executor: validates TrainJobs against the devices and files this process has,
// runs them through the training loop, and is the exception firewall between LibTorch and the
// rest of mpsd (no exception leaves this file).
#include "trainer/executor.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/bench.h"
#include "trainer/checkpoint.h"
#include "trainer/compat.h"
#include "trainer/datasets.h"
#include "trainer/device.h"
#include "trainer/fault_injection.h"
#include "trainer/grad_scaler.h"
#include "trainer/log.h"
#include "trainer/models.h"
#include "trainer/models/torchscript.h"
#include "trainer/optimizers.h"
#include "trainer/schedule.h"
#include "trainer/train_loop.h"

namespace mpsd::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using mpsd::v1::JobEvent;

constexpr int kDefaultBatchSize = 64;
constexpr int kDefaultEpochs = 1;
constexpr double kDefaultLearningRate = 1e-3;     // adam, adamw (torch.optim's)
constexpr double kDefaultSgdLearningRate = 1e-2;  // sgd
constexpr double kDefaultAdamWWeightDecay = 1e-2;

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
  // What Validate assumes the training split holds (the dataset's published size, or
  // limit_train below it): the schedule's total steps are checked with it at submit, and
  // recomputed from the loaded data when the job runs.
  int64_t nominal_train_examples = 0;
  int batch_size = kDefaultBatchSize;
  int epochs = kDefaultEpochs;
  OptimizerConfig optimizer;
  // Steps are filled in by BuildSchedule; warmup_epochs (< 0: unset) becomes warmup_steps there.
  ScheduleConfig schedule;
  double warmup_epochs = -1;
  Precision precision = Precision::kFp32;
  int grad_accumulation_steps = 1;
  double grad_clip_norm = 0;  // 0 = off
  double label_smoothing = 0;
  bool drop_last = false;
  int eval_every_epochs = 1;
  uint64_t seed = 0;
  torch::Device device = torch::kCPU;

  // ---- Checkpoints, resume, the finished model, TorchScript models (trainer/checkpoint.h) ----
  // A user's TorchScript model instead of `model` (then nullptr): the file, and its trainable
  // parameter count measured at validation.
  std::string torchscript_path;
  int64_t torchscript_parameters = 0;
  int checkpoint_every_epochs = 0;  // 0 = no checkpoints
  // The checkpoint to resume from (resume_from resolved, or JobContext::resume_checkpoint);
  // empty = start fresh.
  std::string resume_path;
  // <artifacts_dir>/<job id>/ where checkpoints and the finished model go; empty = nowhere.
  std::string job_dir;
  std::string job_id;
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

// The TorchScript model of `spec` (its forward tried on one example of the dataset's shape).
absl::Status ResolveTorchScript(const mpsd::v1::ModelSpec& spec, TrainJobConfig& config) {
  if (!spec.name().empty() || !spec.preset().empty()) {
    return FieldError("model.torchscript", "set either model.name (and preset) or torchscript");
  }
  const DatasetConfig& dataset = config.dataset;
  config.model_config.input_shape = dataset.input_shape;
  config.model_config.num_classes = dataset.num_classes;
  if (spec.has_num_classes()) {
    if (spec.num_classes() < dataset.num_classes) {
      return FieldError("model.num_classes",
                        absl::StrFormat("must be at least the %d classes of dataset %s, got %d",
                                        dataset.num_classes, dataset.info->name,
                                        spec.num_classes()));
    }
    config.model_config.num_classes = spec.num_classes();
  }
  absl::StatusOr<int64_t> parameters = CheckTorchScriptModel(
      spec.torchscript(), config.model_config.input_shape, config.model_config.num_classes);
  if (!parameters.ok()) return FieldError("model.torchscript", parameters.status().message());
  config.torchscript_path = spec.torchscript();
  config.torchscript_parameters = *parameters;
  return absl::OkStatus();
}

absl::StatusOr<int> PositiveOr(absl::string_view field, bool has_value, int value,
                               int default_value) {
  if (!has_value) return default_value;
  if (value <= 0) return FieldError(field, absl::StrFormat("must be > 0, got %d", value));
  return value;
}

// `value` in the interval from `low` to `high` (closed or open at each end as the flags say;
// a NaN is never in range). The message shows the interval as "[0, 1)".
absl::Status CheckRange(absl::string_view field, double value, double low, bool low_closed,
                        double high, bool high_closed) {
  const bool above = low_closed ? value >= low : value > low;
  const bool below = high_closed ? value <= high : value < high;
  if (above && below) return absl::OkStatus();
  return FieldError(field, absl::StrCat("must be in ", low_closed ? "[" : "(", low, ", ", high,
                                        high_closed ? "]" : ")", ", got ", value));
}

// > 0 and finite.
absl::Status CheckPositive(absl::string_view field, double value) {
  if (!(value > 0)) return FieldError(field, absl::StrCat("must be > 0, got ", value));
  if (!std::isfinite(value)) return FieldError(field, absl::StrCat("must be finite, got ", value));
  return absl::OkStatus();
}

// >= 0 and finite.
absl::Status CheckNonNegative(absl::string_view field, double value) {
  if (!(value >= 0)) return FieldError(field, absl::StrCat("must be >= 0, got ", value));
  if (!std::isfinite(value)) return FieldError(field, absl::StrCat("must be finite, got ", value));
  return absl::OkStatus();
}

// A field set for a setting that does not use it is a mistake worth reporting.
absl::Status NotFor(absl::string_view field, absl::string_view who, absl::string_view what) {
  return FieldError(field, absl::StrFormat("only %s take%s it, not %s", who,
                                           absl::StrContains(who, " ") ? "" : "s", what));
}

// torch.optim's SGD, Adam and AdamW with their defaults (AdamW's weight decay 0.01).
absl::StatusOr<OptimizerConfig> ResolveOptimizer(const mpsd::v1::OptimizerSpec& spec) {
  OptimizerConfig config;
  if (spec.name().empty() || spec.name() == "adam") {
    config.kind = OptimizerKind::kAdam;
  } else if (spec.name() == "adamw") {
    config.kind = OptimizerKind::kAdamW;
  } else if (spec.name() == "sgd") {
    config.kind = OptimizerKind::kSgd;
  } else {
    return FieldError("optimizer.name", absl::StrFormat("unknown optimizer \"%s\" %s", spec.name(),
                                                        Known({"adam", "adamw", "sgd"})));
  }
  const bool sgd = config.kind == OptimizerKind::kSgd;
  const std::string name = OptimizerName(config.kind);
  config.learning_rate = sgd ? kDefaultSgdLearningRate : kDefaultLearningRate;
  if (spec.has_learning_rate()) {
    config.learning_rate = spec.learning_rate();
    if (absl::Status s = CheckPositive("optimizer.learning_rate", config.learning_rate); !s.ok()) {
      return s;
    }
  }
  config.weight_decay = config.kind == OptimizerKind::kAdamW ? kDefaultAdamWWeightDecay : 0;
  if (spec.has_weight_decay()) {
    config.weight_decay = spec.weight_decay();
    if (absl::Status s = CheckNonNegative("optimizer.weight_decay", config.weight_decay);
        !s.ok()) {
      return s;
    }
  }
  if (!sgd && spec.has_momentum()) return NotFor("optimizer.momentum", "sgd", name);
  if (!sgd && spec.nesterov()) return NotFor("optimizer.nesterov", "sgd", name);
  if (sgd && !spec.betas().empty()) return NotFor("optimizer.betas", "adam and adamw", name);
  if (sgd && spec.has_eps()) return NotFor("optimizer.eps", "adam and adamw", name);
  if (spec.has_momentum()) {
    config.momentum = spec.momentum();
    if (absl::Status s = CheckRange("optimizer.momentum", config.momentum, 0, true, 1, false);
        !s.ok()) {
      return s;
    }
  }
  config.nesterov = spec.nesterov();
  if (config.nesterov && config.momentum <= 0) {
    return FieldError("optimizer.nesterov",
                      absl::StrCat("needs momentum > 0, got momentum ", config.momentum));
  }
  if (!spec.betas().empty()) {
    if (spec.betas_size() != 2) {
      return FieldError("optimizer.betas",
                        absl::StrFormat("must be [beta1, beta2], got %d value(s)",
                                        spec.betas_size()));
    }
    for (int i = 0; i < 2; ++i) {
      if (absl::Status s = CheckRange(absl::StrCat("optimizer.betas[", i, "]"), spec.betas(i), 0,
                                      true, 1, false);
          !s.ok()) {
        return s;
      }
    }
    config.beta1 = spec.betas(0);
    config.beta2 = spec.betas(1);
  }
  if (spec.has_eps()) {
    config.eps = spec.eps();
    if (absl::Status s = CheckPositive("optimizer.eps", config.eps); !s.ok()) return s;
  }
  return config;
}

// Rejects a schedule field set for a schedule that does not use it.
absl::Status CheckScheduleFieldsUsed(const mpsd::v1::ScheduleSpec& spec, ScheduleKind kind) {
  const std::string name = ScheduleName(kind);
  if (kind != ScheduleKind::kStep) {
    if (spec.has_step_size_epochs()) return NotFor("schedule.step_size_epochs", "step", name);
    if (spec.has_gamma()) return NotFor("schedule.gamma", "step", name);
  }
  if (kind != ScheduleKind::kCosine) {
    if (spec.has_warmup_steps()) return NotFor("schedule.warmup_steps", "cosine", name);
    if (spec.has_warmup_epochs()) return NotFor("schedule.warmup_epochs", "cosine", name);
    if (spec.has_min_lr()) return NotFor("schedule.min_lr", "cosine", name);
  }
  if (kind != ScheduleKind::kOneCycle) {
    const bool any = spec.has_max_lr() || spec.has_pct_start() || spec.has_div_factor() ||
                     spec.has_final_div_factor() || !spec.anneal_strategy().empty() ||
                     spec.has_cycle_momentum() || spec.has_base_momentum() ||
                     spec.has_max_momentum();
    if (any) {
      return FieldError("schedule",
                        absl::StrFormat("max_lr, pct_start, div_factor, final_div_factor, "
                                        "anneal_strategy and *_momentum are onecycle's, not %s's",
                                        name));
    }
  }
  return absl::OkStatus();
}

absl::Status ResolveStepSchedule(const mpsd::v1::ScheduleSpec& spec, ScheduleConfig& config) {
  if (spec.has_step_size_epochs()) {
    if (spec.step_size_epochs() <= 0) {
      return FieldError("schedule.step_size_epochs",
                        absl::StrFormat("must be > 0, got %d", spec.step_size_epochs()));
    }
    config.step_size_epochs = spec.step_size_epochs();
  }
  if (spec.has_gamma()) {
    config.gamma = spec.gamma();
    if (absl::Status s = CheckPositive("schedule.gamma", config.gamma); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ResolveCosineSchedule(const mpsd::v1::ScheduleSpec& spec, TrainJobConfig& job) {
  ScheduleConfig& config = job.schedule;
  if (spec.has_warmup_steps() && spec.has_warmup_epochs()) {
    return FieldError("schedule.warmup_epochs", "set at most one of warmup_steps and "
                                                "warmup_epochs");
  }
  if (spec.has_warmup_steps()) {
    if (spec.warmup_steps() < 0) {
      return FieldError("schedule.warmup_steps",
                        absl::StrFormat("must be >= 0, got %d", spec.warmup_steps()));
    }
    config.warmup_steps = spec.warmup_steps();
  }
  if (spec.has_warmup_epochs()) {
    job.warmup_epochs = spec.warmup_epochs();
    if (absl::Status s = CheckNonNegative("schedule.warmup_epochs", job.warmup_epochs); !s.ok()) {
      return s;
    }
  }
  if (spec.has_min_lr()) {
    config.min_lr = spec.min_lr();
    if (absl::Status s = CheckNonNegative("schedule.min_lr", config.min_lr); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ResolveOneCycleSchedule(const mpsd::v1::ScheduleSpec& spec, ScheduleConfig& config) {
  config.max_lr = spec.has_max_lr() ? spec.max_lr() : config.base_lr;
  if (absl::Status s = CheckPositive("schedule.max_lr", config.max_lr); !s.ok()) return s;
  if (spec.has_pct_start()) {
    config.pct_start = spec.pct_start();
    if (absl::Status s = CheckRange("schedule.pct_start", config.pct_start, 0, true, 1, true);
        !s.ok()) {
      return s;
    }
  }
  if (spec.has_div_factor()) {
    config.div_factor = spec.div_factor();
    if (absl::Status s = CheckPositive("schedule.div_factor", config.div_factor); !s.ok()) return s;
  }
  if (spec.has_final_div_factor()) {
    config.final_div_factor = spec.final_div_factor();
    if (absl::Status s = CheckPositive("schedule.final_div_factor", config.final_div_factor);
        !s.ok()) {
      return s;
    }
  }
  if (spec.anneal_strategy() == "linear") {
    config.anneal_cos = false;
  } else if (!spec.anneal_strategy().empty() && spec.anneal_strategy() != "cos") {
    return FieldError("schedule.anneal_strategy",
                      absl::StrFormat("must be \"cos\" or \"linear\", got \"%s\"",
                                      spec.anneal_strategy()));
  }
  config.cycle_momentum = !spec.has_cycle_momentum() || spec.cycle_momentum();
  if (spec.has_base_momentum()) config.base_momentum = spec.base_momentum();
  if (spec.has_max_momentum()) config.max_momentum = spec.max_momentum();
  if (absl::Status s =
          CheckRange("schedule.base_momentum", config.base_momentum, 0, true, 1, false);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange("schedule.max_momentum", config.max_momentum, 0, true, 1, false);
      !s.ok()) {
    return s;
  }
  if (config.base_momentum > config.max_momentum) {
    return FieldError("schedule.base_momentum",
                      absl::StrCat("must be <= max_momentum ", config.max_momentum, ", got ",
                                   config.base_momentum));
  }
  return absl::OkStatus();
}

// The schedule's kind and parameters; its steps come from BuildSchedule.
absl::Status ResolveSchedule(const mpsd::v1::ScheduleSpec& spec, TrainJobConfig& job) {
  ScheduleConfig& config = job.schedule;
  config.base_lr = job.optimizer.learning_rate;
  if (spec.name().empty() || spec.name() == "constant") {
    config.kind = ScheduleKind::kConstant;
  } else if (spec.name() == "step") {
    config.kind = ScheduleKind::kStep;
  } else if (spec.name() == "cosine") {
    config.kind = ScheduleKind::kCosine;
  } else if (spec.name() == "onecycle") {
    config.kind = ScheduleKind::kOneCycle;
  } else {
    return FieldError("schedule.name",
                      absl::StrFormat("unknown schedule \"%s\" %s", spec.name(),
                                      Known({"constant", "step", "cosine", "onecycle"})));
  }
  if (absl::Status s = CheckScheduleFieldsUsed(spec, config.kind); !s.ok()) return s;
  switch (config.kind) {
    case ScheduleKind::kConstant:
      return absl::OkStatus();
    case ScheduleKind::kStep:
      return ResolveStepSchedule(spec, config);
    case ScheduleKind::kCosine:
      return ResolveCosineSchedule(spec, job);
    case ScheduleKind::kOneCycle:
      return ResolveOneCycleSchedule(spec, config);
  }
  return absl::OkStatus();
}

// The job's schedule for a training split of `train_examples`: total steps exactly as the loop
// will take them (StepsPerEpoch × epochs). Field errors for a job with no step, a onecycle too
// short for its two phases, a cosine warm-up as long as the job.
absl::StatusOr<Schedule> BuildSchedule(const TrainJobConfig& job, int64_t train_examples) {
  ScheduleConfig config = job.schedule;
  config.steps_per_epoch = StepsPerEpoch(train_examples, job.batch_size, job.drop_last,
                                         job.grad_accumulation_steps);
  config.total_steps = config.steps_per_epoch * job.epochs;
  if (config.steps_per_epoch == 0) {
    return FieldError("drop_last", absl::StrFormat("the %d training examples make no full batch "
                                                   "of %d, so an epoch would have no step",
                                                   train_examples, job.batch_size));
  }
  if (job.warmup_epochs >= 0) {
    config.warmup_steps = std::llround(job.warmup_epochs * config.steps_per_epoch);
  }
  absl::StatusOr<Schedule> schedule = Schedule::Create(config);
  if (schedule.ok()) return schedule;
  const std::string steps = absl::StrFormat(
      " (%d epoch(s) × %d step(s) per epoch: %d training examples, batch size %d, "
      "grad_accumulation_steps %d%s)",
      job.epochs, config.steps_per_epoch, train_examples, job.batch_size,
      job.grad_accumulation_steps, job.drop_last ? ", drop_last" : "");
  std::string field = "schedule.name";
  if (absl::StrContains(schedule.status().message(), "pct_start")) field = "schedule.pct_start";
  if (config.kind == ScheduleKind::kCosine) {
    field = job.warmup_epochs >= 0 ? "schedule.warmup_epochs" : "schedule.warmup_steps";
  }
  return FieldError(field, absl::StrCat(schedule.status().message(), steps));
}

// The training examples the dataset is published with (synthetic: its spec's), after limit_train.
int64_t NominalTrainExamples(const DatasetConfig& dataset) {
  if (dataset.info->name == "synthetic") return dataset.synthetic_train;
  if (dataset.info->resolve != nullptr) return dataset.own.train_examples;  // own data
  const int64_t examples = dataset.info->name == "cifar10" ? 50'000 : 60'000;  // (fashion-)mnist
  return dataset.limit_train > 0 ? std::min(examples, dataset.limit_train) : examples;
}

absl::StatusOr<Precision> ResolvePrecision(absl::string_view name, const torch::Device& device) {
  Precision precision = Precision::kFp32;
  if (name == "fp16") {
    precision = Precision::kFp16;
  } else if (name == "bf16") {
    precision = Precision::kBf16;
  } else if (!name.empty() && name != "fp32") {
    return FieldError("precision", absl::StrFormat("unknown precision \"%s\" %s", name,
                                                   Known({"fp32", "fp16", "bf16"})));
  }
  if (precision == Precision::kFp32) return precision;
  const std::string reason = compat::AutocastUnsupportedReason(
      device.type(), precision == Precision::kFp16 ? torch::kHalf : torch::kBFloat16);
  if (!reason.empty()) {
    return FieldError("precision", absl::StrFormat("%s cannot run on device %s: %s", name,
                                                   DeviceString(device), reason));
  }
  return precision;
}

// grad_accumulation_steps, grad_clip_norm, label_smoothing, drop_last, eval_every_epochs.
absl::Status ResolveStepOptions(const mpsd::v1::TrainJob& spec, TrainJobConfig& config) {
  absl::StatusOr<int> accumulation =
      PositiveOr("grad_accumulation_steps", spec.has_grad_accumulation_steps(),
                 spec.grad_accumulation_steps(), 1);
  if (!accumulation.ok()) return accumulation.status();
  config.grad_accumulation_steps = *accumulation;
  if (spec.has_grad_clip_norm()) {
    config.grad_clip_norm = spec.grad_clip_norm();
    if (absl::Status s = CheckPositive("grad_clip_norm", config.grad_clip_norm); !s.ok()) {
      return s;
    }
  }
  config.label_smoothing = spec.label_smoothing();
  if (absl::Status s = CheckRange("label_smoothing", config.label_smoothing, 0, true, 1, false);
      !s.ok()) {
    return s;
  }
  config.drop_last = spec.drop_last();
  absl::StatusOr<int> eval_every = PositiveOr("eval_every_epochs", spec.has_eval_every_epochs(),
                                              spec.eval_every_epochs(), 1);
  if (!eval_every.ok()) return eval_every.status();
  config.eval_every_epochs = *eval_every;
  return absl::OkStatus();
}

absl::StatusOr<TrainJobConfig> ResolveTrainJob(const mpsd::v1::TrainJob& spec,
                                               const DeviceInventory& inventory) {
  TrainJobConfig config;
  const bool torchscript = !spec.model().torchscript().empty();  // trainer/models/torchscript.h
  if (!torchscript) {
    absl::StatusOr<const ModelEntry*> model = ResolveModel(spec.model());
    if (!model.ok()) return model.status();
    config.model = *model;
  }
  absl::StatusOr<DatasetConfig> dataset = ResolveDataset(spec.dataset());
  if (!dataset.ok()) return dataset.status();
  config.dataset = *std::move(dataset);
  if (absl::Status s = torchscript ? ResolveTorchScript(spec.model(), config)
                                   : ResolveModelConfig(spec.model(), config);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<int> batch_size =
      PositiveOr("batch_size", spec.has_batch_size(), spec.batch_size(), kDefaultBatchSize);
  if (!batch_size.ok()) return batch_size.status();
  config.batch_size = *batch_size;
  absl::StatusOr<int> epochs =
      PositiveOr("epochs", spec.has_epochs(), spec.epochs(), kDefaultEpochs);
  if (!epochs.ok()) return epochs.status();
  config.epochs = *epochs;
  absl::StatusOr<OptimizerConfig> optimizer = ResolveOptimizer(spec.optimizer());
  if (!optimizer.ok()) return optimizer.status();
  config.optimizer = *optimizer;
  if (absl::Status s = ResolveStepOptions(spec, config); !s.ok()) return s;
  if (absl::Status s = ResolveSchedule(spec.schedule(), config); !s.ok()) return s;
  config.nominal_train_examples = NominalTrainExamples(config.dataset);
  if (absl::Status s = BuildSchedule(config, config.nominal_train_examples).status(); !s.ok()) {
    return s;
  }
  config.seed = spec.seed();
  absl::StatusOr<torch::Device> device = ResolveDevice(spec.device(), inventory);
  if (!device.ok()) return FieldError("device", device.status().message());
  config.device = *device;
  absl::StatusOr<Precision> precision = ResolvePrecision(spec.precision(), config.device);
  if (!precision.ok()) return precision.status();
  config.precision = *precision;
  // BenchJob measures channels_last; the training loop keeps LibTorch's default layout.
  if (!spec.memory_format().empty() && spec.memory_format() != "contiguous") {
    return FieldError("memory_format",
                      absl::StrFormat("only \"contiguous\" is implemented for a TrainJob, got "
                                      "\"%s\" (BenchJob.memory_formats measures channels_last)",
                                      spec.memory_format()));
  }
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
    if (event.has_checkpoint()) summary_.set_checkpoint_path(event.checkpoint().path());
  }

  mpsd::v1::JobSummary& summary() { return summary_; }

  void SetMemoryBefore(const api::MemoryFigures& before) {
    summary_.mutable_memory()->set_allocated_before_bytes(before.allocated_bytes);
    summary_.mutable_memory()->set_reserved_before_bytes(before.reserved_bytes);
  }

  void SetMemoryAfter(const api::MemoryFigures& after) {
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
    if (step.skipped()) summary_.set_skipped_steps(summary_.skipped_steps() + 1);
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

// The job's settings as resolved, for the log line at its start.
std::string DescribeTraining(const TrainJobConfig& job, const Schedule& schedule,
                             int64_t parameters) {
  const OptimizerConfig& o = job.optimizer;
  std::string optimizer = absl::StrFormat("%s lr %g weight_decay %g", OptimizerName(o.kind),
                                          o.learning_rate, o.weight_decay);
  if (o.kind == OptimizerKind::kSgd) {
    absl::StrAppendFormat(&optimizer, " momentum %g%s", o.momentum,
                          o.nesterov ? " nesterov" : "");
  } else {
    absl::StrAppendFormat(&optimizer, " betas (%g, %g) eps %g", o.beta1, o.beta2, o.eps);
  }
  const ScheduleConfig& c = schedule.config();
  std::string schedule_text = ScheduleName(c.kind);
  switch (c.kind) {
    case ScheduleKind::kConstant:
      break;
    case ScheduleKind::kStep:
      absl::StrAppendFormat(&schedule_text, " (×%g every %d epoch(s))", c.gamma,
                            c.step_size_epochs);
      break;
    case ScheduleKind::kCosine:
      absl::StrAppendFormat(&schedule_text, " (warm-up %d step(s), min_lr %g)", c.warmup_steps,
                            c.min_lr);
      break;
    case ScheduleKind::kOneCycle:
      absl::StrAppendFormat(&schedule_text, " (max_lr %g, pct_start %g, %s%s)", c.max_lr,
                            c.pct_start, c.anneal_cos ? "cos" : "linear",
                            c.cycle_momentum ? ", cycling momentum" : "");
      break;
  }
  std::string step = absl::StrFormat("batch size %d", job.batch_size);
  if (job.grad_accumulation_steps > 1) {
    absl::StrAppendFormat(&step, " × %d accumulated", job.grad_accumulation_steps);
  }
  if (job.grad_clip_norm > 0) absl::StrAppendFormat(&step, ", clip norm %g", job.grad_clip_norm);
  if (job.label_smoothing > 0) {
    absl::StrAppendFormat(&step, ", label smoothing %g", job.label_smoothing);
  }
  if (job.drop_last) absl::StrAppend(&step, ", drop_last");
  return absl::StrFormat(
      "training %s (%d parameters): %s, schedule %s, precision %s, %s, %d epoch(s) of %d "
      "step(s), seed %d",
      job.model != nullptr ? job.model->name : absl::string_view(job.torchscript_path),
      parameters, optimizer, schedule_text, PrecisionName(job.precision), step,
      job.epochs, c.steps_per_epoch, job.seed);
}

// ---- Checkpoints, resume, the finished model (trainer/checkpoint.h) --------------------------

// What this job's checkpoints record and a checkpoint it resumes from must match. The dataset
// size is known only once loaded (0 before).
CheckpointInfo JobCheckpointInfo(const TrainJobConfig& job, int64_t train_examples) {
  CheckpointInfo info;
  info.model = job.model != nullptr ? std::string(job.model->name) : "torchscript";
  info.parameters = job.model != nullptr ? job.model->parameters(job.model_config)
                                         : job.torchscript_parameters;
  info.optimizer = OptimizerName(job.optimizer.kind);
  info.dataset = std::string(job.dataset.info->name);
  info.train_examples = train_examples;
  info.batch_size = job.batch_size;
  info.precision = PrecisionName(job.precision);
  info.job_id = job.job_id;
  info.torch_version = TORCH_VERSION;
  return info;
}

// Reads the metadata of job.resume_path (not its tensors) and checks it fits the job.
// `field` names where the path came from.
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

// checkpoint, restart_policy and resume_from; `artifacts_dir` as in Executor::Options.
absl::Status ResolveCheckpoints(const mpsd::v1::TrainJob& spec, const std::string& artifacts_dir,
                                TrainJobConfig& config) {
  const int every = spec.checkpoint().every_epochs();
  if (every < 0) {
    return FieldError("checkpoint.every_epochs", absl::StrFormat("must be >= 0, got %d", every));
  }
  if (every > 0 && artifacts_dir.empty()) {
    return FieldError("checkpoint.every_epochs",
                      "this executor has no artifacts directory to write checkpoints to");
  }
  config.checkpoint_every_epochs = every;
  const std::string& policy = spec.restart_policy();
  if (!policy.empty() && policy != "none" && policy != "resume") {
    return FieldError("restart_policy",
                      absl::StrFormat("unknown policy \"%s\" (known: none, resume)", policy));
  }
  if (spec.resume_from().empty()) return absl::OkStatus();
  config.resume_path = ResolveResumeFrom(spec.resume_from(), artifacts_dir);
  if (config.resume_path != spec.resume_from() && artifacts_dir.empty()) {
    return FieldError("resume_from", "a job id needs the executor's artifacts directory");
  }
  return CheckResumeCheckpoint(config, /*train_examples=*/0, "resume_from").status();
}

// A fresh model for the job, on its device: the zoo's, or the user's TorchScript module.
absl::StatusOr<std::shared_ptr<ClassifierImpl>> MakeModel(const TrainJobConfig& job) {
  if (job.model != nullptr) {
    std::shared_ptr<ClassifierImpl> model = job.model->make(job.model_config);
    model->to(job.device);
    return model;
  }
  absl::StatusOr<std::shared_ptr<TorchScriptClassifierImpl>> script =
      LoadTorchScriptClassifier(job.torchscript_path, job.device);
  if (!script.ok()) return FieldError("model.torchscript", script.status().message());
  return std::shared_ptr<ClassifierImpl>(*std::move(script));
}

// The loop's state besides model and optimizer that a checkpoint keeps: fp16's loss scale.
constexpr char kScaleName[] = "grad_scaler_scale";
constexpr char kGrowthTrackerName[] = "grad_scaler_growth_tracker";

ExtraState SaveExtraState(const GradScaler& grad_scaler) {
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  return {{kScaleName, torch::full({}, grad_scaler.scale(), f64)},
          {kGrowthTrackerName,
           torch::full({}, grad_scaler.growth_tracker(), f64.dtype(torch::kInt64))}};
}

// Restores job.resume_path into the model, optimizer and GradScaler, and sets where `options`
// starts (the epoch after the checkpoint's, the step after its step).
absl::Status RestoreCheckpoint(const TrainJobConfig& job, int64_t train_examples,
                               ClassifierImpl& model, torch::optim::Optimizer& optimizer,
                               GradScaler& grad_scaler, TrainOptions& options,
                               const EventSink& sink, mpsd::v1::JobSummary& summary) {
  if (job.resume_path.empty()) return absl::OkStatus();
  absl::StatusOr<CheckpointInfo> checked =
      CheckResumeCheckpoint(job, train_examples, "resume_from");
  if (!checked.ok()) return checked.status();
  ExtraState extra = {{kScaleName, {}}, {kGrowthTrackerName, {}}};
  absl::StatusOr<RestoredCheckpoint> restored =
      LoadCheckpoint(job.resume_path, model, optimizer, extra, job.device);
  if (!restored.ok()) return FieldError("resume_from", restored.status().message());
  if (extra[kScaleName].defined() && extra[kGrowthTrackerName].defined()) {
    grad_scaler.Restore(extra[kScaleName].item<double>(),
                        extra[kGrowthTrackerName].item<int64_t>());
  }
  options.start_epoch = restored->info.epoch + 1;
  options.start_step = restored->info.step;
  summary.set_resumed_at_step(restored->info.step);
  EmitLog(sink, absl::StrFormat("resumed from %s: epoch %d, step %d", job.resume_path,
                                restored->info.epoch, restored->info.step));
  return absl::OkStatus();
}

// The epoch-end hook that writes a checkpoint every job.checkpoint_every_epochs epochs and
// emits its `checkpoint` event. The loop's shuffle order is a function of seed and epoch, so
// there is no shuffle generator to keep.
EpochEndHook CheckpointHook(const TrainJobConfig& job, int64_t train_examples,
                            ClassifierImpl& model, torch::optim::Optimizer& optimizer,
                            const GradScaler& grad_scaler, const EventSink& sink) {
  if (job.checkpoint_every_epochs <= 0) return nullptr;
  return [&job, train_examples, &model, &optimizer, &grad_scaler, &sink](int epoch,
                                                                         int64_t steps_done) {
    if (epoch % job.checkpoint_every_epochs != 0) return absl::OkStatus();
    if (job.job_dir.empty()) {
      return FieldError("checkpoint.every_epochs", "the job has no id to name its directory");
    }
    CheckpointInfo info = JobCheckpointInfo(job, train_examples);
    info.epoch = epoch;
    info.step = steps_done;
    absl::StatusOr<mpsd::v1::CheckpointSaved> saved =
        SaveCheckpoint(job.job_dir, info, model, optimizer, at::Generator(),
                       SaveExtraState(grad_scaler), job.device);
    if (!saved.ok()) return saved.status();
    JobEvent event;
    *event.mutable_checkpoint() = *saved;
    sink(std::move(event));
    return absl::OkStatus();
  };
}

// The class names as a JSON array of strings (RFC 8259 escaping).
std::string ClassNamesJson(const std::vector<std::string>& names) {
  std::string json = "[";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) json += ", ";
    json += '"';
    for (const char c : names[i]) {
      if (c == '"' || c == '\\') {
        json += '\\';
        json += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        absl::StrAppendFormat(&json, "\\u%04x", static_cast<unsigned char>(c));
      } else {
        json += c;
      }
    }
    json += '"';
  }
  return json + "]";
}

// Saves the finished model into the job's directory: the TorchScript module as TorchScript, a
// zoo model as a LibTorch archive (torch::save; torch::load into the same zoo model reads it).
absl::Status SaveFinishedModel(const TrainJobConfig& job, ClassifierImpl& model,
                               const std::vector<std::string>& class_names,
                               mpsd::v1::JobSummary& summary) {
  if (job.job_dir.empty()) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(job.job_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(job.job_dir, ": cannot create: ", ec.message()));
  const std::string path = (std::filesystem::path(job.job_dir) / "model.pt").string();
  const std::string temporary = path + ".tmp";
  auto* script = dynamic_cast<TorchScriptClassifierImpl*>(&model);
  // The class names travel with the model, so its predictions can be mapped back: an extra
  // file of the TorchScript archive (torch.jit.load(..., _extra_files={"class_names.json": ""})),
  // or the entry "class_names" (a list of strings) of the LibTorch archive.
  if (script != nullptr) {
    torch::jit::ExtraFilesMap extra;
    if (!class_names.empty()) extra["class_names.json"] = ClassNamesJson(class_names);
    script->script().save(temporary, extra);
  } else {
    torch::serialize::OutputArchive archive;
    model.save(archive);
    if (!class_names.empty()) {
      c10::List<std::string> names;
      for (const std::string& name : class_names) names.push_back(name);
      archive.write("class_names", c10::IValue(names));
    }
    archive.save_to(temporary);
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename ", temporary, ": ", ec.message()));
  summary.set_model_path(path);
  summary.set_model_format(script != nullptr ? "torchscript" : "libtorch_archive");
  return absl::OkStatus();
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
                   const EventSink& sink, const CancelFlag& cancel) override;

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
    case mpsd::v1::SubmitJobRequest::kTrainJob: {
      absl::StatusOr<TrainJobConfig> config = ResolveTrainJob(spec.train_job(), inventory_);
      if (!config.ok()) return config;
      if (absl::Status s = ResolveCheckpoints(spec.train_job(), options_.artifacts_dir, *config);
          !s.ok()) {
        return s;
      }
      return config;
    }
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
  for (const std::string& note : data->notes) EmitLog(sink, note);
  EmitLog(sink, absl::StrFormat("loaded %s: %d train, %d test examples in %.2f s on %s",
                                job.dataset.info->name, data->train.size(), data->test.size(),
                                load_seconds, DeviceString(job.device)));
  for (const std::string& name : data->class_names) summary.summary().add_class_names(name);
  summary.summary().set_data_placement(data->placement);
  summary.summary().set_skipped_images(data->skipped_images);

  absl::StatusOr<Schedule> schedule = BuildSchedule(job, data->train.size());
  if (!schedule.ok()) return schedule.status();

  torch::manual_seed(job.seed);
  absl::StatusOr<std::shared_ptr<ClassifierImpl>> made = MakeModel(job);
  if (!made.ok()) return made.status();
  std::shared_ptr<ClassifierImpl> model = *std::move(made);
  summary.summary().set_parameters(CountParameters(*model));
  std::unique_ptr<torch::optim::Optimizer> optimizer =
      MakeOptimizer(model->parameters(), job.optimizer);
  summary.summary().set_optimizer(OptimizerName(job.optimizer.kind));
  summary.summary().set_schedule(ScheduleName(job.schedule.kind));
  summary.summary().set_precision(PrecisionName(job.precision));
  EmitLog(sink, DescribeTraining(job, *schedule, summary.summary().parameters()));

  GradScaler grad_scaler;
  TrainOptions options;
  options.batch_size = job.batch_size;
  options.epochs = job.epochs;
  options.seed = job.seed;
  options.steps_per_readback = options_.steps_per_readback;
  options.grad_accumulation_steps = job.grad_accumulation_steps;
  options.drop_last = job.drop_last;
  options.grad_clip_norm = job.grad_clip_norm;
  options.label_smoothing = job.label_smoothing;
  options.eval_every_epochs = job.eval_every_epochs;
  options.precision = job.precision;
  options.schedule = *schedule;
  options.grad_scaler = &grad_scaler;
  // Checkpoints, resume and the finished model (trainer/checkpoint.h).
  const int64_t train_examples = data->train.size();
  if (absl::Status s = RestoreCheckpoint(job, train_examples, *model, *optimizer, grad_scaler,
                                         options, sink, summary.summary());
      !s.ok()) {
    return s;
  }
  options.on_epoch_end =
      CheckpointHook(job, train_examples, *model, *optimizer, grad_scaler, sink);
  absl::Status status = Train(*model, *optimizer, *data, options, sink, cancelled);
  if (job.precision == Precision::kFp16) {
    summary.summary().set_final_loss_scale(static_cast<float>(grad_scaler.scale()));
  }
  if (status.ok()) {
    status = SaveFinishedModel(job, *model, data->class_names, summary.summary());
  }
  return status;
}

absl::Status TorchExecutor::Run(const JobContext& context,
                                const mpsd::v1::SubmitJobRequest& spec, const EventSink& sink,
                                const CancelFlag& cancel) {
  const std::atomic<bool>& cancelled = cancel.flag();  // polled at step boundaries
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
  // Where the job's artifacts go, and a checkpoint chosen by the scheduler (restart_policy).
  job->job_id = context.job_id;
  if (!options_.artifacts_dir.empty() && !context.job_id.empty()) {
    job->job_dir = (std::filesystem::path(options_.artifacts_dir) / context.job_id).string();
  }
  if (!context.resume_checkpoint.empty()) job->resume_path = context.resume_checkpoint;
  job->dataset.own.cache_dir = options_.cache_dir;
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
    const api::MemoryFigures memory = ReadMemory(inventory_.preferred);
    info.set_allocated_bytes(memory.allocated_bytes);
    info.set_reserved_bytes(memory.reserved_bytes);
    return absl::OkStatus();
  });
  if (!status.ok()) Log(LogLevel::kWarning, absl::StrCat("GetDevice: ", status.ToString()));
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Executor>> CreateTorchExecutor(const Executor::Options& options) {
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
