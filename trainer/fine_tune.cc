// Pretrained weights, frozen parameters and parameter groups (fine_tune.h).
#include "trainer/fine_tune.h"

#include <torch/torch.h>

#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/state_dict.h"

namespace mpsd::trainer {
namespace {

// Top-level names of `model` (its direct submodules and parameters), for an error's hint.
std::string TopLevelNames(const ClassifierImpl& model) {
  std::vector<std::string> names;
  for (const auto& item : model.named_children()) names.push_back(item.key());
  for (const auto& item : model.named_parameters(/*recurse=*/false)) names.push_back(item.key());
  return absl::StrJoin(names, ", ");
}

bool Under(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const std::string& prefix : prefixes) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  return false;
}

absl::Status CheckPrefixes(const std::vector<std::string>& prefixes, absl::string_view field,
                           const FieldChecks& fields) {
  for (size_t i = 0; i < prefixes.size(); ++i) {
    if (prefixes[i].empty()) {
      return fields.Error(absl::StrFormat("%s[%d]", field, i),
                          "empty: a prefix of parameter names (\"layer4.\", \"fc.\")");
    }
  }
  return absl::OkStatus();
}

// Every prefix of `prefixes` (the field `field`) matches a parameter of `model`.
absl::Status CheckMatches(const std::vector<std::string>& prefixes, absl::string_view field,
                          const ClassifierImpl& model, const std::vector<std::string>& names,
                          const FieldChecks& fields) {
  for (size_t i = 0; i < prefixes.size(); ++i) {
    bool matched = false;
    for (const std::string& name : names) matched = matched || absl::StartsWith(name, prefixes[i]);
    if (!matched) {
      return fields.Error(
          absl::StrFormat("%s[%d]", field, i),
          absl::StrFormat("\"%s\" matches no parameter of the model (its top-level names: %s)",
                          prefixes[i], TopLevelNames(model)));
    }
  }
  return absl::OkStatus();
}

// Loads config.weights into `model`; notes say what was loaded.
absl::Status LoadWeights(const FineTuneConfig& config, ClassifierImpl& model,
                         const FieldChecks& fields, std::vector<std::string>& notes) {
  absl::StatusOr<NamedTensors> file = ReadStateDict(config.weights);
  if (!file.ok()) return fields.Error("model.weights", file.status().message());
  absl::StatusOr<StateDictLoad> load = LoadStateDict(model, *file, config.strict);
  if (!load.ok()) {
    return fields.Error("model.weights",
                        absl::StrCat(config.weights, ": ", load.status().message()));
  }
  std::string note =
      absl::StrFormat("weights: %d tensors loaded from %s", load->loaded, config.weights);
  if (!load->missing.empty()) {
    absl::StrAppendFormat(&note, "; missing keys (kept as initialised): %s",
                          absl::StrJoin(load->missing, ", "));
  }
  if (!load->unexpected.empty()) {
    absl::StrAppendFormat(&note, "; unexpected keys (not loaded): %s",
                          absl::StrJoin(load->unexpected, ", "));
  }
  notes.push_back(note);
  if (!load->reinitialised.empty()) {
    notes.push_back(
        absl::StrFormat("weights: the head is re-initialised, its shape differs from "
                        "the file's (num_classes): %s",
                        absl::StrJoin(load->reinitialised, ", ")));
  }
  return absl::OkStatus();
}

// Whether parameter `name` is frozen by `config`.
bool Frozen(const FineTuneConfig& config, const std::string& name) {
  if (!config.freeze.empty()) return Under(name, config.freeze);
  if (!config.trainable.empty()) return !Under(name, config.trainable);
  return false;
}

// Freezes the parameters `config` names, and keeps the BatchNorm layers whose parameters are all
// frozen in eval mode.
int64_t Freeze(const FineTuneConfig& config, ClassifierImpl& model,
               std::vector<std::string>& notes) {
  int64_t frozen = 0;
  int64_t total = 0;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    total += item.value().numel();
    if (!Frozen(config, item.key())) continue;
    item.value().set_requires_grad(false);
    frozen += item.value().numel();
  }
  std::vector<std::shared_ptr<torch::nn::Module>> norms;
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    torch::nn::Module& module = *item.value();
    const bool norm = module.as<torch::nn::BatchNorm1d>() != nullptr ||
                      module.as<torch::nn::BatchNorm2d>() != nullptr ||
                      module.as<torch::nn::BatchNorm3d>() != nullptr;
    if (!norm) continue;
    bool all_frozen = true;
    for (const auto& parameter : module.named_parameters(/*recurse=*/false)) {
      all_frozen = all_frozen && Frozen(config, absl::StrCat(item.key(), ".", parameter.key()));
    }
    if (all_frozen) norms.push_back(item.value());
  }
  notes.push_back(absl::StrFormat(
      "frozen: %d of %d parameters (%s %s); %d BatchNorm layer(s) of "
      "frozen blocks kept in eval mode",
      frozen, total, config.freeze.empty() ? "all but trainable" : "freeze",
      absl::StrJoin(config.freeze.empty() ? config.trainable : config.freeze, ", "), norms.size()));
  model.KeepInEvalMode(std::move(norms));
  return frozen;
}

// The trainable parameters in groups: config.param_groups in order, then the rest with the
// optimizer's settings.
absl::StatusOr<ParameterGroups> Group(const FineTuneConfig& config,
                                      const OptimizerConfig& optimizer, ClassifierImpl& model,
                                      const FieldChecks& fields) {
  ParameterGroups result;
  const size_t n = config.param_groups.size();
  std::vector<ParameterGroup> groups(n + 1);
  for (size_t i = 0; i < n; ++i) {
    groups[i].learning_rate = config.param_groups[i].learning_rate;
    groups[i].weight_decay = config.param_groups[i].weight_decay;
  }
  groups[n].learning_rate = optimizer.learning_rate;
  groups[n].weight_decay = optimizer.weight_decay;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    size_t g = 0;
    while (g < n && !absl::StartsWith(item.key(), config.param_groups[g].prefix)) ++g;
    groups[g].parameters.push_back(item.value());
  }
  for (size_t i = 0; i < n; ++i) {
    if (groups[i].parameters.empty()) {
      return fields.Error(
          absl::StrFormat("param_groups[%d].prefix", i),
          absl::StrFormat("\"%s\" matches no trainable parameter (frozen ones, or ones an "
                          "earlier group took, do not count)",
                          config.param_groups[i].prefix));
    }
  }
  for (ParameterGroup& group : groups) {
    if (group.parameters.empty()) continue;
    result.learning_rate_scales.push_back(group.learning_rate / optimizer.learning_rate);
    result.groups.push_back(std::move(group));
  }
  return result;
}

}  // namespace

absl::StatusOr<FineTuneConfig> ResolveFineTune(const mpsd::v1::TrainJob& spec,
                                               const OptimizerConfig& optimizer,
                                               const FieldChecks& fields) {
  FineTuneConfig config;
  config.weights = spec.model().weights();
  config.strict = !spec.model().has_strict() || spec.model().strict();
  if (!config.weights.empty() && !spec.model().torchscript().empty()) {
    return fields.Error("model.weights",
                        "for a zoo model (model.name); a torchscript model "
                        "carries its own weights");
  }
  if (spec.model().has_strict() && config.weights.empty()) {
    return fields.Error("model.strict", "applies only with model.weights");
  }
  if (spec.freeze_size() > 0 && spec.trainable_size() > 0) {
    return fields.Error("trainable", "set either freeze or trainable, not both");
  }
  config.freeze.assign(spec.freeze().begin(), spec.freeze().end());
  config.trainable.assign(spec.trainable().begin(), spec.trainable().end());
  if (absl::Status s = CheckPrefixes(config.freeze, "freeze", fields); !s.ok()) return s;
  if (absl::Status s = CheckPrefixes(config.trainable, "trainable", fields); !s.ok()) return s;
  for (int i = 0; i < spec.param_groups_size(); ++i) {
    const mpsd::v1::ParamGroupSpec& group = spec.param_groups(i);
    const FieldChecks sub = fields.Sub(absl::StrFormat("param_groups[%d]", i));
    if (group.prefix().empty()) {
      return sub.Error("prefix", "required: a prefix of parameter names (\"layer4.\", \"fc.\")");
    }
    ParamGroupConfig c{group.prefix(), optimizer.learning_rate, optimizer.weight_decay};
    if (group.has_learning_rate()) {
      c.learning_rate = group.learning_rate();
      if (absl::Status s = sub.PositiveFinite("learning_rate", c.learning_rate); !s.ok()) return s;
    }
    if (group.has_weight_decay()) {
      c.weight_decay = group.weight_decay();
      if (absl::Status s = sub.NonNegativeFinite("weight_decay", c.weight_decay); !s.ok()) {
        return s;
      }
    }
    config.param_groups.push_back(std::move(c));
  }
  return config;
}

absl::StatusOr<ParameterGroups> PrepareFineTune(const FineTuneConfig& config,
                                                const OptimizerConfig& optimizer,
                                                ClassifierImpl& model, const FieldChecks& fields,
                                                std::vector<std::string>& notes) {
  if (!config.weights.empty()) {
    if (absl::Status s = LoadWeights(config, model, fields, notes); !s.ok()) return s;
  }
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) names.push_back(item.key());
  if (absl::Status s = CheckMatches(config.freeze, "freeze", model, names, fields); !s.ok())
    return s;
  if (absl::Status s = CheckMatches(config.trainable, "trainable", model, names, fields); !s.ok()) {
    return s;
  }
  int64_t frozen = 0;
  if (config.freezes()) frozen = Freeze(config, model, notes);
  absl::StatusOr<ParameterGroups> groups = Group(config, optimizer, model, fields);
  if (!groups.ok()) return groups.status();
  if (groups->groups.empty()) {  // Only `freeze` can: `trainable` must match a parameter.
    return fields.Error("freeze",
                        absl::StrFormat("%s freezes every parameter of the model: nothing would "
                                        "train (name fewer prefixes, or the ones that train with "
                                        "trainable, e.g. [\"fc.\"])",
                                        absl::StrJoin(config.freeze, ", ")));
  }
  groups->frozen_parameters = frozen;
  for (size_t i = 0; i < config.param_groups.size(); ++i) {
    const ParamGroupConfig& g = config.param_groups[i];
    notes.push_back(absl::StrFormat("param group %d: %s* lr %g weight_decay %g (%d tensors)", i,
                                    g.prefix, g.learning_rate, g.weight_decay,
                                    groups->groups[i].parameters.size()));
  }
  return groups;
}

}  // namespace mpsd::trainer
