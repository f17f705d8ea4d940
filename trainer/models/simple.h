// The small models that train in minutes on a CPU: mlp, the seeds' MNIST ConvNet and a
// ~1M-parameter VGG-style CNN for CIFAR-10. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_MODELS_SIMPLE_H_
#define MPSD_TRAINER_MODELS_SIMPLE_H_

#include <torch/torch.h>

#include <vector>

#include "trainer/models.h"

namespace mpsd::trainer {

// A multilayer perceptron on the flattened input (D = product of input_shape): linear D→512,
// ReLU, Dropout 0.2, linear 512→512, ReLU, Dropout 0.2, linear 512→num_classes. 669,706
// parameters for 1×28×28 and 10 classes.
class MlpImpl : public ClassifierImpl {
 public:
  explicit MlpImpl(const ModelConfig& config);
  torch::Tensor forward(torch::Tensor inputs) override;

 private:
  torch::nn::Sequential layers_{nullptr};
};
TORCH_MODULE(Mlp);

// The seeds' and pytorch/examples' MNIST network: conv C→32 3×3, ReLU, conv 32→64 3×3, ReLU,
// max-pool 2 (computed as max-pool then ReLU: the same values and gradients), Dropout2d 0.25,
// flatten (9216 for 28×28), linear 128, ReLU, Dropout 0.5, linear num_classes. 1,199,882 parameters
// for MNIST's 1×28×28 and 10 classes; needs H, W >= 6. Training on CUDA, the convolutions' biases
// and the max-pool are models/conv_ops.h's (cheaper backward kernels, the same gradients).
class ConvNetImpl : public ClassifierImpl {
 public:
  explicit ConvNetImpl(const ModelConfig& config);
  torch::Tensor forward(torch::Tensor images) override;

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::Dropout2d dropout1_{nullptr};
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Dropout dropout2_{nullptr};
  torch::nn::Linear fc2_{nullptr};
};
TORCH_MODULE(ConvNet);

// A small VGG-style CNN for CIFAR-10 (3×32×32). `features`: three blocks of two 3×3 convolutions
// (padding 1, no bias) each followed by BatchNorm and ReLU, and a 2×2 max-pool per block, at 32,
// 64 and 128 channels; `classifier`: flatten (128 × H/8 × W/8 = 2048 at 32×32), linear 384, ReLU,
// Dropout 0.5, linear num_classes. PyTorch's default initialisation. Parameters at 3×32×32 and 10
// classes: convolutions 286,560 + BatchNorm 896 + linear 786,816 + linear 3,850 = 1,078,122.
// Needs H, W >= 8; at Fashion-MNIST's 1×28×28 (flatten 1152) it has 733,482 parameters.
class CifarCnnImpl : public ClassifierImpl {
 public:
  explicit CifarCnnImpl(const ModelConfig& config);
  torch::Tensor forward(torch::Tensor images) override;

 private:
  torch::nn::Sequential features_{nullptr};
  torch::nn::Sequential classifier_{nullptr};
};
TORCH_MODULE(CifarCnn);

// Registry entries: mlp, convnet, cifar_cnn.
std::vector<ModelEntry> SimpleModels();

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODELS_SIMPLE_H_
