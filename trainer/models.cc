// ConvNet and the model registry.
#include "trainer/models.h"

#include <array>

namespace mpsd::trainer {

namespace nn = torch::nn;

ConvNetImpl::ConvNetImpl(const ImageShape& shape) {
  // Two unpadded 3×3 convolutions take 2 pixels off each side, the 2×2 max-pool halves the rest.
  const int64_t pooled_height = (shape.height - 4) / 2;
  const int64_t pooled_width = (shape.width - 4) / 2;
  const auto conv3x3 = [](int64_t in_channels, int64_t out_channels) {
    return nn::Conv2dOptions(in_channels, out_channels, /*kernel_size=*/3).stride(1);
  };
  conv1_ = register_module("conv1", nn::Conv2d(conv3x3(shape.channels, /*out_channels=*/32)));
  conv2_ = register_module("conv2", nn::Conv2d(conv3x3(/*in_channels=*/32, /*out_channels=*/64)));
  dropout1_ = register_module("dropout1", nn::Dropout2d(/*p=*/0.25));
  fc1_ = register_module("fc1", nn::Linear(/*in_features=*/64 * pooled_height * pooled_width,
                                           /*out_features=*/128));
  dropout2_ = register_module("dropout2", nn::Dropout(/*p=*/0.5));
  fc2_ = register_module("fc2", nn::Linear(/*in_features=*/128, shape.num_classes));
}

torch::Tensor ConvNetImpl::forward(torch::Tensor images) {
  torch::Tensor x = torch::relu(conv1_->forward(images));
  x = torch::relu(conv2_->forward(x));
  x = torch::max_pool2d(x, /*kernel_size=*/2);
  x = dropout1_->forward(x);
  x = torch::flatten(x, /*start_dim=*/1);
  x = torch::relu(fc1_->forward(x));
  x = dropout2_->forward(x);
  return fc2_->forward(x);
}

namespace {

const std::array<ModelEntry, 1>& Registry() {
  static const auto* const kModels = new std::array<ModelEntry, 1>{{
      {"convnet",
       [](const ImageShape& shape) -> std::shared_ptr<ClassifierImpl> {
         return ConvNet(shape).ptr();
       }},
  }};
  return *kModels;
}

}  // namespace

const ModelEntry* FindModel(absl::string_view name) {
  for (const ModelEntry& entry : Registry()) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const ModelEntry& entry : Registry()) names.emplace_back(entry.name);
  return names;
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const torch::Tensor& parameter : module.parameters(/*recurse=*/true)) {
    if (parameter.requires_grad()) count += parameter.numel();
  }
  return count;
}

}  // namespace mpsd::trainer
