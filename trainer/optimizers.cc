// torch::optim optimizers built from an OptimizerConfig, and device-side gradient clipping.
#include "trainer/optimizers.h"

#include <tuple>
#include <utility>

namespace mpsd::trainer {

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

void SetLearningRate(torch::optim::Optimizer& optimizer, double learning_rate) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    group.options().set_lr(learning_rate);
  }
}

void SetMomentum(torch::optim::Optimizer& optimizer, double momentum) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    torch::optim::OptimizerOptions& options = group.options();
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
      sgd->momentum(momentum);
    } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
      adam->betas(std::make_tuple(momentum, std::get<1>(adam->betas())));
    } else if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
      adamw->betas(std::make_tuple(momentum, std::get<1>(adamw->betas())));
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
