// ResNet-18/34/50 exactly as torchvision.models.resnet builds them (v1.5: in a Bottleneck the
// stride is on the 3×3 convolution), with torchvision's module names, so that a torchvision
// state dict maps onto these parameters name for name. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_MODELS_RESNET_H_
#define MPSD_TRAINER_MODELS_RESNET_H_

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"

#include "trainer/models.h"

namespace mpsd::trainer {

// The projection shortcut of a block whose input and output shapes differ: conv 1×1 with the
// block's stride, then BatchNorm; nullptr when the shortcut is the identity.
torch::nn::Sequential MakeDownsample(int64_t in_channels, int64_t out_channels, int64_t stride);

// Two 3×3 convolutions with BatchNorm; the first has the block's stride. Output channels =
// planes (expansion 1).
class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in_channels, int64_t planes, int64_t stride);
  // [N, in_channels, H, W] → [N, planes, H / stride, W / stride] (rounded up).
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::BatchNorm2d bn2_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

// conv 1×1 (in → planes), conv 3×3 with the block's stride (planes → planes), conv 1×1
// (planes → 4 × planes), each with BatchNorm. Output channels = 4 × planes.
class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in_channels, int64_t planes, int64_t stride);
  // [N, in_channels, H, W] → [N, 4 × planes, H / stride, W / stride] (rounded up).
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::BatchNorm2d bn2_{nullptr};
  torch::nn::Conv2d conv3_{nullptr};
  torch::nn::BatchNorm2d bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

// Which ResNet: the block type and the number of blocks in each of the four stages.
struct ResNetDepth {
  bool bottleneck = false;
  std::array<int64_t, 4> blocks = {2, 2, 2, 2};
};

// resnet18's, resnet34's or resnet50's depth; nullptr for any other name.
const ResNetDepth* FindResNetDepth(absl::string_view name);

// One block of a ResNet, the plan that its constructor, its parameter count and its fused form
// (trainer/fused_models.h) follow: registered as "layer<stage + 1>.<index>".
struct ResNetBlockPlan {
  int stage = 0;  // 0…3
  int index = 0;  // within the stage
  int64_t in_channels = 0;
  int64_t planes = 0;
  int64_t stride = 1;  // 2 for the first block of stages 1…3
  // A "downsample" branch (1×1 convolution with the block's stride, BatchNorm) on the
  // shortcut: the stride is not 1 or the channels change.
  bool downsample = false;
};
std::vector<ResNetBlockPlan> PlanResNetBlocks(const ResNetDepth& depth);

// conv1 7×7 stride 2 (C → 64), bn1, ReLU, max-pool 3×3 stride 2, layer1…layer4 (64, 128, 256,
// 512 planes; stride 2 from layer2 on), adaptive average pool to 1×1, fc → num_classes.
// Initialised as torchvision does: convolutions kaiming_normal (fan_out, ReLU), BatchNorm weight
// 1 and bias 0, fc LibTorch's default (= PyTorch's); no zero-init of the last BatchNorm of a
// block. Takes any H, W >= 1 (training mode needs more than one value per channel at the last
// BatchNorm: batch size × (H/32) × (W/32) > 1).
class ResNetImpl : public ClassifierImpl {
 public:
  ResNetImpl(const ResNetDepth& depth, const ModelConfig& config);
  torch::Tensor forward(torch::Tensor images) override;

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::array<torch::nn::Sequential, 4> stages_ = {nullptr, nullptr, nullptr, nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

// Registry entries: resnet18, resnet34, resnet50 (11,689,512, 21,797,672 and 25,557,032
// parameters at 3×224×224 and 1000 classes).
std::vector<ModelEntry> ResNetModels();

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_MODELS_RESNET_H_
