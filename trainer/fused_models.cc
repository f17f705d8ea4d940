// The fused forms of mlp, convnet, cifar_cnn, resnet18/34/50, lstm and transformer (bert_base):
// each architecture as a program of fused operators over the zoo model's parameter names
// (trainer/models/simple.cc, resnet.cc and sequence.cc register them so).
#include "trainer/fused_models.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/compat/attention.h"
#include "trainer/compat/autocast.h"
#include "trainer/models/resnet.h"
#include "trainer/models/sequence.h"

namespace mpsd::trainer {
namespace {

namespace F = torch::nn::functional;

// One operator of an architecture's program before its tensors are looked up.
struct OpSpec {
  enum Kind {
    kConv,
    kConvNoBias,
    kBatchNorm,
    kRelu,
    kMaxPool,
    kDropout,
    kDropout2d,
    kFlatten,
    kLinear,
    kSave,          // the shortcut: a residual block's input, kept for kAddSaved
    kAddSaved,      // x + the shortcut
    kAvgPool,       // adaptive average pool to 1×1
    kSequence,      // images → sequences of rows
    kLstm,          // the torch::nn::LSTM `prefix`, all its layers
    kPositions,     // + the Embedding `prefix`'s rows 0 … T − 1
    kLayerNorm,     // the LayerNorm `prefix`
    kLayerDropout,  // a dropout with the probability of the TransformerEncoderLayer `prefix`
    kAttention,     // the self-attention of the TransformerEncoderLayer `prefix`
    kGelu,
    kMeanSteps  // mean over the steps
  };
  Kind kind;
  std::string prefix;  // the module's name in the zoo model ("conv1", "features.0")
  int64_t padding = 0;
  int64_t stride = 0;     // kConv* (0: 1), kMaxPool (0: the pool's kernel)
  int64_t kernel = 2;     // kMaxPool
  bool on_saved = false;  // kConv*, kBatchNorm: applied to the shortcut (a downsample branch)
};

// torchvision's ResNet (trainer/models/resnet.h), block by block: the residual blocks' shortcut
// is kept by kSave, transformed by the downsample branch's ops (on_saved) and added back.
std::vector<OpSpec> ResNetProgram(const ResNetDepth& depth) {
  using K = OpSpec;
  std::vector<OpSpec> ops = {{K::kConvNoBias, "conv1", 3, 2},
                             {K::kBatchNorm, "bn1"},
                             {K::kRelu, ""},
                             {K::kMaxPool, "", 1, 2, 3}};
  for (const ResNetBlockPlan& block : PlanResNetBlocks(depth)) {
    const std::string prefix = absl::StrCat("layer", block.stage + 1, ".", block.index, ".");
    ops.push_back({K::kSave, ""});
    if (depth.bottleneck) {  // v1.5: the stride on the 3×3 convolution
      ops.push_back({K::kConvNoBias, prefix + "conv1", 0, 1});
      ops.push_back({K::kBatchNorm, prefix + "bn1"});
      ops.push_back({K::kRelu, ""});
      ops.push_back({K::kConvNoBias, prefix + "conv2", 1, block.stride});
      ops.push_back({K::kBatchNorm, prefix + "bn2"});
      ops.push_back({K::kRelu, ""});
      ops.push_back({K::kConvNoBias, prefix + "conv3", 0, 1});
      ops.push_back({K::kBatchNorm, prefix + "bn3"});
    } else {
      ops.push_back({K::kConvNoBias, prefix + "conv1", 1, block.stride});
      ops.push_back({K::kBatchNorm, prefix + "bn1"});
      ops.push_back({K::kRelu, ""});
      ops.push_back({K::kConvNoBias, prefix + "conv2", 1, 1});
      ops.push_back({K::kBatchNorm, prefix + "bn2"});
    }
    if (block.downsample) {
      ops.push_back({K::kConvNoBias, prefix + "downsample.0", 0, block.stride, 2, true});
      ops.push_back({K::kBatchNorm, prefix + "downsample.1", 0, 1, 2, true});
    }
    ops.push_back({K::kAddSaved, ""});
    ops.push_back({K::kRelu, ""});
  }
  ops.push_back({K::kAvgPool, ""});
  ops.push_back({K::kFlatten, ""});
  ops.push_back({K::kLinear, "fc"});
  return ops;
}

// The submodule `name` of `model` as a `ModuleType`; nullptr when there is none (or another).
template <typename ModuleType>
ModuleType* FindModule(torch::nn::Module& model, const std::string& name) {
  const torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>> modules =
      model.named_modules(/*name_prefix=*/"", /*include_self=*/false);
  const std::shared_ptr<torch::nn::Module>* module = modules.find(name);
  return module == nullptr ? nullptr : (*module)->as<ModuleType>();
}

// The Transformer encoder classifier (TransformerClassifierImpl::forward): the embedding block,
// then each TransformerEncoderLayer's two residual branches, x = LayerNorm(x + branch(x)), kept
// as a residual block's shortcut is, their dropouts in the order the layer draws them (the
// attention probabilities inside kAttention, then the attention branch, then the feed-forward
// branch), then the mean over the steps and the classifier.
std::vector<OpSpec> TransformerProgram(torch::nn::Module& model) {
  using K = OpSpec;
  std::vector<OpSpec> ops = {{K::kSequence, ""},
                             {K::kLinear, "input_proj"},
                             {K::kPositions, "positions"},
                             {K::kLayerNorm, "norm"},
                             {K::kDropout, ""}};
  for (int i = 0;; ++i) {
    const std::string layer = absl::StrCat("layers.", i);
    if (FindModule<TransformerEncoderLayerImpl>(model, layer) == nullptr) break;
    ops.insert(ops.end(), {{K::kSave, ""},
                           {K::kAttention, layer},
                           {K::kLayerDropout, layer},
                           {K::kAddSaved, ""},
                           {K::kLayerNorm, layer + ".norm1"},
                           {K::kSave, ""},
                           {K::kLinear, layer + ".linear1"},
                           {K::kGelu, ""},
                           {K::kLinear, layer + ".linear2"},
                           {K::kLayerDropout, layer},
                           {K::kAddSaved, ""},
                           {K::kLayerNorm, layer + ".norm2"}});
  }
  ops.push_back({K::kMeanSteps, ""});
  ops.push_back({K::kLinear, "classifier"});
  return ops;
}

// The zoo models with a fused form, for messages and HasFusedForm.
constexpr const char* kFusedModels[] = {"mlp",      "convnet",     "cifar_cnn",
                                        "resnet18", "resnet34",    "resnet50",
                                        "lstm",     "transformer", "bert_base"};

// The programs, in the order each zoo model's forward runs its modules; `model` (one of the
// trials' zoo models) tells the transformer's layer count. Each dropout's probability is taken
// from the built model (ModelSpec.dropout or the architecture's default).
std::vector<OpSpec> Program(absl::string_view name, torch::nn::Module& model) {
  using K = OpSpec;
  if (name == "lstm") return {{K::kSequence, ""}, {K::kLstm, "lstm"}, {K::kLinear, "fc"}};
  if (name == "transformer" || name == "bert_base") return TransformerProgram(model);
  if (name == "mlp") {  // layers: Flatten, Linear, ReLU, Dropout, Linear, ReLU, Dropout, Linear
    return {{K::kFlatten, "", 0}, {K::kLinear, "layers.1", 0}, {K::kRelu, "", 0},
            {K::kDropout, "", 0}, {K::kLinear, "layers.4", 0}, {K::kRelu, "", 0},
            {K::kDropout, "", 0}, {K::kLinear, "layers.7", 0}};
  }
  if (name == "convnet") {
    // As ConvNetImpl::forward: the second ReLU after the max-pool.
    return {{K::kConv, "conv1", 0}, {K::kRelu, "", 0},      {K::kConv, "conv2", 0},
            {K::kMaxPool, "", 0},   {K::kRelu, "", 0},      {K::kDropout2d, "", 0},
            {K::kFlatten, "", 0},   {K::kLinear, "fc1", 0}, {K::kRelu, "", 0},
            {K::kDropout, "", 0},   {K::kLinear, "fc2", 0}};
  }
  if (name == "cifar_cnn") {
    std::vector<OpSpec> ops;
    for (int block = 0; block < 3; ++block) {
      for (int conv = 0; conv < 2; ++conv) {
        const int index = block * 7 + conv * 3;
        ops.push_back({K::kConvNoBias, absl::StrCat("features.", index), 1});
        ops.push_back({K::kBatchNorm, absl::StrCat("features.", index + 1), 0});
        ops.push_back({K::kRelu, "", 0});
      }
      ops.push_back({K::kMaxPool, "", 0});
    }
    ops.push_back({K::kFlatten, "", 0});
    ops.push_back({K::kLinear, "classifier.1", 0});
    ops.push_back({K::kRelu, "", 0});
    ops.push_back({K::kDropout, "", 0});
    ops.push_back({K::kLinear, "classifier.4", 0});
    return ops;
  }
  if (const ResNetDepth* depth = FindResNetDepth(name)) return ResNetProgram(*depth);
  return {};
}

// Each dropout module's probability, in registration order (= the forward's order in these
// models).
std::vector<double> DropoutProbabilities(ClassifierImpl& model) {
  std::vector<double> p;
  for (const std::shared_ptr<torch::nn::Module>& module : model.modules(/*include_self=*/false)) {
    if (const auto* dropout = module->as<torch::nn::Dropout>()) {
      p.push_back(dropout->options.p());
    } else if (const auto* dropout2d = module->as<torch::nn::Dropout2d>()) {
      p.push_back(dropout2d->options.p());
    }
  }
  return p;
}

// Trial k's masks for an activation of `shape` (the unfused activation's: [N, F] for dropout,
// [N, C, 1, 1] for dropout2d's feature noise), as ATen's _dropout_impl draws them: bernoulli_(1 −
// p) from the generator, then divided by 1 − p; ones for p = 0 (no draw, as dropout returns its
// input then).
torch::Tensor Noise(at::IntArrayRef shape, double p, at::Generator& generator,
                    const torch::TensorOptions& options) {
  if (p == 0) return torch::ones(shape, options);
  torch::Tensor noise = torch::empty(shape, options);
  noise.bernoulli_(1 - p, generator);
  return noise.div_(1 - p);
}

// torch::stack of trial(k) for k = 0 … trials − 1: on the CPU each trial's own call, the very
// call its unfused layer makes, stacked into [K, ...].
torch::Tensor StackTrials(int64_t trials, const std::function<torch::Tensor(int64_t)>& trial) {
  std::vector<torch::Tensor> outputs;
  outputs.reserve(static_cast<size_t>(trials));
  for (int64_t k = 0; k < trials; ++k) outputs.push_back(trial(k));
  return torch::stack(outputs);
}

// A fused linear for one forward pass: weight [K, out, in], bias [K, out]; on the CPU each
// trial's slices, selected once (autograd then sums a trial's gradients over the uses in its
// slice alone, as the unfused layer does, instead of adding a whole [K, out, in] gradient per
// use).
class TrialLinear {
 public:
  TrialLinear(const torch::Tensor& weight, const torch::Tensor& bias)
      : weight_(weight), bias_(bias) {
    if (!weight.is_cpu()) return;
    for (int64_t k = 0; k < weight.size(0); ++k) {
      weights_.push_back(weight[k]);
      biases_.push_back(bias[k]);
    }
  }

  // x [K, ..., in] → [K, ..., out]: each trial's linear.
  torch::Tensor operator()(const torch::Tensor& x) const {
    if (x.is_cpu()) {
      // Each trial's own F::linear (addmm), stacked: on the CPU a batched matmul is a loop
      // of GEMMs anyway, and the very call the unfused layer makes keeps fused and unfused
      // bit-identical whatever kernel the BLAS picks (OpenBLAS's Haswell kernels, which it
      // picks on AVX2 CPUs and on AMD Zen 5, sum baddbmm's batches otherwise than addmm).
      // x[k] keeps the strides the caller gives it: they pick linear's path (addmm, or matmul
      // and a separate bias add) as they do for the unfused layer.
      return StackTrials(static_cast<int64_t>(weights_.size()), [&](int64_t k) {
        return torch::nn::functional::linear(x[k], weights_[k], biases_[k]);
      });
    }
    // x [K, M, in] @ weightᵀ [K, in, out] + bias [K, 1, out]: each trial's F::linear.
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = weight_.size(1);
    return torch::baddbmm(bias_.unsqueeze(1), x.reshape({x.size(0), -1, x.size(-1)}),
                          weight_.transpose(1, 2))
        .view(sizes);
  }

 private:
  torch::Tensor weight_;
  torch::Tensor bias_;
  std::vector<torch::Tensor> weights_;  // the CPU's slices
  std::vector<torch::Tensor> biases_;
};

// Each trial's LayerNorm over the last dimension of x [K, ..., h] (weight, bias [K, h]).
torch::Tensor TrialLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps) {
  const int64_t hidden = x.size(-1);
  if (x.is_cpu()) {
    // Each trial's own layer_norm, whose kernel applies the weight and bias and sums their
    // gradients over the rows itself: the unfused layer's arithmetic exactly.
    return StackTrials(x.size(0), [&](int64_t k) {
      return torch::layer_norm(x[k], {hidden}, weight[k], bias[k], eps);
    });
  }
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape.front() = x.size(0);
  shape.back() = hidden;
  return torch::addcmul(bias.view(shape), torch::layer_norm(x, {hidden}, {}, {}, eps),
                        weight.view(shape));
}

// x [K, N, T, h] + each trial's position embedding (weight [K, positions, h]) of steps 0 … T − 1.
torch::Tensor AddPositions(const torch::Tensor& x, const torch::Tensor& weight) {
  const torch::Tensor steps =
      torch::arange(x.size(2), torch::TensorOptions().dtype(torch::kInt64).device(x.device()));
  if (x.is_cpu()) {
    // As the unfused model's input_proj(x) + positions(steps), trial by trial: the
    // embedding's gradient summed over the batch as its unfused job sums it.
    return StackTrials(x.size(0),
                       [&](int64_t k) { return x[k] + torch::embedding(weight[k], steps); });
  }
  return x + weight.index_select(/*dim=*/1, steps).unsqueeze(1);
}

// torch::nn::LSTM's layers (batch first, zero initial state, no dropout between layers) over
// x [K, N, T, F] for each trial; `w` holds per layer weight_ih [K, 4H, F], weight_hh [K, 4H, H],
// bias_ih, bias_hh [K, 4H]. Returns the top layer's hidden state after the last step, [K, N, H].
// Each trial's recurrence is the very call its unfused nn::LSTM makes (at::lstm over its own
// slices of the weights: cuDNN's fused kernel on CUDA, ATen's cell loop on the CPU), so fused
// trials compute their unfused numbers. Under autocast with its cache (bf16, eager) each trial's
// slices are cast once here: autocast's cache casts the unfused layer's weights (leaves) once
// per forward, but a slice (a view) afresh at every use, and on the CPU at::lstm's steps are
// separate uses, so that the recurrent weights' gradients would be summed over the steps in
// float32 instead of bf16 as unfused. Stepping the K trials' cells together as batched matmuls was
// measured and dropped: on an H100, 4 trials' 2 × 28 steps ran 2.7× slower than 4 cuDNN LSTMs one
// after another, and on a 2-core CPU 0.8× (tests/perf/SWEEP_RESULTS.md). What fusing still batches
// here is everything around the recurrence: the rest of the model, the loss, the optimizer.
torch::Tensor Lstm(const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
  const int64_t layers = static_cast<int64_t>(w.size() / 4);
  TORCH_CHECK(layers > 0 && static_cast<int64_t>(w.size()) == layers * 4,
              "FusedModel: lstm needs 4 tensors per layer, got ", w.size());
  const int64_t hidden = w[1].size(2);
  // nn::LSTM's default initial state: zeros [layers, N, H].
  const torch::Tensor zeros = torch::zeros({layers, x.size(1), hidden}, x.options());
  const std::optional<c10::ScalarType> cast = compat::CachedAutocastDtype(x.device().type());
  return StackTrials(x.size(0), [&](int64_t k) {
    std::vector<torch::Tensor> params;
    params.reserve(w.size());
    for (const torch::Tensor& tensor : w) {
      params.push_back(cast.has_value() ? tensor[k].to(*cast) : tensor[k]);
    }
    const auto outputs = at::lstm(x[k], {zeros, zeros}, params, /*has_biases=*/true, layers,
                                  /*dropout=*/0.0, /*train=*/true, /*bidirectional=*/false,
                                  /*batch_first=*/true);
    return std::get<1>(outputs).select(/*dim=*/0, /*index=*/layers - 1);
  });
}

// A TransformerEncoderLayer's self-attention (TransformerEncoderLayerImpl::forward with
// compat::ScaledDotProductAttention as LibTorch 1.13 has it) over x [K, N, T, h] for each trial:
// the fused q/k/v projection, softmax(q·kᵀ/√d) per trial and head, through
// `dropout(probabilities)` when `drops`, then ·v and the output projection.
torch::Tensor Attention(const torch::Tensor& x, const TrialLinear& in_proj,
                        const TrialLinear& out_proj, int64_t heads, bool drops,
                        const std::function<torch::Tensor(const torch::Tensor&)>& dropout) {
  const int64_t k_trials = x.size(0);
  const int64_t n = x.size(1);
  const int64_t steps = x.size(2);
  const int64_t hidden = x.size(3);
  // [K, N, T, 3 × hidden] → [3, K, N, heads, T, head size]: q, k, v.
  const torch::Tensor qkv =
      in_proj(x).view({k_trials, n, steps, 3, heads, hidden / heads}).permute({3, 0, 1, 4, 2, 5});
  torch::Tensor attention;
  if (drops) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(hidden / heads));
    torch::Tensor probabilities = torch::softmax(
        torch::matmul(qkv[0], qkv[1].transpose(/*dim0=*/-2, /*dim1=*/-1)) * scale, /*dim=*/-1);
    probabilities = dropout(probabilities);
    attention = torch::matmul(probabilities, qkv[2]);
  } else {
    // [K·N, heads, T, head size]: the shape LibTorch 2's fused attention kernels take.
    attention = compat::ScaledDotProductAttention(qkv[0].flatten(0, 1), qkv[1].flatten(0, 1),
                                                  qkv[2].flatten(0, 1), /*dropout_p=*/0)
                    .view({k_trials, n, heads, steps, hidden / heads});
  }
  return out_proj(
      attention.transpose(/*dim0=*/2, /*dim1=*/3).reshape({k_trials, n, steps, hidden}));
}

}  // namespace

bool HasFusedForm(absl::string_view name) {
  return std::find(std::begin(kFusedModels), std::end(kFusedModels), name) !=
         std::end(kFusedModels);
}

std::string FusedModelNames() { return absl::StrJoin(kFusedModels, ", "); }

absl::StatusOr<std::unique_ptr<FusedModel>> FusedModel::Create(
    absl::string_view name, const std::vector<std::shared_ptr<ClassifierImpl>>& models,
    const torch::Device& device) {
  if (!HasFusedForm(name)) {
    return absl::InvalidArgumentError(absl::StrCat("model ", name, " has no fused form yet"));
  }
  if (models.empty()) return absl::InvalidArgumentError("no model to fuse");
  const std::vector<OpSpec> program = Program(name, *models.front());
  torch::NoGradGuard no_grad;
  auto fused = std::unique_ptr<FusedModel>(new FusedModel());
  const int trials = static_cast<int>(models.size());
  fused->trials_ = trials;
  std::vector<std::vector<double>> dropout;  // [trial][layer]
  for (const auto& model : models) dropout.push_back(DropoutProbabilities(*model));

  // The trials' tensors of one name, checked to agree in shape.
  const auto gather = [&](const std::string& tensor_name,
                          bool buffer) -> absl::StatusOr<std::vector<torch::Tensor>> {
    std::vector<torch::Tensor> tensors;
    for (const auto& model : models) {
      const torch::OrderedDict<std::string, torch::Tensor> dict =
          buffer ? model->named_buffers() : model->named_parameters();
      const torch::Tensor* tensor = dict.find(tensor_name);
      if (tensor == nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "model %s: no %s %s to fuse", name, buffer ? "buffer" : "parameter", tensor_name));
      }
      if (!tensors.empty() && !tensors.front().sizes().equals(tensor->sizes())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("model %s: the trials' %s differ in shape", name, tensor_name));
      }
      tensors.push_back(tensor->detach().to(torch::kCPU));
    }
    return tensors;
  };
  // Adds a fused parameter: `stack` [K, ...] (linear), else concatenated along dim 0 (conv, norm).
  const auto add_parameter = [&](const std::string& tensor_name,
                                 bool stack) -> absl::StatusOr<int> {
    absl::StatusOr<std::vector<torch::Tensor>> tensors = gather(tensor_name, false);
    if (!tensors.ok()) return tensors.status();
    torch::Tensor joined = stack ? torch::stack(*tensors) : torch::cat(*tensors);
    fused->parameters_.push_back(joined.to(device).contiguous().set_requires_grad(true));
    fused->parameter_names_.push_back(tensor_name);
    return static_cast<int>(fused->parameters_.size()) - 1;
  };
  const auto add_buffer = [&](const std::string& tensor_name, bool stack) -> absl::StatusOr<int> {
    absl::StatusOr<std::vector<torch::Tensor>> tensors = gather(tensor_name, true);
    if (!tensors.ok()) return tensors.status();
    torch::Tensor joined = stack ? torch::stack(*tensors) : torch::cat(*tensors);
    fused->buffers_.push_back(joined.to(device).contiguous());
    fused->buffer_names_.push_back(tensor_name);
    return static_cast<int>(fused->buffers_.size()) - 1;
  };

  // `prefix`.weight and `prefix`.bias (in that order) as op.weight and op.bias.
  const auto add_weight_and_bias = [&](Op& op, const std::string& prefix,
                                       bool stack) -> absl::Status {
    absl::StatusOr<int> weight = add_parameter(prefix + ".weight", stack);
    if (!weight.ok()) return weight.status();
    absl::StatusOr<int> bias = add_parameter(prefix + ".bias", stack);
    if (!bias.ok()) return bias.status();
    op.weight = *weight;
    op.bias = *bias;
    return absl::OkStatus();
  };
  // Each trial's dropout probability on `op`, and 1 − p on the device.
  const auto set_dropout = [&](Op& op, std::vector<double> p) {
    std::vector<float> keep;
    for (const double each : p) keep.push_back(static_cast<float>(1 - each));
    op.p = std::move(p);
    op.keep = torch::tensor(keep, torch::kFloat32).to(device);
  };
  // Each trial's TransformerEncoderLayer `prefix`'s dropout probability.
  const auto layer_dropout = [&](const std::string& prefix) -> absl::StatusOr<std::vector<double>> {
    std::vector<double> p;
    for (const auto& model : models) {
      const auto* layer = FindModule<TransformerEncoderLayerImpl>(*model, prefix);
      if (layer == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrFormat("model %s: no encoder layer %s to fuse", name, prefix));
      }
      p.push_back(layer->dropout());
    }
    return p;
  };

  size_t dropout_layer = 0;
  for (const OpSpec& spec : program) {
    Op op;
    switch (spec.kind) {
      case OpSpec::kConv:
      case OpSpec::kConvNoBias: {
        op.kind = Op::Kind::kConv2d;
        op.padding = spec.padding;
        op.stride = spec.stride == 0 ? 1 : spec.stride;
        op.on_saved = spec.on_saved;
        absl::StatusOr<int> weight = add_parameter(spec.prefix + ".weight", /*stack=*/false);
        if (!weight.ok()) return weight.status();
        op.weight = *weight;
        if (spec.kind == OpSpec::kConv) {
          absl::StatusOr<int> bias = add_parameter(spec.prefix + ".bias", /*stack=*/false);
          if (!bias.ok()) return bias.status();
          op.bias = *bias;
        }
        break;
      }
      case OpSpec::kBatchNorm: {
        op.kind = Op::Kind::kBatchNorm2d;
        op.on_saved = spec.on_saved;
        if (absl::Status added = add_weight_and_bias(op, spec.prefix, /*stack=*/false);
            !added.ok()) {
          return added;
        }
        absl::StatusOr<int> mean = add_buffer(spec.prefix + ".running_mean", /*stack=*/false);
        if (!mean.ok()) return mean.status();
        absl::StatusOr<int> var = add_buffer(spec.prefix + ".running_var", /*stack=*/false);
        if (!var.ok()) return var.status();
        absl::StatusOr<int> tracked =
            add_buffer(spec.prefix + ".num_batches_tracked", /*stack=*/true);
        if (!tracked.ok()) return tracked.status();
        op.running = *mean;
        break;
      }
      case OpSpec::kLinear: {
        op.kind = Op::Kind::kLinear;
        if (absl::Status added = add_weight_and_bias(op, spec.prefix, /*stack=*/true);
            !added.ok()) {
          return added;
        }
        break;
      }
      case OpSpec::kRelu:
        op.kind = Op::Kind::kRelu;
        break;
      case OpSpec::kMaxPool:
        op.kind = Op::Kind::kMaxPool2d;
        op.kernel = spec.kernel;
        op.stride = spec.stride == 0 ? spec.kernel : spec.stride;
        op.padding = spec.padding;
        break;
      case OpSpec::kSave:
        op.kind = Op::Kind::kSave;
        break;
      case OpSpec::kAddSaved:
        op.kind = Op::Kind::kAddSaved;
        break;
      case OpSpec::kAvgPool:
        op.kind = Op::Kind::kAvgPool;
        break;
      case OpSpec::kFlatten:
        op.kind = Op::Kind::kFlatten;
        break;
      case OpSpec::kDropout:
      case OpSpec::kDropout2d: {
        op.kind = spec.kind == OpSpec::kDropout ? Op::Kind::kDropout : Op::Kind::kDropout2d;
        std::vector<double> p;
        for (int k = 0; k < trials; ++k) {
          if (dropout_layer >= dropout[k].size()) {
            return absl::InvalidArgumentError(
                absl::StrFormat("model %s: trial %d has fewer dropout layers", name, k));
          }
          p.push_back(dropout[k][dropout_layer]);
        }
        set_dropout(op, std::move(p));
        ++dropout_layer;
        break;
      }
      case OpSpec::kSequence:
        op.kind = Op::Kind::kSequence;
        break;
      case OpSpec::kLstm: {
        op.kind = Op::Kind::kLstm;
        // torch::nn::LSTM's parameters, layer by layer (weight_ih_l0, weight_hh_l0, bias_ih_l0,
        // bias_hh_l0, weight_ih_l1, ...).
        const torch::OrderedDict<std::string, torch::Tensor> named =
            models.front()->named_parameters();
        for (int layer = 0; named.contains(absl::StrCat(spec.prefix, ".weight_ih_l", layer));
             ++layer) {
          for (const char* tensor : {"weight_ih_l", "weight_hh_l", "bias_ih_l", "bias_hh_l"}) {
            absl::StatusOr<int> index =
                add_parameter(absl::StrCat(spec.prefix, ".", tensor, layer), /*stack=*/true);
            if (!index.ok()) return index.status();
            op.tensors.push_back(*index);
          }
        }
        break;
      }
      case OpSpec::kPositions: {
        op.kind = Op::Kind::kPositions;
        absl::StatusOr<int> weight = add_parameter(spec.prefix + ".weight", /*stack=*/true);
        if (!weight.ok()) return weight.status();
        op.weight = *weight;
        break;
      }
      case OpSpec::kLayerNorm: {
        op.kind = Op::Kind::kLayerNorm;
        const auto* norm = FindModule<torch::nn::LayerNormImpl>(*models.front(), spec.prefix);
        if (norm == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrFormat("model %s: no LayerNorm %s to fuse", name, spec.prefix));
        }
        op.eps = norm->options.eps();
        if (absl::Status added = add_weight_and_bias(op, spec.prefix, /*stack=*/true);
            !added.ok()) {
          return added;
        }
        break;
      }
      case OpSpec::kLayerDropout:
      case OpSpec::kAttention: {
        absl::StatusOr<std::vector<double>> p = layer_dropout(spec.prefix);
        if (!p.ok()) return p.status();
        set_dropout(op, *std::move(p));
        if (spec.kind == OpSpec::kLayerDropout) {
          op.kind = Op::Kind::kDropout;
          break;
        }
        op.kind = Op::Kind::kAttention;
        op.heads = FindModule<TransformerEncoderLayerImpl>(*models.front(), spec.prefix)->heads();
        for (const auto& model : models) {
          if (FindModule<TransformerEncoderLayerImpl>(*model, spec.prefix)->heads() != op.heads) {
            return absl::InvalidArgumentError(
                absl::StrFormat("model %s: the trials' %s differ in heads", name, spec.prefix));
          }
        }
        for (const char* tensor :
             {".in_proj.weight", ".in_proj.bias", ".out_proj.weight", ".out_proj.bias"}) {
          absl::StatusOr<int> index = add_parameter(spec.prefix + tensor, /*stack=*/true);
          if (!index.ok()) return index.status();
          op.tensors.push_back(*index);
        }
        break;
      }
      case OpSpec::kGelu:
        op.kind = Op::Kind::kGelu;
        break;
      case OpSpec::kMeanSteps:
        op.kind = Op::Kind::kMeanSteps;
        break;
    }
    fused->ops_.push_back(std::move(op));
  }
  // Every tensor of the zoo model must be in the program, or Unfuse would leave one behind.
  const size_t parameters = models.front()->named_parameters().size();
  const size_t buffers = models.front()->named_buffers().size();
  if (parameters != fused->parameters_.size() || buffers != fused->buffers_.size()) {
    return absl::InternalError(absl::StrFormat(
        "model %s: the fused program covers %d of %d parameters and %d of %d buffers", name,
        fused->parameters_.size(), parameters, fused->buffers_.size(), buffers));
  }
  return fused;
}

torch::Tensor FusedModel::Forward(const torch::Tensor& inputs,
                                  std::vector<at::Generator>& generators) {
  TORCH_CHECK(static_cast<int>(generators.size()) == trials_, "FusedModel: ", trials_,
              " generators needed");
  const int64_t n = inputs.dim() >= 2 ? inputs.size(1) : 0;
  return Run(inputs, [&](const Op& op, const torch::Tensor& x) {
    if (std::all_of(op.p.begin(), op.p.end(), [](double p) { return p == 0; })) return x;
    if (op.kind == Op::Kind::kDropout2d) {
      // x [N, K·C, H, W]: each trial's feature noise [N, C, 1, 1] as at::feature_dropout draws
      // it (a bernoulli_ on every device).
      const int64_t channels = x.size(1) / trials_;
      std::vector<torch::Tensor> noise;
      for (int k = 0; k < trials_; ++k) {
        noise.push_back(Noise({n, channels, 1, 1}, op.p[k], generators[k], x.options()));
      }
      return x * torch::cat(noise, /*dim=*/1);
    }
    // x [K, N, ...]: each trial's slice [N, ...] dropped as at::dropout drops its unfused
    // activation. On CUDA (0 < p < 1) that is the fused dropout kernel (at::native_dropout, which
    // draws from the default generator only; at::_fused_dropout is the same kernel, given a
    // generator and the keep probability); elsewhere bernoulli_(1 − p) noise.
    return StackTrials(trials_, [&](int64_t k) -> torch::Tensor {
      const torch::Tensor slice = x[k];
      const double p = op.p[static_cast<size_t>(k)];
      if (p == 0) return slice;
      if (slice.is_cuda() && p < 1 && slice.numel() > 0) {
        return std::get<0>(at::_fused_dropout(slice, 1 - p, generators[static_cast<size_t>(k)]));
      }
      return slice * Noise(slice.sizes(), p, generators[static_cast<size_t>(k)], x.options());
    });
  });
}

torch::Tensor FusedModel::Forward(const torch::Tensor& inputs, at::Generator& generator) {
  return Run(inputs, [&](const Op& op, const torch::Tensor& x) {
    if (std::all_of(op.p.begin(), op.p.end(), [](double p) { return p == 0; })) return x;
    const int64_t k_trials = trials_;
    if (op.kind == Op::Kind::kDropout2d) {
      // x [N, K·C, H, W]: one draw per (example, trial, channel).
      const int64_t n = x.size(0);
      const torch::Tensor keep = op.keep.view({1, k_trials, 1});
      torch::Tensor noise = torch::empty({n, k_trials, x.size(1) / k_trials}, x.options());
      noise.bernoulli_(keep, generator);
      return x * noise.div_(keep).view({n, x.size(1), 1, 1});
    }
    // x [K, N, ...] ([K, N, F], [K, N, T, h], the attention probabilities [K, N, heads, T, T]).
    std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
    shape.front() = k_trials;
    const torch::Tensor keep = op.keep.view(shape);
    torch::Tensor noise = torch::empty(x.sizes(), x.options());
    noise.bernoulli_(keep, generator);
    return x * noise.div_(keep);
  });
}

torch::Tensor FusedModel::Run(
    const torch::Tensor& inputs,
    const std::function<torch::Tensor(const Op&, const torch::Tensor&)>& dropout) {
  TORCH_CHECK(inputs.dim() >= 2 && inputs.size(0) == trials_, "FusedModel: expected inputs [",
              trials_, ", N, ...], got ", inputs.sizes());
  const int64_t k_trials = trials_;
  const int64_t n = inputs.size(1);
  // Trial-major [K, N, ...] until the first convolution; channel-fused [N, K·C, H, W] while
  // convolving; trial-major [K, N, F] again from the flatten on.
  bool channel_fused = false;
  torch::Tensor x = inputs;
  torch::Tensor saved;  // a residual block's shortcut
  for (const Op& op : ops_) {
    // A downsample branch's ops transform the shortcut; every other op, x.
    torch::Tensor& y = op.on_saved ? saved : x;
    switch (op.kind) {
      case Op::Kind::kConv2d: {
        if (!channel_fused) {
          TORCH_CHECK(x.dim() == 5, "FusedModel: conv2d expects inputs [K, N, C, H, W], got ",
                      x.sizes());
          x = x.transpose(0, 1).reshape({n, k_trials * x.size(2), x.size(3), x.size(4)});
          channel_fused = true;
        }
        const torch::Tensor& weight = parameters_[op.weight];
        const bool strided_1x1 = weight.size(2) == 1 && weight.size(3) == 1 && op.stride > 1;
        if (y.device().is_cpu() && (weight.size(1) == 1 || strided_1x1)) {
          // Where oneDNN's grouped convolution computes otherwise than the trial's own (last-bit
          // differences that Adam's normalised steps amplify): one input channel per trial (a
          // depthwise convolution, whose weight gradient it sums in another order), and a 1×1
          // convolution with stride 2 (ResNet's downsample branches: forward, weight and input
          // gradients differ from 128 input channels on, LibTorch 1.13). On the CPU each such
          // trial's convolution runs alone instead, bit-identical to its unfused job's; both are
          // among the cheapest convolutions of their models.
          const int64_t out = weight.size(0) / k_trials;
          const int64_t channels = y.size(1) / k_trials;
          std::vector<torch::Tensor> outputs;
          for (int64_t k = 0; k < k_trials; ++k) {
            outputs.push_back(
                torch::conv2d(y.narrow(/*dim=*/1, k * channels, channels).contiguous(),
                              weight.narrow(/*dim=*/0, k * out, out),
                              op.bias >= 0 ? parameters_[op.bias].narrow(/*dim=*/0, k * out, out)
                                           : torch::Tensor(),
                              /*stride=*/op.stride, /*padding=*/op.padding));
          }
          y = torch::cat(outputs, /*dim=*/1);
          break;
        }
        y = torch::conv2d(y, weight, op.bias >= 0 ? parameters_[op.bias] : torch::Tensor(),
                          /*stride=*/op.stride, /*padding=*/op.padding, /*dilation=*/1,
                          /*groups=*/k_trials);
        break;
      }
      case Op::Kind::kBatchNorm2d: {
        y = torch::batch_norm(y, parameters_[op.weight], parameters_[op.bias], buffers_[op.running],
                              buffers_[op.running + 1],
                              /*training=*/true, op.momentum, op.eps,
                              /*cudnn_enabled=*/true);
        {
          torch::NoGradGuard no_grad;
          buffers_[op.running + 2].add_(1);  // num_batches_tracked, as BatchNorm2d counts
        }
        break;
      }
      case Op::Kind::kRelu:
        x = torch::relu(x);
        break;
      case Op::Kind::kMaxPool2d:
        x = torch::max_pool2d(x, op.kernel, op.stride, op.padding);
        break;
      case Op::Kind::kSave:
        saved = x;
        break;
      case Op::Kind::kAddSaved:
        // As the unfused block's `out += shortcut`, out of place (autograd keeps x for the
        // ReLU before).
        x = x + saved;
        saved = torch::Tensor();
        break;
      case Op::Kind::kAvgPool:
        x = torch::adaptive_avg_pool2d(x, {1, 1});
        break;
      case Op::Kind::kDropout2d: {
        TORCH_CHECK(channel_fused && x.dim() == 4, "FusedModel: dropout2d expects [N, K·C, H, W]");
        x = dropout(op, x);
        break;
      }
      case Op::Kind::kDropout: {
        TORCH_CHECK(!channel_fused && x.dim() >= 3, "FusedModel: dropout expects [K, N, ...]");
        x = dropout(op, x);
        break;
      }
      case Op::Kind::kFlatten:
        if (channel_fused) {
          // [N, K·C, H, W] → [N, K, C·H·W] (each trial's features in its unfused flatten order)
          // → [K, N, C·H·W].
          x = x.reshape({n, k_trials, -1}).transpose(0, 1);
          channel_fused = false;
        } else {
          x = x.reshape({k_trials, n, -1});
        }
        break;
      case Op::Kind::kLinear: {
        // On the CPU each trial's rows contiguous, as its unfused flatten (or layer) leaves them
        // (a strided input takes another bf16 GEMM path).
        const TrialLinear linear(parameters_[op.weight], parameters_[op.bias]);
        x = linear(x.is_cpu() ? x.contiguous() : x);
        break;
      }
      case Op::Kind::kSequence:
        if (x.dim() == 5) {  // images; [K, N, T, F] sequences stay as they are
          const torch::Tensor rows = AsSequence(x.flatten(0, 1));
          x = rows.reshape({k_trials, n, rows.size(1), rows.size(2)});
        }
        break;
      case Op::Kind::kLstm: {
        TORCH_CHECK(x.dim() == 4, "FusedModel: lstm expects [K, N, T, F], got ", x.sizes());
        std::vector<torch::Tensor> weights;
        for (const int index : op.tensors) weights.push_back(parameters_[index]);
        x = Lstm(x, weights);
        break;
      }
      case Op::Kind::kPositions:
        x = AddPositions(x, parameters_[op.weight]);
        break;
      case Op::Kind::kLayerNorm:
        x = TrialLayerNorm(x, parameters_[op.weight], parameters_[op.bias], op.eps);
        break;
      case Op::Kind::kAttention: {
        TORCH_CHECK(x.dim() == 4, "FusedModel: attention expects [K, N, T, h], got ", x.sizes());
        const bool drops = std::any_of(op.p.begin(), op.p.end(), [](double p) { return p > 0; });
        const TrialLinear in_proj(parameters_[op.tensors[0]], parameters_[op.tensors[1]]);
        const TrialLinear out_proj(parameters_[op.tensors[2]], parameters_[op.tensors[3]]);
        x = Attention(
            x, in_proj, out_proj, op.heads, drops,
            [&](const torch::Tensor& probabilities) { return dropout(op, probabilities); });
        break;
      }
      case Op::Kind::kGelu:
        x = torch::gelu(x);
        break;
      case Op::Kind::kMeanSteps:
        x = x.mean(/*dim=*/2);
        break;
    }
  }
  return x;
}

void FusedModel::Unfuse(int k, ClassifierImpl& model) const {
  torch::NoGradGuard no_grad;
  const auto copy = [&](const torch::OrderedDict<std::string, torch::Tensor>& dict,
                        const std::vector<torch::Tensor>& fused,
                        const std::vector<std::string>& names) {
    for (size_t i = 0; i < fused.size(); ++i) {
      const torch::Tensor* target = dict.find(names[i]);
      TORCH_CHECK(target != nullptr, "FusedModel::Unfuse: the model has no ", names[i]);
      const torch::Tensor slice = fused[i].reshape({trials_, -1})[k];
      target->detach().copy_(slice.reshape(target->sizes()));
    }
  };
  copy(model.named_parameters(), parameters_, parameter_names_);
  copy(model.named_buffers(), buffers_, buffer_names_);
}

}  // namespace mpsd::trainer
