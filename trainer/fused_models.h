// Horizontally fused zoo models (HFTA: Wang et al., "Horizontally Fused Training Array", MLSys
// 2021): K models of one architecture, each with its own weights, trained as one module whose
// operators are the K models' operators made K times wider. K linears are one batched matmul
// (torch::baddbmm over [K, N, in]), K conv2d one grouped conv2d (groups = K × the original
// groups, inputs [N, K·C, H, W]), K BatchNorm2d one BatchNorm over K·C channels (each trial's
// channels keep their own batch statistics and running statistics), K dropouts each trial's own
// draw from its own generator (or one draw for all, the cheaper form); activations and pooling are
// unchanged. K LSTMs stay K recurrences (each trial's own at::lstm call, below); K LayerNorms are
// one normalisation with each trial's own weight and bias; K self-attentions one batched matmul
// over [K, N, heads, T, ·]. Internal to trainer/: includes torch.
//
// Fused forms exist for mlp, convnet, cifar_cnn (trainer/models/simple.h), resnet18/34/50
// (trainer/models/resnet.h: a residual block's shortcut, and its downsample branch, are ops of
// the program too), lstm and transformer with either preset, bert_base included
// (trainer/models/sequence.h: an encoder layer's two residual branches are kept as ResNet's
// shortcut is). Each trial's
// weights come from its own zoo model (built as its unfused job builds it: seeded, on the CPU)
// and go back into a zoo model the same way (Unfuse), so every trial saves and evaluates as a
// plain zoo model does.
//
// On the CPU each trial's linears and LayerNorms run as their own calls (stacked into [K, ...]),
// with the strides its unfused layer gives them, so that fused trials compute what their
// unfused jobs compute bit for bit whatever kernel the BLAS picks. On CUDA and MPS they are
// batched matmuls (torch::baddbmm), the same arithmetic up to rounding. The LSTM's recurrence is
// each trial's own at::lstm call on every device (cuDNN's kernel on CUDA): K cells stepped as
// batched matmuls ran 2.7× slower than K cuDNN LSTMs on an H100.
//
// Thread-safety: none; a FusedModel belongs to the loop that trains it.
#ifndef MPSD_TRAINER_FUSED_MODELS_H_
#define MPSD_TRAINER_FUSED_MODELS_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/models.h"

namespace mpsd::trainer {

// Whether the zoo model `name` has a fused form here.
bool HasFusedForm(absl::string_view name);

// The zoo models with a fused form, comma-separated (for messages).
std::string FusedModelNames();

class FusedModel {
 public:
  // Stacks the parameters and buffers of `models` (K >= 1 zoo models named `name`, built for
  // the same ModelConfig up to dropout; borrowed only during the call) into fused tensors on
  // `device`, each trial's slice a copy of its model's tensor. Each trial's dropout
  // probabilities are read from its model's Dropout / Dropout2d modules. INVALID_ARGUMENT for a
  // model without a fused form or models whose tensors do not match in shape.
  static absl::StatusOr<std::unique_ptr<FusedModel>> Create(
      absl::string_view name, const std::vector<std::shared_ptr<ClassifierImpl>>& models,
      const torch::Device& device);

  // The training forward pass of the K trials: inputs [K, N, ...input shape] float32 (trial k's
  // batch at [k]) → logits [K, N, num_classes] float32. Trial k's dropout is drawn from
  // generators[k] exactly as its unfused model's at::dropout draws from the default generator,
  // in its forward's order (the transformer's: embeddings, then per layer the attention
  // probabilities [N, heads, T, T], the attention branch, the feed-forward branch): on CUDA, for
  // 0 < p < 1, the fused dropout kernel over trial k's [N, ...] slice (at::_fused_dropout, the
  // kernel at::native_dropout runs); otherwise, and for dropout2d's per-channel noise
  // [N, C, 1, 1], bernoulli_(1 − p) noise divided by 1 − p; nothing when p is 0. So with
  // generators[k] in the state the unfused job's default generator would be in, the masks are
  // the same (the attention's only where the unfused layer spells its dropout out, LibTorch
  // 1.13; LibTorch 2's scaled_dot_product_attention draws its own). Generators of the inputs'
  // device; on CUDA inside a graph capture they must be registered with the graph
  // (compat::CudaGraph::Capture). BatchNorm runs in training mode (batch statistics, running
  // statistics updated). Throws c10::Error for LibTorch failures.
  torch::Tensor Forward(const torch::Tensor& inputs, std::vector<at::Generator>& generators);

  // The same forward pass with every trial's dropout masks drawn in one kernel per layer from
  // `generator` (the batched step, trainer/fused_step.h: on CUDA the device's default generator,
  // which a CUDA graph advances per replay): keep ~ Bernoulli(1 − p_k) over the whole [K, N, F]
  // (dropout; [K, N, T, h] and the attention probabilities [K, N, heads, T, T] alike) or
  // [N, K, C] (dropout2d's per-channel noise) activation, each trial's 1 − p_k read
  // from a [K] float32 tensor made on the device at Create, divided by 1 − p_k; no mask at all
  // when every trial's p is 0. Same distribution as Forward's, other numbers. Allocates and
  // copies nothing from the host (capturable). Throws c10::Error for LibTorch failures.
  torch::Tensor Forward(const torch::Tensor& inputs, at::Generator& generator);

  // The fused buffers (BatchNorm's running statistics and counts), to snapshot around a warm-up.
  const std::vector<torch::Tensor>& buffers() const { return buffers_; }

  // The fused parameters, leaves with requires_grad: each one's dim 0 is trial-major, so
  // view({K, -1})[k] is trial k's tensor flattened (the fused optimizer's layout).
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }

  // Copies trial k's slice of every fused parameter and buffer into `model` (a zoo model of the
  // same name and shapes, e.g. one Create was given), outside autograd.
  void Unfuse(int k, ClassifierImpl& model) const;

  int trials() const { return trials_; }

 private:
  // One operator of the fused program, applied in order.
  struct Op {
    enum class Kind {
      kConv2d,
      kBatchNorm2d,
      kRelu,
      kMaxPool2d,
      kDropout,
      kDropout2d,
      kFlatten,
      kLinear,
      kSave,       // keep x as the shortcut of a residual block (or encoder layer branch)
      kAddSaved,   // x + the shortcut
      kAvgPool,    // adaptive average pool to 1×1
      kSequence,   // [K, N, C, H, W] images → [K, N, T = H, F = C·W] rows (AsSequence)
      kLstm,       // [K, N, T, F] → the top layer's hidden state after the last step, [K, N, H]
      kPositions,  // x [K, N, T, h] + the position embedding of steps 0 … T − 1
      kLayerNorm,  // over the last dimension, each trial's weight and bias
      kAttention,  // a TransformerEncoderLayer's self-attention, [K, N, T, h] → [K, N, T, h]
      kGelu,
      kMeanSteps  // [K, N, T, h] → [K, N, h]
    };
    Kind kind = Kind::kRelu;
    // kConv2d, kLinear, kBatchNorm2d, kLayerNorm: the weight's index in parameters_, the bias's
    // (-1: none); kPositions: the embedding's; kBatchNorm2d: running_mean's index in buffers_
    // (running_var, num_batches_tracked next).
    int weight = -1;
    int bias = -1;
    int running = -1;
    // kLstm: per layer weight_ih, weight_hh, bias_ih, bias_hh; kAttention: in_proj's weight and
    // bias, out_proj's weight and bias. Indices in parameters_.
    std::vector<int> tensors;
    int64_t heads = 1;    // kAttention
    int64_t padding = 0;  // kConv2d (dilation 1, groups 1 unfused: the zoo's), kMaxPool2d
    int64_t stride = 1;   // kConv2d, kMaxPool2d
    int64_t kernel = 2;   // kMaxPool2d
    // kConv2d, kBatchNorm2d: applied to the shortcut instead of x (a downsample branch).
    bool on_saved = false;
    double momentum = 0.1;  // kBatchNorm2d, BatchNorm2dOptions' defaults
    double eps = 1e-5;      // kBatchNorm2d; kLayerNorm: the zoo LayerNorm's
    // kDropout, kDropout2d, kAttention (on the probabilities): each trial's probability.
    std::vector<double> p;
    torch::Tensor keep;  // kDropout, kDropout2d, kAttention: [K] float32 on the device, 1 − p
  };
  // Forward's body; `dropout(op, x)` returns `x` through op's dropout (x itself: none).
  torch::Tensor Run(const torch::Tensor& inputs,
                    const std::function<torch::Tensor(const Op&, const torch::Tensor&)>& dropout);
  FusedModel() = default;

  int trials_ = 0;
  std::vector<Op> ops_;
  // The fused tensors, each [K, ...] or [K·C, ...] trial-major, and the zoo model's name of each
  // (e.g. "conv1.weight"). BatchNorm's num_batches_tracked is [K] int64.
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> buffers_;
  std::vector<std::string> parameter_names_;
  std::vector<std::string> buffer_names_;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_FUSED_MODELS_H_
