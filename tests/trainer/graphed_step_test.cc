// Tests for trainer/graphed_step.h's eligibility rules, on the CPU: the CUDA graph itself runs
// only on the GPU machine (tests/perf/gpu_train_compare.sh, recorded in tests/perf/RESULTS.md).
#include "trainer/graphed_step.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace mpsd::trainer {
namespace {

using ::testing::HasSubstr;

GraphedStepRequest CudaAdam() {
  GraphedStepRequest request;
  request.device = torch::Device(torch::kCUDA, 0);
  request.optimizer = OptimizerKind::kAdam;
  return request;
}

TEST(GraphedStepTest, CpuRunsEagerly) {
  GraphedStepRequest request = CudaAdam();
  request.device = torch::kCPU;
  EXPECT_THAT(GraphedStepUnsupportedReason(request), HasSubstr("CUDA devices"));
}

TEST(GraphedStepTest, CudaAdamNeedsACudaLibTorchWithFusedAdam) {
  for (const OptimizerKind optimizer : {OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    GraphedStepRequest request = CudaAdam();
    request.optimizer = optimizer;
    if (compat::kHasCudaGraphs) {
      EXPECT_EQ(GraphedStepUnsupportedReason(request), "") << OptimizerName(optimizer);
    } else {
      EXPECT_THAT(GraphedStepUnsupportedReason(request), HasSubstr(">= 2.2"))
          << OptimizerName(optimizer);
    }
  }
}

// Each of these runs eagerly whatever the LibTorch; the reason names the setting.
TEST(GraphedStepTest, SettingsThatRunEagerly) {
  GraphedStepRequest sgd = CudaAdam();
  sgd.optimizer = OptimizerKind::kSgd;
  EXPECT_THAT(GraphedStepUnsupportedReason(sgd), HasSubstr("adam and adamw"));
  GraphedStepRequest bf16 = CudaAdam();
  bf16.precision = Precision::kBf16;
  EXPECT_THAT(GraphedStepUnsupportedReason(bf16), HasSubstr("mixed precision"));
  GraphedStepRequest accumulation = CudaAdam();
  accumulation.grad_accumulation_steps = 2;
  EXPECT_THAT(GraphedStepUnsupportedReason(accumulation), HasSubstr("accumulation"));
  GraphedStepRequest clip = CudaAdam();
  clip.grad_clip = true;
  EXPECT_THAT(GraphedStepUnsupportedReason(clip), HasSubstr("clipping"));
  GraphedStepRequest scaling = CudaAdam();
  scaling.loss_scaling = true;
  EXPECT_THAT(GraphedStepUnsupportedReason(scaling), HasSubstr("loss scaling"));
  GraphedStepRequest augmentation = CudaAdam();
  augmentation.augmentation = true;
  EXPECT_THAT(GraphedStepUnsupportedReason(augmentation), HasSubstr("augmentation"));
}

}  // namespace
}  // namespace mpsd::trainer
