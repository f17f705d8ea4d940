// See graphed_step.h. The capture follows PyTorch's whole-network recipe: warm up on a side
// stream, drop the gradients, capture forward + backward + optimizer step, replay per batch.
#include "trainer/graphed_step.h"

#include <utility>

namespace mpsd::trainer {
namespace {

namespace F = torch::nn::functional;

constexpr int kWarmupSteps = 3;

template <typename Options>
void ReadHyperparameters(const torch::optim::OptimizerOptions& options, double& beta1,
                         double& beta2, double& eps, double& weight_decay) {
  const auto& o = static_cast<const Options&>(options);
  TORCH_CHECK(!o.amsgrad(), "the graphed step has no amsgrad");
  beta1 = std::get<0>(o.betas());
  beta2 = std::get<1>(o.betas());
  eps = o.eps();
  weight_decay = o.weight_decay();
}

// Copies of `tensors`' values, to put back after the warm-up.
std::vector<torch::Tensor> Snapshot(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> copies;
  copies.reserve(tensors.size());
  for (const torch::Tensor& t : tensors) copies.push_back(t.detach().clone());
  return copies;
}

void Restore(const std::vector<torch::Tensor>& tensors, const std::vector<torch::Tensor>& saved) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].detach().copy_(saved[i]);
}

}  // namespace

std::string GraphedStepUnsupportedReason(const GraphedStepRequest& request) {
  if (!request.device.is_cuda()) return "CUDA graphs are for CUDA devices";
  if (request.optimizer != OptimizerKind::kAdam && request.optimizer != OptimizerKind::kAdamW) {
    return "only adam and adamw have a fused, capturable update";
  }
  if (request.precision != Precision::kFp32) return "mixed precision runs eagerly";
  if (request.grad_accumulation_steps != 1) return "gradient accumulation runs eagerly";
  if (request.grad_clip) return "gradient clipping runs eagerly";
  if (request.loss_scaling) return "loss scaling runs eagerly";
  if (request.augmentation) return "augmentation runs eagerly";
  if (!compat::kHasCudaGraphs) return "this LibTorch has no CUDA graphs or fused Adam (needs >= 2.2)";
  return "";
}

GraphedStep::GraphedStep(ClassifierImpl& model, torch::optim::Optimizer& optimizer,
                         OptimizerKind kind, const torch::Tensor& images, const torch::Tensor& labels,
                         int64_t batch_size, double label_smoothing)
    : model_(model),
      optimizer_(optimizer),
      images_(images),
      labels_(labels),
      batch_size_(batch_size),
      label_smoothing_(label_smoothing) {
  TORCH_CHECK(optimizer.param_groups().size() == 1, "the graphed step needs one param group");
  const torch::optim::OptimizerOptions& options = optimizer.param_groups()[0].options();
  TORCH_CHECK(kind == OptimizerKind::kAdam || kind == OptimizerKind::kAdamW,
              "the graphed step needs torch::optim::Adam or AdamW");
  decoupled_ = kind == OptimizerKind::kAdamW;
  if (decoupled_) {
    ReadHyperparameters<torch::optim::AdamWOptions>(options, beta1_, beta2_, eps_, weight_decay_);
  } else {
    ReadHyperparameters<torch::optim::AdamOptions>(options, beta1_, beta2_, eps_, weight_decay_);
  }
  const torch::TensorOptions scalar = torch::TensorOptions().dtype(torch::kFloat32).device(images.device());
  lr_ = torch::zeros({}, scalar);
  for (const torch::Tensor& param : optimizer.param_groups()[0].params()) {
    if (!param.requires_grad()) continue;
    params_.push_back(param);
    auto found = optimizer.state().find(compat::OptimizerStateKey(param));
    int64_t step = 0;
    torch::Tensor exp_avg, exp_avg_sq;
    if (found != optimizer.state().end()) {
      if (decoupled_) {
        const auto& state = static_cast<const torch::optim::AdamWParamState&>(*found->second);
        step = state.step(), exp_avg = state.exp_avg(), exp_avg_sq = state.exp_avg_sq();
      } else {
        const auto& state = static_cast<const torch::optim::AdamParamState&>(*found->second);
        step = state.step(), exp_avg = state.exp_avg(), exp_avg_sq = state.exp_avg_sq();
      }
    }
    exp_avgs_.push_back(exp_avg.defined() ? exp_avg.detach().clone() : torch::zeros_like(param));
    exp_avg_sqs_.push_back(exp_avg_sq.defined() ? exp_avg_sq.detach().clone()
                                                : torch::zeros_like(param));
    state_steps_.push_back(torch::full({}, static_cast<double>(step), scalar));
  }
  static_index_ = torch::arange(batch_size, torch::TensorOptions().dtype(torch::kInt64).device(images.device()));

  // Warm-up with learning rate 0 (parameters unchanged), then put back what it touched: the
  // moments and step counts, and the model's buffers (BatchNorm running statistics).
  const int device_index = images.device().index() < 0 ? 0 : images.device().index();
  const std::vector<torch::Tensor> buffers = model.buffers();
  const std::vector<torch::Tensor> saved_buffers = Snapshot(buffers);
  const std::vector<torch::Tensor> saved_avgs = Snapshot(exp_avgs_);
  const std::vector<torch::Tensor> saved_avg_sqs = Snapshot(exp_avg_sqs_);
  const std::vector<torch::Tensor> saved_steps = Snapshot(state_steps_);
  graph_.OnSideStream(device_index, [&] {
    for (int i = 0; i < kWarmupSteps; ++i) Compute(static_index_);
  });
  compat::ZeroGradToNone(optimizer);
  graph_.Capture(device_index, [&] {
    std::tie(static_loss_, static_correct_) = Compute(static_index_);
  });
  Restore(buffers, saved_buffers);
  Restore(exp_avgs_, saved_avgs);
  Restore(exp_avg_sqs_, saved_avg_sqs);
  Restore(state_steps_, saved_steps);
}

GraphedStep::~GraphedStep() = default;

std::pair<torch::Tensor, torch::Tensor> GraphedStep::Compute(const torch::Tensor& index) {
  const torch::Tensor labels = labels_.index_select(/*dim=*/0, index);
  const torch::Tensor logits = model_.forward(images_.index_select(/*dim=*/0, index));
  torch::Tensor loss = F::cross_entropy(
      logits, labels, F::CrossEntropyFuncOptions().label_smoothing(label_smoothing_));
  loss.backward();
  std::vector<torch::Tensor> grads;
  grads.reserve(params_.size());
  for (const torch::Tensor& param : params_) grads.push_back(param.grad());
  {
    torch::NoGradGuard no_grad;
    compat::FusedAdamUpdate(params_, grads, exp_avgs_, exp_avg_sqs_, state_steps_, lr_, beta1_,
                            beta2_, weight_decay_, eps_, decoupled_);
  }
  torch::Tensor correct = logits.detach().argmax(/*dim=*/1).eq(labels).sum();
  return {loss.detach(), std::move(correct)};
}

std::pair<torch::Tensor, torch::Tensor> GraphedStep::Step(const torch::Tensor& index,
                                                          double learning_rate) {
  if (learning_rate != lr_value_) {  // one kernel, only when the schedule moves
    lr_.fill_(learning_rate);
    lr_value_ = learning_rate;
  }
  if (index.size(0) == batch_size_) {
    static_index_.copy_(index);
    graph_.Replay();
    return {static_loss_, static_correct_};
  }
  // The partial batch: eager, through the same fused state. Its gradients must not add to the
  // graph's (which the graph overwrites anyway), so drop them first.
  compat::ZeroGradToNone(optimizer_);
  return Compute(index);
}

void GraphedStep::ExportState() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto step = static_cast<int64_t>(state_steps_[i].item<double>());
    if (decoupled_) {
      auto state = std::make_unique<torch::optim::AdamWParamState>();
      state->step(step);
      state->exp_avg(exp_avgs_[i].clone());
      state->exp_avg_sq(exp_avg_sqs_[i].clone());
      optimizer_.state()[compat::OptimizerStateKey(params_[i])] = std::move(state);
    } else {
      auto state = std::make_unique<torch::optim::AdamParamState>();
      state->step(step);
      state->exp_avg(exp_avgs_[i].clone());
      state->exp_avg_sq(exp_avg_sqs_[i].clone());
      optimizer_.state()[compat::OptimizerStateKey(params_[i])] = std::move(state);
    }
  }
}

}  // namespace mpsd::trainer
