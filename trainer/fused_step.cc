// See fused_step.h.
#include "trainer/fused_step.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "trainer/compat/autocast.h"
#include "trainer/graphed_step.h"
#include "trainer/models.h"

namespace mpsd::trainer {
namespace {

namespace F = torch::nn::functional;

constexpr int kWarmupSteps = 3;

}  // namespace

std::string FusedGraphUnsupportedReason(const FusedGraphRequest& request) {
  if (!request.device.is_cuda()) return "CUDA graphs are for CUDA devices";
  if (!request.cuda_graphs) return "CUDA graphs turned off";
  if (!compat::HasCudaGraphs()) return "this LibTorch has no CUDA graphs (needs >= 2.2)";
  return "";
}

FusedStep::FusedStep(FusedModel& model, FusedOptimizer& optimizer,
                     std::vector<torch::Tensor> images, std::vector<torch::Tensor> labels,
                     torch::Tensor table, FusedStepOptions options)
    : model_(model),
      optimizer_(optimizer),
      images_(std::move(images)),
      labels_(std::move(labels)),
      table_(std::move(table)),
      options_(std::move(options)),
      trials_(model.trials()),
      stopped_(model.trials(), false) {
  TORCH_CHECK(static_cast<int>(images_.size()) == trials_ &&
                  static_cast<int>(labels_.size()) == trials_ &&
                  static_cast<int>(options_.label_smoothing.size()) == trials_,
              "FusedStep: one training set and label smoothing per trial needed (", trials_, ")");
  TORCH_CHECK(options_.precision == Precision::kFp32 || options_.precision == Precision::kBf16,
              "FusedStep: precision must be fp32 or bf16, got ", PrecisionName(options_.precision));
  TORCH_CHECK(table_.dim() == 3 && table_.size(0) >= 1 && table_.size(1) == FusedOptimizer::kRows &&
                  table_.size(2) == trials_,
              "FusedStep: the hyperparameter table must be [T, ", FusedOptimizer::kRows, ", ",
              trials_, "], got ", table_.sizes());
  const torch::Device device = images_.front().device();
  for (int k = 1; k < trials_; ++k) {
    shared_data_ = shared_data_ && images_[k].is_same(images_[0]) && labels_[k].is_same(labels_[0]);
    same_smoothing_ = same_smoothing_ && options_.label_smoothing[k] == options_.label_smoothing[0];
  }
  if (!options_.task.class_weights.empty()) {
    for (int k = 0; k < trials_; ++k) {
      TaskConfig task = options_.task;
      task.metrics.clear();
      task.label_smoothing = options_.label_smoothing[k];
      weighted_.push_back(std::make_unique<TaskLoss>(task, device));
    }
  }
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  std::vector<float> smoothing(options_.label_smoothing.begin(), options_.label_smoothing.end());
  smoothing_ = torch::tensor(smoothing, torch::kFloat32).to(device).view({trials_, 1});
  running_ = torch::ones({trials_}, f32.dtype(torch::kBool));
  counter_ = torch::zeros({1}, f32.dtype(torch::kInt64));
  generator_ = at::globalContext().defaultGenerator(device);
  if (static_cast<int>(options_.generators.size()) == trials_ &&
      (!options_.capture || compat::CudaGraph::TakesGenerators())) {
    generators_ = options_.generators;
  }
  optimizer_.InitState();
  if (!options_.capture) return;

  static_index_ = torch::arange(options_.batch_size, f32.dtype(torch::kInt64))
                      .unsqueeze(0)
                      .expand({trials_, options_.batch_size})
                      .contiguous();
  // What the warm-up changes: the parameters (it trains at the table's learning rates), the
  // BatchNorm statistics, the optimizer state and the step counter.
  std::vector<torch::Tensor> state = model_.parameters();
  for (const torch::Tensor& t : model_.buffers()) state.push_back(t);
  for (const torch::Tensor& t : optimizer_.State()) state.push_back(t);
  state.push_back(counter_);
  const int device_index = device.index() < 0 ? 0 : device.index();
  WarmUpAndCapture(
      graph_, device_index, state, kWarmupSteps, [&] { optimizer_.ZeroGrad(); },
      [&] { static_out_ = Compute(static_index_); }, /*share_pool_with=*/nullptr, generators_);
  captured_ = true;
}

FusedStep::~FusedStep() = default;

torch::Tensor FusedStep::Loss(const torch::Tensor& logits, const torch::Tensor& labels) const {
  const int64_t k = logits.size(0), b = logits.size(1), classes = logits.size(2);
  if (!weighted_.empty()) {
    std::vector<torch::Tensor> losses;
    for (int64_t i = 0; i < k; ++i) losses.push_back(weighted_[i]->Loss(logits[i], labels[i]));
    return torch::stack(losses);
  }
  if (same_smoothing_) {
    const auto options = F::CrossEntropyFuncOptions()
                             .reduction(torch::kNone)
                             .label_smoothing(options_.label_smoothing.front());
    return F::cross_entropy(logits.reshape({k * b, classes}), labels.reshape({k * b}), options)
        .view({k, b})
        .mean(/*dim=*/1);
  }
  // ε per trial: (1 − ε)·nll + ε·(mean over classes of −log p).
  const torch::Tensor log_p = torch::log_softmax(logits, /*dim=*/-1);
  const torch::Tensor nll = -log_p.gather(/*dim=*/-1, labels.unsqueeze(-1)).squeeze(-1);
  const torch::Tensor uniform = -log_p.mean(/*dim=*/-1);
  return (nll * (1 - smoothing_) + uniform * smoothing_).mean(/*dim=*/1);
}

torch::Tensor FusedStep::Compute(const torch::Tensor& index) {
  const int64_t b = index.size(1);
  torch::Tensor images, labels;
  if (shared_data_) {
    const torch::Tensor flat = index.reshape({-1});
    images = GatherRows(images_.front(), flat);
    std::vector<int64_t> shape = {trials_, b};
    for (int64_t d = 1; d < images.dim(); ++d) shape.push_back(images.size(d));
    images = images.view(shape);
    labels = labels_.front().index_select(/*dim=*/0, flat).view({trials_, b});
  } else {
    std::vector<torch::Tensor> image_rows, label_rows;
    for (int k = 0; k < trials_; ++k) {
      image_rows.push_back(GatherRows(images_[k], index[k]));
      label_rows.push_back(labels_[k].index_select(/*dim=*/0, index[k]));
    }
    images = torch::stack(image_rows);
    labels = torch::stack(label_rows);
  }
  if (options_.augmentation.enabled() && per_trial_draws()) {
    // Trial k's batch from its generator, as its unfused step augments its gathered batch.
    std::vector<torch::Tensor> augmented;
    for (int k = 0; k < trials_; ++k) {
      augmented.push_back(Augment(images[k], options_.augmentation, generators_[k]));
    }
    images = torch::stack(augmented);
  } else if (options_.augmentation.enabled()) {
    // [K, B, C, H, W] → [K·B, C, H, W]: each image its own draws, then back per trial (a crop
    // or resize may change H and W).
    const torch::Tensor augmented =
        Augment(images.flatten(/*start_dim=*/0, /*end_dim=*/1), options_.augmentation, generator_);
    std::vector<int64_t> shape = {trials_, b};
    for (int64_t d = 1; d < augmented.dim(); ++d) shape.push_back(augmented.size(d));
    images = augmented.reshape(shape);
  }
  torch::Tensor logits;  // [K, B, classes] float32
  {
    // bf16: cache off, a cached cast would be made once, outside what the graph replays.
    std::optional<compat::AutocastGuard> autocast;
    if (options_.precision == Precision::kBf16) {
      autocast.emplace(images.device().type(), torch::kBFloat16, /*cache_enabled=*/false);
    }
    // The loss in float32.
    logits = (per_trial_draws() ? model_.Forward(images, generators_)
                                : model_.Forward(images, generator_))
                 .to(torch::kFloat32);
  }
  const torch::Tensor losses = Loss(logits, labels);  // [K]
  torch::where(running_, losses, torch::zeros({}, losses.options())).sum().backward();
  const torch::Tensor at = counter_.clamp_max(table_.size(0) - 1);
  optimizer_.StepWithRows(table_.index_select(/*dim=*/0, at).squeeze(0).unsqueeze(2));
  {
    torch::NoGradGuard no_grad;
    counter_.add_(1);
  }
  const torch::Tensor correct =
      logits.detach().argmax(/*dim=*/-1).eq(labels).sum(/*dim=*/1).to(torch::kFloat32);
  return torch::stack({losses.detach(), correct}, /*dim=*/1);
}

torch::Tensor FusedStep::Step(const torch::Tensor& index) {
  TORCH_CHECK(index.dim() == 2 && index.size(0) == trials_, "FusedStep: index must be [", trials_,
              ", B], got ", index.sizes());
  if (captured_ && index.size(1) == options_.batch_size) {
    static_index_.copy_(index);
    graph_.Replay();
    return static_out_;
  }
  // Eager (the partial batch, or no graph): the graph's gradients must not add to these.
  optimizer_.ZeroGrad();
  return Compute(index);
}

void FusedStep::Stop(int k) {
  TORCH_CHECK(k >= 0 && k < trials_, "FusedStep::Stop: no trial ", k);
  if (stopped_[k]) return;
  stopped_[k] = true;
  torch::NoGradGuard no_grad;
  running_.select(/*dim=*/0, k).fill_(false);
  optimizer_.FreezeInTable(table_, k);
}

}  // namespace mpsd::trainer
