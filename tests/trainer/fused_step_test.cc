// Tests for the batched fused step (trainer/fused_step.h), on the CPU: when it is captured in a
// CUDA graph (pure logic), that a frozen trial's column of the hyperparameter table really
// freezes its parameters under sgd, adam and adamw with weight decay (even with NaN gradients),
// and the batched step against the per-trial fused step (RunFusedTrainJobs with
// FusedStepMode::kBatched and kAuto, which is per-trial on the CPU) on the real Fashion-MNIST
// files: per-trial step losses within 1e-5 for 20 steps, a cancelled and a diverged trial ending
// alone while the others go on unchanged. The CUDA graph itself runs on the GPU machine only
// (tests/perf/fused_graph_check.cc).
#include "trainer/fused_step.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/executor.h"
#include "tests/common/temp_dir.h"
#include "trainer/device.h"
#include "trainer/fused_models.h"
#include "trainer/fused_optimizer.h"
#include "trainer/fused_train.h"
#include "trainer/models.h"
#include "trainer/train_job.h"

namespace mpsd::trainer {
namespace {

using ::mpsd::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

TEST(FusedStepTest, TheGraphNeedsCudaAndACapturingLibTorch) {
  FusedGraphRequest request;
  request.device = torch::kCPU;
  EXPECT_THAT(FusedGraphUnsupportedReason(request), HasSubstr("CUDA devices"));
  request.device = torch::Device(torch::kCUDA, 0);
  request.cuda_graphs = false;
  EXPECT_EQ(FusedGraphUnsupportedReason(request), "CUDA graphs turned off");
  request.cuda_graphs = true;
  if (compat::HasCudaGraphs()) {
    EXPECT_EQ(FusedGraphUnsupportedReason(request), "");
  } else {
    EXPECT_THAT(FusedGraphUnsupportedReason(request), HasSubstr(">= 2.2"));
  }
}

// Two trials of one [2, 6] parameter; trial 1 frozen in the table from the start.
void ExpectFrozenTrialStays(OptimizerKind kind) {
  torch::manual_seed(3);
  torch::Tensor param = torch::randn({2, 6}).set_requires_grad(true);
  const torch::Tensor before = param.detach().clone();
  FusedOptimizer optimizer(kind, /*nesterov=*/kind == OptimizerKind::kSgd, {param}, 2);
  TrialHyperparameters h;
  h.learning_rate = 0.1;
  h.weight_decay = 0.1;
  h.momentum = 0.9;
  const std::vector<std::vector<TrialHyperparameters>> steps(4, {h, h});
  torch::Tensor table = optimizer.Tabulate(steps);
  ASSERT_EQ(table.sizes(), (std::vector<int64_t>{4, FusedOptimizer::kRows, 2}));
  optimizer.FreezeInTable(table, 1);
  optimizer.InitState();
  for (int64_t t = 0; t < 4; ++t) {
    torch::Tensor grad = torch::randn({2, 6});
    if (t == 2) grad[1][3] = std::numeric_limits<float>::quiet_NaN();  // a diverged trial's
    param.mutable_grad() = grad;
    optimizer.StepWithRows(table[t].unsqueeze(2));
  }
  const std::string what = OptimizerName(kind);
  EXPECT_TRUE(torch::equal(param.detach()[1], before[1])) << what << ": frozen trial moved";
  EXPECT_FALSE(torch::equal(param.detach()[0], before[0])) << what << ": trial 0 did not train";
  EXPECT_TRUE(torch::isfinite(param.detach()).all().item<bool>()) << what;
}

TEST(FusedStepTest, AFrozenTrialsParametersStayAsTheyAreUnderEveryOptimizer) {
  for (const OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    ExpectFrozenTrialStays(kind);
  }
}

// The table's update equals Step's (the host table's) for the same hyperparameters.
TEST(FusedStepTest, TheTablesUpdateIsStepsUpdate) {
  for (const OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    torch::manual_seed(5);
    const torch::Tensor start = torch::randn({3, 4});
    const std::vector<torch::Tensor> grads = {torch::randn({3, 4}), torch::randn({3, 4}),
                                              torch::randn({3, 4})};
    std::vector<TrialHyperparameters> hyper(3);
    for (int k = 0; k < 3; ++k) {
      hyper[k].learning_rate = 0.01 * (k + 1);
      hyper[k].weight_decay = 0.01 * k;
      hyper[k].momentum = 0.5 * k / 2;
    }
    torch::Tensor a = start.clone().set_requires_grad(true);
    torch::Tensor b = start.clone().set_requires_grad(true);
    FusedOptimizer host(kind, false, {a}, 3);
    FusedOptimizer device(kind, false, {b}, 3);
    const torch::Tensor table = device.Tabulate({hyper, hyper, hyper});
    device.InitState();
    for (int t = 0; t < 3; ++t) {
      a.mutable_grad() = grads[t].clone();
      b.mutable_grad() = grads[t].clone();
      host.Step(hyper);
      device.StepWithRows(table[t].unsqueeze(2));
    }
    EXPECT_TRUE(torch::allclose(a, b, /*rtol=*/0, /*atol=*/1e-7)) << OptimizerName(kind);
  }
}

// One trial: 160 training examples in batches of 8 = 20 steps, 50 test examples, dropout off.
mpsd::v1::TrainJob Trial(const std::string& model, const std::string& optimizer, double lr,
                         double weight_decay, uint64_t seed) {
  mpsd::v1::TrainJob job;
  job.mutable_model()->set_name(model);
  job.mutable_model()->set_dropout(0);
  job.mutable_dataset()->set_name("fashion-mnist");
  job.mutable_dataset()->set_root(kFashionMnist);
  job.mutable_dataset()->set_limit_train(160);
  job.mutable_dataset()->set_limit_test(50);
  job.set_batch_size(8);
  job.set_epochs(1);
  job.mutable_optimizer()->set_name(optimizer);
  job.mutable_optimizer()->set_learning_rate(lr);
  job.mutable_optimizer()->set_weight_decay(weight_decay);
  job.set_seed(seed);
  job.set_device("cpu");
  return job;
}

struct Outcome {
  absl::Status status;
  std::vector<float> losses;
  std::vector<std::string> logs;
};

// Runs `specs` fused with `mode`; trial `cancel_trial` (>= 0) is cancelled once its step
// `cancel_after` has been reported.
std::vector<Outcome> RunTrials(const std::vector<mpsd::v1::TrainJob>& specs, FusedStepMode mode,
                               const std::string& prefix, int cancel_trial = -1,
                               int64_t cancel_after = 0) {
  at::set_num_threads(1);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  const TempDir dir("fused_step_test");
  api::Executor::Options options;
  options.artifacts_dir = dir.path().string();
  const DeviceInventory inventory = ProbeDevices();
  std::vector<TrainJobConfig> configs;
  for (size_t k = 0; k < specs.size(); ++k) {
    api::JobContext context;
    context.job_id = absl::StrCat(prefix, k);
    absl::StatusOr<TrainJobConfig> config = ResolveTrainJob(specs[k], inventory, options, &context);
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return {};
    configs.push_back(*std::move(config));
  }
  std::vector<Outcome> outcomes(specs.size());
  std::vector<std::unique_ptr<std::atomic<bool>>> flags;
  std::vector<FusedTrial> trials;
  for (size_t k = 0; k < specs.size(); ++k) {
    flags.push_back(std::make_unique<std::atomic<bool>>(false));
    std::atomic<bool>* flag = flags.back().get();
    Outcome* outcome = &outcomes[k];
    const bool cancels = static_cast<int>(k) == cancel_trial;
    FusedTrial trial;
    trial.job = &configs[k];
    trial.cancelled = flag;
    trial.sink = [outcome, flag, cancels, cancel_after](mpsd::v1::JobEvent event) {
      if (event.has_step()) {
        outcome->losses.push_back(event.step().loss());
        if (cancels && event.step().step() >= cancel_after) flag->store(true);
      }
      if (event.has_log()) outcome->logs.push_back(event.log().text());
    };
    trials.push_back(std::move(trial));
  }
  const std::vector<absl::Status> statuses =
      RunFusedTrainJobs(trials, /*shared_data_order=*/false, /*steps_per_readback=*/1, mode);
  for (size_t k = 0; k < statuses.size(); ++k) outcomes[k].status = statuses[k];
  return outcomes;
}

void ExpectLossesNear(const std::vector<float>& batched, const std::vector<float>& per_trial,
                      size_t steps, double tolerance, const std::string& what) {
  ASSERT_GE(batched.size(), steps) << what;
  ASSERT_GE(per_trial.size(), steps) << what;
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_NEAR(batched[i], per_trial[i], tolerance) << what << " step " << i + 1;
  }
}

// shared_data: whether the trials share one training tensor (one gather per step).
void CompareBatchedWithPerTrial(const std::vector<mpsd::v1::TrainJob>& specs,
                                const std::string& what, bool shared_data) {
  const std::vector<Outcome> per_trial = RunTrials(specs, FusedStepMode::kAuto, "p");
  const std::vector<Outcome> batched = RunTrials(specs, FusedStepMode::kBatched, "b");
  ASSERT_EQ(per_trial.size(), specs.size());
  ASSERT_EQ(batched.size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::string trial = absl::StrCat(what, " trial ", k);
    ASSERT_TRUE(per_trial[k].status.ok()) << trial << ": " << per_trial[k].status;
    ASSERT_TRUE(batched[k].status.ok()) << trial << ": " << batched[k].status;
    EXPECT_EQ(batched[k].losses.size(), 20u) << trial;
    ExpectLossesNear(batched[k].losses, per_trial[k].losses, 20, 1e-5, trial);
    // The batched path says so (on the CPU: eagerly, the graph being for CUDA).
    EXPECT_THAT(batched[k].logs,
                ::testing::Contains(HasSubstr("fused step runs eagerly (batched over the trials): "
                                              "CUDA graphs are for CUDA devices")))
        << trial;
    for (const auto* logs : {&batched[k].logs, &per_trial[k].logs}) {
      EXPECT_THAT(*logs, ::testing::Contains(HasSubstr("each trial's dropout masks and "
                                                       "augmentation from its own generator")))
          << trial;
    }
    EXPECT_THAT(per_trial[k].logs, ::testing::Contains(HasSubstr("fused step runs trial by trial")))
        << trial;
    const auto per_trial_gather = ::testing::Contains(HasSubstr("one gather per trial"));
    if (shared_data) {
      EXPECT_THAT(batched[k].logs, ::testing::Not(per_trial_gather)) << trial;
    } else {
      EXPECT_THAT(batched[k].logs, per_trial_gather) << trial;
    }
  }
  EXPECT_NE(batched[0].losses[5], batched[1].losses[5]) << what << ": the trials do not differ";
}

TEST(FusedStepTest, BatchedConvNetAdamWMatchesThePerTrialStep) {
  CompareBatchedWithPerTrial(
      {Trial("convnet", "adamw", 1e-3, 0, 1), Trial("convnet", "adamw", 3e-3, 1e-4, 2),
       Trial("convnet", "adamw", 5e-4, 1e-2, 3)},
      "convnet adamw", /*shared_data=*/false);
}

// bf16: the batched forward under autocast as the per-trial one (the loss in float32).
TEST(FusedStepTest, BatchedConvNetBf16MatchesThePerTrialStep) {
  std::vector<mpsd::v1::TrainJob> specs = {Trial("convnet", "adamw", 1e-3, 0, 1),
                                           Trial("convnet", "adamw", 3e-3, 1e-4, 2)};
  for (auto& spec : specs) spec.set_precision("bf16");
  CompareBatchedWithPerTrial(specs, "convnet adamw bf16", /*shared_data=*/false);
}

// The trials' augmentation in the batched step: deterministic transforms (Resize 32, then
// CenterCrop 28) give the per-trial step's losses; random ones are drawn (the losses move away
// from the unaugmented run's) and train to finite losses.
TEST(FusedStepTest, BatchedStepAugmentsEveryTrialsImages) {
  std::vector<mpsd::v1::TrainJob> specs = {Trial("convnet", "adam", 1e-3, 0, 1),
                                           Trial("convnet", "adam", 3e-3, 1e-4, 2)};
  std::vector<mpsd::v1::TrainJob> resized = specs;
  for (auto& spec : resized) {
    spec.mutable_dataset()->mutable_augmentation()->add_resize(32);
    spec.mutable_dataset()->mutable_augmentation()->add_center_crop(28);
  }
  CompareBatchedWithPerTrial(resized, "convnet resize + center crop", /*shared_data=*/false);

  std::vector<mpsd::v1::TrainJob> flipped = specs;
  for (auto& spec : flipped) {
    spec.mutable_dataset()->mutable_augmentation()->set_random_crop_padding(2);
    spec.mutable_dataset()->mutable_augmentation()->set_horizontal_flip(true);
  }
  const std::vector<Outcome> plain = RunTrials(specs, FusedStepMode::kBatched, "n");
  const std::vector<Outcome> augmented = RunTrials(flipped, FusedStepMode::kBatched, "a");
  ASSERT_EQ(augmented.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    ASSERT_TRUE(augmented[k].status.ok()) << augmented[k].status;
    ASSERT_EQ(augmented[k].losses.size(), 20u);
    ASSERT_EQ(plain[k].losses.size(), 20u);
    for (const float loss : augmented[k].losses) EXPECT_TRUE(std::isfinite(loss));
    // Step 1's batch is the same examples through the same weights: only the crops and flips
    // can make its loss differ.
    EXPECT_NE(augmented[k].losses[0], plain[k].losses[0]) << "trial " << k;
  }
}

// The ConvNet's own dropout (Dropout2d 0.25, Dropout 0.5) and random augmentation (crops with
// padding, flips): the batched step draws each trial's from the trial's own generator as the
// per-trial step does, so the losses are the same numbers, not only the same distribution.
TEST(FusedStepTest, BatchedStepDrawsEachTrialsDropoutAndAugmentationAsItsRunAlone) {
  std::vector<mpsd::v1::TrainJob> specs = {Trial("convnet", "adam", 1e-3, 0, 1),
                                           Trial("convnet", "adam", 3e-3, 1e-4, 2)};
  for (auto& spec : specs) {
    spec.mutable_model()->clear_dropout();
    spec.mutable_dataset()->mutable_augmentation()->set_random_crop_padding(2);
    spec.mutable_dataset()->mutable_augmentation()->set_horizontal_flip(true);
  }
  CompareBatchedWithPerTrial(specs, "convnet dropout + random crop and flip",
                             /*shared_data=*/false);
}

// Per-trial label smoothing (the loss's own formula, not one cross_entropy), sgd with nesterov
// momentum (a zero momentum buffer against LibTorch's clone of the first step), and the first
// 160 examples for every trial: one training tensor shared by all, so one gather per step (the
// stratified subsets of the other tests differ per seed: one gather per trial).
TEST(FusedStepTest, BatchedMlpSgdWithPerTrialLabelSmoothingMatchesThePerTrialStep) {
  std::vector<mpsd::v1::TrainJob> specs = {Trial("mlp", "sgd", 0.05, 0, 1),
                                           Trial("mlp", "sgd", 0.02, 1e-4, 2),
                                           Trial("mlp", "sgd", 0.01, 1e-2, 3)};
  const double smoothing[] = {0, 0.1, 0.2};
  for (size_t k = 0; k < specs.size(); ++k) {
    specs[k].mutable_optimizer()->set_momentum(0.9);
    specs[k].mutable_optimizer()->set_nesterov(true);
    specs[k].set_label_smoothing(smoothing[k]);
    specs[k].mutable_dataset()->set_subset("first");
  }
  CompareBatchedWithPerTrial(specs, "mlp sgd", /*shared_data=*/true);
}

// The sequence models on synthetic [1, 6, 8] images (6 steps of 8 features: Fashion-MNIST's 28
// of 28 would take minutes on 2 cores), 160 training examples = 20 steps, each trial's own data
// (the seed draws it: one gather per trial).
std::vector<mpsd::v1::TrainJob> SequenceTrials(const std::string& model) {
  std::vector<mpsd::v1::TrainJob> specs = {Trial(model, "adamw", 1e-3, 0, 1),
                                           Trial(model, "adamw", 3e-3, 1e-4, 2)};
  for (auto& spec : specs) {
    mpsd::v1::DatasetSpec& dataset = *spec.mutable_dataset();
    dataset.Clear();
    dataset.set_name("synthetic");
    for (const int64_t size : {1, 6, 8}) dataset.mutable_synthetic()->add_input_shape(size);
    dataset.mutable_synthetic()->set_train_examples(160);
    dataset.mutable_synthetic()->set_test_examples(16);
  }
  return specs;
}

TEST(FusedStepTest, BatchedLstmMatchesThePerTrialStep) {
  CompareBatchedWithPerTrial(SequenceTrials("lstm"), "lstm adamw", /*shared_data=*/false);
}

TEST(FusedStepTest, BatchedTransformerMatchesThePerTrialStep) {
  CompareBatchedWithPerTrial(SequenceTrials("transformer"), "transformer adamw",
                             /*shared_data=*/false);
}

// The batched forward's dropout (one draw per layer for all trials, each trial's 1 − p
// broadcast over [K, N, T, h] and the attention probabilities [K, N, heads, T, T]): a trial with
// p = 0 keeps everything (its logits are the per-trial forward's), one with p = 0.3 does not.
TEST(FusedStepTest, BatchedTransformerDropoutIsEachTrialsOwn) {
  at::set_num_threads(1);
  ModelConfig config;
  config.input_shape = {1, 6, 8};
  std::vector<std::shared_ptr<ClassifierImpl>> models;
  for (const double p : {0.0, 0.3}) {
    config.dropout = p;
    torch::manual_seed(1);  // the same weights: only the dropout differs
    models.push_back(FindModel("transformer")->make(config));
  }
  absl::StatusOr<std::unique_ptr<FusedModel>> fused =
      FusedModel::Create("transformer", models, torch::kCPU);
  ASSERT_TRUE(fused.ok()) << fused.status();
  torch::manual_seed(7);
  const torch::Tensor inputs = torch::randn({2, 4, 1, 6, 8});
  at::Generator generator = at::detail::createCPUGenerator(3);
  std::vector<at::Generator> generators = {at::detail::createCPUGenerator(4),
                                           at::detail::createCPUGenerator(5)};
  torch::NoGradGuard no_grad;
  const torch::Tensor batched = (*fused)->Forward(inputs, generator);
  const torch::Tensor per_trial = (*fused)->Forward(inputs, generators);
  ASSERT_EQ(batched.sizes(), (std::vector<int64_t>{2, 4, 10}));
  EXPECT_TRUE(torch::equal(batched[0], per_trial[0]));
  EXPECT_TRUE(torch::isfinite(batched).all().item<bool>());
  EXPECT_GT((batched[1] - batched[0]).abs().max().item<double>(), 1e-4);
}

// A cancelled trial (masked from its next step) and a diverged one (step 1) end alone; the
// others' losses are those of the batched run without them stopping.
TEST(FusedStepTest, StoppedTrialsOnlyChangeTheirMaskInTheBatchedStep) {
  std::vector<mpsd::v1::TrainJob> specs = {
      Trial("convnet", "adam", 1e-3, 0, 1), Trial("convnet", "adam", 3e-3, 1e-4, 2),
      Trial("convnet", "adam", 5e-4, 1e-2, 3), Trial("convnet", "adam", 2e-3, 1e-3, 4)};
  const std::vector<Outcome> full = RunTrials(specs, FusedStepMode::kBatched, "f");
  specs[3].set_divergence_threshold(0.5);  // a first loss near ln 10 = 2.3 diverges at step 1
  const std::vector<Outcome> stopped =
      RunTrials(specs, FusedStepMode::kBatched, "s", /*cancel_trial=*/1, /*cancel_after=*/5);
  ASSERT_EQ(full.size(), 4u);
  ASSERT_EQ(stopped.size(), 4u);
  EXPECT_EQ(stopped[1].status.code(), absl::StatusCode::kCancelled) << stopped[1].status;
  EXPECT_THAT(std::string(stopped[1].status.message()), HasSubstr("cancelled after step 5 of 20"));
  EXPECT_EQ(stopped[1].losses.size(), 5u);
  EXPECT_EQ(stopped[3].status.code(), absl::StatusCode::kAborted) << stopped[3].status;
  EXPECT_EQ(stopped[3].losses.size(), 1u);
  for (const size_t k : {size_t{0}, size_t{2}}) {
    ASSERT_TRUE(stopped[k].status.ok()) << stopped[k].status;
    ExpectLossesNear(stopped[k].losses, full[k].losses, 20, 1e-6, absl::StrCat("trial ", k));
  }
  ExpectLossesNear(stopped[1].losses, full[1].losses, 5, 1e-6, "the cancelled trial");
}

}  // namespace
}  // namespace mpsd::trainer
