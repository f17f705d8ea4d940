// Tasks, their losses and metrics (task.h).
#include "trainer/task.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/models/torchscript.h"
#include "trainer/torch_errors.h"

namespace mpsd::trainer {
namespace {

namespace F = torch::nn::functional;

struct LossEntry {
  const char* name;
  LossKind kind;
  TaskKind task;
};
constexpr LossEntry kLosses[] = {
    {"cross_entropy", LossKind::kCrossEntropy, TaskKind::kClassification},
    {"bce_with_logits", LossKind::kBceWithLogits, TaskKind::kMultilabel},
    {"mse", LossKind::kMse, TaskKind::kRegression},
    {"l1", LossKind::kL1, TaskKind::kRegression},
    {"smooth_l1", LossKind::kSmoothL1, TaskKind::kRegression},
    {"huber", LossKind::kHuber, TaskKind::kRegression},
};

std::vector<std::string> LossNamesOf(TaskKind task) {
  std::vector<std::string> names;
  for (const LossEntry& e : kLosses) {
    if (e.task == task) names.push_back(e.name);
  }
  return names;
}

absl::StatusOr<TaskKind> ParseTask(const std::string& name, const FieldChecks& fields) {
  if (name.empty() || name == "classification") return TaskKind::kClassification;
  if (name == "multilabel") return TaskKind::kMultilabel;
  if (name == "regression") return TaskKind::kRegression;
  return fields.Error("task", absl::StrFormat("unknown task \"%s\" (known: classification, "
                                              "multilabel, regression)",
                                              name));
}

absl::Status ResolveLossType(const mpsd::v1::LossSpec& spec, TaskConfig& config,
                             const FieldChecks& fields) {
  const std::vector<std::string> known = LossNamesOf(config.kind);
  if (spec.type().empty()) {
    config.loss = config.kind == TaskKind::kClassification ? LossKind::kCrossEntropy
                  : config.kind == TaskKind::kMultilabel   ? LossKind::kBceWithLogits
                                                           : LossKind::kMse;
    return absl::OkStatus();
  }
  for (const LossEntry& e : kLosses) {
    if (spec.type() != e.name) continue;
    if (e.task != config.kind) {
      return fields.Error(
          "loss.type",
          absl::StrFormat("\"%s\" is a %s loss; task %s takes %s", e.name, TaskName(e.task),
                          TaskName(config.kind), absl::StrJoin(known, ", ")));
    }
    config.loss = e.kind;
    return absl::OkStatus();
  }
  return fields.Error("loss.type",
                      absl::StrFormat("unknown loss \"%s\" (task %s takes %s)", spec.type(),
                                      TaskName(config.kind), absl::StrJoin(known, ", ")));
}

// beta, delta, class_weights, pos_weight: each only where its loss uses it, with valid values.
absl::Status ResolveLossSettings(const mpsd::v1::LossSpec& spec, TaskConfig& config,
                                 const FieldChecks& fields) {
  const auto only = [&](const char* field, const char* where) {
    return fields.Error(
        absl::StrCat("loss.", field),
        absl::StrFormat("only %s takes it (loss %s)", where, LossName(config.loss)));
  };
  if (spec.has_beta()) {
    if (config.loss != LossKind::kSmoothL1) return only("beta", "loss smooth_l1");
    if (absl::Status s = fields.PositiveFinite("loss.beta", spec.beta()); !s.ok()) return s;
    config.beta = spec.beta();
  }
  if (spec.has_delta()) {
    if (config.loss != LossKind::kHuber) return only("delta", "loss huber");
    if (absl::Status s = fields.PositiveFinite("loss.delta", spec.delta()); !s.ok()) return s;
    config.delta = spec.delta();
  }
  if (!spec.class_weights().empty()) {
    if (config.kind != TaskKind::kClassification) {
      return only("class_weights", "task classification");
    }
    if (spec.class_weights_size() != config.outputs) {
      return fields.Error("loss.class_weights",
                          absl::StrFormat("%d weights, but the model has %d classes (one weight "
                                          "per class)",
                                          spec.class_weights_size(), config.outputs));
    }
    double total = 0;
    for (int i = 0; i < spec.class_weights_size(); ++i) {
      const double w = spec.class_weights(i);
      if (!(std::isfinite(w) && w >= 0)) {
        return fields.Error(absl::StrCat("loss.class_weights[", i, "]"),
                            absl::StrFormat("must be finite and >= 0, got %g", w));
      }
      total += w;
    }
    if (total <= 0) return fields.Error("loss.class_weights", "all weights are 0");
    config.class_weights.assign(spec.class_weights().begin(), spec.class_weights().end());
  }
  if (!spec.pos_weight().empty()) {
    if (config.kind != TaskKind::kMultilabel) return only("pos_weight", "task multilabel");
    if (spec.pos_weight_size() != config.outputs) {
      return fields.Error("loss.pos_weight",
                          absl::StrFormat("%d weights, but the targets have %d labels (one "
                                          "weight per label)",
                                          spec.pos_weight_size(), config.outputs));
    }
    for (int i = 0; i < spec.pos_weight_size(); ++i) {
      if (!(std::isfinite(spec.pos_weight(i)) && spec.pos_weight(i) > 0)) {
        return fields.Error(absl::StrCat("loss.pos_weight[", i, "]"),
                            absl::StrFormat("must be finite and > 0, got %g", spec.pos_weight(i)));
      }
    }
    config.pos_weight.assign(spec.pos_weight().begin(), spec.pos_weight().end());
  }
  return absl::OkStatus();
}

// The dataset's targets fit the task: class indices for classification, float targets
// (0/1 for multilabel) for the others, as wide as the model's output.
absl::Status CheckTargets(const DatasetConfig& dataset, TaskConfig& config,
                          const FieldChecks& fields) {
  const std::string name(dataset.info != nullptr ? dataset.info->name : "");
  if (config.kind == TaskKind::kClassification) {
    if (dataset.float_targets) {
      return fields.Error("task",
                          absl::StrFormat("classification needs int64 class indices in y, but %s "
                                          "holds float targets; set task: regression or multilabel",
                                          dataset.root));
    }
    return absl::OkStatus();
  }
  if (!dataset.float_targets) {
    return fields.Error(
        "task",
        absl::StrFormat(
            "%s needs float targets: dataset tensors with y float %s; "
            "dataset %s has class indices",
            TaskName(config.kind),
            config.kind == TaskKind::kMultilabel ? "[N, K] of 0 and 1" : "[N] or [N, D]", name));
  }
  if (config.kind == TaskKind::kMultilabel) {
    if (dataset.target_shape.size() != 1) {
      return fields.Error("dataset.root",
                          absl::StrFormat("%s: train.y: multilabel targets must be [N, K] (one "
                                          "column per label), got [N] (for one yes/no label: "
                                          "[N, 1])",
                                          dataset.root));
    }
    if (!dataset.non_binary_target.empty()) {
      return fields.Error("dataset.root",
                          absl::StrFormat("%s: %s; multilabel targets must be 0 or 1", dataset.root,
                                          dataset.non_binary_target));
    }
  }
  if (config.outputs != dataset.num_classes) {
    return fields.Error(
        "model.num_classes",
        absl::StrFormat("%d, but the %s targets of %s have %d %s (the model's "
                        "output width must equal it)",
                        config.outputs, TaskName(config.kind), dataset.root, dataset.num_classes,
                        config.kind == TaskKind::kMultilabel ? "labels" : "outputs"));
  }
  return absl::OkStatus();
}

// TrainJob.metrics: names that are identifiers, none built in or repeated, a known reduction, a
// file each (tried later, LoadTorchScriptMetric).
absl::Status ResolveUserMetrics(const mpsd::v1::TrainJob& spec, TaskConfig& config,
                                const FieldChecks& fields) {
  constexpr int kMaxMetrics = 16;  // each is tried at submit and called on every evaluated batch
  if (spec.metrics_size() > kMaxMetrics) {
    return fields.Error(
        "metrics", absl::StrFormat("at most %d metrics, got %d", kMaxMetrics, spec.metrics_size()));
  }
  const std::vector<std::string>& built_in = BuiltInMetricNames();
  for (int i = 0; i < spec.metrics_size(); ++i) {
    const mpsd::v1::MetricSpec& metric = spec.metrics(i);
    const std::string at = absl::StrCat("metrics[", i, "]");
    const std::string& name = metric.name();
    const bool identifier = !name.empty() && name.size() <= 64 && absl::ascii_isalpha(name[0]) &&
                            std::all_of(name.begin(), name.end(),
                                        [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
    if (!identifier) {
      return fields.Error(absl::StrCat(at, ".name"),
                          absl::StrFormat("\"%s\" is not a metric name: letters, digits and '_', "
                                          "starting with a letter, at most 64 characters",
                                          absl::CHexEscape(name.substr(0, 80))));
    }
    if (std::find(built_in.begin(), built_in.end(), name) != built_in.end()) {
      return fields.Error(absl::StrCat(at, ".name"),
                          absl::StrFormat("\"%s\" is a built-in metric's name (%s); give yours "
                                          "another",
                                          name, absl::StrJoin(built_in, ", ")));
    }
    for (const char* split : {"val_", "test_", "train_"}) {
      if (absl::StartsWith(name, split)) {
        return fields.Error(
            absl::StrCat(at, ".name"),
            absl::StrFormat("\"%s\" starts with \"%s\": mpsd adds the split's prefix itself (a "
                            "metric named \"%s\" is reported as val_%s and test_%s)",
                            name, split, name.substr(strlen(split)), name.substr(strlen(split)),
                            name.substr(strlen(split))));
      }
    }
    for (const UserMetricConfig& earlier : config.metrics) {
      if (earlier.name == name) {
        return fields.Error(absl::StrCat(at, ".name"),
                            absl::StrFormat("\"%s\" names an earlier metric too", name));
      }
    }
    if (metric.torchscript().empty()) {
      return fields.Error(absl::StrCat(at, ".torchscript"),
                          "required: the metric's TorchScript file");
    }
    const std::string& reduction = metric.reduction();
    if (!reduction.empty() && reduction != "mean" && reduction != "sum") {
      return fields.Error(absl::StrCat(at, ".reduction"),
                          absl::StrFormat("unknown \"%s\" (known: mean, sum)", reduction));
    }
    config.metrics.push_back(UserMetricConfig{name, metric.torchscript(),
                                              fields.Path(absl::StrCat(at, ".torchscript")),
                                              reduction == "sum"});
  }
  return absl::OkStatus();
}

// "logits [16, 2] float32 and targets [16] int64": what a user's forward was called on, in the
// words of the submit-time probe's errors (trainer/models/torchscript.h).
std::string BatchShapes(const torch::Tensor& logits, const torch::Tensor& targets) {
  const auto described = [](const torch::Tensor& t) {
    const c10::ScalarType type = t.scalar_type();
    const std::string dtype = type == torch::kFloat32   ? "float32"
                              : type == torch::kInt64   ? "int64"
                              : type == torch::kFloat64 ? "float64"
                                                        : c10::toString(type);
    return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "] ", dtype);
  };
  return absl::StrCat("logits ", described(logits), " and targets ", described(targets));
}

}  // namespace

const std::vector<std::string>& BuiltInMetricNames() {
  static const std::vector<std::string>* const names =
      new std::vector<std::string>{"loss", "accuracy", "macro_f1", "mse", "mae", "r2"};
  return *names;
}

const char* TaskName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kClassification:
      return "classification";
    case TaskKind::kMultilabel:
      return "multilabel";
    case TaskKind::kRegression:
      return "regression";
  }
  return "?";
}

const char* LossName(LossKind kind) {
  for (const LossEntry& e : kLosses) {
    if (e.kind == kind) return e.name;
  }
  return "?";
}

std::string TaskConfig::Describe() const {
  if (!custom_loss_path.empty()) return absl::StrCat("torchscript(", custom_loss_path, ")");
  std::vector<std::string> settings;
  if (loss == LossKind::kSmoothL1) settings.push_back(absl::StrFormat("beta=%g", beta));
  if (loss == LossKind::kHuber) settings.push_back(absl::StrFormat("delta=%g", delta));
  if (label_smoothing > 0) {
    settings.push_back(absl::StrFormat("label_smoothing=%g", label_smoothing));
  }
  if (!class_weights.empty()) {
    settings.push_back(absl::StrFormat("weight=[%s]", absl::StrJoin(class_weights, ", ")));
  }
  if (!pos_weight.empty()) {
    settings.push_back(absl::StrFormat("pos_weight=[%s]", absl::StrJoin(pos_weight, ", ")));
  }
  return settings.empty() ? std::string(LossName(loss))
                          : absl::StrCat(LossName(loss), "(", absl::StrJoin(settings, ", "), ")");
}

absl::StatusOr<TaskConfig> ResolveTask(const mpsd::v1::TrainJob& spec, const DatasetConfig& dataset,
                                       int outputs, const FieldChecks& fields) {
  TaskConfig config;
  absl::StatusOr<TaskKind> kind = ParseTask(spec.task(), fields);
  if (!kind.ok()) return kind.status();
  config.kind = *kind;
  config.outputs = outputs;
  config.label_smoothing = spec.label_smoothing();
  if (config.kind != TaskKind::kClassification && config.label_smoothing != 0) {
    return fields.Error("label_smoothing", absl::StrFormat("only task classification takes it "
                                                           "(CrossEntropyLoss), not %s",
                                                           TaskName(config.kind)));
  }
  if (absl::Status s = CheckTargets(dataset, config, fields); !s.ok()) return s;
  // Mixup and cutmix mix one-hot class targets; other tasks' targets are not classes.
  const AugmentationOptions& augmentation = dataset.augmentation;
  if (augmentation.mixes() && config.kind != TaskKind::kClassification) {
    return fields.Error(
        augmentation.mixup_alpha > 0 ? "dataset.augmentation.mixup" : "dataset.augmentation.cutmix",
        absl::StrFormat("mixes one-hot class targets: task classification only, "
                        "not %s",
                        TaskName(config.kind)));
  }
  config.target_shape.clear();
  if (config.kind == TaskKind::kMultilabel ||
      (config.kind == TaskKind::kRegression && !dataset.target_shape.empty())) {
    config.target_shape = {config.outputs};
  }
  if (absl::Status s = ResolveUserMetrics(spec, config, fields); !s.ok()) return s;
  if (!spec.loss().torchscript().empty()) {
    // The user's loss replaces the built-in one and every setting of it.
    const mpsd::v1::LossSpec& loss = spec.loss();
    const char* set = !loss.type().empty()          ? "loss.type"
                      : loss.has_beta()             ? "loss.beta"
                      : loss.has_delta()            ? "loss.delta"
                      : loss.class_weights_size()   ? "loss.class_weights"
                      : loss.pos_weight_size()      ? "loss.pos_weight"
                      : spec.label_smoothing() != 0 ? "label_smoothing"
                                                    : nullptr;
    if (set != nullptr) {
      return fields.Error(set,
                          "set either loss.torchscript (your own loss) or the built-in "
                          "loss's settings, not both");
    }
    config.custom_loss_path = loss.torchscript();
    config.label_smoothing = 0;
    return config;
  }
  if (absl::Status s = ResolveLossType(spec.loss(), config, fields); !s.ok()) return s;
  if (absl::Status s = ResolveLossSettings(spec.loss(), config, fields); !s.ok()) return s;
  return config;
}

TaskLoss::TaskLoss(const TaskConfig& config, const torch::Device& device)
    : config_(config), sum_dtype_(device.is_mps() ? torch::kFloat32 : torch::kFloat64) {
  if (!config_.custom_loss_path.empty()) {
    absl::StatusOr<torch::jit::Module> module = LoadTorchScriptLoss(config_, device);
    if (!module.ok()) {
      throw UserCodeError("train_job.loss.torchscript",
                          absl::StrCat("train_job.loss.torchscript: ", module.status().message()));
    }
    custom_ = *std::move(module);
  }
  for (const UserMetricConfig& metric : config_.metrics) {
    absl::StatusOr<torch::jit::Module> module = LoadTorchScriptMetric(config_, metric.path, device);
    if (!module.ok()) {
      throw UserCodeError(metric.field,
                          absl::StrCat(metric.field, ": ", module.status().message()));
    }
    metrics_.push_back(*std::move(module));
  }
  const auto on_device = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  if (!config_.class_weights.empty()) {
    class_weights_ = torch::tensor(config_.class_weights, torch::kFloat64).to(on_device);
  }
  if (!config_.pos_weight.empty()) {
    pos_weight_ = torch::tensor(config_.pos_weight, torch::kFloat64).to(on_device);
  }
}

int64_t TaskLoss::labels_per_example() const {
  return config_.kind == TaskKind::kMultilabel ? config_.outputs : 1;
}

torch::Tensor TaskLoss::AsMatrix(const torch::Tensor& targets) const {
  torch::Tensor matrix = targets.dim() == 1 ? targets.unsqueeze(/*dim=*/1) : targets;
  return matrix.to(torch::kFloat32);
}

torch::Tensor TaskLoss::Loss(const torch::Tensor& logits, const torch::Tensor& targets) const {
  if (custom_.has_value()) {
    const torch::Tensor x = logits.to(torch::kFloat32);
    const std::string field = "train_job.loss.torchscript";
    const torch::jit::IValue loss = CallUserCode(
        field, config_.custom_loss_path, [&] { return "forward on " + BatchShapes(x, targets); },
        [&] {
          return custom_->forward({x, targets});
        });
    if (!loss.isTensor() || loss.toTensor().dim() != 0 || !loss.toTensor().is_floating_point()) {
      throw UserCodeError(
          field,
          absl::StrCat(field, ": ", config_.custom_loss_path, ": forward returned ",
                       loss.isTensor() ? "a tensor that is not a float scalar" : loss.tagKind(),
                       " for ", BatchShapes(x, targets),
                       "; it must return the batch's loss as a scalar float tensor"));
    }
    return loss.toTensor().to(torch::kFloat32);
  }
  switch (config_.loss) {
    case LossKind::kCrossEntropy: {
      auto options = F::CrossEntropyFuncOptions().label_smoothing(config_.label_smoothing);
      if (class_weights_.defined()) options.weight(class_weights_);
      return F::cross_entropy(logits, targets, options);
    }
    case LossKind::kBceWithLogits: {
      auto options = F::BinaryCrossEntropyWithLogitsFuncOptions();
      if (pos_weight_.defined()) options.pos_weight(pos_weight_);
      return F::binary_cross_entropy_with_logits(logits, AsMatrix(targets), options);
    }
    case LossKind::kMse:
      return F::mse_loss(logits, AsMatrix(targets));
    case LossKind::kL1:
      return F::l1_loss(logits, AsMatrix(targets));
    case LossKind::kSmoothL1:
      return F::smooth_l1_loss(logits, AsMatrix(targets),
                               F::SmoothL1LossFuncOptions().beta(config_.beta));
    case LossKind::kHuber:
      return F::huber_loss(logits, AsMatrix(targets),
                           F::HuberLossFuncOptions().delta(config_.delta));
  }
  return {};
}

torch::Tensor TaskLoss::Correct(const torch::Tensor& logits, const torch::Tensor& targets) const {
  const torch::Tensor detached = logits.detach();
  switch (config_.kind) {
    case TaskKind::kClassification:
      // Mixed (soft) targets: the class with the largest share, as torchvision's references
      // count accuracy under mixup and cutmix.
      return detached.argmax(/*dim=*/1)
          .eq(targets.dim() == 2 ? targets.argmax(/*dim=*/1) : targets)
          .sum();
    case TaskKind::kMultilabel:
      // σ(x) > 0.5 ⟺ x > 0.
      return detached.gt(0).eq(AsMatrix(targets).gt(0.5)).sum();
    case TaskKind::kRegression:
      return torch::zeros({}, detached.options().dtype(torch::kInt64));
  }
  return {};
}

// Layout of EvalSums:
//  multilabel: [loss sum, correct, TP[K], FP[K], FN[K]]
//  regression: [loss sum, Σd²[D], Σ|d|[D], Σy[D], Σy²[D]]
torch::Tensor TaskLoss::EvalSums(const torch::Tensor& logits, const torch::Tensor& targets) const {
  const torch::Tensor x = logits.to(torch::kFloat32);
  const torch::Tensor y = AsMatrix(targets);
  const torch::Tensor loss_sum =
      Loss(x, targets).to(sum_dtype_) * static_cast<double>(x.numel());  // mean → sum
  if (config_.kind == TaskKind::kMultilabel) {
    const torch::Tensor predicted = x.gt(0);
    const torch::Tensor actual = y.gt(0.5);
    const auto count = [&](const torch::Tensor& mask) {
      return mask.sum(/*dim=*/0).to(sum_dtype_);
    };
    return torch::cat({loss_sum.reshape({1}), count(predicted.eq(actual)).sum().reshape({1}),
                       count(predicted.logical_and(actual)),
                       count(predicted.logical_and(actual.logical_not())),
                       count(predicted.logical_not().logical_and(actual))});
  }
  const torch::Tensor d = (x - y).to(sum_dtype_);
  const torch::Tensor y64 = y.to(sum_dtype_);
  return torch::cat({loss_sum.reshape({1}), d.square().sum(/*dim=*/0), d.abs().sum(/*dim=*/0),
                     y64.sum(/*dim=*/0), y64.square().sum(/*dim=*/0)});
}

TaskMetrics TaskLoss::Finish(const torch::Tensor& sums, int64_t examples) const {
  TaskMetrics metrics;
  if (examples <= 0) return metrics;
  const torch::Tensor host = sums.to(torch::kCPU).to(torch::kFloat64).contiguous();
  const double* s = host.data_ptr<double>();
  const int64_t k = config_.outputs;
  const double n = static_cast<double>(examples);
  const double elements = n * static_cast<double>(k);
  metrics["loss"] = s[0] / elements;
  if (config_.kind == TaskKind::kMultilabel) {
    metrics["accuracy"] = s[1] / elements;
    const double* tp = s + 2;
    const double* fp = tp + k;
    const double* fn = fp + k;
    double f1_sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double denominator = 2 * tp[j] + fp[j] + fn[j];
      f1_sum += denominator > 0 ? 2 * tp[j] / denominator : 0;
    }
    metrics["macro_f1"] = f1_sum / static_cast<double>(k);
    return metrics;
  }
  const double* squared = s + 1;
  const double* absolute = squared + k;
  const double* y_sum = absolute + k;
  const double* y_squared = y_sum + k;
  double sse = 0, sae = 0, r2_sum = 0;
  for (int64_t j = 0; j < k; ++j) {
    sse += squared[j];
    sae += absolute[j];
    const double total = y_squared[j] - y_sum[j] * y_sum[j] / n;  // Σ (y - ȳ)²
    // torchmetrics: a constant target gives r2 0 where the fit is not perfect (and 1 where it is).
    r2_sum += total > 0 ? 1 - squared[j] / total : (squared[j] == 0 ? 1.0 : 0.0);
  }
  metrics["mse"] = sse / elements;
  metrics["mae"] = sae / elements;
  metrics["r2"] = r2_sum / static_cast<double>(k);
  return metrics;
}

torch::Tensor TaskLoss::MetricSums(const torch::Tensor& logits,
                                   const torch::Tensor& targets) const {
  const torch::Tensor x = logits.to(torch::kFloat32);
  const double examples = static_cast<double>(x.size(0));
  std::vector<torch::Tensor> values;
  values.reserve(metrics_.size());
  for (size_t i = 0; i < metrics_.size(); ++i) {
    const UserMetricConfig& metric = config_.metrics[i];
    const torch::jit::IValue value = CallUserCode(
        metric.field, metric.path, [&] { return "forward on " + BatchShapes(x, targets); },
        [&] {
          return metrics_[i].forward({x, targets});
        });
    if (!value.isTensor() || value.toTensor().dim() != 0 || value.toTensor().is_complex() ||
        value.toTensor().scalar_type() == torch::kBool) {
      throw UserCodeError(
          metric.field,
          absl::StrCat(metric.field, ": ", metric.path, ": forward returned ",
                       value.isTensor() ? "a tensor that is not a real scalar" : value.tagKind(),
                       " for ", BatchShapes(x, targets),
                       "; it must return the batch's value as a scalar tensor"));
    }
    const torch::Tensor v = value.toTensor().to(x.device(), sum_dtype_).reshape({1});
    values.push_back(metric.sum ? v : v * examples);
  }
  return torch::cat(values);
}

torch::Tensor TaskLoss::ZeroMetricSums(const torch::Device& device) const {
  return torch::zeros({static_cast<int64_t>(metrics_.size())},
                      torch::TensorOptions().dtype(sum_dtype_).device(device));
}

void TaskLoss::FinishMetrics(const torch::Tensor& sums, int64_t examples,
                             TaskMetrics& metrics) const {
  if (examples <= 0 || metrics_.empty()) return;
  const torch::Tensor host = sums.to(torch::kCPU).to(torch::kFloat64).contiguous();
  const double* s = host.data_ptr<double>();
  for (size_t i = 0; i < config_.metrics.size(); ++i) {
    const UserMetricConfig& metric = config_.metrics[i];
    metrics[metric.name] = metric.sum ? s[i] : s[i] / static_cast<double>(examples);
  }
}

}  // namespace mpsd::trainer
