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
    if (compat::HasCudaGraphs()) {
      EXPECT_EQ(GraphedStepUnsupportedReason(request), "") << OptimizerName(optimizer);
    } else {
      EXPECT_THAT(GraphedStepUnsupportedReason(request), HasSubstr(">= 2.2"))
          << OptimizerName(optimizer);
    }
  }
}

// Issue 15: sgd (momentum, nesterov), bf16, clipping, SGD's cycling momentum and augmentation
// (drawn inside the graph) take the fast path where the LibTorch can capture; each of the rest
// runs eagerly whatever the LibTorch, and the reason names the setting.
TEST(GraphedStepTest, SgdBf16AndCyclingSgdMomentumAreOnTheFastPath) {
  GraphedStepRequest sgd = CudaAdam();
  sgd.optimizer = OptimizerKind::kSgd;
  sgd.cycles_momentum = true;
  GraphedStepRequest bf16 = CudaAdam();
  bf16.precision = Precision::kBf16;
  GraphedStepRequest augmentation = CudaAdam();
  augmentation.augmentation = true;
  for (const GraphedStepRequest& request : {sgd, bf16, augmentation}) {
    if (compat::HasCudaGraphs()) {
      EXPECT_EQ(GraphedStepUnsupportedReason(request), "");
    } else {
      EXPECT_THAT(GraphedStepUnsupportedReason(request), HasSubstr(">= 2.2"));
    }
  }
}

TEST(GraphedStepTest, SettingsThatRunEagerly) {
  GraphedStepRequest fp16 = CudaAdam();
  fp16.precision = Precision::kFp16;
  fp16.loss_scaling = true;
  EXPECT_THAT(GraphedStepUnsupportedReason(fp16), HasSubstr("loss scaling"));
  GraphedStepRequest accumulation = CudaAdam();
  accumulation.grad_accumulation_steps = 2;
  EXPECT_THAT(GraphedStepUnsupportedReason(accumulation), HasSubstr("accumulation"));
  GraphedStepRequest beta1 = CudaAdam();
  beta1.cycles_momentum = true;
  EXPECT_THAT(GraphedStepUnsupportedReason(beta1), HasSubstr("beta1"));
}

ScheduleConfig OneCycle(int64_t total_steps) {
  ScheduleConfig config;
  config.kind = ScheduleKind::kOneCycle;
  config.max_lr = 0.1;
  config.steps_per_epoch = total_steps;
  config.total_steps = total_steps;
  return config;
}

// The table the graph reads holds, at every step, the schedule's learning rate and momentum
// (as float32); without a schedule, the optimizer's own values.
TEST(ScheduleTableTest, HoldsTheScheduleOfEveryStep) {
  const absl::StatusOr<Schedule> schedule = Schedule::Create(OneCycle(40));
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  const ScheduleTable table = TabulateSchedule(*schedule, 0.5, 0.5, 40);
  ASSERT_EQ(table.learning_rates.size(), 40u);
  ASSERT_EQ(table.momenta.size(), 40u);
  for (int64_t t = 0; t < 40; ++t) {
    EXPECT_EQ(table.learning_rates[t], static_cast<float>(schedule->LearningRate(t))) << t;
    EXPECT_EQ(table.momenta[t], static_cast<float>(*schedule->Momentum(t))) << t;
  }
  EXPECT_NE(table.learning_rates.front(), table.learning_rates[20]);
  const ScheduleTable constant = TabulateSchedule(std::nullopt, 0.01, 0.9, 3);
  EXPECT_EQ(constant.learning_rates, std::vector<float>(3, 0.01f));
  EXPECT_EQ(constant.momenta, std::vector<float>(3, 0.9f));
}

// Gradients of a fixed quadratic loss: the same for the reference optimizer and DeviceUpdate.
void SetGradients(const std::vector<torch::Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor& grad = const_cast<torch::Tensor&>(params[i]).mutable_grad();
    grad = (params[i].detach() * (0.5 + 0.1 * static_cast<double>(i)) +
            0.01 * static_cast<double>(step + 1))
               .contiguous();
  }
}

std::vector<torch::Tensor> MakeParams() {
  torch::manual_seed(7);
  return {torch::randn({4, 3}).requires_grad_(), torch::randn({3}).requires_grad_(),
          torch::randn({2, 3, 3, 3}).requires_grad_()};
}

std::vector<torch::Tensor> Copy(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> copies;
  for (const torch::Tensor& p : params) copies.push_back(p.detach().clone().requires_grad_());
  return copies;
}

// DeviceUpdate's SGD (the graphed step's update; the multi-tensor one where LibTorch has it)
// makes the same updates as torch::optim::SGD under a onecycle schedule that cycles the
// momentum, with weight decay, with and without nesterov; its exported state continues in
// torch::optim::SGD as if it had run there all along.
TEST(DeviceUpdateTest, SgdMatchesTorchOptimSgdUnderOneCycleAndExportsItsState) {
  const absl::StatusOr<Schedule> schedule = Schedule::Create(OneCycle(6));
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  for (const bool nesterov : {false, true}) {
    const std::vector<torch::Tensor> reference_params = MakeParams();
    const std::vector<torch::Tensor> params = Copy(reference_params);
    const auto options =
        torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(nesterov).weight_decay(1e-2);
    torch::optim::SGD reference(reference_params, options);
    torch::optim::SGD optimizer(params, options);
    DeviceUpdate update(optimizer, OptimizerKind::kSgd, TabulateSchedule(*schedule, 0.1, 0.9, 6),
                        /*first_step=*/0, torch::kCPU);
    for (int step = 0; step < 4; ++step) {
      SetLearningRate(reference, static_cast<float>(schedule->LearningRate(step)));
      SetMomentum(reference, OptimizerKind::kSgd, static_cast<float>(*schedule->Momentum(step)));
      SetGradients(reference_params, step);
      reference.step();
      SetGradients(params, step);
      update.Update();
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::allclose(params[i], reference_params[i], 1e-6, 1e-7))
            << "nesterov " << nesterov << " step " << step << " param " << i;
      }
    }
    update.ExportState();
    for (int step = 4; step < 6; ++step) {
      for (torch::optim::SGD* o : {&reference, &optimizer}) {
        SetLearningRate(*o, static_cast<float>(schedule->LearningRate(step)));
        SetMomentum(*o, OptimizerKind::kSgd, static_cast<float>(*schedule->Momentum(step)));
      }
      SetGradients(reference_params, step);
      reference.step();
      SetGradients(params, step);
      optimizer.step();
    }
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params[i], reference_params[i], 1e-6, 1e-7))
          << "after export, nesterov " << nesterov << " param " << i;
    }
  }
}

// Plain SGD (no momentum, no schedule) keeps no buffers and takes lr × gradient steps; the
// warm-up's zero learning rate leaves the parameters alone for one update.
TEST(DeviceUpdateTest, PlainSgdAndTheWarmUpsZeroLearningRate) {
  const std::vector<torch::Tensor> params = MakeParams();
  const std::vector<torch::Tensor> start = Copy(params);
  torch::optim::SGD optimizer(params, torch::optim::SGDOptions(0.25));
  DeviceUpdate update(optimizer, OptimizerKind::kSgd, TabulateSchedule(std::nullopt, 0.25, 0, 1), 0,
                      torch::kCPU);
  EXPECT_EQ(update.State().size(), 1u);  // the step counter alone
  SetGradients(params, 0);
  update.ZeroNextLearningRate();
  update.Update();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], start[i]));
  update.Update();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i], start[i] - 0.25 * params[i].grad(), 1e-6, 1e-7));
  }
}

}  // namespace
}  // namespace mpsd::trainer
