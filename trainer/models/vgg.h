// VGG-11 and VGG-16 exactly as torchvision.models.vgg builds them without BatchNorm
// (configurations "A" and "D"), with torchvision's module names (features.N, classifier.N).
// Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_MODELS_VGG_H_
#define MPSD_TRAINER_MODELS_VGG_H_

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "trainer/models.h"

namespace mpsd::trainer {

// `features`: 3×3 convolutions (padding 1, with bias) each followed by ReLU, and 2×2 max-pools
// (stride 2), as `layout` says (a width, or kMaxPool); `avgpool`: adaptive average pool to 7×7;
// `classifier`: linear 25088→4096, ReLU, Dropout 0.5, linear 4096→4096, ReLU, Dropout 0.5,
// linear 4096→num_classes. Initialised as torchvision does: convolutions kaiming_normal
// (fan_out, ReLU) with zero bias, linear layers normal(0, 0.01) with zero bias. The five
// max-pools need H, W >= 32.
class VggImpl : public ClassifierImpl {
 public:
  static constexpr int64_t kMaxPool = 0;
  VggImpl(const std::vector<int64_t>& layout, const ModelConfig& config);
  torch::Tensor forward(torch::Tensor images) override;

 private:
  torch::nn::Sequential features_{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool_{nullptr};
  torch::nn::Sequential classifier_{nullptr};
};
TORCH_MODULE(Vgg);

// Registry entries: vgg11, vgg16 (132,863,336 and 138,357,544 parameters at 3×224×224 and 1000
// classes).
std::vector<ModelEntry> VggModels();

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODELS_VGG_H_
