// mlp, convnet and cifar_cnn, and their registry entries.
#include "trainer/models/simple.h"

#include <functional>
#include <numeric>

#include "absl/strings/str_format.h"
#include "trainer/models/conv_ops.h"
#include "trainer/models/layers.h"

namespace mpsd::trainer {
namespace {

namespace nn = torch::nn;

int64_t Product(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// Needs `minimum` pixels in each of H and W of an image shape [C, H, W].
absl::Status CheckMinimumSize(absl::string_view model, const std::vector<int64_t>& shape,
                              int64_t minimum, absl::string_view why) {
  if (shape[1] >= minimum && shape[2] >= minimum) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s cannot take %s images: %s, so it needs at least %d×%d", model,
                      FormatShape(shape), why, minimum, minimum));
}

// ---- mlp --------------------------------------------------------------------------------------

constexpr int64_t kMlpHidden = 512;

int64_t MlpParameters(const ModelConfig& config) {
  return layers::LinearParameters(Product(config.input_shape), kMlpHidden) +
         layers::LinearParameters(kMlpHidden, kMlpHidden) +
         layers::LinearParameters(kMlpHidden, config.num_classes);
}

// ---- convnet ----------------------------------------------------------------------------------

// Two unpadded 3×3 convolutions take 2 pixels off each side, the 2×2 max-pool halves the rest.
int64_t ConvNetPooledSize(int64_t size) { return (size - 4) / 2; }

absl::Status CheckConvNet(const ModelConfig& config) {
  return CheckMinimumSize("convnet", config.input_shape, 6,
                          "two 3×3 convolutions and a 2×2 max-pool leave nothing of less");
}

int64_t ConvNetParameters(const ModelConfig& config) {
  const std::vector<int64_t>& shape = config.input_shape;
  const int64_t flat = 64 * ConvNetPooledSize(shape[1]) * ConvNetPooledSize(shape[2]);
  return layers::Conv2dParameters(shape[0], 32, /*kernel=*/3, /*bias=*/true) +
         layers::Conv2dParameters(32, 64, /*kernel=*/3, /*bias=*/true) +
         layers::LinearParameters(flat, 128) + layers::LinearParameters(128, config.num_classes);
}

// ---- cifar_cnn --------------------------------------------------------------------------------

constexpr int64_t kCifarWidths[] = {32, 64, 128};
constexpr int64_t kCifarHidden = 384;

absl::Status CheckCifarCnn(const ModelConfig& config) {
  return CheckMinimumSize("cifar_cnn", config.input_shape, 8,
                          "its three 2×2 max-pools reduce anything smaller to nothing");
}

int64_t CifarCnnFlatFeatures(const std::vector<int64_t>& shape) {
  return kCifarWidths[2] * (shape[1] / 8) * (shape[2] / 8);
}

int64_t CifarCnnParameters(const ModelConfig& config) {
  int64_t count = 0;
  int64_t in_channels = config.input_shape[0];
  for (const int64_t width : kCifarWidths) {
    count += layers::Conv2dParameters(in_channels, width, /*kernel=*/3, /*bias=*/false) +
             layers::Conv2dParameters(width, width, /*kernel=*/3, /*bias=*/false) +
             2 * layers::NormParameters(width);
    in_channels = width;
  }
  return count + layers::LinearParameters(CifarCnnFlatFeatures(config.input_shape), kCifarHidden) +
         layers::LinearParameters(kCifarHidden, config.num_classes);
}

}  // namespace

MlpImpl::MlpImpl(const ModelConfig& config) {
  const double p = DropoutOr(config, 0.2);
  layers_ = register_module(
      "layers",
      nn::Sequential(nn::Flatten(), nn::Linear(Product(config.input_shape), kMlpHidden), nn::ReLU(),
                     nn::Dropout(p), nn::Linear(kMlpHidden, kMlpHidden), nn::ReLU(), nn::Dropout(p),
                     nn::Linear(kMlpHidden, config.num_classes)));
}

torch::Tensor MlpImpl::forward(torch::Tensor inputs) { return layers_->forward(inputs); }

ConvNetImpl::ConvNetImpl(const ModelConfig& config) {
  const std::vector<int64_t>& shape = config.input_shape;
  const auto conv3x3 = [](int64_t in_channels, int64_t out_channels) {
    return nn::Conv2dOptions(in_channels, out_channels, /*kernel_size=*/3).stride(1);
  };
  conv1_ = register_module("conv1", nn::Conv2d(conv3x3(shape[0], /*out_channels=*/32)));
  conv2_ = register_module("conv2", nn::Conv2d(conv3x3(/*in_channels=*/32, /*out_channels=*/64)));
  dropout1_ = register_module("dropout1", nn::Dropout2d(/*p=*/DropoutOr(config, 0.25)));
  fc1_ = register_module("fc1", nn::Linear(/*in_features=*/64 * ConvNetPooledSize(shape[1]) *
                                               ConvNetPooledSize(shape[2]),
                                           /*out_features=*/128));
  dropout2_ = register_module("dropout2", nn::Dropout(/*p=*/DropoutOr(config, 0.5)));
  fc2_ = register_module("fc2", nn::Linear(/*in_features=*/128, config.num_classes));
}

torch::Tensor ConvNetImpl::forward(torch::Tensor images) {
  // ReLUs in place (neither a convolution's nor a linear's backward reads its output), and the
  // second one after the max-pool: max and ReLU commute (ReLU is monotone), so the values are
  // pytorch/examples' and so is the gradient (a window whose maximum is <= 0 passes none
  // either way; else it goes to the maximum), on a quarter of the elements.
  // On CUDA, when training: each convolution's bias and ReLU (and the second one's max-pool) as
  // one layer of models/conv_ops.h, the same values and gradients from fewer kernels (mpsd's
  // own where the build has them, else AddChannelBias and MaxPool2x2's cheaper backwards).
  torch::Tensor x;
  if (images.is_cuda() && torch::GradMode::is_enabled()) {
    x = AddChannelBiasRelu_(torch::conv2d(images, conv1_->weight), conv1_->bias);
    x = BiasMaxPool2x2Relu(torch::conv2d(x, conv2_->weight), conv2_->bias);
  } else {
    x = conv1_->forward(images).relu_();
    x = torch::max_pool2d(conv2_->forward(x), /*kernel_size=*/2).relu_();
  }
  x = dropout1_->forward(x);
  x = torch::flatten(x, /*start_dim=*/1);
  x = fc1_->forward(x).relu_();
  x = dropout2_->forward(x);
  return fc2_->forward(x);
}

CifarCnnImpl::CifarCnnImpl(const ModelConfig& config) {
  nn::Sequential features;
  int64_t in_channels = config.input_shape[0];
  for (const int64_t width : kCifarWidths) {
    for (int conv = 0; conv < 2; ++conv) {
      features->push_back(nn::Conv2d(
          nn::Conv2dOptions(in_channels, width, /*kernel_size=*/3).padding(1).bias(false)));
      features->push_back(nn::BatchNorm2d(width));
      features->push_back(nn::ReLU(nn::ReLUOptions().inplace(true)));
      in_channels = width;
    }
    features->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(/*kernel_size=*/2).stride(2)));
  }
  features_ = register_module("features", features);
  classifier_ = register_module(
      "classifier",
      nn::Sequential(
          nn::Flatten(), nn::Linear(CifarCnnFlatFeatures(config.input_shape), kCifarHidden),
          nn::ReLU(nn::ReLUOptions().inplace(true)), nn::Dropout(/*p=*/DropoutOr(config, 0.5)),
          nn::Linear(kCifarHidden, config.num_classes)));
}

torch::Tensor CifarCnnImpl::forward(torch::Tensor images) {
  return classifier_->forward(features_->forward(images));
}

std::vector<ModelEntry> SimpleModels() {
  return {
      {"mlp",
       "multilayer perceptron on the flattened input: 512, 512 (ReLU, Dropout 0.2)",
       InputKind::kAny,
       {1, 28, 28},
       10,
       {},
       [](const ModelConfig&) { return absl::OkStatus(); },
       MlpParameters,
       [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> { return Mlp(c).ptr(); }},
      {"convnet",
       "the seeds' MNIST ConvNet (pytorch/examples): conv 32, conv 64, linear 128",
       InputKind::kImage,
       {1, 28, 28},
       10,
       {},
       CheckConvNet,
       ConvNetParameters,
       [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> { return ConvNet(c).ptr(); }},
      {"cifar_cnn",
       "VGG-style CNN for CIFAR-10: 3 × (2 conv 3×3 + BatchNorm, max-pool), linear 384",
       InputKind::kImage,
       {3, 32, 32},
       10,
       {},
       CheckCifarCnn,
       CifarCnnParameters,
       [](const ModelConfig& c) -> std::shared_ptr<ClassifierImpl> { return CifarCnn(c).ptr(); }},
  };
}

}  // namespace mpsd::trainer
