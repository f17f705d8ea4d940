// Tests for trainer/schedule.cc: each schedule's learning rate at chosen steps against values
// worked out from PyTorch's formulas (written next to each number), and the step counting.
#include "trainer/schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace mpsd::trainer {
namespace {

using ::testing::HasSubstr;

constexpr double kTolerance = 1e-12;

Schedule Make(const ScheduleConfig& config) {
  absl::StatusOr<Schedule> schedule = Schedule::Create(config);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return *schedule;
}

TEST(StepsPerEpochTest, CountsBatchesThenAccumulationGroupsRoundingUp) {
  EXPECT_EQ(StepsPerEpoch(2000, 64, /*drop_last=*/false, 1), 32);  // 31 full + 1 of 16
  EXPECT_EQ(StepsPerEpoch(2000, 64, /*drop_last=*/true, 1), 31);
  EXPECT_EQ(StepsPerEpoch(2000, 64, /*drop_last=*/false, 3), 11);  // ceil(32 / 3)
  EXPECT_EQ(StepsPerEpoch(2000, 64, /*drop_last=*/true, 2), 16);   // ceil(31 / 2)
  EXPECT_EQ(StepsPerEpoch(2048, 64, /*drop_last=*/true, 2), 16);
  EXPECT_EQ(StepsPerEpoch(10, 64, /*drop_last=*/true, 1), 0);
  EXPECT_EQ(StepsPerEpoch(10, 64, /*drop_last=*/false, 4), 1);
}

TEST(ScheduleTest, ConstantIsTheBaseLearningRate) {
  ScheduleConfig config;
  config.base_lr = 0.02;
  config.total_steps = 10;
  const Schedule schedule = Make(config);
  EXPECT_EQ(schedule.LearningRate(0), 0.02);
  EXPECT_EQ(schedule.LearningRate(9), 0.02);
  EXPECT_FALSE(schedule.Momentum(3).has_value());
}

TEST(ScheduleTest, StepDecaysEveryStepSizeEpochs) {
  // StepLR(step_size=2, gamma=0.5) stepped once per epoch of 10 optimizer steps:
  // lr = 0.1 × 0.5^floor(epoch / 2), epoch = floor(step / 10).
  ScheduleConfig config;
  config.kind = ScheduleKind::kStep;
  config.base_lr = 0.1;
  config.steps_per_epoch = 10;
  config.total_steps = 80;
  config.step_size_epochs = 2;
  config.gamma = 0.5;
  const Schedule schedule = Make(config);
  EXPECT_NEAR(schedule.LearningRate(0), 0.1, kTolerance);
  EXPECT_NEAR(schedule.LearningRate(19), 0.1, kTolerance);     // epoch 1
  EXPECT_NEAR(schedule.LearningRate(20), 0.05, kTolerance);    // epoch 2
  EXPECT_NEAR(schedule.LearningRate(39), 0.05, kTolerance);    // epoch 3
  EXPECT_NEAR(schedule.LearningRate(40), 0.025, kTolerance);   // epoch 4
  EXPECT_NEAR(schedule.LearningRate(65), 0.0125, kTolerance);  // epoch 6: 0.1 × 0.5³
}

TEST(ScheduleTest, CosineWarmsUpLinearlyThenAnneals) {
  // Warm-up W = 10: lr = 0.1 × step / 10. Then CosineAnnealingLR with T_max = 110 − 10 = 100,
  // eta_min = 0.001: lr = 0.001 + (0.1 − 0.001) × (1 + cos(π t / 100)) / 2, t = step − 10.
  ScheduleConfig config;
  config.kind = ScheduleKind::kCosine;
  config.base_lr = 0.1;
  config.steps_per_epoch = 11;
  config.total_steps = 110;
  config.warmup_steps = 10;
  config.min_lr = 0.001;
  const Schedule schedule = Make(config);
  EXPECT_NEAR(schedule.LearningRate(0), 0.0, kTolerance);
  EXPECT_NEAR(schedule.LearningRate(5), 0.05, kTolerance);
  EXPECT_NEAR(schedule.LearningRate(10), 0.1, kTolerance);  // t = 0: cos 0 = 1
  // t = 25: 0.001 + 0.099 × (1 + cos(π/4)) / 2 = 0.001 + 0.0495 × 1.7071067811865475
  EXPECT_NEAR(schedule.LearningRate(35), 0.0855017856687341, kTolerance);
  // t = 50: cos(π/2) = 0 → 0.001 + 0.099 / 2
  EXPECT_NEAR(schedule.LearningRate(60), 0.0505, kTolerance);
  EXPECT_NEAR(schedule.LearningRate(110), 0.001, kTolerance);  // t = T: cos π = −1
  EXPECT_NEAR(schedule.LearningRate(500), 0.001, kTolerance);  // stays at eta_min
}

ScheduleConfig OneCycle(bool anneal_cos) {
  // OneCycleLR(max_lr=0.1, total_steps=100) with its defaults: pct_start 0.3, div_factor 25,
  // final_div_factor 1e4, base_momentum 0.85, max_momentum 0.95.
  ScheduleConfig config;
  config.kind = ScheduleKind::kOneCycle;
  config.base_lr = 0.001;  // not used by onecycle
  config.steps_per_epoch = 10;
  config.total_steps = 100;
  config.max_lr = 0.1;
  config.anneal_cos = anneal_cos;
  return config;
}

TEST(ScheduleTest, OneCycleCosMatchesPyTorch) {
  // initial_lr = 0.1 / 25 = 0.004, min_lr = 0.004 / 1e4 = 4e-7. Phase 1 ends at
  // 0.3 × 100 − 1 = 29 (29.000000000000004 in doubles, as in Python), phase 2 at 99.
  // cos anneal: end + (start − end) / 2 × (cos(π pct) + 1).
  const Schedule schedule = Make(OneCycle(/*anneal_cos=*/true));
  EXPECT_NEAR(schedule.LearningRate(0), 0.004, kTolerance);
  // pct = 10 / 29: 0.1 + (0.004 − 0.1) / 2 × (cos(10π/29) + 1)
  EXPECT_NEAR(schedule.LearningRate(10), 0.029516394846410082, kTolerance);
  EXPECT_NEAR(schedule.LearningRate(29), 0.1, kTolerance);
  // pct = (64 − 29) / 70 = 0.5: (0.1 + 4e-7) / 2
  EXPECT_NEAR(schedule.LearningRate(64), 0.0500002, kTolerance);
  // pct = 51 / 70: 4e-7 + (0.1 − 4e-7) / 2 × (cos(51π/70) + 1)
  EXPECT_NEAR(schedule.LearningRate(80), 0.017103395290759563, kTolerance);
  EXPECT_NEAR(schedule.LearningRate(99), 4e-7, kTolerance);

  // Momentum anneals the other way: 0.95 → 0.85 over phase 1, back to 0.95 over phase 2.
  EXPECT_NEAR(*schedule.Momentum(0), 0.95, kTolerance);
  // 0.85 + (0.95 − 0.85) / 2 × (cos(10π/29) + 1)
  EXPECT_NEAR(*schedule.Momentum(10), 0.9234204220349895, kTolerance);
  EXPECT_NEAR(*schedule.Momentum(29), 0.85, kTolerance);
  EXPECT_NEAR(*schedule.Momentum(64), 0.9, kTolerance);
  EXPECT_NEAR(*schedule.Momentum(99), 0.95, kTolerance);
}

TEST(ScheduleTest, OneCycleLinearMatchesPyTorch) {
  // linear anneal: start + (end − start) × pct.
  const Schedule schedule = Make(OneCycle(/*anneal_cos=*/false));
  EXPECT_NEAR(schedule.LearningRate(0), 0.004, kTolerance);
  // 0.004 + 0.096 × 10 / 29
  EXPECT_NEAR(schedule.LearningRate(10), 0.037103448275862067, kTolerance);
  EXPECT_NEAR(schedule.LearningRate(29), 0.1, kTolerance);
  // 0.1 + (4e-7 − 0.1) × 0.5
  EXPECT_NEAR(schedule.LearningRate(64), 0.0500002, kTolerance);
  EXPECT_NEAR(schedule.LearningRate(99), 4e-7, kTolerance);
  EXPECT_NEAR(*schedule.Momentum(64), 0.9, kTolerance);
}

TEST(ScheduleTest, OneCycleWithoutCycleMomentumLeavesTheMomentumAlone) {
  ScheduleConfig config = OneCycle(/*anneal_cos=*/true);
  config.cycle_momentum = false;
  EXPECT_FALSE(Make(config).Momentum(10).has_value());
}

TEST(ScheduleTest, OneCycleWithPhaseOneBeforeStepZeroStartsInPhaseTwo) {
  // total 2, pct_start 0.3: phase 1 ends at 0.6 − 1 = −0.4, so step 0 is in phase 2 with
  // pct = 0.4 / 1.4 (OneCycleLR: start_step = −0.4, end 1).
  ScheduleConfig config = OneCycle(/*anneal_cos=*/false);
  config.total_steps = 2;
  const Schedule schedule = Make(config);
  EXPECT_NEAR(schedule.LearningRate(0), 0.1 + (4e-7 - 0.1) * (0.4 / 1.4), kTolerance);
  EXPECT_NEAR(schedule.LearningRate(1), 4e-7, kTolerance);
}

TEST(ScheduleTest, RejectsSchedulesPyTorchCannotCompute) {
  ScheduleConfig too_short = OneCycle(/*anneal_cos=*/true);
  too_short.total_steps = 1;
  absl::StatusOr<Schedule> schedule = Schedule::Create(too_short);
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(schedule.status().message()),
              HasSubstr("onecycle needs at least 2 optimizer steps in all"));

  ScheduleConfig empty_phase = OneCycle(/*anneal_cos=*/true);
  empty_phase.total_steps = 4;
  empty_phase.pct_start = 0.25;  // 0.25 × 4 − 1 = 0
  schedule = Schedule::Create(empty_phase);
  EXPECT_THAT(std::string(schedule.status().message()), HasSubstr("pct_start"));

  ScheduleConfig cosine;
  cosine.kind = ScheduleKind::kCosine;
  cosine.total_steps = 20;
  cosine.warmup_steps = 20;
  schedule = Schedule::Create(cosine);
  EXPECT_THAT(std::string(schedule.status().message()),
              HasSubstr("warm-up of 20 steps leaves no step"));
}

}  // namespace
}  // namespace mpsd::trainer
