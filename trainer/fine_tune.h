// Fine-tuning: pretrained weights (ModelSpec.weights, trainer/state_dict.h), frozen parameters
// (TrainJob.freeze / trainable) and per-part optimizer settings (TrainJob.param_groups). Internal
// to trainer/: includes torch.
#ifndef MPSD_TRAINER_FINE_TUNE_H_
#define MPSD_TRAINER_FINE_TUNE_H_

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/field_checks.h"
#include "trainer/models.h"
#include "trainer/optimizers.h"

namespace mpsd::trainer {

struct ParamGroupConfig {
  std::string prefix;
  double learning_rate = 0;  // the optimizer's when the spec leaves it out
  double weight_decay = 0;
};

// The fine-tuning fields with defaults applied; all empty for an ordinary job.
struct FineTuneConfig {
  std::string weights;  // ModelSpec.weights; "" = none
  bool strict = true;
  // Exactly one of these is non-empty when parameters are frozen.
  std::vector<std::string> freeze;
  std::vector<std::string> trainable;
  std::vector<ParamGroupConfig> param_groups;
  bool freezes() const { return !freeze.empty() || !trainable.empty(); }
  bool enabled() const { return !weights.empty() || freezes() || !param_groups.empty(); }
};

// Checks the fields of `spec` that need no model: one of freeze and trainable, no empty prefix,
// param_groups' learning_rate > 0 and weight_decay >= 0 (finite), weights only for a zoo model.
// Errors from `fields` (train_job): "train_job.freeze[1]: ...", "train_job.param_groups[0]
// .learning_rate: ...", "train_job.model.weights: ...". Thread-safe.
absl::StatusOr<FineTuneConfig> ResolveFineTune(const mpsd::v1::TrainJob& spec,
                                               const OptimizerConfig& optimizer,
                                               const FieldChecks& fields);

// The model's parameters split as the optimizer takes them, and the learning-rate scale of each
// group (its rate over the optimizer's, for the schedule: TrainOptions::learning_rate_scales).
struct ParameterGroups {
  std::vector<ParameterGroup> groups;
  std::vector<double> learning_rate_scales;
  int64_t frozen_parameters = 0;  // scalars not trained
};

// Applies `config` to a freshly built `model` (on its device): reads and loads the weights
// (field model.weights: the file's errors, a shape that differs, strict), freezes what freeze /
// trainable name (requires_grad off; the BatchNorm layers all of whose parameters are frozen kept
// in eval mode through ClassifierImpl::KeepInEvalMode) and groups the rest for the optimizer.
// `fields` is the TrainJob's (train_job). INVALID_ARGUMENT naming the field for a prefix that
// matches no parameter ("train_job .freeze[0]: \"layer9.\" matches no parameter of resnet18 (its
// top-level names: conv1, bn1, layer1, ...)") or a group that matches only frozen ones. `notes`
// gets the log's lines (what was loaded, missing and unexpected keys, a re-initialised head, what
// is frozen). Runs at submit (a CPU model) and at run; not thread-safe with other users of `model`.
absl::StatusOr<ParameterGroups> PrepareFineTune(const FineTuneConfig& config,
                                                const OptimizerConfig& optimizer,
                                                ClassifierImpl& model, const FieldChecks& fields,
                                                std::vector<std::string>& notes);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_FINE_TUNE_H_
