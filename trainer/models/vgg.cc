// VGG as torchvision builds it, its parameter and shape arithmetic and its registry entries.
#include "trainer/models/vgg.h"

#include "absl/strings/str_format.h"
#include "trainer/models/layers.h"

namespace mpsd::trainer {
namespace {

namespace nn = torch::nn;

constexpr int64_t M = VggImpl::kMaxPool;
constexpr int64_t kPooledSize = 7;  // avgpool's output, H and W
constexpr int64_t kHidden = 4096;

// torchvision's cfgs["A"] and cfgs["D"].
const std::vector<int64_t>& Vgg11Layout() {
  static const auto* const kLayout =
      new std::vector<int64_t>{64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
  return *kLayout;
}

const std::vector<int64_t>& Vgg16Layout() {
  static const auto* const kLayout = new std::vector<int64_t>{
      64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M};
  return *kLayout;
}

int64_t LastWidth(const std::vector<int64_t>& layout) {
  int64_t width = 0;
  for (const int64_t w : layout) width = w == M ? width : w;
  return width;
}

absl::Status CheckVgg(absl::string_view name, const std::vector<int64_t>& layout,
                      const ModelConfig& config) {
  int64_t height = config.input_shape[1];
  int64_t width = config.input_shape[2];
  int pools = 0;
  for (const int64_t w : layout) {
    if (w != M) continue;  // padded 3×3 convolutions keep the size
    height = layers::WindowOutputSize(height, /*kernel=*/2, /*stride=*/2);
    width = layers::WindowOutputSize(width, /*kernel=*/2, /*stride=*/2);
    ++pools;
  }
  if (height >= 1 && width >= 1) return absl::OkStatus();
  const int64_t minimum = int64_t{1} << pools;
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s cannot take %s images: its %d 2×2 max-pools reduce %d×%d to %d×%d, so it needs at "
      "least %d×%d",
      name, FormatShape(config.input_shape), pools, config.input_shape[1], config.input_shape[2],
      height, width, minimum, minimum));
}

int64_t VggParameters(const std::vector<int64_t>& layout, const ModelConfig& config) {
  int64_t count = 0;
  int64_t in_channels = config.input_shape[0];
  for (const int64_t w : layout) {
    if (w == M) continue;
    count += layers::Conv2dParameters(in_channels, w, /*kernel=*/3, /*bias=*/true);
    in_channels = w;
  }
  return count + layers::LinearParameters(LastWidth(layout) * kPooledSize * kPooledSize, kHidden) +
         layers::LinearParameters(kHidden, kHidden) +
         layers::LinearParameters(kHidden, config.num_classes);
}

// torchvision's VGG.__init__ loop (init_weights=True).
void InitLikeTorchvision(nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (const std::shared_ptr<nn::Module>& module : model.modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
      nn::init::zeros_(conv->bias);
    } else if (auto* linear = module->as<nn::Linear>()) {
      nn::init::normal_(linear->weight, /*mean=*/0, /*std=*/0.01);
      nn::init::zeros_(linear->bias);
    }
  }
}

ModelEntry VggEntry(absl::string_view name, absl::string_view description,
                    absl::Status (*check)(const ModelConfig&),
                    int64_t (*parameters)(const ModelConfig&),
                    std::shared_ptr<ClassifierImpl> (*make)(const ModelConfig&)) {
  return {name, description, InputKind::kImage, {3, 224, 224}, 1000, {}, check, parameters, make};
}

}  // namespace

VggImpl::VggImpl(const std::vector<int64_t>& layout, const ModelConfig& config) {
  nn::Sequential features;
  int64_t in_channels = config.input_shape[0];
  for (const int64_t w : layout) {
    if (w == M) {
      features->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(/*kernel_size=*/2).stride(2)));
      continue;
    }
    features->push_back(
        nn::Conv2d(nn::Conv2dOptions(in_channels, w, /*kernel_size=*/3).padding(1)));
    features->push_back(nn::ReLU(nn::ReLUOptions().inplace(true)));
    in_channels = w;
  }
  features_ = register_module("features", features);
  avgpool_ = register_module(
      "avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({kPooledSize, kPooledSize})));
  const double p = DropoutOr(config, 0.5);
  classifier_ = register_module(
      "classifier",
      nn::Sequential(nn::Linear(in_channels * kPooledSize * kPooledSize, kHidden),
                     nn::ReLU(nn::ReLUOptions().inplace(true)), nn::Dropout(p),
                     nn::Linear(kHidden, kHidden), nn::ReLU(nn::ReLUOptions().inplace(true)),
                     nn::Dropout(p), nn::Linear(kHidden, config.num_classes)));
  InitLikeTorchvision(*this);
}

torch::Tensor VggImpl::forward(torch::Tensor images) {
  torch::Tensor x = avgpool_->forward(features_->forward(images));
  return classifier_->forward(torch::flatten(x, /*start_dim=*/1));
}

std::vector<ModelEntry> VggModels() {
  return {
      VggEntry(
          "vgg11", "torchvision VGG-11, no BatchNorm (needs at least 32×32)",
          [](const ModelConfig& c) { return CheckVgg("vgg11", Vgg11Layout(), c); },
          [](const ModelConfig& c) { return VggParameters(Vgg11Layout(), c); },
          [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> {
            return Vgg(Vgg11Layout(), c).ptr();
          }),
      VggEntry(
          "vgg16", "torchvision VGG-16, no BatchNorm (needs at least 32×32)",
          [](const ModelConfig& c) { return CheckVgg("vgg16", Vgg16Layout(), c); },
          [](const ModelConfig& c) { return VggParameters(Vgg16Layout(), c); },
          [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> {
            return Vgg(Vgg16Layout(), c).ptr();
          }),
  };
}

}  // namespace mpsd::trainer
