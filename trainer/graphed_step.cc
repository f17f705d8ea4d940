// See graphed_step.h. The capture follows PyTorch's whole-network recipe: warm up on a side
// stream, drop the gradients, capture forward + backward + optimizer step, replay per batch.
#include "trainer/graphed_step.h"
#include "trainer/compat/autocast.h"
#include "trainer/compat/optim.h"
#include "trainer/device.h"

#include <algorithm>
#include <mutex>
#include <utility>

namespace mpsd::trainer {
namespace {

// The step's task without the user's metrics: the graph computes the loss and correct count
// only (evaluations run eagerly, trainer/train_loop.h), so their modules need not be loaded.
TaskConfig LossOnly(TaskConfig task) {
  task.metrics.clear();
  return task;
}

constexpr int kWarmupSteps = 3;

template <typename Options>
void ReadAdamHyperparameters(const torch::optim::OptimizerOptions& options, double& beta1,
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

void WarmUpAndCapture(compat::CudaGraph& graph, int device_index,
                      const std::vector<torch::Tensor>& state, int warmup_steps,
                      const std::function<void()>& before_capture,
                      const std::function<void()>& step, const compat::CudaGraph* share_pool_with,
                      const std::vector<at::Generator>& generators) {
  const std::vector<torch::Tensor> saved = Snapshot(state);
  const torch::Tensor rng = compat::CudaGraph::GetRngState(device_index);
  std::vector<torch::Tensor> generator_states;
  for (at::Generator generator : generators) {  // a handle: copies share the generator
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator_states.push_back(generator.get_state());
  }
  graph.OnSideStream(device_index, [&] {
    for (int i = 0; i < warmup_steps; ++i) step();
  });
  compat::CudaGraph::SetRngState(device_index, rng);  // the warm-up's dropout draws undone
  for (size_t i = 0; i < generators.size(); ++i) {
    at::Generator generator = generators[i];
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(generator_states[i]);
  }
  before_capture();
  graph.Capture(device_index, step, share_pool_with, generators);
  Restore(state, saved);
}

std::string GraphedStepUnsupportedReason(const GraphedStepRequest& request) {
  if (!request.device.is_cuda()) return "CUDA graphs are for CUDA devices";
  if (request.precision == Precision::kFp16 || request.loss_scaling) {
    return "fp16 with loss scaling runs eagerly";
  }
  if (request.grad_accumulation_steps != 1) return "gradient accumulation runs eagerly";
  if (request.cycles_momentum && request.optimizer != OptimizerKind::kSgd) {
    return "the schedule cycles adam's beta1, a number in the fused kernel's arguments";
  }
  if (!compat::HasCudaGraphs())
    return "this LibTorch has no CUDA graphs or fused Adam (needs >= 2.2)";
  return "";
}

ScheduleTable TabulateSchedule(const std::optional<Schedule>& schedule, double constant_lr,
                               double constant_momentum, int64_t total_steps) {
  ScheduleTable table;
  const int64_t steps = std::max<int64_t>(total_steps, 1);
  table.learning_rates.reserve(steps);
  table.momenta.reserve(steps);
  for (int64_t t = 0; t < steps; ++t) {
    table.learning_rates.push_back(
        static_cast<float>(schedule.has_value() ? schedule->LearningRate(t) : constant_lr));
    const std::optional<double> momentum =
        schedule.has_value() ? schedule->Momentum(t) : std::nullopt;
    table.momenta.push_back(static_cast<float>(momentum.value_or(constant_momentum)));
  }
  return table;
}

DeviceUpdate::DeviceUpdate(torch::optim::Optimizer& optimizer, OptimizerKind kind,
                           const ScheduleTable& table, int64_t first_step,
                           const torch::Device& device)
    : optimizer_(optimizer), kind_(kind) {
  TORCH_CHECK(optimizer.param_groups().size() == 1, "the graphed step needs one param group");
  TORCH_CHECK(!table.learning_rates.empty() && table.learning_rates.size() == table.momenta.size(),
              "the schedule table needs one learning rate and momentum per step");
  const torch::optim::OptimizerOptions& options = optimizer.param_groups()[0].options();
  switch (kind) {
    case OptimizerKind::kAdam:
      ReadAdamHyperparameters<torch::optim::AdamOptions>(options, beta1_, beta2_, eps_,
                                                         weight_decay_);
      break;
    case OptimizerKind::kAdamW:
      ReadAdamHyperparameters<torch::optim::AdamWOptions>(options, beta1_, beta2_, eps_,
                                                          weight_decay_);
      break;
    case OptimizerKind::kSgd: {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(options);
      TORCH_CHECK(o.dampening() == 0, "the graphed step's SGD has no dampening");
      weight_decay_ = o.weight_decay();
      nesterov_ = o.nesterov();
      momentum_ = o.momentum() > 0 || std::any_of(table.momenta.begin(), table.momenta.end(),
                                                  [](float m) { return m > 0; });
      break;
    }
  }
  const torch::TensorOptions f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  lr_table_ = torch::tensor(table.learning_rates, torch::kFloat32).to(device);
  momentum_table_ = torch::tensor(table.momenta, torch::kFloat32).to(device);
  step_ = torch::full({1}, first_step, f32.dtype(torch::kInt64));
  lr_ = torch::zeros({}, f32);
  momentum_value_ = torch::zeros({}, f32);
  for (const torch::Tensor& param : optimizer.param_groups()[0].params()) {
    if (!param.requires_grad()) continue;
    params_.push_back(param);
    auto found = optimizer.state().find(compat::OptimizerStateKey(param));
    const bool has_state = found != optimizer.state().end();
    if (kind == OptimizerKind::kSgd) {
      if (!momentum_) continue;
      torch::Tensor buffer;
      if (has_state) {
        buffer = static_cast<const torch::optim::SGDParamState&>(*found->second).momentum_buffer();
      }
      buffers_.push_back(buffer.defined() ? buffer.detach().clone() : torch::zeros_like(param));
      continue;
    }
    int64_t step = 0;
    torch::Tensor exp_avg, exp_avg_sq;
    if (has_state && kind == OptimizerKind::kAdamW) {
      const auto& state = static_cast<const torch::optim::AdamWParamState&>(*found->second);
      step = state.step(), exp_avg = state.exp_avg(), exp_avg_sq = state.exp_avg_sq();
    } else if (has_state) {
      const auto& state = static_cast<const torch::optim::AdamParamState&>(*found->second);
      step = state.step(), exp_avg = state.exp_avg(), exp_avg_sq = state.exp_avg_sq();
    }
    exp_avgs_.push_back(exp_avg.defined() ? exp_avg.detach().clone() : torch::zeros_like(param));
    exp_avg_sqs_.push_back(exp_avg_sq.defined() ? exp_avg_sq.detach().clone()
                                                : torch::zeros_like(param));
    state_steps_.push_back(torch::full({}, static_cast<double>(step), f32));
  }
}

void DeviceUpdate::Update() {
  torch::NoGradGuard no_grad;
  // This step's learning rate and momentum, looked up on the device (past the table's end the
  // last entry holds).
  const torch::Tensor at = step_.clamp_max(lr_table_.size(0) - 1);
  lr_.copy_(lr_table_.index_select(/*dim=*/0, at).squeeze(0));
  if (zero_lr_) lr_.zero_();
  zero_lr_ = false;
  std::vector<torch::Tensor> params, grads, first, second, steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    params.push_back(params_[i]);
    grads.push_back(params_[i].grad());
    if (kind_ != OptimizerKind::kSgd) {
      first.push_back(exp_avgs_[i]);
      second.push_back(exp_avg_sqs_[i]);
      steps.push_back(state_steps_[i]);
    } else if (momentum_) {
      first.push_back(buffers_[i]);
    }
  }
  if (kind_ == OptimizerKind::kSgd) {
    if (momentum_) momentum_value_.copy_(momentum_table_.index_select(/*dim=*/0, at).squeeze(0));
    compat::MultiTensorSgdUpdate(params, grads, first, lr_, momentum_value_, weight_decay_,
                                 nesterov_, momentum_);
  } else {
    compat::FusedAdamUpdate(params, grads, first, second, steps, lr_, beta1_, beta2_, weight_decay_,
                            eps_, kind_ == OptimizerKind::kAdamW);
  }
  step_.add_(1);
}

std::vector<torch::Tensor> DeviceUpdate::State() const {
  std::vector<torch::Tensor> state = {step_};
  for (const auto* list : {&exp_avgs_, &exp_avg_sqs_, &state_steps_, &buffers_}) {
    state.insert(state.end(), list->begin(), list->end());
  }
  return state;
}

void DeviceUpdate::ExportState() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto key = compat::OptimizerStateKey(params_[i]);
    if (kind_ == OptimizerKind::kSgd) {
      if (!momentum_) continue;
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(buffers_[i].clone());
      optimizer_.state()[key] = std::move(state);
      continue;
    }
    const auto step = static_cast<int64_t>(state_steps_[i].item<double>());
    if (kind_ == OptimizerKind::kAdamW) {
      auto state = std::make_unique<torch::optim::AdamWParamState>();
      state->step(step);
      state->exp_avg(exp_avgs_[i].clone());
      state->exp_avg_sq(exp_avg_sqs_[i].clone());
      optimizer_.state()[key] = std::move(state);
    } else {
      auto state = std::make_unique<torch::optim::AdamParamState>();
      state->step(step);
      state->exp_avg(exp_avgs_[i].clone());
      state->exp_avg_sq(exp_avg_sqs_[i].clone());
      optimizer_.state()[key] = std::move(state);
    }
  }
}

GraphedStep::GraphedStep(ClassifierImpl& model, torch::optim::Optimizer& optimizer,
                         const torch::Tensor& images, const torch::Tensor& labels,
                         GraphedStepOptions options)
    : model_(model),
      optimizer_(optimizer),
      images_(images),
      labels_(labels),
      options_(std::move(options)),
      task_loss_(LossOnly(options_.task), images.device()),
      update_(optimizer, options_.optimizer, options_.schedule, options_.first_step,
              images.device()) {
  TORCH_CHECK(options_.precision == Precision::kFp32 || options_.precision == Precision::kBf16,
              "the graphed step runs fp32 or bf16");
  TORCH_CHECK(options_.tail_batch_size >= 0 && options_.tail_batch_size < options_.batch_size,
              "the last partial batch must be smaller than a full batch");
  CaptureStep(full_, options_.batch_size, /*share_pool_with=*/nullptr);
  if (options_.tail_batch_size > 0) {
    // cuDNN's heuristics for this once-an-epoch shape: benchmark mode's search would allocate
    // its trial workspaces on top of the first graph's pool (the job's peak memory).
    const CudnnBenchmarkScope heuristics(false);
    tail_ = std::make_unique<Captured>();
    CaptureStep(*tail_, options_.tail_batch_size, &full_.graph);
  }
}

void GraphedStep::CaptureStep(Captured& captured, int64_t rows,
                              const compat::CudaGraph* share_pool_with) {
  captured.index =
      torch::arange(rows, torch::TensorOptions().dtype(torch::kInt64).device(images_.device()));
  // Warm-up with learning rate 0 (parameters unchanged), then put back what it touched: the
  // optimizer state and step counter, and the model's buffers (BatchNorm running statistics).
  const int device_index = images_.device().index() < 0 ? 0 : images_.device().index();
  std::vector<torch::Tensor> state = model_.buffers();
  for (const torch::Tensor& t : update_.State()) state.push_back(t);
  // An earlier graph's gradients are its own: the warm-up must not add to them.
  compat::ZeroGradToNone(optimizer_);
  bool capturing = false;
  WarmUpAndCapture(
      captured.graph, device_index, state, kWarmupSteps,
      [&] {
        compat::ZeroGradToNone(optimizer_);
        capturing = true;
      },
      [&] {
        if (capturing) {
          std::tie(captured.loss, captured.correct) = Compute(captured.index);
          return;
        }
        update_.ZeroNextLearningRate();
        Compute(captured.index);
      },
      share_pool_with);
}

GraphedStep::~GraphedStep() = default;

std::pair<torch::Tensor, torch::Tensor> GraphedStep::Batch(const torch::Tensor& index) {
  torch::Tensor batch = GatherRows(images_, index);
  torch::Tensor targets = labels_.index_select(/*dim=*/0, index);
  const AugmentationOptions& augmentation = options_.augmentation;
  if (!augmentation.enabled() && !augmentation.mixes()) return {batch, targets};
  at::Generator generator = at::globalContext().defaultGenerator(images_.device());
  batch = Augment(batch, augmentation, generator);
  if (augmentation.mixes()) {
    MixedBatch mixed = MixBatch(batch, targets, options_.task.outputs, augmentation, generator);
    batch = std::move(mixed.images);
    targets = std::move(mixed.targets);
  }
  // Augment's crop gathers into NCHW: back into the resident images' layout (channels_last).
  return {images_.suggest_memory_format() == at::MemoryFormat::ChannelsLast
              ? ChannelsLastStrides(batch)
              : batch.contiguous(),
          targets};
}

std::pair<torch::Tensor, torch::Tensor> GraphedStep::Compute(const torch::Tensor& index) {
  const auto [images, labels] = Batch(index);
  torch::Tensor logits;
  if (options_.precision == Precision::kBf16) {
    // The cast weights are made inside the graph on every replay: autocast's cache would hand
    // the capture tensors that the next replay does not refresh.
    const compat::AutocastGuard autocast(images_.device().type(), torch::kBFloat16,
                                         /*cache_enabled=*/false);
    logits = model_.forward(images);
  } else {
    logits = model_.forward(images);
  }
  logits = logits.to(torch::kFloat32);  // the loss in float32, as autocast's policy has it
  torch::Tensor loss = task_loss_.Loss(logits, labels);
  loss.backward();
  if (options_.grad_clip_norm > 0) {
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& param : update_.params()) {
      if (param.grad().defined()) grads.push_back(param.grad());
    }
    torch::NoGradGuard no_grad;
    ClipGradNorm(grads, options_.grad_clip_norm);
  }
  update_.Update();
  torch::Tensor correct = task_loss_.Correct(logits, labels);
  return {loss.detach(), std::move(correct)};
}

std::pair<torch::Tensor, torch::Tensor> GraphedStep::Step(const torch::Tensor& index) {
  Captured* captured = index.size(0) == options_.batch_size                            ? &full_
                       : tail_ != nullptr && index.size(0) == options_.tail_batch_size ? tail_.get()
                                                                                       : nullptr;
  if (captured != nullptr) {
    captured->index.copy_(index);
    captured->graph.Replay();
    return {captured->loss, captured->correct};
  }
  // A batch of another size: eager, through the same state. Its gradients must not add to the
  // graphs' (which they overwrite anyway), so drop them first.
  compat::ZeroGradToNone(optimizer_);
  return Compute(index);
}

}  // namespace mpsd::trainer
