// Tests for trainer/train_loop.cc, trainer/grad_scaler.cc and trainer/optimizers.cc on the CPU:
// loss scaling with an injected inf gradient, device-side clipping, gradient accumulation against
// one big batch, and the schedule's values on the optimizer. Small tensors made by the test.
#include "trainer/train_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "api/failure_reason.h"
#include "trainer/compat/autocast.h"
#include "trainer/compat/optim.h"
#include "trainer/grad_scaler.h"
#include "trainer/optimizers.h"
#include "trainer/schedule.h"

namespace mpsd::trainer {
namespace {

// A linear classifier on flattened inputs: no dropout, no batch norm, so a batch's gradient is
// a plain mean over its examples.
class LinearClassifierImpl : public ClassifierImpl {
 public:
  LinearClassifierImpl(int64_t inputs, int64_t classes)
      : fc_(register_module("fc", torch::nn::Linear(inputs, classes))) {}
  torch::Tensor forward(torch::Tensor inputs) override { return fc_(inputs.flatten(1)); }

 private:
  torch::nn::Linear fc_;
};

// `n` random 1×4×4 images in 3 classes.
DeviceDataset RandomData(int64_t n) {
  torch::manual_seed(7);
  DeviceDataset data;
  data.train = {torch::randn({n, 1, 4, 4}), torch::randint(0, 3, {n}, torch::kInt64)};
  data.test = {torch::randn({16, 1, 4, 4}), torch::randint(0, 3, {16}, torch::kInt64)};
  return data;
}

std::shared_ptr<LinearClassifierImpl> MakeModel() {
  torch::manual_seed(3);
  return std::make_shared<LinearClassifierImpl>(16, 3);
}

torch::Tensor Flat(const torch::nn::Module& model) {
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& p : model.parameters()) parts.push_back(p.detach().flatten());
  return torch::cat(parts);
}

std::vector<mpsd::v1::JobEvent> RunTrain(ClassifierImpl& model, torch::optim::Optimizer& optimizer,
                                         const DeviceDataset& data, const TrainOptions& options) {
  std::vector<mpsd::v1::JobEvent> events;
  std::atomic<bool> cancelled{false};
  const absl::Status status = Train(
      model, optimizer, data, options,
      [&](mpsd::v1::JobEvent event) { events.push_back(std::move(event)); }, cancelled);
  EXPECT_TRUE(status.ok()) << status;
  return events;
}

// ---- GradScaler -------------------------------------------------------------------------------

TEST(GradScalerTest, SkipsAStepWithAnInfGradientBacksOffThenGrows) {
  torch::Tensor weight = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(0.1));
  GradScaler::Options options;
  options.growth_interval = 2;
  GradScaler scaler(options);
  EXPECT_EQ(scaler.scale(), 65536.0);

  // Scaled gradient [1, inf, 1] × 65536: the step is skipped, the weights unchanged.
  weight.mutable_grad() =
      torch::tensor({1.0f, std::numeric_limits<float>::infinity(), 1.0f}) * scaler.scale();
  EXPECT_FALSE(scaler.Step(optimizer));
  scaler.Update();
  EXPECT_TRUE(torch::equal(weight.detach(), torch::ones({3})));
  EXPECT_EQ(scaler.scale(), 32768.0);

  // NaN is skipped as well.
  weight.mutable_grad() = torch::tensor({std::nanf(""), 0.0f, 0.0f});
  EXPECT_FALSE(scaler.Step(optimizer));
  scaler.Update();
  EXPECT_EQ(scaler.scale(), 16384.0);

  // Two clean steps: both step with the unscaled gradient, and the second grows the scale.
  for (int i = 0; i < 2; ++i) {
    weight.mutable_grad() = torch::full({3}, 2.0f) * scaler.scale();
    EXPECT_TRUE(scaler.Step(optimizer));
    scaler.Update();
  }
  EXPECT_TRUE(torch::allclose(weight.detach(), torch::full({3}, 1.0f - 2 * 0.1f * 2.0f)));
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScalerTest, UnscaleBeforeStepLeavesTrueGradientsForClipping) {
  torch::Tensor weight = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(1.0));
  GradScaler scaler;
  const torch::Tensor loss = (weight * torch::tensor({3.0f, 4.0f})).sum();
  scaler.Scale(loss).backward();
  EXPECT_TRUE(torch::allclose(weight.grad(), torch::tensor({3.0f, 4.0f}) * 65536.0f));
  scaler.Unscale(optimizer);
  EXPECT_TRUE(torch::allclose(weight.grad(), torch::tensor({3.0f, 4.0f})));
  ClipGradNorm(Gradients(optimizer), 1.0);
  EXPECT_TRUE(scaler.Step(optimizer));  // does not unscale a second time
  EXPECT_TRUE(torch::allclose(weight.detach(), torch::tensor({-0.6f, -0.8f}), 1e-5, 1e-6));
}

// ---- Clipping ---------------------------------------------------------------------------------

TEST(ClipGradNormTest, BoundsTheGlobalNormAndReturnsItOnTheDevice) {
  // ‖[3, 0]‖ = 3, ‖[4]‖ = 4: global norm 5.
  std::vector<torch::Tensor> gradients = {torch::tensor({3.0f, 0.0f}), torch::tensor({4.0f})};
  const torch::Tensor total = ClipGradNorm(gradients, 1.0);
  EXPECT_NEAR(total.item<float>(), 5.0f, 1e-6);
  const float clipped =
      std::sqrt(gradients[0].pow(2).sum().item<float>() + gradients[1].pow(2).sum().item<float>());
  EXPECT_NEAR(clipped, 1.0f, 1e-5);
  // Direction kept: 5 × 1 / (5 + 1e-6) of each.
  EXPECT_NEAR(gradients[1].item<float>(), 0.8f, 1e-5);

  std::vector<torch::Tensor> small = {torch::tensor({0.3f, 0.4f})};
  ClipGradNorm(small, 1.0);
  EXPECT_TRUE(torch::equal(small[0], torch::tensor({0.3f, 0.4f})));  // under the bound: as is
}

// ---- Train ------------------------------------------------------------------------------------

TEST(TrainTest, AccumulatingTwoBatchesOf32EqualsOneBatchOf64) {
  const DeviceDataset data = RandomData(64);
  const auto run = [&](int64_t batch_size, int accumulation) {
    auto model = MakeModel();
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.5));
    TrainOptions options;
    options.optimizer = OptimizerKind::kSgd;
    options.batch_size = batch_size;
    options.grad_accumulation_steps = accumulation;
    options.seed = 11;
    const std::vector<mpsd::v1::JobEvent> events = RunTrain(*model, optimizer, data, options);
    int steps = 0;
    for (const auto& event : events) steps += event.has_step() ? 1 : 0;
    EXPECT_EQ(steps, 64 / batch_size / accumulation);
    return Flat(*model);
  };
  const torch::Tensor initial = Flat(*MakeModel());
  const torch::Tensor big_batch = run(64, 1);
  const torch::Tensor accumulated = run(32, 2);
  const torch::Tensor two_steps = run(32, 1);
  EXPECT_GT((big_batch - initial).abs().max().item<float>(), 1e-3);  // it did update
  EXPECT_LE((big_batch - accumulated).abs().max().item<float>(), 1e-5);
  EXPECT_GT((big_batch - two_steps).abs().max().item<float>(), 1e-4);  // the test can fail
}

TEST(TrainTest, PartialAccumulationGroupAndDropLastCountSteps) {
  const DeviceDataset data = RandomData(100);  // batches of 16: 6 full + 1 of 4
  auto model = MakeModel();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  TrainOptions options;
  options.optimizer = OptimizerKind::kSgd;
  options.batch_size = 16;
  options.grad_accumulation_steps = 3;
  std::vector<int32_t> sizes;
  for (const auto& event : RunTrain(*model, optimizer, data, options)) {
    if (event.has_step()) sizes.push_back(event.step().batch_size());
  }
  EXPECT_THAT(sizes, ::testing::ElementsAre(48, 48, 4));  // ceil(7 / 3) = 3 steps

  options.drop_last = true;
  sizes.clear();
  for (const auto& event : RunTrain(*model, optimizer, data, options)) {
    if (event.has_step()) sizes.push_back(event.step().batch_size());
  }
  EXPECT_THAT(sizes, ::testing::ElementsAre(48, 48));
}

TEST(TrainTest, OneCycleSetsLearningRateAndMomentumOfEveryStep) {
  const DeviceDataset data = RandomData(64);
  auto model = MakeModel();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  ScheduleConfig config;
  config.kind = ScheduleKind::kOneCycle;
  config.max_lr = 0.2;
  config.steps_per_epoch = 8;
  config.total_steps = 16;
  const absl::StatusOr<Schedule> schedule = Schedule::Create(config);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  TrainOptions options;
  options.optimizer = OptimizerKind::kSgd;
  options.batch_size = 8;
  options.epochs = 2;
  options.eval_every_epochs = 3;
  options.schedule = *schedule;
  std::vector<int> hook_epochs;
  options.on_epoch_end = [&](int epoch, int64_t steps_done) {
    hook_epochs.push_back(epoch);
    EXPECT_EQ(steps_done, 8 * epoch);
    return absl::OkStatus();
  };
  const std::vector<mpsd::v1::JobEvent> events = RunTrain(*model, optimizer, data, options);
  std::vector<mpsd::v1::EpochMetrics> epochs;
  int64_t step = 0;
  for (const auto& event : events) {
    if (event.has_epoch()) epochs.push_back(event.epoch());
    if (!event.has_step()) continue;
    EXPECT_EQ(event.step().step(), step + 1);
    EXPECT_EQ(event.step().learning_rate(), schedule->LearningRate(step)) << step;
    EXPECT_EQ(event.step().loss_scale(), 0);
    ++step;
  }
  EXPECT_EQ(step, 16);
  const auto& sgd =
      static_cast<const torch::optim::SGDOptions&>(optimizer.param_groups().front().options());
  EXPECT_DOUBLE_EQ(sgd.lr(), schedule->LearningRate(15));
  EXPECT_DOUBLE_EQ(sgd.momentum(), *schedule->Momentum(15));
  EXPECT_THAT(hook_epochs, ::testing::ElementsAre(1, 2));
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_FALSE(epochs[0].evaluated());  // eval_every_epochs 3: only the last epoch
  EXPECT_EQ(epochs[0].test_loss(), 0);
  EXPECT_TRUE(epochs[1].evaluated());
  EXPECT_GT(epochs[1].test_loss(), 0);
  EXPECT_DOUBLE_EQ(epochs[0].learning_rate(), schedule->LearningRate(8));
}

TEST(TrainTest, ResumingAtAnEpochContinuesStepsAndShuffleOrder) {
  const DeviceDataset data = RandomData(64);
  TrainOptions options;
  options.optimizer = OptimizerKind::kSgd;
  options.batch_size = 16;
  options.epochs = 2;
  options.seed = 5;
  options.steps_per_readback = 1;
  // Plain SGD without momentum has no state, so the model after epoch 1 is all a resume needs.
  auto model = MakeModel();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torch::Tensor after_epoch_1;
  options.on_epoch_end = [&](int epoch, int64_t) {
    if (epoch == 1) after_epoch_1 = Flat(*model).clone();
    return absl::OkStatus();
  };
  RunTrain(*model, optimizer, data, options);
  const torch::Tensor uninterrupted = Flat(*model);

  auto resumed = MakeModel();
  {
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (torch::Tensor& p : resumed->parameters()) {
      p.copy_(after_epoch_1.narrow(0, offset, p.numel()).view_as(p));
      offset += p.numel();
    }
  }
  torch::optim::SGD resumed_optimizer(resumed->parameters(), torch::optim::SGDOptions(0.1));
  options.on_epoch_end = nullptr;
  options.start_epoch = 2;
  options.start_step = 4;
  std::vector<int64_t> steps;
  for (const auto& event : RunTrain(*resumed, resumed_optimizer, data, options)) {
    if (event.has_step()) steps.push_back(event.step().step());
  }
  EXPECT_THAT(steps, ::testing::ElementsAre(5, 6, 7, 8));
  EXPECT_TRUE(torch::equal(Flat(*resumed), uninterrupted));
}

// A checkpoint offered inside epoch 2 (every 5 steps: after step 10, the epoch's 2nd) holds
// all a resume needs with plain SGD: the weights and the LoopPosition. Resumed from it, the epoch
// goes on with its 3rd batch in the same order, and ends with the uninterrupted run's weights
// and train_loss.
TEST(TrainTest, ResumingInsideAnEpochContinuesItExactly) {
  const DeviceDataset data = RandomData(64);
  TrainOptions options;
  options.optimizer = OptimizerKind::kSgd;
  options.batch_size = 8;
  options.epochs = 2;
  options.seed = 5;
  options.checkpoint_every_steps = 5;
  auto model = MakeModel();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<int64_t> offered;
  torch::Tensor at_step_10;
  LoopPosition position;
  options.on_checkpoint = [&](const LoopPosition& p, CheckpointMoment moment) {
    if (moment == CheckpointMoment::kSteps) offered.push_back(p.step);
    if (moment == CheckpointMoment::kEpochEnd) EXPECT_EQ(p.epoch_steps, 0);
    if (p.step == 10) {
      at_step_10 = Flat(*model).clone();
      position = p;
    }
    return absl::OkStatus();
  };
  std::vector<mpsd::v1::EpochMetrics> epochs;
  for (const auto& event : RunTrain(*model, optimizer, data, options)) {
    if (event.has_epoch()) epochs.push_back(event.epoch());
  }
  EXPECT_THAT(offered, ::testing::ElementsAre(5, 10, 15));  // 16 ends epoch 2: offered there
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_EQ(position.epoch, 2);
  EXPECT_EQ(position.epoch_steps, 2);
  EXPECT_EQ(position.epoch_examples, 16);

  auto resumed = MakeModel();
  {
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (torch::Tensor& p : resumed->parameters()) {
      p.copy_(at_step_10.narrow(0, offset, p.numel()).view_as(p));
      offset += p.numel();
    }
  }
  torch::optim::SGD resumed_optimizer(resumed->parameters(), torch::optim::SGDOptions(0.1));
  options.on_checkpoint = nullptr;
  options.resume = position;
  std::vector<int64_t> steps;
  std::vector<mpsd::v1::EpochMetrics> resumed_epochs;
  for (const auto& event : RunTrain(*resumed, resumed_optimizer, data, options)) {
    if (event.has_step()) steps.push_back(event.step().step());
    if (event.has_epoch()) resumed_epochs.push_back(event.epoch());
  }
  EXPECT_THAT(steps, ::testing::ElementsAre(11, 12, 13, 14, 15, 16));
  EXPECT_TRUE(torch::equal(Flat(*resumed), Flat(*model)));
  ASSERT_EQ(resumed_epochs.size(), 1u);
  EXPECT_EQ(resumed_epochs[0].epoch(), 2);
  EXPECT_EQ(resumed_epochs[0].train_loss(), epochs[1].train_loss());
  EXPECT_EQ(resumed_epochs[0].train_accuracy(), epochs[1].train_accuracy());
}

// A cancel seen before step 4 offers a checkpoint at that step boundary, with step 3's event
// already emitted, then Train ends CANCELLED.
TEST(TrainTest, ACancelOffersACheckpointAtTheStepBoundaryWhereItStops) {
  const DeviceDataset data = RandomData(64);
  TrainOptions options;
  options.optimizer = OptimizerKind::kSgd;
  options.batch_size = 8;
  options.epochs = 1;
  options.steps_per_readback = 1;
  auto model = MakeModel();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  std::atomic<bool> cancelled{false};
  std::vector<std::pair<int64_t, CheckpointMoment>> offers;
  options.on_checkpoint = [&](const LoopPosition& p, CheckpointMoment moment) {
    offers.emplace_back(p.step, moment);
    EXPECT_EQ(p.epoch_steps, 3);
    return absl::OkStatus();
  };
  int64_t last_step = 0;
  const absl::Status status = Train(
      *model, optimizer, data, options,
      [&](mpsd::v1::JobEvent event) {
        if (!event.has_step()) return;
        last_step = event.step().step();
        if (last_step == 3) cancelled = true;
      },
      cancelled);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(last_step, 3);
  ASSERT_EQ(offers.size(), 1u);
  EXPECT_EQ(offers[0].first, 3);
  EXPECT_EQ(offers[0].second, CheckpointMoment::kStopping);
}

// nan_policy skip_step with Adam: a NaN loss at the epoch's last step (its gradients NaN too)
// leaves the weights and Adam's state (moments and step count) as they were after step 3; the step
// is counted and left out of train_loss. Beyond max_skipped_steps the job diverges.
TEST(TrainTest, SkipStepLeavesTheUpdateOfANonFiniteStepUndone) {
  const DeviceDataset data = RandomData(64);
  TrainOptions options;
  options.optimizer = OptimizerKind::kAdam;
  options.batch_size = 16;
  options.epochs = 1;
  options.seed = 2;
  options.nan_policy = NanPolicy::kSkipStep;
  options.max_skipped_steps = 1;
  const auto adam_state = [](torch::optim::Adam& adam, const torch::Tensor& param) {
    return static_cast<torch::optim::AdamParamState&>(
        *adam.state().at(compat::OptimizerStateKey(param)));
  };

  // Clean: the weights, Adam's first moment and the epoch's figures after step 3.
  auto clean = MakeModel();
  torch::optim::Adam clean_adam(clean->parameters(), torch::optim::AdamOptions(0.01));
  torch::Tensor weights_3, exp_avg_3;
  LoopPosition at_3;
  options.checkpoint_every_steps = 3;
  options.on_checkpoint = [&](const LoopPosition& p, CheckpointMoment moment) {
    if (moment != CheckpointMoment::kSteps) return absl::OkStatus();
    weights_3 = Flat(*clean).clone();
    exp_avg_3 = adam_state(clean_adam, clean->parameters()[0]).exp_avg().clone();
    at_3 = p;
    return absl::OkStatus();
  };
  RunTrain(*clean, clean_adam, data, options);
  ASSERT_TRUE(weights_3.defined());

  auto model = MakeModel();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  options.checkpoint_every_steps = 0;
  options.on_checkpoint = nullptr;
  options.nan_loss_from = 4;
  options.nan_loss_steps = 1;
  std::vector<mpsd::v1::JobEvent> events = RunTrain(*model, adam, data, options);
  EXPECT_TRUE(torch::equal(Flat(*model), weights_3));
  const torch::optim::AdamParamState& state = adam_state(adam, model->parameters()[0]);
  EXPECT_TRUE(torch::equal(state.exp_avg(), exp_avg_3));
  EXPECT_EQ(state.step(), 3);
  std::vector<bool> skipped;
  mpsd::v1::EpochMetrics epoch;
  for (const auto& event : events) {
    if (event.has_step()) skipped.push_back(event.step().skipped());
    if (event.has_epoch()) epoch = event.epoch();
  }
  EXPECT_THAT(skipped, ::testing::ElementsAre(false, false, false, true));
  EXPECT_EQ(epoch.skipped_steps(), 1);
  EXPECT_DOUBLE_EQ(epoch.train_loss(), at_3.epoch_loss_sum / at_3.epoch_examples);

  // Every step from step 2 on: step 2 is skipped (max_skipped_steps 1), step 3 diverges.
  auto again = MakeModel();
  torch::optim::Adam again_adam(again->parameters(), torch::optim::AdamOptions(0.01));
  options.nan_loss_from = 2;
  options.nan_loss_steps = 0;
  std::atomic<bool> cancelled{false};
  int64_t last_step = 0;
  const absl::Status status = Train(
      *again, again_adam, data, options,
      [&](mpsd::v1::JobEvent event) {
        if (event.has_step()) last_step = event.step().step();
      },
      cancelled);
  EXPECT_EQ(api::FailureReasonOf(status), mpsd::v1::Job::DIVERGED) << status;
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("diverged at step 3 of 4 (epoch 1): training loss nan"));
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("1 step(s) with a non-finite loss skipped before it, "
                                   "max_skipped_steps 1 (nan_policy skip_step)"));
  EXPECT_EQ(last_step, 3);
}

// skip_step's outcome does not depend on when the losses are read back: a skipped step (step 2
// of 4) never reaches Adam, so the steps after it use the exact step count in their bias
// correction whether the loss is read back after every step or at the epoch's end. (Undoing the
// update on the device and taking Adam's host-side step count back at the read-back gave
// different weights, and on a real clock, different losses from run to run.)
TEST(TrainTest, SkipStepGivesTheSameWeightsWhateverTheReadBackInterval) {
  const DeviceDataset data = RandomData(64);
  TrainOptions options;
  options.optimizer = OptimizerKind::kAdam;
  options.batch_size = 16;
  options.epochs = 1;
  options.seed = 3;
  options.nan_policy = NanPolicy::kSkipStep;
  options.max_skipped_steps = 1;
  options.nan_loss_from = 2;
  options.nan_loss_steps = 1;
  options.readback_interval_ms = 3600 * 1000;  // by count only
  std::vector<torch::Tensor> weights;
  std::vector<std::vector<float>> losses;
  for (const int readback : {1, 100}) {
    torch::manual_seed(7);
    auto model = MakeModel();
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
    options.steps_per_readback = readback;
    std::vector<float> run;
    for (const auto& event : RunTrain(*model, adam, data, options)) {
      if (event.has_step()) run.push_back(event.step().loss());
    }
    weights.push_back(Flat(*model).clone());
    losses.push_back(run);
    EXPECT_EQ(static_cast<torch::optim::AdamParamState&>(
                  *adam.state().at(compat::OptimizerStateKey(model->parameters()[0])))
                  .step(),
              3)
        << "steps_per_readback " << readback;
  }
  ASSERT_EQ(losses[0].size(), 4u);
  EXPECT_TRUE(std::isnan(losses[0][1]));
  EXPECT_EQ(losses[0][3], losses[1][3]);
  EXPECT_TRUE(torch::equal(weights[0], weights[1]));
}

TEST(AutocastGuardTest, Bf16OnCpuInsideTheScopeOnlyAndNestable) {
  const torch::Tensor a = torch::ones({4, 4});
  {
    const compat::AutocastGuard outer(c10::DeviceType::CPU, torch::kBFloat16);
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
    {
      const compat::AutocastGuard inner(c10::DeviceType::CPU, torch::kBFloat16);
      EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);  // inner restored outer's state
  }
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat32);
}

TEST(TrainTest, Bf16RunsTheForwardInBf16AndLeavesAutocastOff) {
  const DeviceDataset data = RandomData(64);
  const auto losses = [&](Precision precision) {
    auto model = MakeModel();
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.5));
    TrainOptions options;
    options.optimizer = OptimizerKind::kSgd;
    options.batch_size = 16;
    options.precision = precision;
    std::vector<float> values;
    for (const auto& event : RunTrain(*model, optimizer, data, options)) {
      if (event.has_step()) values.push_back(event.step().loss());
    }
    EXPECT_EQ(model->parameters().front().scalar_type(), torch::kFloat32);
    return values;
  };
  const std::vector<float> fp32 = losses(Precision::kFp32);
  const std::vector<float> bf16 = losses(Precision::kBf16);
  ASSERT_EQ(fp32.size(), 4u);
  ASSERT_EQ(bf16.size(), 4u);
  EXPECT_NE(fp32, bf16);  // bf16 rounding shows in the losses
  for (size_t i = 0; i < fp32.size(); ++i) EXPECT_NEAR(fp32[i], bf16[i], 0.05) << i;
  const torch::Tensor a = torch::ones({2, 2});
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat32);  // autocast is off again
}

TEST(TrainTest, Fp16WithoutAScalerIsRejected) {
  const DeviceDataset data = RandomData(16);
  auto model = MakeModel();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  TrainOptions options;
  options.optimizer = OptimizerKind::kSgd;
  options.precision = Precision::kFp16;
  std::atomic<bool> cancelled{false};
  const absl::Status status = Train(
      *model, optimizer, data, options, [](mpsd::v1::JobEvent) {}, cancelled);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

// ---- Divergence (issue 27) --------------------------------------------------------------------

// The linear classifier whose `nan_at`-th forward pass returns NaN logits: a loss that turns NaN
// at a known step (one forward per step here: no accumulation, no evaluation before it).
class NanAtForwardImpl : public ClassifierImpl {
 public:
  explicit NanAtForwardImpl(int nan_at)
      : fc_(register_module("fc", torch::nn::Linear(16, 3))), nan_at_(nan_at) {}
  torch::Tensor forward(torch::Tensor inputs) override {
    torch::Tensor logits = fc_(inputs.flatten(1));
    return ++forwards_ == nan_at_ ? logits * std::nanf("") : logits;
  }

 private:
  torch::nn::Linear fc_;
  int nan_at_;
  int forwards_ = 0;
};

struct TrainOutcome {
  absl::Status status;
  std::vector<mpsd::v1::JobEvent> events;
};

TrainOutcome TrainCollecting(ClassifierImpl& model, const TrainOptions& options) {
  const DeviceDataset data = RandomData(64);
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.01));
  TrainOutcome outcome;
  std::atomic<bool> cancelled{false};
  outcome.status = Train(
      model, optimizer, data, options,
      [&](mpsd::v1::JobEvent event) { outcome.events.push_back(std::move(event)); }, cancelled);
  return outcome;
}

// The loss of step 6 is read back with steps 5-8 (groups of 4, as the CUDA graph path reads
// them too): the events end at step 6, nothing after it is reported, no epoch ends, and the
// error names the step, the learning rate and the last finite loss.
TEST(TrainTest, ANanLossEndsTrainingAsDivergedAtItsStepThroughTheGroupedReadBack) {
  torch::manual_seed(3);
  auto model = std::make_shared<NanAtForwardImpl>(/*nan_at=*/6);
  TrainOptions options;
  options.batch_size = 8;
  options.epochs = 2;
  options.optimizer = OptimizerKind::kSgd;
  options.steps_per_readback = 4;
  options.readback_interval_ms = 600'000;  // groups by count only
  const TrainOutcome outcome = TrainCollecting(*model, options);
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(api::FailureReasonOf(outcome.status), mpsd::v1::Job::DIVERGED);
  std::vector<int64_t> steps;
  float last_finite = 0;
  for (const mpsd::v1::JobEvent& event : outcome.events) {
    EXPECT_FALSE(event.has_epoch());
    if (!event.has_step()) continue;
    steps.push_back(event.step().step());
    if (event.step().step() < 6) {
      EXPECT_TRUE(std::isfinite(event.step().loss()));
      last_finite = event.step().loss();
    } else {
      EXPECT_TRUE(std::isnan(event.step().loss()));
    }
  }
  EXPECT_THAT(steps, ::testing::ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(outcome.status.message(),
              ::testing::HasSubstr("diverged at step 6 of 16 (epoch 1): training loss nan at "
                                   "learning rate 0.01; last finite loss "));
  EXPECT_THAT(outcome.status.message(),
              ::testing::HasSubstr(absl::StrFormat("%.6g at step 5", last_finite)));
}

TEST(TrainTest, ALossAboveTheDivergenceThresholdEndsTrainingAtTheFirstSuchStep) {
  auto model = MakeModel();
  TrainOptions options;
  options.batch_size = 8;
  options.optimizer = OptimizerKind::kSgd;
  options.divergence_threshold = 1e-6;  // any cross-entropy of 3 classes is above it
  const TrainOutcome outcome = TrainCollecting(*model, options);
  EXPECT_EQ(api::FailureReasonOf(outcome.status), mpsd::v1::Job::DIVERGED);
  EXPECT_THAT(outcome.status.message(),
              ::testing::HasSubstr("diverged at step 1 of 8 (epoch 1): training loss "));
  EXPECT_THAT(outcome.status.message(),
              ::testing::HasSubstr("above divergence_threshold 1e-06 at learning rate 0.01; no "
                                   "finite loss before it"));

  // Without the threshold the same job trains to its end.
  auto again = MakeModel();
  options.divergence_threshold = 0;
  EXPECT_TRUE(TrainCollecting(*again, options).status.ok());
}

}  // namespace
}  // namespace mpsd::trainer
