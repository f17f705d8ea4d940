// The fused forms of mlp, convnet, cifar_cnn and resnet18/34/50: each architecture as a program
// of fused operators over the zoo model's parameter names (trainer/models/simple.cc and
// resnet.cc register them so).
#include "trainer/fused_models.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/models/resnet.h"

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
    kSave,      // the shortcut: a residual block's input, kept for kAddSaved
    kAddSaved,  // x + the shortcut
    kAvgPool    // adaptive average pool to 1×1
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

// The zoo models with a fused form, for messages.
constexpr const char* kFusedModels[] = {"mlp",      "convnet",  "cifar_cnn",
                                        "resnet18", "resnet34", "resnet50"};

// The programs, in the order each zoo model's forward runs its modules. Each dropout's
// probability is taken from the built model (ModelSpec.dropout or the architecture's default).
std::vector<OpSpec> Program(absl::string_view name) {
  using K = OpSpec;
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

}  // namespace

bool HasFusedForm(absl::string_view name) { return !Program(name).empty(); }

std::string FusedModelNames() { return absl::StrJoin(kFusedModels, ", "); }

absl::StatusOr<std::unique_ptr<FusedModel>> FusedModel::Create(
    absl::string_view name, const std::vector<std::shared_ptr<ClassifierImpl>>& models,
    const torch::Device& device) {
  const std::vector<OpSpec> program = Program(name);
  if (program.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model ", name, " has no fused form yet"));
  }
  if (models.empty()) return absl::InvalidArgumentError("no model to fuse");
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
        absl::StatusOr<int> weight = add_parameter(spec.prefix + ".weight", /*stack=*/false);
        if (!weight.ok()) return weight.status();
        absl::StatusOr<int> bias = add_parameter(spec.prefix + ".bias", /*stack=*/false);
        if (!bias.ok()) return bias.status();
        absl::StatusOr<int> mean = add_buffer(spec.prefix + ".running_mean", /*stack=*/false);
        if (!mean.ok()) return mean.status();
        absl::StatusOr<int> var = add_buffer(spec.prefix + ".running_var", /*stack=*/false);
        if (!var.ok()) return var.status();
        absl::StatusOr<int> tracked =
            add_buffer(spec.prefix + ".num_batches_tracked", /*stack=*/true);
        if (!tracked.ok()) return tracked.status();
        op.weight = *weight;
        op.bias = *bias;
        op.running = *mean;
        break;
      }
      case OpSpec::kLinear: {
        op.kind = Op::Kind::kLinear;
        absl::StatusOr<int> weight = add_parameter(spec.prefix + ".weight", /*stack=*/true);
        if (!weight.ok()) return weight.status();
        absl::StatusOr<int> bias = add_parameter(spec.prefix + ".bias", /*stack=*/true);
        if (!bias.ok()) return bias.status();
        op.weight = *weight;
        op.bias = *bias;
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
      case OpSpec::kDropout2d:
        op.kind = spec.kind == OpSpec::kDropout ? Op::Kind::kDropout : Op::Kind::kDropout2d;
        for (int k = 0; k < trials; ++k) {
          if (dropout_layer >= dropout[k].size()) {
            return absl::InvalidArgumentError(
                absl::StrFormat("model %s: trial %d has fewer dropout layers", name, k));
          }
          op.p.push_back(dropout[k][dropout_layer]);
        }
        {
          std::vector<float> keep;
          for (const double p : op.p) keep.push_back(static_cast<float>(1 - p));
          op.keep = torch::tensor(keep, torch::kFloat32).to(device);
        }
        ++dropout_layer;
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
    std::vector<torch::Tensor> noise;
    if (op.kind == Op::Kind::kDropout2d) {
      const int64_t channels = x.size(1) / trials_;
      for (int k = 0; k < trials_; ++k) {
        noise.push_back(Noise({n, channels, 1, 1}, op.p[k], generators[k], x.options()));
      }
      return torch::cat(noise, /*dim=*/1);
    }
    for (int k = 0; k < trials_; ++k) {
      noise.push_back(Noise({n, x.size(2)}, op.p[k], generators[k], x.options()));
    }
    return torch::stack(noise);
  });
}

torch::Tensor FusedModel::Forward(const torch::Tensor& inputs, at::Generator& generator) {
  return Run(inputs, [&](const Op& op, const torch::Tensor& x) {
    if (std::all_of(op.p.begin(), op.p.end(), [](double p) { return p == 0; })) {
      return torch::Tensor();
    }
    const int64_t k_trials = trials_;
    if (op.kind == Op::Kind::kDropout2d) {
      // x [N, K·C, H, W]: one draw per (example, trial, channel).
      const int64_t n = x.size(0);
      const torch::Tensor keep = op.keep.view({1, k_trials, 1});
      torch::Tensor noise = torch::empty({n, k_trials, x.size(1) / k_trials}, x.options());
      noise.bernoulli_(keep, generator);
      return noise.div_(keep).view({n, x.size(1), 1, 1});
    }
    // x [K, N, F].
    const torch::Tensor keep = op.keep.view({k_trials, 1, 1});
    torch::Tensor noise = torch::empty(x.sizes(), x.options());
    noise.bernoulli_(keep, generator);
    return noise.div_(keep);
  });
}

torch::Tensor FusedModel::Run(
    const torch::Tensor& inputs,
    const std::function<torch::Tensor(const Op&, const torch::Tensor&)>& noise) {
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
        TORCH_CHECK(channel_fused, "FusedModel: a residual block expects [N, K·C, H, W]");
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
        const torch::Tensor mask = noise(op, x);
        if (mask.defined()) x = x * mask;
        break;
      }
      case Op::Kind::kDropout: {
        TORCH_CHECK(!channel_fused && x.dim() == 3, "FusedModel: dropout expects [K, N, F]");
        const torch::Tensor mask = noise(op, x);
        if (mask.defined()) x = x * mask;
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
      case Op::Kind::kLinear:
        if (x.is_cpu()) {
          // Each trial's own F::linear (addmm), stacked: on the CPU a batched matmul is a loop
          // of GEMMs anyway, and the very call the unfused layer makes keeps fused and unfused
          // bit-identical whatever kernel the BLAS picks (OpenBLAS's Haswell kernels, which it
          // picks on AVX2 CPUs and on AMD Zen 5, sum baddbmm's batches otherwise than addmm).
          // Each trial's rows contiguous, as its unfused flatten leaves them (a strided input
          // takes another bf16 GEMM path).
          x = x.contiguous();
          std::vector<torch::Tensor> outputs;
          outputs.reserve(static_cast<size_t>(k_trials));
          for (int64_t k = 0; k < k_trials; ++k) {
            outputs.push_back(torch::nn::functional::linear(x[k], parameters_[op.weight][k],
                                                            parameters_[op.bias][k]));
          }
          x = torch::stack(outputs);
        } else {
          // x [K, N, in] @ weightᵀ [K, in, out] + bias [K, 1, out]: each trial's F::linear.
          x = torch::baddbmm(parameters_[op.bias].unsqueeze(1), x,
                             parameters_[op.weight].transpose(1, 2));
        }
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
