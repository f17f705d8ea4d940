// What a TrainJob learns (TrainJob.task and TrainJob.loss): classification, multilabel or
// regression, its loss, and the metrics each task reports. Resolving a spec into a TaskConfig is
// part of a TrainJob's validation; TaskLoss computes the loss and the per-step and evaluation
// figures on the device for the training loop (trainer/train_loop.h) and the CUDA graph
// (trainer/graphed_step.h), so that both compute the same thing. Internal to trainer/: includes
// torch.
//
// Definitions (each as the library that names it defines it):
//  - cross_entropy: torch.nn.CrossEntropyLoss(weight=class_weights, label_smoothing=…);
//    with weights the mean is Σ w[y_i] ℓ_i / Σ w[y_i]
//    (https://pytorch.org/docs/1.13/generated/torch.nn.CrossEntropyLoss.html).
//  - bce_with_logits: torch.nn.BCEWithLogitsLoss(pos_weight=…), ℓ = -[p y log σ(x) + (1 - y)
//    log(1 - σ(x))], mean over the N×K elements
//    (https://pytorch.org/docs/1.13/generated/torch.nn.BCEWithLogitsLoss.html).
//  - mse: torch.nn.MSELoss, mean of (x - y)²; l1: torch.nn.L1Loss, mean of |x - y|;
//    smooth_l1: torch.nn.SmoothL1Loss(beta), 0.5 d²/beta if |d| < beta else |d| - 0.5 beta;
//    huber: torch.nn.HuberLoss(delta), 0.5 d² if |d| <= delta else delta (|d| - 0.5 delta);
//    all means over the N×D elements (https://pytorch.org/docs/1.13/nn.html#loss-functions).
//  - multilabel accuracy: torchmetrics MultilabelAccuracy(num_labels=K, threshold=0.5,
//    average="macro"): label k's accuracy is the fraction of examples whose prediction σ(x) >
//    0.5 equals the target, averaged over the K labels; with every label counted over the same
//    examples this is correct labels / (N K)
//    (https://torchmetrics.readthedocs.io/en/v0.11.4/classification/accuracy.html).
//  - multilabel macro_f1: torchmetrics MultilabelF1Score(average="macro"): F1_k = 2 TP_k / (2 TP_k
//    + FP_k + FN_k), 0 when the denominator is 0, averaged over the K labels
//    (https://torchmetrics.readthedocs.io/en/v0.11.4/classification/f1_score.html).
//  - regression mse, mae: torchmetrics MeanSquaredError, MeanAbsoluteError: Σ over the N×D
//    elements / (N D)
//    (https://torchmetrics.readthedocs.io/en/v0.11.4/regression/mean_squared_error.html).
//  - regression r2: torchmetrics R2Score(multioutput="uniform_average"): per output d,
//    1 - SS_res,d / SS_tot,d with SS_res,d = Σ_i (y_id - x_id)², SS_tot,d = Σ_i (y_id - ȳ_d)²,
//    averaged over the D outputs
//    (https://torchmetrics.readthedocs.io/en/v0.11.4/regression/r2_score.html).
#ifndef MPSD_TRAINER_TASK_H_
#define MPSD_TRAINER_TASK_H_

#include <torch/script.h>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/datasets.h"
#include "trainer/field_checks.h"

namespace mpsd::trainer {

enum class TaskKind { kClassification, kMultilabel, kRegression };
enum class LossKind { kCrossEntropy, kBceWithLogits, kMse, kL1, kSmoothL1, kHuber };

// "classification", "multilabel", "regression"; "cross_entropy", "bce_with_logits", "mse", ...
const char* TaskName(TaskKind kind);
const char* LossName(LossKind kind);

// One of TrainJob.metrics resolved (MetricSpec): the user's TorchScript metric.
struct UserMetricConfig {
  std::string name;   // as the metrics maps call it after the split ("val_<name>")
  std::string path;   // the TorchScript file
  std::string field;  // "train_job.metrics[i].torchscript", for errors
  bool sum = false;   // reduction "sum" (Σ value_b); else "mean" (Σ value_b n_b / Σ n_b)
};

// TrainJob.task and TrainJob.loss resolved: every default applied.
struct TaskConfig {
  TaskKind kind = TaskKind::kClassification;
  LossKind loss = LossKind::kCrossEntropy;
  double beta = 1.0;   // smooth_l1
  double delta = 1.0;  // huber
  // CrossEntropyLoss's label_smoothing, in [0, 1); classification only.
  double label_smoothing = 0;
  // classification: one weight per class (model outputs); empty = unweighted.
  std::vector<double> class_weights;
  // multilabel: one weight per label; empty = 1 for all.
  std::vector<double> pos_weight;
  // The model's output width: classes (classification), labels K or outputs D.
  int outputs = 0;
  // LossSpec.torchscript: the user's loss module (forward(logits, targets) -> scalar), used
  // instead of `loss` for the training and evaluated loss; "" = the built-in `loss`. The task's
  // metrics (accuracy, F1, MSE, ...) stay the task's own.
  std::string custom_loss_path;
  // The targets one example has, as the loss receives them: [] for classification's class
  // index and a regression's [N] targets, [K] or [D] otherwise (the probe's shape).
  std::vector<int64_t> target_shape;
  // TrainJob.metrics, in the spec's order; evaluated beside the task's own metrics.
  std::vector<UserMetricConfig> metrics;
  // The loss and its settings for people: "mse", "huber(delta=0.5)", "cross_entropy(…)".
  std::string Describe() const;
};

// Resolves TrainJob.task, loss and label_smoothing against the dataset (its targets: class
// indices or float; dataset.num_classes is the target width for float targets) and the model's
// output width `outputs` (model.num_classes resolved). INVALID_ARGUMENT naming the field:
// "train_job.task: unknown task …", "train_job.loss.type: \"mse\" is a regression loss; task
// classification takes cross_entropy", "train_job.loss.class_weights: 3 weights, but the model
// has 10 classes", "train_job.dataset.root: <path>: train.y[4, 1]: 0.5; multilabel targets must
// be 0 or 1", "train_job.model.num_classes: 3, but the targets have 2 outputs",
// "train_job.dataset.augmentation.mixup: … task classification only, not regression",
// "train_job.metrics[1].name: \"accuracy\" is a built-in metric's name". Pure (the metrics'
// files are tried by LoadTorchScriptMetric, trainer/models/torchscript.h).
absl::StatusOr<TaskConfig> ResolveTask(const mpsd::v1::TrainJob& spec, const DatasetConfig& dataset,
                                       int outputs, const FieldChecks& fields);

// What an evaluation pass measured, by metric name without the split ("loss", "accuracy",
// "macro_f1", "mse", "mae", "r2"): each task's own (see the file comment); "accuracy" is absent
// for regression; and the user's metrics (TaskConfig::metrics) by their names.
using TaskMetrics = std::map<std::string, double>;

// The built-in metrics' names (every task's), which a user's metric may not take.
const std::vector<std::string>& BuiltInMetricNames();

// The loss and figures of one TaskConfig on one device. Holds its weights as device tensors
// (made once). Not thread-safe to share between concurrent steps; the training loop owns one.
class TaskLoss {
 public:
  // With config.custom_loss_path, loads that TorchScript module onto `device` (checked as at
  // submit: trainer/models/torchscript.h), and so each of config.metrics; a file that changed
  // since and no longer loads throws UserCodeError naming its field (trainer/torch_errors.h: the
  // training loop's catch fails the job).
  TaskLoss(const TaskConfig& config, const torch::Device& device);

  const TaskConfig& config() const { return config_; }
  // Targets per example that the `correct` count is over: K for multilabel, else 1.
  int64_t labels_per_example() const;
  // Whether steps report an accuracy (not regression).
  bool has_accuracy() const { return config_.kind != TaskKind::kRegression; }

  // The batch's training loss, mean as the config's torch.nn loss reduces it: [] float32, in
  // autograd. logits [N, outputs] float32; targets: int64 [N] (classification) or float32
  // [N, classes] class probabilities (classification after mixup / cutmix: CrossEntropyLoss
  // with probability targets, whose mean divides by N even with class weights), float [N, K]
  // (multilabel), float [N] or [N, D] (regression). For classification without class weights
  // this is exactly F::cross_entropy(logits, targets, label_smoothing), as before tasks.
  // With a custom loss (TaskConfig::custom_loss_path): the module's forward(logits as float32,
  // targets), which must return a scalar; an exception it raises, or anything else it returns,
  // throws UserCodeError naming train_job.loss.torchscript.
  torch::Tensor Loss(const torch::Tensor& logits, const torch::Tensor& targets) const;
  // Whether the loss is the user's TorchScript module (then the step runs eagerly).
  bool custom() const { return custom_.has_value(); }
  // Correct decisions in the batch, [] int64, outside autograd: classified examples
  // (classification; against the largest share of probability targets), correct labels at threshold
  // 0.5 (multilabel), 0 (regression).
  torch::Tensor Correct(const torch::Tensor& logits, const torch::Tensor& targets) const;

  // Evaluation: the sums a split's metrics are made of, accumulated over batches on the device
  // and read back once. Add returns a 1-D tensor to be summed over batches (and across ranks);
  // Finish turns the total over `examples` examples into metrics. Not for classification
  // (Evaluate keeps its own loss and correct count).
  torch::Tensor EvalSums(const torch::Tensor& logits, const torch::Tensor& targets) const;
  TaskMetrics Finish(const torch::Tensor& sums, int64_t examples) const;

  // The user's metrics (TaskConfig::metrics), for both evaluations: MetricSums returns a [M]
  // tensor (M = config.metrics.size(); float64, float32 on MPS) on the logits' device, to be
  // summed over a split's batches (and across ranks): value × batch size for a "mean" metric,
  // the value for a "sum" one; ZeroMetricSums is its zero (an empty shard's). Call them without
  // autograd. An exception a metric raises, or a value that is not a scalar, throws
  // UserCodeError naming train_job.metrics[i].torchscript. FinishMetrics adds each metric's
  // value over `examples` examples (Σ / examples for "mean") to `metrics` by its name.
  bool has_metrics() const { return !metrics_.empty(); }
  torch::Tensor MetricSums(const torch::Tensor& logits, const torch::Tensor& targets) const;
  torch::Tensor ZeroMetricSums(const torch::Device& device) const;
  void FinishMetrics(const torch::Tensor& sums, int64_t examples, TaskMetrics& metrics) const;

 private:
  // targets as [N, outputs] float32 (regression [N] gets its column).
  torch::Tensor AsMatrix(const torch::Tensor& targets) const;

  TaskConfig config_;
  torch::Tensor class_weights_;  // [classes] float32 on the device; undefined when unweighted
  torch::Tensor pos_weight_;     // [K] float32 on the device; undefined without
  c10::ScalarType sum_dtype_;    // float64 for the evaluation sums, float32 on MPS (no float64)
  // The user's loss module on the device; forward is not const in LibTorch's API.
  mutable std::optional<torch::jit::Module> custom_;
  // The user's metric modules on the device, one per config_.metrics entry (forward is not
  // const either).
  mutable std::vector<torch::jit::Module> metrics_;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TASK_H_
