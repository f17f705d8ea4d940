// ResNet as torchvision builds it, its parameter arithmetic and its registry entries.
#include "trainer/models/resnet.h"

#include "trainer/models/layers.h"

namespace mpsd::trainer {
namespace {

namespace nn = torch::nn;

constexpr int64_t kStemChannels = 64;

nn::Conv2dOptions Conv3x3(int64_t in_channels, int64_t out_channels, int64_t stride) {
  return nn::Conv2dOptions(in_channels, out_channels, /*kernel_size=*/3)
      .stride(stride)
      .padding(1)
      .bias(false);
}

nn::Conv2dOptions Conv1x1(int64_t in_channels, int64_t out_channels, int64_t stride = 1) {
  return nn::Conv2dOptions(in_channels, out_channels, /*kernel_size=*/1).stride(stride).bias(false);
}

int64_t FinalChannels(const ResNetDepth& depth) {
  return (kStemChannels << 3) *
         (depth.bottleneck ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion);
}

int64_t BlockParameters(bool bottleneck, const ResNetBlockPlan& block) {
  using layers::Conv2dParameters;
  using layers::NormParameters;
  const int64_t p = block.planes;
  int64_t count = 0;
  int64_t out_channels = p;
  if (bottleneck) {
    out_channels = p * BottleneckImpl::kExpansion;
    count = Conv2dParameters(block.in_channels, p, 1, false) + NormParameters(p) +
            Conv2dParameters(p, p, 3, false) + NormParameters(p) +
            Conv2dParameters(p, out_channels, 1, false) + NormParameters(out_channels);
  } else {
    count = Conv2dParameters(block.in_channels, p, 3, false) + NormParameters(p) +
            Conv2dParameters(p, p, 3, false) + NormParameters(p);
  }
  if (block.downsample) {
    count +=
        Conv2dParameters(block.in_channels, out_channels, 1, false) + NormParameters(out_channels);
  }
  return count;
}

int64_t ResNetParameters(const ResNetDepth& depth, const ModelConfig& config) {
  int64_t count = layers::Conv2dParameters(config.input_shape[0], kStemChannels, 7, false) +
                  layers::NormParameters(kStemChannels);
  for (const ResNetBlockPlan& block : PlanResNetBlocks(depth)) {
    count += BlockParameters(depth.bottleneck, block);
  }
  return count + layers::LinearParameters(FinalChannels(depth), config.num_classes);
}

// torchvision's ResNet.__init__ loop (zero_init_residual=False).
void InitLikeTorchvision(nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (const std::shared_ptr<nn::Module>& module : model.modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

// Whether a block needs a projection shortcut (MakeDownsample): its stride or channels change.
bool NeedsDownsample(int64_t in_channels, int64_t out_channels, int64_t stride) {
  return stride != 1 || in_channels != out_channels;
}

constexpr ResNetDepth kResNet18 = {/*bottleneck=*/false, {2, 2, 2, 2}};
constexpr ResNetDepth kResNet34 = {/*bottleneck=*/false, {3, 4, 6, 3}};
constexpr ResNetDepth kResNet50 = {/*bottleneck=*/true, {3, 4, 6, 3}};

}  // namespace

const ResNetDepth* FindResNetDepth(absl::string_view name) {
  if (name == "resnet18") return &kResNet18;
  if (name == "resnet34") return &kResNet34;
  if (name == "resnet50") return &kResNet50;
  return nullptr;
}

std::vector<ResNetBlockPlan> PlanResNetBlocks(const ResNetDepth& depth) {
  const int64_t expansion =
      depth.bottleneck ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion;
  std::vector<ResNetBlockPlan> plan;
  int64_t in_channels = kStemChannels;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = kStemChannels << stage;
    for (int64_t block = 0; block < depth.blocks[stage]; ++block) {
      ResNetBlockPlan next;
      next.stage = stage;
      next.index = static_cast<int>(block);
      next.in_channels = in_channels;
      next.planes = planes;
      next.stride = stage > 0 && block == 0 ? 2 : 1;
      next.downsample = NeedsDownsample(in_channels, planes * expansion, next.stride);
      plan.push_back(next);
      in_channels = planes * expansion;
    }
  }
  return plan;
}

nn::Sequential MakeDownsample(int64_t in_channels, int64_t out_channels, int64_t stride) {
  if (!NeedsDownsample(in_channels, out_channels, stride)) return nullptr;
  return nn::Sequential(nn::Conv2d(Conv1x1(in_channels, out_channels, stride)),
                        nn::BatchNorm2d(out_channels));
}

BasicBlockImpl::BasicBlockImpl(int64_t in_channels, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", nn::Conv2d(Conv3x3(in_channels, planes, stride)));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", nn::Conv2d(Conv3x3(planes, planes, /*stride=*/1)));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  downsample_ = MakeDownsample(in_channels, planes * kExpansion, stride);
  if (downsample_) register_module("downsample", downsample_);
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor out = torch::relu(bn1_->forward(conv1_->forward(x)));
  out = bn2_->forward(conv2_->forward(out));
  out += downsample_ ? downsample_->forward(x) : x;
  return torch::relu(out);
}

BottleneckImpl::BottleneckImpl(int64_t in_channels, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", nn::Conv2d(Conv1x1(in_channels, planes)));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", nn::Conv2d(Conv3x3(planes, planes, stride)));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  conv3_ = register_module("conv3", nn::Conv2d(Conv1x1(planes, planes * kExpansion)));
  bn3_ = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
  downsample_ = MakeDownsample(in_channels, planes * kExpansion, stride);
  if (downsample_) register_module("downsample", downsample_);
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor out = torch::relu(bn1_->forward(conv1_->forward(x)));
  out = torch::relu(bn2_->forward(conv2_->forward(out)));
  out = bn3_->forward(conv3_->forward(out));
  out += downsample_ ? downsample_->forward(x) : x;
  return torch::relu(out);
}

ResNetImpl::ResNetImpl(const ResNetDepth& depth, const ModelConfig& config) {
  conv1_ =
      register_module("conv1", nn::Conv2d(nn::Conv2dOptions(config.input_shape[0], kStemChannels,
                                                            /*kernel_size=*/7)
                                              .stride(2)
                                              .padding(3)
                                              .bias(false)));
  bn1_ = register_module("bn1", nn::BatchNorm2d(kStemChannels));
  for (nn::Sequential& stage : stages_) stage = nn::Sequential();
  for (const ResNetBlockPlan& block : PlanResNetBlocks(depth)) {
    nn::Sequential& stage = stages_[block.stage];
    if (depth.bottleneck) {
      stage->push_back(Bottleneck(block.in_channels, block.planes, block.stride));
    } else {
      stage->push_back(BasicBlock(block.in_channels, block.planes, block.stride));
    }
  }
  for (int stage = 0; stage < 4; ++stage) {
    register_module("layer" + std::to_string(stage + 1), stages_[stage]);
  }
  fc_ = register_module("fc", nn::Linear(FinalChannels(depth), config.num_classes));
  InitLikeTorchvision(*this);
}

torch::Tensor ResNetImpl::forward(torch::Tensor images) {
  torch::Tensor x = torch::relu(bn1_->forward(conv1_->forward(images)));
  x = torch::max_pool2d(x, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);
  for (nn::Sequential& stage : stages_) x = stage->forward(x);
  x = torch::adaptive_avg_pool2d(x, {1, 1});
  return fc_->forward(torch::flatten(x, /*start_dim=*/1));
}

std::vector<ModelEntry> ResNetModels() {
  const auto check = [](const ModelConfig&) { return absl::OkStatus(); };
  return {
      {"resnet18",
       "torchvision ResNet-18 (BasicBlock ×[2, 2, 2, 2])",
       InputKind::kImage,
       {3, 224, 224},
       1000,
       {},
       check,
       [](const ModelConfig& c) { return ResNetParameters(kResNet18, c); },
       [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> {
         return ResNet(kResNet18, c).ptr();
       }},
      {"resnet34",
       "torchvision ResNet-34 (BasicBlock ×[3, 4, 6, 3])",
       InputKind::kImage,
       {3, 224, 224},
       1000,
       {},
       check,
       [](const ModelConfig& c) { return ResNetParameters(kResNet34, c); },
       [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> {
         return ResNet(kResNet34, c).ptr();
       }},
      {"resnet50",
       "torchvision ResNet-50 v1.5 (Bottleneck ×[3, 4, 6, 3])",
       InputKind::kImage,
       {3, 224, 224},
       1000,
       {},
       check,
       [](const ModelConfig& c) { return ResNetParameters(kResNet50, c); },
       [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> {
         return ResNet(kResNet50, c).ptr();
       }},
  };
}

}  // namespace mpsd::trainer
