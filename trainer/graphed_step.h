// The CUDA fast path of the training loop: the whole training step (gather the batch from the
// device-resident dataset, forward (fp32, or bf16 autocast), cross-entropy with label smoothing,
// backward, gradient clipping, the optimizer update) captured once in one CUDA graph and replayed
// for every full batch, as PyTorch's "whole network capture" recipe does (torch.cuda.graphs;
// Adam(fused=True, capturable=True)). The learning rate, and SGD's momentum where onecycle cycles
// it, are read inside the graph from a table of the job's schedule on the device, indexed by a
// step counter that the graph advances: a replay needs no host work but copying the batch's
// indices. Augmentation (trainer/augment.h: crops, flips, rotation, colour jitter, erasing,
// mixup and cutmix) is drawn inside the graph too: every draw is a device kernel on the CUDA
// generator, with no host read-back. The epoch's last partial batch has a graph of its own
// (GraphedStepOptions::tail_batch_size) in the first graph's memory pool; a batch of any other
// size runs the same step eagerly through the same state, so every update of the job goes
// through one optimizer state.
// Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_GRAPHED_STEP_H_
#define MPSD_TRAINER_GRAPHED_STEP_H_

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/augment.h"
#include "trainer/compat/cuda_graph.h"
#include "trainer/models.h"
#include "trainer/optimizers.h"
#include "trainer/precision.h"
#include "trainer/schedule.h"
#include "trainer/task.h"

namespace mpsd::trainer {

// What the loop knows when it decides whether to capture.
struct GraphedStepRequest {
  torch::Device device = torch::kCPU;
  // adam and adamw (the fused kernels) and sgd (a multi-tensor update, momentum and nesterov).
  OptimizerKind optimizer = OptimizerKind::kAdam;
  // fp32, or bf16 (autocast inside the graph, its weight cache off). fp16 needs loss scaling.
  Precision precision = Precision::kFp32;
  int grad_accumulation_steps = 1;
  bool loss_scaling = false;
  // Training-time augmentation (DeviceDataset::augmentation enabled): on the fast path, drawn
  // inside the graph from the device's default generator (GraphedStepOptions::augmentation).
  bool augmentation = false;
  // onecycle with cycle_momentum: SGD's momentum follows it inside the graph; Adam's beta1 is a
  // number in the fused kernel's signature, so it cannot.
  bool cycles_momentum = false;
};

// Why the graphed step cannot serve `request`, or "" when it can: the request's settings are
// checked first, then that this is a CUDA LibTorch >= 2.2 (compat::HasCudaGraphs()). Pure: no
// device, no tensors (tested on CPU).
std::string GraphedStepUnsupportedReason(const GraphedStepRequest& request);

// The learning rate and momentum of every optimizer step of a job, as the graph reads them on
// the device: learning_rates[t] = schedule.LearningRate(t) (or `constant_lr` without a
// schedule), momenta[t] = schedule.Momentum(t) (or `constant_momentum`), t in [0, total_steps),
// rounded to float32 as the kernels take them. total_steps >= 1. Pure (tested on CPU).
struct ScheduleTable {
  std::vector<float> learning_rates;
  std::vector<float> momenta;
};
ScheduleTable TabulateSchedule(const std::optional<Schedule>& schedule, double constant_lr,
                               double constant_momentum, int64_t total_steps);

// The optimizer update of the graphed step, on the device: it takes over a torch::optim::Adam,
// AdamW or SGD's per-parameter state (Adam: step, exp_avg, exp_avg_sq; SGD: momentum_buffer;
// fresh when the optimizer has not stepped) into device tensors, and updates with the learning
// rate and momentum read from a ScheduleTable at a step counter on the device, which Update
// advances: no host value changes between steps, so a CUDA graph can capture it. Adam/AdamW:
// the fused kernels (LibTorch >= 2.2). SGD (torch.optim.SGD, dampening 0): d = g + wd·p; with
// momentum, buf = momentum·buf + d (a zero buffer makes the first step buf = d, as PyTorch's
// clone), d = nesterov ? d + momentum·buf : buf; p -= lr·d; multi-tensor (_foreach) kernels from
// LibTorch 2.1, one tensor at a time before (the CPU tests). The optimizer must have one param
// group (amsgrad off, dampening 0). Throws c10::Error on any LibTorch failure. Not thread-safe;
// the optimizer and its parameters must outlive it.
class DeviceUpdate {
 public:
  // first_step: the job's step counter at the start (a resumed job's start_step).
  DeviceUpdate(torch::optim::Optimizer& optimizer, OptimizerKind kind, const ScheduleTable& table,
               int64_t first_step, const torch::Device& device);

  // One update of every parameter from its .grad (those without one are skipped, as torch.optim
  // does); then the step counter advances. Queues work only.
  void Update();

  // Zeroes the learning rate of the next Update (the graph's warm-up: parameters unchanged).
  void ZeroNextLearningRate() { zero_lr_ = true; }

  // The state the warm-up touches (moments, buffers, step counts), to snapshot and restore.
  std::vector<torch::Tensor> State() const;

  // Writes the state back into the optimizer's per-parameter state (checkpoints, an eager
  // continuation). One host sync (Adam's step counts).
  void ExportState();

  const std::vector<torch::Tensor>& params() const { return params_; }

 private:
  torch::optim::Optimizer& optimizer_;
  const OptimizerKind kind_;
  double beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
  bool nesterov_ = false;
  bool momentum_ = false;  // sgd with momentum buffers (momentum > 0, or a cycling schedule)

  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> exp_avgs_;     // adam, adamw
  std::vector<torch::Tensor> exp_avg_sqs_;  // adam, adamw
  std::vector<torch::Tensor> state_steps_;  // adam, adamw: [] float32 each, on the device
  std::vector<torch::Tensor> buffers_;      // sgd with momentum
  torch::Tensor lr_table_;                  // [T] float32
  torch::Tensor momentum_table_;            // [T] float32
  torch::Tensor step_;                      // [1] int64: the job's step counter
  torch::Tensor lr_;                        // [] float32, this step's
  torch::Tensor momentum_value_;            // [] float32, this step's
  bool zero_lr_ = false;
};

// PyTorch's whole-network capture recipe (torch.cuda.graphs), shared by GraphedStep and the
// fused step (trainer/fused_step.h): runs `step` `warmup_steps` times eagerly on `graph`'s side
// stream (cuDNN / cuBLAS handles, workspaces and algorithm choices made outside the graph), puts
// back the default CUDA generator's state (the warm-up's draws undone), calls `before_capture`
// (drop the gradients, so that the captured backward allocates them in the graph's pool),
// captures `step` into `graph`, and finally copies back into `state` the values it held before
// the warm-up (what the warm-up changed: parameters, BatchNorm statistics, optimizer state,
// step counters). `share_pool_with`: as compat::CudaGraph::Capture. `generators`: CUDA
// generators besides the default one that `step` draws from (the fused step's per trial): their
// states are put back after the warm-up too, and they are registered with the graph
// (compat::CudaGraph::Capture, which needs CudaGraph::TakesGenerators()). Throws c10::Error on
// any LibTorch failure (no CUDA graphs: always). Not thread-safe.
void WarmUpAndCapture(compat::CudaGraph& graph, int device_index,
                      const std::vector<torch::Tensor>& state, int warmup_steps,
                      const std::function<void()>& before_capture,
                      const std::function<void()>& step,
                      const compat::CudaGraph* share_pool_with = nullptr,
                      const std::vector<at::Generator>& generators = {});

// What GraphedStep needs beyond the model, the optimizer and the data.
struct GraphedStepOptions {
  OptimizerKind optimizer = OptimizerKind::kAdam;
  Precision precision = Precision::kFp32;  // fp32 or bf16
  int64_t batch_size = 1;                  // rows of a full batch
  // Rows of the epoch's last partial batch (the training set's size mod batch_size; 0 when
  // there is none or drop_last drops it): captured as a second graph in the first one's memory
  // pool, so that no step runs eagerly beside the pool (an eager step's activations, and
  // cuDNN's algorithm search for its shape, would add to the job's peak memory). Its
  // convolutions take cuDNN's heuristic algorithms, not benchmark mode's search: it runs once
  // an epoch, and the search's trial workspaces are what would raise the peak.
  int64_t tail_batch_size = 0;
  // The task's loss and correct count (trainer/task.h), computed inside the graph as the eager
  // loop computes them: classification's cross-entropy (label_smoothing, class weights),
  // multilabel's BCEWithLogitsLoss, regression's losses.
  TaskConfig task;
  double grad_clip_norm = 0;  // 0 = off; else ClipGradNorm before the update
  // Augment and MixBatch of each gathered batch (trainer/augment.h), inside the graph: the
  // crops, flips, angles, colour factors, boxes and mixing weights are drawn from the device's
  // default CUDA generator, whose philox offset a graph advances on every replay (as dropout's
  // draws), so each replay draws anew. The eager loop draws from the same generator (TrainStep), so
  // both paths augment alike.
  AugmentationOptions augmentation;
  ScheduleTable schedule;
  int64_t first_step = 0;
};

class GraphedStep {
 public:
  // images: [N, ...] float32 (NCHW, or channels_last), labels: [N] int64 (or the task's float
  // targets [N] / [N, D]), both on the CUDA
  // device the model is on. Takes over the optimizer's state (DeviceUpdate). Warms up on a side
  // stream (learning rate 0; model buffers, e.g. BatchNorm's running statistics, and the
  // optimizer state are restored afterwards) and captures. Throws c10::Error on any LibTorch
  // failure (the caller's firewall converts it). Not thread-safe; the model, optimizer and data
  // must outlive it.
  GraphedStep(ClassifierImpl& model, torch::optim::Optimizer& optimizer,
              const torch::Tensor& images, const torch::Tensor& labels, GraphedStepOptions options);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // One optimizer step on the examples at `index` ([B] int64 on the device; B == batch_size
  // or tail_batch_size replays that graph, any other B runs eagerly), at the learning rate of
  // the schedule's next
  // step. Returns the batch's mean loss ([] float32) and correct count ([] int64), on the device,
  // valid until the next call. Queues work only: no host sync.
  std::pair<torch::Tensor, torch::Tensor> Step(const torch::Tensor& index);

  // Writes the optimizer state back (DeviceUpdate::ExportState).
  void ExportState() { update_.ExportState(); }

 private:
  // One captured step: its input (the batch's indices) and outputs, at fixed addresses.
  struct Captured {
    torch::Tensor index;  // [rows] int64: the graph's input
    torch::Tensor loss;   // [] float32, the graph's outputs
    torch::Tensor correct;
    compat::CudaGraph graph;
  };

  // Warms up and captures the step for batches of `rows` into `captured` (sharing
  // `share_pool_with`'s memory pool when given).
  void CaptureStep(Captured& captured, int64_t rows, const compat::CudaGraph* share_pool_with);
  // forward + loss + backward + clipping + update on the examples at `index`; returns loss,
  // correct.
  std::pair<torch::Tensor, torch::Tensor> Compute(const torch::Tensor& index);
  // The examples at `index` and their targets, augmented (and mixed: probability targets) when
  // the options say so.
  std::pair<torch::Tensor, torch::Tensor> Batch(const torch::Tensor& index);

  ClassifierImpl& model_;
  torch::optim::Optimizer& optimizer_;
  const torch::Tensor images_;
  const torch::Tensor labels_;
  const GraphedStepOptions options_;
  const TaskLoss task_loss_;
  DeviceUpdate update_;

  Captured full_;                   // batches of batch_size
  std::unique_ptr<Captured> tail_;  // batches of tail_batch_size; null when 0
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_GRAPHED_STEP_H_
