// The CUDA fast path of the training loop: the whole training step (gather the batch from the
// device-resident dataset, forward, cross-entropy, backward, fused Adam/AdamW update) captured
// once in one CUDA graph and replayed for every full batch, as PyTorch's "whole network capture"
// recipe does (torch.cuda.graphs; Adam(fused=True, capturable=True)). Batches of another size (the
// last partial batch of an epoch) run the same step eagerly with the same fused update, so every
// update of the job goes through one optimizer state. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_GRAPHED_STEP_H_
#define MPSD_TRAINER_GRAPHED_STEP_H_

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/compat.h"
#include "trainer/models.h"
#include "trainer/optimizers.h"
#include "trainer/precision.h"

namespace mpsd::trainer {

// What the loop knows when it decides whether to capture.
struct GraphedStepRequest {
  torch::Device device = torch::kCPU;
  // adam or adamw (the fused kernels); sgd runs eagerly.
  OptimizerKind optimizer = OptimizerKind::kAdam;
  // fp32 only: autocast's weight cache does not belong in a graph.
  Precision precision = Precision::kFp32;
  int grad_accumulation_steps = 1;
  bool grad_clip = false;
  bool loss_scaling = false;
  // Training-time augmentation (DeviceDataset::augmentation enabled): it draws per batch from
  // the shuffle generator outside the captured step.
  bool augmentation = false;
};

// Why the graphed step cannot serve `request`, or "" when it can: the request's settings are
// checked first, then that this is a CUDA LibTorch >= 2.2 (compat::kHasCudaGraphs). Pure: no
// device, no tensors (tested on CPU).
std::string GraphedStepUnsupportedReason(const GraphedStepRequest& request);

class GraphedStep {
 public:
  // Takes over the optimizer's state: its per-parameter Adam state (step, exp_avg, exp_avg_sq;
  // fresh when the optimizer has not stepped) moves into fused device tensors; ExportState puts
  // it back. `optimizer` must be the torch::optim::Adam or AdamW that `kind` names (kAdam or
  // kAdamW, as MakeOptimizer built it) over model.parameters() in one param group without
  // amsgrad. images: [N, ...] float32, labels: [N] int64, both on the CUDA
  // device the model is on; batch_size: rows of a full batch. label_smoothing as
  // CrossEntropyLoss's. Warms up on a side stream (learning rate 0; model buffers, e.g.
  // BatchNorm's running statistics, and the optimizer state are restored afterwards) and
  // captures. Throws c10::Error on any LibTorch failure (the caller's firewall converts it).
  // Not thread-safe; the model, optimizer and data must outlive it.
  GraphedStep(ClassifierImpl& model, torch::optim::Optimizer& optimizer, OptimizerKind kind,
              const torch::Tensor& images, const torch::Tensor& labels, int64_t batch_size,
              double label_smoothing);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // One optimizer step on the examples at `index` ([B] int64 on the device; B == batch_size
  // replays the graph, any other B runs eagerly) with learning rate `learning_rate`. Returns
  // the batch's mean loss ([] float32) and correct count ([] int64), on the device, valid until
  // the next call. Queues work only: no host sync.
  std::pair<torch::Tensor, torch::Tensor> Step(const torch::Tensor& index, double learning_rate);

  // Writes the fused state back into the optimizer's per-parameter state (for checkpoints, or an
  // eager continuation). One host sync (the step counts).
  void ExportState();

 private:
  // forward + loss + backward + fused update on the examples at `index`; returns loss, correct.
  std::pair<torch::Tensor, torch::Tensor> Compute(const torch::Tensor& index);

  ClassifierImpl& model_;
  torch::optim::Optimizer& optimizer_;
  const torch::Tensor images_;
  const torch::Tensor labels_;
  const int64_t batch_size_;
  const double label_smoothing_;
  bool decoupled_ = false;  // AdamW
  double beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;

  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> exp_avgs_;
  std::vector<torch::Tensor> exp_avg_sqs_;
  std::vector<torch::Tensor> state_steps_;  // [] float32 each, on the device
  torch::Tensor lr_;                         // [] float32 on the device
  double lr_value_ = 0;                      // what lr_ holds

  torch::Tensor static_index_;  // [batch_size] int64: the graph's input
  torch::Tensor static_loss_;   // the graph's outputs
  torch::Tensor static_correct_;
  compat::CudaGraph graph_;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_GRAPHED_STEP_H_
