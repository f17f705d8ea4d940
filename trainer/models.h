// Models the executor can train, and the registry that names them. Every model is an image
// classifier: images [N, C, H, W] float32 in, logits [N, num_classes] float32 out (no softmax;
// the loss is cross-entropy on logits). Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_MODELS_H_
#define MPSD_TRAINER_MODELS_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace mpsd::trainer {

// What a model is built for: the shape of one input image and the number of classes.
struct ImageShape {
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t num_classes = 10;
};

// The interface the training loop sees. Modules are not thread-safe; one job uses one instance.
class ClassifierImpl : public torch::nn::Module {
 public:
  // images: [N, C, H, W] float32 → logits [N, num_classes] float32.
  virtual torch::Tensor forward(torch::Tensor images) = 0;
};

// The seeds' and pytorch/examples' MNIST network: conv 1→32 3×3, ReLU, conv 32→64 3×3, ReLU,
// max-pool 2, Dropout2d 0.25, flatten (9216 for 28×28), linear 128, ReLU, Dropout 0.5, linear
// num_classes. 1,199,882 parameters for MNIST's shape.
class ConvNetImpl : public ClassifierImpl {
 public:
  explicit ConvNetImpl(const ImageShape& shape = {});
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

// One registry entry. `make` builds a freshly initialised model on the CPU, drawing its
// initial weights from torch's default generator (seed it first for reproducible weights).
struct ModelEntry {
  absl::string_view name;
  std::function<std::shared_ptr<ClassifierImpl>(const ImageShape&)> make;
};

// nullptr for an unknown name. Entries live for the whole process.
const ModelEntry* FindModel(absl::string_view name);
// Known names in registry order ("convnet"), for error messages.
std::vector<std::string> ModelNames();

// Trainable scalars in `module` and its submodules.
int64_t CountParameters(const torch::nn::Module& module);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODELS_H_
