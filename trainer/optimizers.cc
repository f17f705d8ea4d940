// OptimizerSpec resolved into an OptimizerConfig, torch::optim optimizers built from one, and
// device-side gradient clipping.
#include "trainer/optimizers.h"

#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mpsd::trainer {
namespace {

constexpr double kDefaultLearningRate = 1e-3;     // adam, adamw (torch.optim's)
constexpr double kDefaultSgdLearningRate = 1e-2;  // sgd
constexpr double kDefaultAdamWWeightDecay = 1e-2;
constexpr Interval kUnitInterval = {0, true, 1, false};  // [0, 1)

absl::StatusOr<OptimizerKind> ParseOptimizerName(const std::string& name,
                                                 const FieldChecks& fields) {
  if (name.empty()) return OptimizerKind::kAdam;
  for (const OptimizerKind kind :
       {OptimizerKind::kAdam, OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    if (name == OptimizerName(kind)) return kind;
  }
  return fields.Error("name", absl::StrFormat("unknown optimizer \"%s\" %s", name,
                                              KnownNames({"adam", "adamw", "sgd"})));
}

// learning_rate and weight_decay, which every optimizer takes.
absl::Status ResolveCommon(const mpsd::v1::OptimizerSpec& spec, const FieldChecks& fields,
                           OptimizerConfig& config) {
  const bool sgd = config.kind == OptimizerKind::kSgd;
  config.learning_rate = sgd ? kDefaultSgdLearningRate : kDefaultLearningRate;
  if (spec.has_learning_rate()) {
    config.learning_rate = spec.learning_rate();
    if (absl::Status s = fields.PositiveFinite("learning_rate", config.learning_rate); !s.ok()) {
      return s;
    }
  }
  config.weight_decay = config.kind == OptimizerKind::kAdamW ? kDefaultAdamWWeightDecay : 0;
  if (spec.has_weight_decay()) {
    config.weight_decay = spec.weight_decay();
    return fields.NonNegativeFinite("weight_decay", config.weight_decay);
  }
  return absl::OkStatus();
}

// Rejects a field of another optimizer.
absl::Status CheckFieldsUsed(const mpsd::v1::OptimizerSpec& spec, const FieldChecks& fields,
                             OptimizerKind kind) {
  const bool sgd = kind == OptimizerKind::kSgd;
  const std::string name = OptimizerName(kind);
  if (!sgd && spec.has_momentum()) return fields.NotFor("momentum", "sgd", name);
  if (!sgd && spec.nesterov()) return fields.NotFor("nesterov", "sgd", name);
  if (sgd && !spec.betas().empty()) return fields.NotFor("betas", "adam and adamw", name);
  if (sgd && spec.has_eps()) return fields.NotFor("eps", "adam and adamw", name);
  return absl::OkStatus();
}

// sgd's momentum and nesterov.
absl::Status ResolveMomentum(const mpsd::v1::OptimizerSpec& spec, const FieldChecks& fields,
                             OptimizerConfig& config) {
  if (spec.has_momentum()) {
    config.momentum = spec.momentum();
    if (absl::Status s = fields.InRange("momentum", config.momentum, kUnitInterval); !s.ok()) {
      return s;
    }
  }
  config.nesterov = spec.nesterov();
  if (config.nesterov && config.momentum <= 0) {
    return fields.Error("nesterov",
                        absl::StrCat("needs momentum > 0, got momentum ", config.momentum));
  }
  return absl::OkStatus();
}

// adam's and adamw's betas and eps.
absl::Status ResolveBetas(const mpsd::v1::OptimizerSpec& spec, const FieldChecks& fields,
                          OptimizerConfig& config) {
  if (!spec.betas().empty()) {
    if (spec.betas_size() != 2) {
      return fields.Error(
          "betas", absl::StrFormat("must be [beta1, beta2], got %d value(s)", spec.betas_size()));
    }
    for (int i = 0; i < 2; ++i) {
      if (absl::Status s = fields.InRange(Indexed("betas", i), spec.betas(i), kUnitInterval);
          !s.ok()) {
        return s;
      }
    }
    config.beta1 = spec.betas(0);
    config.beta2 = spec.betas(1);
  }
  if (spec.has_eps()) {
    config.eps = spec.eps();
    return fields.PositiveFinite("eps", config.eps);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OptimizerConfig> ResolveOptimizer(const mpsd::v1::OptimizerSpec& spec,
                                                 const FieldChecks& fields) {
  OptimizerConfig config;
  absl::StatusOr<OptimizerKind> kind = ParseOptimizerName(spec.name(), fields);
  if (!kind.ok()) return kind.status();
  config.kind = *kind;
  if (absl::Status s = ResolveCommon(spec, fields, config); !s.ok()) return s;
  if (absl::Status s = CheckFieldsUsed(spec, fields, config.kind); !s.ok()) return s;
  if (absl::Status s = ResolveMomentum(spec, fields, config); !s.ok()) return s;
  if (absl::Status s = ResolveBetas(spec, fields, config); !s.ok()) return s;
  if (config.kind != OptimizerKind::kSgd) {
    // Adam's first step is learning_rate / (1 - beta1) (its bias correction), a float32 scalar.
    const double first_step = config.learning_rate / (1 - config.beta1);
    if (!(first_step <= kMaxFloat32)) {
      return fields.Error(
          "learning_rate",
          absl::StrFormat(
              "%s's first step is learning_rate / (1 - beta1) = %g / %g = %g, beyond the largest "
              "float32 (%g)",
              OptimizerName(config.kind), config.learning_rate, 1 - config.beta1, first_step,
              kMaxFloat32));
    }
  }
  return config;
}

std::string OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdamW:
      return "adamw";
  }
  return "unknown";
}

std::string DescribeOptimizer(const OptimizerConfig& o) {
  std::string text = absl::StrFormat("%s lr %g weight_decay %g", OptimizerName(o.kind),
                                     o.learning_rate, o.weight_decay);
  if (o.kind == OptimizerKind::kSgd) {
    absl::StrAppendFormat(&text, " momentum %g%s", o.momentum, o.nesterov ? " nesterov" : "");
  } else {
    absl::StrAppendFormat(&text, " betas (%g, %g) eps %g", o.beta1, o.beta2, o.eps);
  }
  return text;
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(std::vector<torch::Tensor> parameters,
                                                       const OptimizerConfig& config) {
  const auto betas = std::make_tuple(config.beta1, config.beta2);
  switch (config.kind) {
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(std::move(parameters),
                                                 torch::optim::SGDOptions(config.learning_rate)
                                                     .momentum(config.momentum)
                                                     .nesterov(config.nesterov)
                                                     .weight_decay(config.weight_decay));
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(std::move(parameters),
                                                  torch::optim::AdamOptions(config.learning_rate)
                                                      .betas(betas)
                                                      .eps(config.eps)
                                                      .weight_decay(config.weight_decay));
    case OptimizerKind::kAdamW:
      return std::make_unique<torch::optim::AdamW>(std::move(parameters),
                                                   torch::optim::AdamWOptions(config.learning_rate)
                                                       .betas(betas)
                                                       .eps(config.eps)
                                                       .weight_decay(config.weight_decay));
  }
  return nullptr;
}

namespace {

// torch.optim's per-group options of `config`'s kind.
std::unique_ptr<torch::optim::OptimizerOptions> MakeOptions(const OptimizerConfig& config) {
  const auto betas = std::make_tuple(config.beta1, config.beta2);
  switch (config.kind) {
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(config.learning_rate)
              .momentum(config.momentum)
              .nesterov(config.nesterov)
              .weight_decay(config.weight_decay));
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::AdamOptions>(
          torch::optim::AdamOptions(config.learning_rate)
              .betas(betas)
              .eps(config.eps)
              .weight_decay(config.weight_decay));
    case OptimizerKind::kAdamW:
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(config.learning_rate)
              .betas(betas)
              .eps(config.eps)
              .weight_decay(config.weight_decay));
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(std::vector<ParameterGroup> groups,
                                                       const OptimizerConfig& config) {
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  for (ParameterGroup& group : groups) {
    OptimizerConfig settings = config;
    settings.learning_rate = group.learning_rate;
    settings.weight_decay = group.weight_decay;
    param_groups.emplace_back(std::move(group.parameters), MakeOptions(settings));
  }
  std::unique_ptr<torch::optim::OptimizerOptions> defaults = MakeOptions(config);
  switch (config.kind) {
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(std::move(param_groups),
                                                 static_cast<torch::optim::SGDOptions&>(*defaults));
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(
          std::move(param_groups), static_cast<torch::optim::AdamOptions&>(*defaults));
    case OptimizerKind::kAdamW:
      return std::make_unique<torch::optim::AdamW>(
          std::move(param_groups), static_cast<torch::optim::AdamWOptions&>(*defaults));
  }
  return nullptr;
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double learning_rate,
                     const std::vector<double>& scales) {
  size_t i = 0;
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    group.options().set_lr(learning_rate * (i < scales.size() ? scales[i] : 1.0));
    ++i;
  }
}

void SetMomentum(torch::optim::Optimizer& optimizer, OptimizerKind kind, double momentum) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    torch::optim::OptimizerOptions& options = group.options();
    switch (kind) {
      case OptimizerKind::kSgd:
        static_cast<torch::optim::SGDOptions&>(options).momentum(momentum);
        break;
      case OptimizerKind::kAdam: {
        auto& adam = static_cast<torch::optim::AdamOptions&>(options);
        adam.betas(std::make_tuple(momentum, std::get<1>(adam.betas())));
        break;
      }
      case OptimizerKind::kAdamW: {
        auto& adamw = static_cast<torch::optim::AdamWOptions&>(options);
        adamw.betas(std::make_tuple(momentum, std::get<1>(adamw.betas())));
        break;
      }
    }
  }
}

std::vector<torch::Tensor> Gradients(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> gradients;
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    for (const torch::Tensor& param : group.params()) {
      if (param.grad().defined()) gradients.push_back(param.grad());
    }
  }
  return gradients;
}

torch::Tensor ClipGradNorm(const std::vector<torch::Tensor>& gradients, double max_norm) {
  if (gradients.empty()) return torch::zeros({});
  std::vector<torch::Tensor> norms;
  norms.reserve(gradients.size());
  for (const torch::Tensor& gradient : gradients) {
    norms.push_back(gradient.detach().norm(/*p=*/2).to(torch::kFloat32));
  }
  const torch::Tensor total = torch::stack(norms).norm(/*p=*/2);
  const torch::Tensor coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (const torch::Tensor& gradient : gradients) {
    gradient.detach().mul_(coefficient.to(gradient.scalar_type()));
  }
  return total;
}

}  // namespace mpsd::trainer
