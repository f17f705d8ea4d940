// The fused update: LibTorch's SGD, Adam and AdamW steps with [K, 1] hyperparameters.
#include "trainer/fused_optimizer.h"

#include <cmath>
#include <utility>

namespace mpsd::trainer {
namespace {

// Rows of the per-step table; each row holds one value per trial.
enum Row : int64_t {
  kLearningRate,     // sgd: −lr (p += −lr·d); adam/adamw: −lr / (1 − β1ᵗ)
  kWeightDecay,      // sgd/adam: wd; adamw: 1 − lr·wd
  kMomentum,         // sgd: μ; adam/adamw: β1
  kOneMinusBeta1,    // adam/adamw
  kBeta2,            // adam/adamw
  kOneMinusBeta2,    // adam/adamw
  kSqrtCorrection2,  // adam/adamw: √(1 − β2ᵗ)
  kEps,              // adam/adamw
  kActive,           // 1, or 0 for a frozen trial (its gradient zeroed)
  kRows,
};

static_assert(static_cast<int64_t>(Row::kRows) == FusedOptimizer::kRows,
              "FusedOptimizer::kRows is the number of rows");

}  // namespace

FusedOptimizer::FusedOptimizer(OptimizerKind kind, bool nesterov,
                               std::vector<torch::Tensor> parameters, int trials)
    : kind_(kind),
      nesterov_(nesterov),
      trials_(trials),
      parameters_(std::move(parameters)),
      first_(parameters_.size()),
      second_(parameters_.size()) {}

void FusedOptimizer::ZeroGrad() {
  for (torch::Tensor& p : parameters_) {
    if (p.grad().defined()) p.mutable_grad().reset();
  }
}

void FusedOptimizer::FillRows(const std::vector<TrialHyperparameters>& hyper, int64_t step,
                              torch::TensorAccessor<double, 2> t) const {
  const bool sgd = kind_ == OptimizerKind::kSgd;
  for (int k = 0; k < trials_; ++k) {
    const TrialHyperparameters& h = hyper[k];
    const double lr = h.active ? h.learning_rate : 0.0;
    const double wd = h.active ? h.weight_decay : 0.0;
    if (sgd) {
      t[kLearningRate][k] = -lr;
      t[kWeightDecay][k] = wd;
      t[kMomentum][k] = h.momentum;
    } else {
      const double correction1 = 1 - std::pow(h.beta1, static_cast<double>(step));
      const double correction2 = 1 - std::pow(h.beta2, static_cast<double>(step));
      t[kLearningRate][k] = -lr / correction1;
      t[kWeightDecay][k] = kind_ == OptimizerKind::kAdamW ? 1 - lr * wd : wd;
      t[kMomentum][k] = h.beta1;
      t[kOneMinusBeta1][k] = 1 - h.beta1;
      t[kBeta2][k] = h.beta2;
      t[kOneMinusBeta2][k] = 1 - h.beta2;
      t[kSqrtCorrection2][k] = std::sqrt(correction2);
      t[kEps][k] = h.eps;
    }
    t[kActive][k] = h.active ? 1.0 : 0.0;
  }
}

void FusedOptimizer::Step(const std::vector<TrialHyperparameters>& hyper) {
  TORCH_CHECK(static_cast<int>(hyper.size()) == trials_, "FusedOptimizer: ", trials_,
              " trials' hyperparameters needed, got ", hyper.size());
  torch::NoGradGuard no_grad;
  ++steps_;
  // The table in double on the host, as LibTorch computes these scalars, then float32 on the
  // device (LibTorch's scalars are cast to the tensors' float32 inside each kernel too).
  torch::Tensor table = torch::zeros({kRows, trials_}, torch::kFloat64);
  FillRows(hyper, steps_, table.accessor<double, 2>());
  if (parameters_.empty()) return;
  const torch::Tensor rows =
      table.to(torch::kFloat32).to(parameters_.front().device()).unsqueeze(2);  // [rows, K, 1]
  bool any_frozen = false;
  for (const TrialHyperparameters& h : hyper) any_frozen = any_frozen || !h.active;
  Apply(rows, any_frozen, /*where_mask=*/false);
}

torch::Tensor FusedOptimizer::Tabulate(
    const std::vector<std::vector<TrialHyperparameters>>& steps) const {
  const auto count = static_cast<int64_t>(steps.size());
  torch::Tensor table = torch::zeros({count, kRows, trials_}, torch::kFloat64);
  auto t = table.accessor<double, 3>();
  for (int64_t i = 0; i < count; ++i) {
    TORCH_CHECK(static_cast<int>(steps[i].size()) == trials_, "FusedOptimizer: ", trials_,
                " trials' hyperparameters needed at step ", i, ", got ", steps[i].size());
    FillRows(steps[i], i + 1, t[i]);
  }
  return table.to(torch::kFloat32);
}

void FusedOptimizer::FreezeInTable(torch::Tensor& table, int k) const {
  torch::NoGradGuard no_grad;
  torch::Tensor column = table.select(/*dim=*/2, k);  // [T, kRows]
  column.select(1, kLearningRate).fill_(0);           // sgd −0, adam −0 / correction
  column.select(1, kWeightDecay).fill_(kind_ == OptimizerKind::kAdamW ? 1.0 : 0.0);
  column.select(1, kActive).fill_(0);
}

void FusedOptimizer::StepWithRows(const torch::Tensor& rows) {
  torch::NoGradGuard no_grad;
  Apply(rows, /*mask=*/false, /*where_mask=*/true);
}

void FusedOptimizer::InitState() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const torch::Tensor p = parameters_[i].detach().view({trials_, -1});
    if (!first_[i].defined()) first_[i] = torch::zeros_like(p);
    if (kind_ != OptimizerKind::kSgd && !second_[i].defined()) second_[i] = torch::zeros_like(p);
  }
}

std::vector<torch::Tensor> FusedOptimizer::State() const {
  std::vector<torch::Tensor> state;
  for (const auto* list : {&first_, &second_}) {
    for (const torch::Tensor& t : *list) {
      if (t.defined()) state.push_back(t);
    }
  }
  return state;
}

void FusedOptimizer::Apply(const torch::Tensor& rows, bool mask, bool where_mask) {
  const bool sgd = kind_ == OptimizerKind::kSgd;
  const torch::Tensor lr = rows[kLearningRate];
  const torch::Tensor wd = rows[kWeightDecay];
  const torch::Tensor momentum = rows[kMomentum];
  const torch::Tensor active = rows[kActive];
  const torch::Tensor running = where_mask ? active.gt(0) : torch::Tensor();

  for (size_t i = 0; i < parameters_.size(); ++i) {
    torch::Tensor& param = parameters_[i];
    if (!param.grad().defined()) continue;
    const torch::Tensor p = param.detach().view({trials_, -1});
    torch::Tensor grad = param.grad().detach().view({trials_, -1});
    if (mask) grad = grad * active;
    if (where_mask) grad = torch::where(running, grad, torch::zeros({}, grad.options()));
    // a.add_(b, alpha) is fma(b, alpha, a) in ATen's CPU kernel; addcmul(a, b, alpha_k) is the
    // same fma with alpha a tensor, so each line below rounds as LibTorch's scalar version does.
    if (sgd) {
      // torch::optim::SGD::step: d_p = d_p.add(p, wd); buf = clone(d_p), later
      // buf.mul_(momentum).add_(d_p, 1 − dampening = 1); nesterov: d_p = d_p.add(buf, momentum),
      // else d_p = buf; p.add_(d_p, −lr).
      torch::Tensor d = torch::addcmul(grad, p, wd);
      if (!first_[i].defined()) {
        first_[i] = d.clone();
      } else {
        first_[i].mul_(momentum).add_(d);
      }
      const torch::Tensor& buffer = first_[i];
      d = nesterov_ ? torch::addcmul(d, buffer, momentum) : buffer;
      p.addcmul_(d, lr);
      continue;
    }
    // torch::optim::Adam::step / AdamW::step.
    if (!first_[i].defined()) {
      first_[i] = torch::zeros_like(p);
      second_[i] = torch::zeros_like(p);
    }
    if (kind_ == OptimizerKind::kAdamW) {
      p.mul_(wd);  // p.mul_(1 − lr·wd): the decoupled decay, before the moments
    } else {
      grad = torch::addcmul(grad, p, wd);  // grad.add(p, weight_decay)
    }
    torch::Tensor& exp_avg = first_[i];
    torch::Tensor& exp_avg_sq = second_[i];
    // exp_avg.mul_(β1).add_(grad, 1 − β1)
    exp_avg.mul_(momentum).addcmul_(grad, rows[kOneMinusBeta1]);
    // exp_avg_sq.mul_(β2).addcmul_(grad, grad, 1 − β2): ATen computes (value·t1)·t2 + self
    exp_avg_sq.mul_(rows[kBeta2]).addcmul_(grad * rows[kOneMinusBeta2], grad);
    // denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)
    const torch::Tensor denom = (exp_avg_sq.sqrt() / rows[kSqrtCorrection2]).add_(rows[kEps]);
    // p.addcdiv_(exp_avg, denom, −step_size): ATen computes (value·t1) / t2 + self
    p.addcdiv_(exp_avg * lr, denom);
  }
}

}  // namespace mpsd::trainer
