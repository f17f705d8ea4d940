// The batched step of K fused trials (trainer/fused_train.h) and its CUDA graph: the per-trial
// parts of a fused step done for all K trials at once, so that a step is a fixed number of
// kernels whatever K, and on CUDA the whole step captured in one CUDA graph as the unfused job's
// fast path does (trainer/graphed_step.h, PyTorch's whole-network capture recipe):
//   - one gather of all K trials' batches: index [K, B] int64 (row k: trial k's examples, from
//     its own permutation, or the first trial's for a shared order) → images [K, B, C, H, W]
//     float32 and labels [K, B] int64 by one index_select of the shared training tensors (the
//     usual sweep: trials that share the dataset tensor); one index_select per trial when the
//     trials' training sets are different tensors (a seed that picks the data);
//   - the trials' augmentation (FusedStepOptions::augmentation) and the fused forward
//     (FusedModel::Forward), under autocast to bfloat16 for bf16 trials, drawing their random
//     numbers either from each trial's own generator (FusedStepOptions::generators: trial k's
//     crops, flips and dropout masks those of its unfused step) or, cheaper, in one pass over
//     all K × B images and one dropout draw per layer from the device's default generator;
//   - the loss as one cross-entropy over [K·B, C] logits (reduction none, viewed [K, B], meaned
//     per trial → [K]): torch.nn.functional.cross_entropy's formula, with label smoothing ε
//     loss_i = (1 − ε)·(−log p_{i,y_i}) + ε·(−Σ_c log p_{i,c} / C) (PyTorch's CrossEntropyLoss
//     documentation), ε per trial ([K, 1] on the device) where the trials' ε differ; with class
//     weights (the same for all trials) each trial's TaskLoss instead;
//   - the running mask: the sum of the running trials' losses backward (torch::where, so a
//     stopped trial's NaN loss adds nothing), and the update reads each trial's hyperparameters
//     (learning rate, weight decay, momentum / betas, eps, bias corrections) from a device table
//     [T, FusedOptimizer::kRows, K] at a device step counter the step advances
//     (FusedOptimizer::Tabulate / StepWithRows);
//   - the correct count per trial as one [K] tensor.
// A trial that stops (cancel, divergence, a failed evaluation) only changes device tensors: its
// running mask entry and its column of the table (learning rate and weight decay 0, gradient
// masked): no recapture. The partial last batch of an epoch runs the same step eagerly through
// the same state (parameters, optimizer state, step counter). Internal to trainer/: includes
// torch.
//
// Numerics: the same arithmetic as the per-trial fused loop up to the order of sums (the loss's
// mean over [K, B] rows, not per trial), so per-trial losses agree with it within float32
// rounding on the CPU (tests/trainer/fused_step_test.cc: 1e-5 over 20 steps, with dropout and
// random augmentation when each trial draws from its own generator; with the one shared draw
// the masks and crops are other numbers of the same distributions).
//
// Thread-safety: none; a FusedStep belongs to the loop that trains. The model, optimizer, data
// tensors and table must outlive it.
#ifndef MPSD_TRAINER_FUSED_STEP_H_
#define MPSD_TRAINER_FUSED_STEP_H_

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "trainer/augment.h"
#include "trainer/compat/cuda_graph.h"
#include "trainer/fused_models.h"
#include "trainer/fused_optimizer.h"
#include "trainer/precision.h"
#include "trainer/task.h"

namespace mpsd::trainer {

// What the fused loop knows when it decides whether to capture the batched step.
struct FusedGraphRequest {
  torch::Device device = torch::kCPU;
  bool cuda_graphs = true;  // TrainJobConfig::cuda_graphs of every trial (false: turned off)
};

// Why the batched fused step cannot be captured in a CUDA graph for `request`, or "" when it
// can: a CUDA device, CUDA graphs not turned off, a CUDA LibTorch >= 2.2
// (compat::HasCudaGraphs()). Pure: no device, no tensors (tested on CPU).
std::string FusedGraphUnsupportedReason(const FusedGraphRequest& request);

struct FusedStepOptions {
  int64_t batch_size = 1;               // B: rows of a full batch per trial
  std::vector<double> label_smoothing;  // [K]: each trial's ε in [0, 1)
  // The first trial's task (classification); its class_weights (shared by every trial, which
  // FusionDifference guarantees) switch the loss to one TaskLoss per trial.
  TaskConfig task;
  // The trials' per-image training transforms (trainer/augment.h; the same for every trial,
  // which FusionDifference guarantees; no mixing): drawn for all K × B images at once from the
  // device's default generator (inside the graph when captured, as GraphedStep draws them).
  AugmentationOptions augmentation;
  bool capture = false;  // capture full batches in one CUDA graph (FusedGraphUnsupportedReason "")
  // K generators on the trials' device, trial k's in the state its unfused job's default
  // generator would be in (the fused loop's Trial::generator), or none. With them each trial's
  // augmentation and dropout are drawn from its own (K draws per layer: the fused trial is its
  // unfused run up to rounding); without, one draw per layer for all K from the device's default
  // generator. A captured step needs compat::CudaGraph::TakesGenerators() for them (LibTorch
  // >= 2.4); where it is false the step draws as without them (per_trial_draws() says which).
  std::vector<at::Generator> generators;
  // kFp32, or kBf16: the fused forward under autocast to bfloat16 (weights cast on every step,
  // autocast's cache off, as GraphedStep's bf16 forward), the loss in float32; parameters,
  // gradients and optimizer state stay float32.
  Precision precision = Precision::kFp32;
};

class FusedStep {
 public:
  // images[k]: trial k's training images [n, C, H, W] float32 (or [n, ...] for mlp inputs),
  // labels[k]: [n] int64, all on the model's device (the same tensors for every trial where the
  // trials share the data: one gather then). table: FusedOptimizer::Tabulate's [T, kRows, K]
  // float32 table moved to the device, T >= 1 (past its end the last row holds); the step takes
  // a handle to it and changes it only through Stop. Creates the optimizer's state
  // (InitState). With options.capture: warms up on a side stream and captures
  // (WarmUpAndCapture; parameters, buffers, optimizer state, step counter and the generators
  // put back). Throws c10::Error on any LibTorch failure.
  FusedStep(FusedModel& model, FusedOptimizer& optimizer, std::vector<torch::Tensor> images,
            std::vector<torch::Tensor> labels, torch::Tensor table, FusedStepOptions options);
  ~FusedStep();
  FusedStep(const FusedStep&) = delete;
  FusedStep& operator=(const FusedStep&) = delete;

  // One fused step on the examples at `index` ([K, B'] int64 on the device; B' == batch_size
  // replays the graph when captured, else eager): forward, loss, backward, update. Returns
  // [K, 2] float32 on the device, row k trial k's mean loss and correct count (a stopped
  // trial's row is computed but means nothing), valid until the next call. Queues work only: no
  // host sync.
  torch::Tensor Step(const torch::Tensor& index);

  // Stops trial k from now on: its loss leaves the sum, its parameters stay as they are
  // (FusedOptimizer::FreezeInTable). Device tensors only; no recapture, no sync. Idempotent.
  void Stop(int k);

  bool captured() const { return captured_; }
  // Whether each trial draws from its own generator (FusedStepOptions::generators).
  bool per_trial_draws() const { return !generators_.empty(); }
  // Whether the trials share one training tensor (one gather per step).
  bool shared_data() const { return shared_data_; }

 private:
  torch::Tensor Compute(const torch::Tensor& index);
  torch::Tensor Loss(const torch::Tensor& logits, const torch::Tensor& labels) const;

  FusedModel& model_;
  FusedOptimizer& optimizer_;
  const std::vector<torch::Tensor> images_;
  const std::vector<torch::Tensor> labels_;
  torch::Tensor table_;  // [T, kRows, K] float32
  const FusedStepOptions options_;
  const int trials_;
  bool shared_data_ = true;
  bool same_smoothing_ = true;
  std::vector<std::unique_ptr<TaskLoss>> weighted_;  // class weights: one TaskLoss per trial
  torch::Tensor smoothing_;                          // [K, 1] float32: each trial's ε
  torch::Tensor running_;                            // [K] bool: the running mask
  torch::Tensor counter_;                            // [1] int64: the table's row
  at::Generator generator_;                          // the device's default generator
  std::vector<at::Generator> generators_;            // [K] each trial's, or none: one shared draw
  std::vector<bool> stopped_;

  bool captured_ = false;
  torch::Tensor static_index_;  // [K, batch_size] int64: the graph's input
  torch::Tensor static_out_;    // [K, 2] float32: the graph's output
  compat::CudaGraph graph_;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_FUSED_STEP_H_
