// Tests for fused trials (trainer/fused_train.h) through the public Executor interface
// (PlanFusion, RunFused) on the real Fashion-MNIST files, CPU only: each fused trial against the
// same trial run alone with Executor::Run (step losses and the weights of its model.pt), a trial
// cancelled mid-run, the shared data order, and PlanFusion's refusals. Small shapes and subsets
// for 2 cores; deterministic algorithms.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/error_cause.h"
#include "api/executor.h"
#include "tests/common/temp_dir.h"
#include "trainer/device.h"
#include "trainer/fused_models.h"
#include "trainer/fused_train.h"
#include "trainer/models.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;
using ::mpsd::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";
constexpr int kComparedSteps = 50;
constexpr double kTolerance = 1e-5;

std::unique_ptr<Executor> MakeExecutor(const std::string& artifacts_dir) {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  Executor::Options options;
  // One intra-op thread: with two, oneDNN splits a grouped convolution's weight-gradient sum
  // over threads otherwise than the trial's own convolution's (last-bit differences, which
  // training amplifies); with one, fused and unfused steps are bit-identical.
  options.cpu_threads = 1;
  options.steps_per_readback = 1;  // a cancel flag set in a step's event stops the next step
  options.artifacts_dir = artifacts_dir;
  absl::StatusOr<std::unique_ptr<Executor>> executor = CreateTorchExecutor(options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return *std::move(executor);
}

// One trial: 400 training examples in batches of 8 = 50 steps per epoch, 100 test examples.
mpsd::v1::SubmitJobRequest Trial(const std::string& model, const std::string& optimizer,
                                 double learning_rate, double weight_decay, uint64_t seed) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name(model);
  job.mutable_dataset()->set_name("fashion-mnist");
  job.mutable_dataset()->set_root(kFashionMnist);
  job.mutable_dataset()->set_limit_train(400);
  job.mutable_dataset()->set_limit_test(100);
  job.set_batch_size(8);
  job.set_epochs(1);
  job.mutable_optimizer()->set_name(optimizer);
  job.mutable_optimizer()->set_learning_rate(learning_rate);
  job.mutable_optimizer()->set_weight_decay(weight_decay);
  job.set_seed(seed);
  job.set_device("cpu");
  return request;
}

struct Result {
  absl::Status status;
  std::vector<mpsd::v1::JobEvent> events;
  // RunFused: TrialRun::done's calls, the status it was given, and how many events of every
  // trial had arrived by then (in the order of the run's sinks).
  int done_calls = 0;
  absl::Status done_status;
  bool summary_before_done = false;
  int64_t events_of_all_at_done = 0;

  std::vector<float> losses() const {
    std::vector<float> losses;
    for (const auto& event : events) {
      if (event.has_step()) losses.push_back(event.step().loss());
    }
    return losses;
  }
  const mpsd::v1::JobSummary* summary() const {
    return !events.empty() && events.back().has_summary() ? &events.back().summary() : nullptr;
  }
  std::vector<mpsd::v1::EpochMetrics> epochs() const {
    std::vector<mpsd::v1::EpochMetrics> epochs;
    for (const auto& event : events) {
      if (event.has_epoch()) epochs.push_back(event.epoch());
    }
    return epochs;
  }
};

Result RunAlone(Executor& executor, const std::string& job_id,
                const mpsd::v1::SubmitJobRequest& spec) {
  Result result;
  CancelFlag cancelled;
  result.status = executor.Run(
      JobContext{job_id, ""}, spec,
      [&](mpsd::v1::JobEvent event) { result.events.push_back(std::move(event)); }, cancelled);
  return result;
}

// Runs `specs` fused as jobs "<prefix>0", "<prefix>1", ...; `cancel_trial` (>= 0) is cancelled
// once its step `cancel_after` has been reported.
std::vector<Result> RunFused(Executor& executor, const std::string& prefix,
                             const std::vector<mpsd::v1::SubmitJobRequest>& specs,
                             bool shared_data_order = false, int cancel_trial = -1,
                             int64_t cancel_after = 0) {
  std::vector<Result> results(specs.size());
  auto events_of_all = std::make_shared<int64_t>(0);
  std::vector<std::unique_ptr<CancelFlag>> flags;
  std::vector<api::TrialRun> trials;
  for (size_t k = 0; k < specs.size(); ++k) {
    flags.push_back(std::make_unique<CancelFlag>());
    CancelFlag* flag = flags.back().get();
    Result* result = &results[k];
    const bool cancels = static_cast<int>(k) == cancel_trial;
    api::TrialRun trial;
    trial.job.job_id = absl::StrCat(prefix, k);
    trial.spec = specs[k];
    trial.sink = [result, flag, cancels, cancel_after, events_of_all](mpsd::v1::JobEvent event) {
      if (cancels && event.has_step() && event.step().step() >= cancel_after) flag->Cancel();
      result->events.push_back(std::move(event));
      ++*events_of_all;
    };
    trial.done = [result, events_of_all](const absl::Status& status) {
      ++result->done_calls;
      result->done_status = status;
      result->summary_before_done = result->summary() != nullptr;
      result->events_of_all_at_done = *events_of_all;
    };
    trial.cancelled = flag;
    trials.push_back(std::move(trial));
  }
  api::FusionOptions options;
  options.shared_data_order = shared_data_order;
  const std::vector<absl::Status> statuses = executor.RunFused(trials, options);
  EXPECT_EQ(statuses.size(), specs.size());
  for (size_t k = 0; k < statuses.size() && k < results.size(); ++k) {
    results[k].status = statuses[k];
    // Each trial settled once, after its summary, with the status RunFused returns for it.
    EXPECT_EQ(results[k].done_calls, 1) << "trial " << k;
    EXPECT_EQ(results[k].done_status, statuses[k]) << "trial " << k;
    EXPECT_TRUE(results[k].summary_before_done) << "trial " << k;
  }
  return results;
}

// The input shape of a job of Trial's: Fashion-MNIST's, or the synthetic dataset's.
std::vector<int64_t> InputShape(const mpsd::v1::TrainJob& job) {
  const auto& shape = job.dataset().synthetic().input_shape();
  if (job.dataset().name() == "synthetic") return {shape.begin(), shape.end()};
  return {1, 28, 28};
}

// The zoo model a job's model.pt holds.
std::shared_ptr<ClassifierImpl> LoadModel(const std::string& name, const fs::path& path,
                                          const std::vector<int64_t>& input_shape = {1, 28, 28}) {
  ModelConfig config;
  config.input_shape = input_shape;
  config.num_classes = 10;
  std::shared_ptr<ClassifierImpl> model = FindModel(name)->make(config);
  torch::serialize::InputArchive archive;
  archive.load_from(path.string());
  model->load(archive);
  return model;
}

// The largest difference between `a`'s and `b`'s parameters and buffers of the same name, in
// float64; `relative`: each tensor's divided by max(1, its largest magnitude in `b`).
double MaxWeightDifference(const torch::nn::Module& a, const torch::nn::Module& b,
                           bool relative = false) {
  double worst = 0;
  const auto compare = [&](const torch::OrderedDict<std::string, torch::Tensor>& x,
                           const torch::OrderedDict<std::string, torch::Tensor>& y) {
    for (const auto& item : x) {
      const torch::Tensor u = item.value().to(torch::kFloat64);
      const torch::Tensor v = y[item.key()].to(torch::kFloat64);
      const double scale = relative ? std::max(1.0, v.abs().max().item<double>()) : 1.0;
      worst = std::max(worst, (u - v).abs().max().item<double>() / scale);
    }
  };
  compare(a.named_parameters(), b.named_parameters());
  compare(a.named_buffers(), b.named_buffers());
  return worst;
}

void ExpectSameLosses(const std::vector<float>& fused, const std::vector<float>& alone,
                      size_t steps, const std::string& what) {
  ASSERT_GE(fused.size(), steps) << what;
  ASSERT_GE(alone.size(), steps) << what;
  size_t first_difference = steps;  // for the messages: the first step not bit-identical
  for (size_t i = 0; i < steps && first_difference == steps; ++i) {
    if (fused[i] != alone[i]) first_difference = i;
  }
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_NEAR(fused[i], alone[i], kTolerance)
        << what << " step " << i + 1 << " (bit-identical up to step " << first_difference << ")";
  }
}

// Three trials of `model` with `optimizer`: different learning rates, weight decays and seeds.
std::vector<mpsd::v1::SubmitJobRequest> ThreeTrials(const std::string& model,
                                                    const std::string& optimizer) {
  const bool sgd = optimizer == "sgd";
  std::vector<mpsd::v1::SubmitJobRequest> specs = {
      Trial(model, optimizer, sgd ? 0.05 : 1e-3, 0, 1),
      Trial(model, optimizer, sgd ? 0.02 : 3e-3, 1e-4, 2),
      Trial(model, optimizer, sgd ? 0.01 : 5e-4, 1e-2, 3)};
  if (sgd) {  // momentum per trial too, 0 included
    specs[0].mutable_train_job()->mutable_optimizer()->set_momentum(0.9);
    specs[1].mutable_train_job()->mutable_optimizer()->set_momentum(0.5);
  }
  return specs;
}

// Each fused trial against itself alone: its first `steps` step losses, its final weights, its
// epoch. `mutate` (optional) changes every trial's job alike.
void CompareFusedWithAlone(const std::string& model, const std::string& optimizer,
                           void (*mutate)(mpsd::v1::TrainJob&) = nullptr,
                           size_t steps = kComparedSteps) {
  const TempDir dir("fused_test");
  auto executor = MakeExecutor(dir.path().string());
  std::vector<mpsd::v1::SubmitJobRequest> specs = ThreeTrials(model, optimizer);
  if (mutate != nullptr) {
    for (auto& spec : specs) mutate(*spec.mutable_train_job());
  }
  absl::StatusOr<std::vector<int>> plan = executor->PlanFusion(specs, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, (std::vector<int>{0, 1, 2}));
  const std::vector<Result> fused = RunFused(*executor, "fused", specs);
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::string what = absl::StrCat(model, " ", optimizer, " trial ", k);
    const Result alone = RunAlone(*executor, absl::StrCat("alone", k), specs[k]);
    ASSERT_TRUE(alone.status.ok()) << what << ": " << alone.status;
    ASSERT_TRUE(fused[k].status.ok()) << what << ": " << fused[k].status;
    EXPECT_EQ(fused[k].losses().size(), alone.losses().size()) << what;
    ExpectSameLosses(fused[k].losses(), alone.losses(), steps, what);
    const std::vector<int64_t> shape = InputShape(specs[k].train_job());
    const auto fused_model =
        LoadModel(model, dir.path() / absl::StrCat("fused", k) / "model.pt", shape);
    const auto alone_model =
        LoadModel(model, dir.path() / absl::StrCat("alone", k) / "model.pt", shape);
    EXPECT_LE(MaxWeightDifference(*fused_model, *alone_model), kTolerance) << what;
    // The same events as the unfused job: its epochs (with the test evaluation) and its summary.
    ASSERT_EQ(fused[k].epochs().size(), 1u) << what;
    EXPECT_NEAR(fused[k].epochs()[0].test_accuracy(), alone.epochs()[0].test_accuracy(), 0.011)
        << what;
    EXPECT_NEAR(fused[k].epochs()[0].train_loss(), alone.epochs()[0].train_loss(), 1e-4) << what;
    ASSERT_NE(fused[k].summary(), nullptr) << what;
    EXPECT_EQ(fused[k].summary()->stop_reason(), "epochs_completed") << what;
    EXPECT_EQ(fused[k].summary()->parameters(), alone.summary()->parameters()) << what;
    EXPECT_EQ(fused[k].summary()->model_path(),
              (dir.path() / absl::StrCat("fused", k) / "model.pt").string())
        << what;
  }
  // The trials really differ (otherwise the comparison above proves little).
  EXPECT_NE(fused[0].losses()[5], fused[1].losses()[5]);
}

TEST(FusedTrainTest, MlpSgdMatchesEachTrialAlone) { CompareFusedWithAlone("mlp", "sgd"); }
TEST(FusedTrainTest, MlpAdamMatchesEachTrialAlone) { CompareFusedWithAlone("mlp", "adam"); }
TEST(FusedTrainTest, MlpAdamWMatchesEachTrialAlone) { CompareFusedWithAlone("mlp", "adamw"); }
TEST(FusedTrainTest, ConvNetSgdMatchesEachTrialAlone) { CompareFusedWithAlone("convnet", "sgd"); }
TEST(FusedTrainTest, ConvNetAdamMatchesEachTrialAlone) { CompareFusedWithAlone("convnet", "adam"); }
TEST(FusedTrainTest, ConvNetAdamWMatchesEachTrialAlone) {
  CompareFusedWithAlone("convnet", "adamw");
}
TEST(FusedTrainTest, CifarCnnSgdMatchesEachTrialAlone) {
  CompareFusedWithAlone("cifar_cnn", "sgd");
}
TEST(FusedTrainTest, CifarCnnAdamMatchesEachTrialAlone) {
  CompareFusedWithAlone("cifar_cnn", "adam");
}
TEST(FusedTrainTest, CifarCnnAdamWMatchesEachTrialAlone) {
  CompareFusedWithAlone("cifar_cnn", "adamw");
}

// ResNet's residual blocks (BasicBlock), its downsample branches, the 7×7 stride-2 stem on one
// input channel and the 3×3 stride-2 max-pool, trained 25 steps: 200 training examples, as
// resnet18's steps are the slowest of these tests' on 2 cores (the same 100 test examples).
constexpr size_t kResNetSteps = 25;
TEST(FusedTrainTest, ResNet18AdamMatchesEachTrialAlone) {
  CompareFusedWithAlone(
      "resnet18", "adam",
      [](mpsd::v1::TrainJob& job) { job.mutable_dataset()->set_limit_train(8 * kResNetSteps); },
      kResNetSteps);
}

// Every fused ResNet (resnet18, 34 and 50: BasicBlock and Bottleneck, downsample branches with
// stride 1 and 2) on [3, 32, 32], one thread: its training forward pass is each trial's own
// model's (batch statistics), and after one SGD step on the summed logits' gradients each
// trial's weights and running statistics, unfused, are its own model's to float32 rounding
// (within 1e-5 relative; 1.3e-6 measured: the 3-channel stem is a grouped convolution here).
TEST(FusedTrainTest, FusedResNetsComputeEachTrialsForwardAndGradients) {
  torch::set_num_threads(1);
  constexpr double kLearningRate = 0.1;
  for (const std::string name : {"resnet18", "resnet34", "resnet50"}) {
    ModelConfig config;
    config.input_shape = {3, 32, 32};
    config.num_classes = 10;
    std::vector<std::shared_ptr<ClassifierImpl>> models;
    for (int k = 0; k < 2; ++k) {
      torch::manual_seed(k + 1);
      models.push_back(FindModel(name)->make(config));
    }
    absl::StatusOr<std::unique_ptr<FusedModel>> fused =
        FusedModel::Create(name, models, torch::kCPU);
    ASSERT_TRUE(fused.ok()) << name << ": " << fused.status();
    torch::manual_seed(7);
    const torch::Tensor inputs = torch::randn({2, 4, 3, 32, 32});
    std::vector<at::Generator> generators = {at::detail::createCPUGenerator(1),
                                             at::detail::createCPUGenerator(2)};
    const torch::Tensor logits = (*fused)->Forward(inputs, generators);
    ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 4, 10})) << name;
    logits.sum().backward();
    {
      torch::NoGradGuard no_grad;
      for (const torch::Tensor& p : (*fused)->parameters()) p.sub_(kLearningRate * p.grad());
    }
    // The trials differ (else the comparisons prove little).
    EXPECT_GT((logits[0] - logits[1]).abs().max().item<double>(), 1e-3) << name;
    for (int k = 0; k < 2; ++k) {
      models[k]->train();
      const torch::Tensor expected = models[k]->forward(inputs[k]);
      EXPECT_LE((logits[k] - expected).abs().max().item<double>(), 1e-6) << name << " trial " << k;
      expected.sum().backward();
      {
        torch::NoGradGuard no_grad;
        for (torch::Tensor& p : models[k]->parameters()) p.sub_(kLearningRate * p.grad());
      }
      const std::shared_ptr<ClassifierImpl> unfused = FindModel(name)->make(config);
      (*fused)->Unfuse(k, *unfused);
      EXPECT_LE(MaxWeightDifference(*unfused, *models[k], /*relative=*/true), 1e-5)
          << name << " trial " << k;
    }
  }
}

// The sequence models on small images read row by row (Fashion-MNIST's 28 steps of 28 would
// take minutes on 2 cores): synthetic [1, 6, 8] images, 6 steps of 8 features; 160 training
// examples in batches of 8 = 20 steps, 16 test examples.
constexpr size_t kSequenceSteps = 20;
void SmallSequences(mpsd::v1::TrainJob& job) {
  mpsd::v1::DatasetSpec& dataset = *job.mutable_dataset();
  dataset.Clear();
  dataset.set_name("synthetic");
  for (const int64_t size : {1, 6, 8}) dataset.mutable_synthetic()->add_input_shape(size);
  dataset.mutable_synthetic()->set_train_examples(160);
  dataset.mutable_synthetic()->set_test_examples(16);
}

// The LSTM (2 layers of 512) as ATen's CPU LSTM computes it, trial by trial: bit-identical.
TEST(FusedTrainTest, LstmAdamMatchesEachTrialAlone) {
  CompareFusedWithAlone("lstm", "adam", SmallSequences, kSequenceSteps);
}

// bf16: the LSTM's weights cast once per forward, as autocast's cache casts the unfused
// layer's, so that their gradients are summed over the steps in bf16 as unfused.
TEST(FusedTrainTest, Bf16LstmAdamMatchesEachTrialAlone) {
  CompareFusedWithAlone(
      "lstm", "adam",
      [](mpsd::v1::TrainJob& job) {
        SmallSequences(job);
        job.set_precision("bf16");
      },
      kSequenceSteps);
}

// The transformer (preset small: 4 layers × 256, 4 heads) with dropout 0.1: each trial's masks
// (embeddings, attention probabilities, both residual branches) from its own generator.
TEST(FusedTrainTest, TransformerAdamWMatchesEachTrialAlone) {
  CompareFusedWithAlone("transformer", "adamw", SmallSequences, kSequenceSteps);
}

TEST(FusedTrainTest, Bf16TransformerAdamWMatchesEachTrialAlone) {
  CompareFusedWithAlone(
      "transformer", "adamw",
      [](mpsd::v1::TrainJob& job) {
        SmallSequences(job);
        job.set_precision("bf16");
      },
      kSequenceSteps);
}

// One fused training forward and backward of a sequence model against each trial's own model,
// one thread: trial k's logits, and its weights after one SGD step of learning rate 1 on the
// summed logits (so its gradients), unfused, against its model's. `dropout[k]`: trial k's
// ModelSpec.dropout (nullopt: the architecture's); its masks come from its own generator, in the
// state the default generator is in when its unfused forward runs. Returns the largest
// differences of the logits and of the weights.
std::pair<double, double> FusedAgainstEachTrial(const std::string& name, ModelConfig config,
                                                const std::vector<std::optional<double>>& dropout,
                                                const std::vector<int64_t>& batch_shape) {
  torch::set_num_threads(1);
  const int trials = static_cast<int>(dropout.size());
  std::vector<std::shared_ptr<ClassifierImpl>> models;
  for (int k = 0; k < trials; ++k) {
    config.dropout = dropout[k];
    torch::manual_seed(k + 1);
    models.push_back(FindModel(name)->make(config));
  }
  absl::StatusOr<std::unique_ptr<FusedModel>> fused = FusedModel::Create(name, models, torch::kCPU);
  EXPECT_TRUE(fused.ok()) << name << ": " << fused.status();
  if (!fused.ok()) return {1, 1};
  torch::manual_seed(7);
  std::vector<int64_t> shape = {trials};
  shape.insert(shape.end(), batch_shape.begin(), batch_shape.end());
  const torch::Tensor inputs = torch::randn(shape);
  std::vector<at::Generator> generators;
  for (int k = 0; k < trials; ++k) {
    torch::manual_seed(100 + k);
    generators.push_back(at::globalContext().defaultGenerator(torch::kCPU).clone());
  }
  const torch::Tensor logits = (*fused)->Forward(inputs, generators);
  logits.sum().backward();
  {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& p : (*fused)->parameters()) p.sub_(p.grad());
  }
  // The trials differ (else the comparisons prove little).
  EXPECT_GT((logits[0] - logits[1]).abs().max().item<double>(), 1e-3) << name;
  double logit_difference = 0;
  double weight_difference = 0;
  for (int k = 0; k < trials; ++k) {
    models[k]->train();
    torch::manual_seed(100 + k);  // the masks' generator, as generators[k]
    const torch::Tensor expected = models[k]->forward(inputs[k]);
    logit_difference =
        std::max(logit_difference, (logits[k] - expected).abs().max().item<double>());
    expected.sum().backward();
    {
      torch::NoGradGuard no_grad;
      for (torch::Tensor& p : models[k]->parameters()) p.sub_(p.grad());
    }
    config.dropout = dropout[k];
    const std::shared_ptr<ClassifierImpl> unfused = FindModel(name)->make(config);
    (*fused)->Unfuse(k, *unfused);
    weight_difference = std::max(weight_difference, MaxWeightDifference(*unfused, *models[k]));
  }
  return {logit_difference, weight_difference};
}

// The fused LSTM on images read row by row ([1, 12, 10]: 12 steps of 10 features) and on
// [T, F] sequences (7 steps of 24, a batch of 3): each trial's logits and gradients are its
// unfused model's bit for bit (the same at::lstm call on its own weights, see Lstm in
// fused_models.cc).
TEST(FusedTrainTest, FusedLstmComputesEachTrialsForwardAndGradients) {
  ModelConfig config;
  config.input_shape = {1, 12, 10};
  EXPECT_EQ(FusedAgainstEachTrial("lstm", config, {{}, {}, {}}, {4, 1, 12, 10}),
            std::make_pair(0.0, 0.0));
  config.input_shape = {7, 24};
  EXPECT_EQ(FusedAgainstEachTrial("lstm", config, {{}, {}}, {3, 7, 24}), std::make_pair(0.0, 0.0));
}

// The fused transformer (preset small), trials with dropout 0.1, 0 and 0.3 (every dropout:
// embeddings, attention probabilities, both residual branches), and with none at all (the
// attention without masks): each trial's logits and gradients are its unfused model's bit for
// bit, its masks drawn from its generator as its unfused forward draws them.
TEST(FusedTrainTest, FusedTransformerComputesEachTrialsForwardAndGradients) {
  ModelConfig config;
  config.input_shape = {1, 12, 10};
  EXPECT_EQ(FusedAgainstEachTrial("transformer", config, {{}, 0.0, 0.3}, {4, 1, 12, 10}),
            std::make_pair(0.0, 0.0));
  EXPECT_EQ(FusedAgainstEachTrial("transformer", config, {0.0, 0.0}, {4, 1, 12, 10}),
            std::make_pair(0.0, 0.0));
}

// Training-time augmentation fused: each trial's crops, flips, brightness and erasing drawn from
// its own generator before its dropout masks, as its unfused step draws them.
TEST(FusedTrainTest, AugmentedConvNetAdamMatchesEachTrialAlone) {
  CompareFusedWithAlone("convnet", "adam", [](mpsd::v1::TrainJob& job) {
    auto& augmentation = *job.mutable_dataset()->mutable_augmentation();
    augmentation.set_random_crop_padding(2);
    augmentation.set_horizontal_flip(true);
    augmentation.mutable_color_jitter()->set_brightness(0.3);
    augmentation.mutable_random_erasing()->set_p(0.5);
  });
}

TEST(FusedTrainTest, Bf16ConvNetAdamMatchesEachTrialAlone) {
  CompareFusedWithAlone("convnet", "adam",
                        [](mpsd::v1::TrainJob& job) { job.set_precision("bf16"); });
}

// TrainJob.early_stopping in a fused run: a min_delta no epoch can beat stops every trial after
// its second of three epochs, as it stops each alone: the same steps, epochs (the test split
// evaluated after the stopping one: evaluate_test end), best.pt (epoch 1) and model.pt (the
// last weights), SUCCEEDED with stop reason early_stopped.
TEST(FusedTrainTest, EarlyStoppedTrialsMatchEachTrialAlone) {
  const TempDir dir("fused_test");
  auto executor = MakeExecutor(dir.path().string());
  std::vector<mpsd::v1::SubmitJobRequest> specs = ThreeTrials("mlp", "sgd");
  for (auto& spec : specs) {
    mpsd::v1::TrainJob& job = *spec.mutable_train_job();
    job.set_epochs(3);
    job.mutable_early_stopping()->set_monitor("train_loss");
    job.mutable_early_stopping()->set_patience(1);
    job.mutable_early_stopping()->set_min_delta(100);
    job.set_evaluate_test("end");  // the test split after the epoch that stops, as alone
  }
  absl::StatusOr<std::vector<int>> plan = executor->PlanFusion(specs, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, (std::vector<int>{0, 1, 2}));
  const std::vector<Result> fused = RunFused(*executor, "fused", specs);
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::string what = absl::StrCat("trial ", k);
    const Result alone = RunAlone(*executor, absl::StrCat("alone", k), specs[k]);
    ASSERT_TRUE(alone.status.ok()) << what << ": " << alone.status;
    ASSERT_TRUE(fused[k].status.ok()) << what << ": " << fused[k].status;
    EXPECT_EQ(fused[k].losses().size(), 100u) << what;  // 2 epochs of 50 steps
    EXPECT_EQ(fused[k].losses().size(), alone.losses().size()) << what;
    ExpectSameLosses(fused[k].losses(), alone.losses(), 100, what);
    ASSERT_EQ(fused[k].epochs().size(), 2u) << what;
    ASSERT_EQ(alone.epochs().size(), 2u) << what;
    EXPECT_TRUE(alone.epochs()[1].evaluated()) << what;
    EXPECT_TRUE(fused[k].epochs()[1].evaluated()) << what;
    EXPECT_NEAR(fused[k].epochs()[1].test_accuracy(), alone.epochs()[1].test_accuracy(), 0.011)
        << what;
    EXPECT_NEAR(fused[k].epochs()[1].test_loss(), alone.epochs()[1].test_loss(), 1e-4) << what;
    ASSERT_NE(fused[k].summary(), nullptr) << what;
    const mpsd::v1::JobSummary& summary = *fused[k].summary();
    EXPECT_EQ(summary.stop_reason(), "early_stopped") << what;
    EXPECT_EQ(summary.monitor(), "train_loss") << what;
    EXPECT_EQ(summary.best_epoch(), 1) << what;
    EXPECT_EQ(summary.best_model_path(),
              (dir.path() / absl::StrCat("fused", k) / "best.pt").string())
        << what;
    EXPECT_TRUE(fs::exists(summary.best_model_path())) << what;
    bool noted = false;
    for (const auto& event : fused[k].events) {
      noted = noted || (event.has_log() &&
                        absl::StrContains(event.log().text(), "early stopping after epoch 2"));
    }
    EXPECT_TRUE(noted) << what;
    const auto fused_model = LoadModel("mlp", dir.path() / absl::StrCat("fused", k) / "model.pt");
    const auto alone_model = LoadModel("mlp", dir.path() / absl::StrCat("alone", k) / "model.pt");
    EXPECT_LE(MaxWeightDifference(*fused_model, *alone_model), kTolerance) << what;
    const auto fused_best = LoadModel("mlp", dir.path() / absl::StrCat("fused", k) / "best.pt");
    const auto alone_best = LoadModel("mlp", dir.path() / absl::StrCat("alone", k) / "best.pt");
    EXPECT_LE(MaxWeightDifference(*fused_best, *alone_best), kTolerance) << what;
  }
}

TEST(FusedTrainTest, NesterovAndScheduleMatchEachTrialAlone) {
  const TempDir dir("fused_test");
  auto executor = MakeExecutor(dir.path().string());
  std::vector<mpsd::v1::SubmitJobRequest> specs = ThreeTrials("mlp", "sgd");
  for (auto& spec : specs) spec.mutable_train_job()->mutable_optimizer()->set_momentum(0.8);
  for (auto& spec : specs) spec.mutable_train_job()->mutable_optimizer()->set_nesterov(true);
  specs[0].mutable_train_job()->mutable_schedule()->set_name("onecycle");
  specs[1].mutable_train_job()->mutable_schedule()->set_name("cosine");
  specs[1].mutable_train_job()->mutable_schedule()->set_warmup_steps(10);
  specs[2].mutable_train_job()->mutable_model()->set_dropout(0);
  const std::vector<Result> fused = RunFused(*executor, "fused", specs);
  for (size_t k = 0; k < specs.size(); ++k) {
    const Result alone = RunAlone(*executor, absl::StrCat("alone", k), specs[k]);
    ASSERT_TRUE(fused[k].status.ok()) << fused[k].status;
    ExpectSameLosses(fused[k].losses(), alone.losses(), kComparedSteps, absl::StrCat("trial ", k));
  }
}

TEST(FusedTrainTest, CancelledTrialEndsAloneAndTheOthersGoOn) {
  const TempDir dir("fused_test");
  auto executor = MakeExecutor(dir.path().string());
  const std::vector<mpsd::v1::SubmitJobRequest> specs = ThreeTrials("convnet", "adam");
  const std::vector<Result> fused =
      RunFused(*executor, "fused", specs, /*shared_data_order=*/false, /*cancel_trial=*/1,
               /*cancel_after=*/10);
  EXPECT_EQ(fused[1].status.code(), absl::StatusCode::kCancelled) << fused[1].status;
  EXPECT_THAT(std::string(fused[1].status.message()), HasSubstr("cancelled after step 10 of 50"));
  EXPECT_EQ(fused[1].losses().size(), 10u);
  ASSERT_NE(fused[1].summary(), nullptr);
  EXPECT_EQ(fused[1].summary()->stop_reason(), "cancelled");
  EXPECT_FALSE(fs::exists(dir.path() / "fused1" / "model.pt"));
  // It was settled while the others still trained: far fewer events had arrived by then than
  // at the end.
  EXPECT_LT(fused[1].events_of_all_at_done, fused[0].events_of_all_at_done / 2);
  for (const size_t k : {size_t{0}, size_t{2}}) {
    ASSERT_TRUE(fused[k].status.ok()) << fused[k].status;
    const Result alone = RunAlone(*executor, absl::StrCat("alone", k), specs[k]);
    ExpectSameLosses(fused[k].losses(), alone.losses(), kComparedSteps, absl::StrCat("trial ", k));
    const auto fused_model =
        LoadModel("convnet", dir.path() / absl::StrCat("fused", k) / "model.pt");
    const auto alone_model =
        LoadModel("convnet", dir.path() / absl::StrCat("alone", k) / "model.pt");
    EXPECT_LE(MaxWeightDifference(*fused_model, *alone_model), kTolerance);
  }
  // The cancelled trial's steps before the cancel are its steps alone.
  const Result alone = RunAlone(*executor, "alone1", specs[1]);
  ExpectSameLosses(fused[1].losses(), alone.losses(), 10, "cancelled trial");
}

TEST(FusedTrainTest, DivergedTrialEndsAloneAndTheOthersGoOn) {
  const TempDir dir("fused_test");
  auto executor = MakeExecutor(dir.path().string());
  std::vector<mpsd::v1::SubmitJobRequest> specs = ThreeTrials("mlp", "adam");
  // A first loss near ln 10 = 2.3 is above trial 1's threshold: it diverges at step 1.
  specs[1].mutable_train_job()->set_divergence_threshold(0.5);
  const std::vector<Result> fused = RunFused(*executor, "fused", specs);
  EXPECT_EQ(fused[1].status.code(), absl::StatusCode::kAborted) << fused[1].status;
  EXPECT_EQ(fused[1].losses().size(), 1u);
  ASSERT_NE(fused[1].summary(), nullptr);
  EXPECT_EQ(fused[1].summary()->stop_reason(), "diverged");
  const Result alone1 = RunAlone(*executor, "alone1", specs[1]);
  EXPECT_EQ(fused[1].status, alone1.status);
  for (const size_t k : {size_t{0}, size_t{2}}) {
    ASSERT_TRUE(fused[k].status.ok()) << fused[k].status;
    const Result alone = RunAlone(*executor, absl::StrCat("alone", k), specs[k]);
    ExpectSameLosses(fused[k].losses(), alone.losses(), kComparedSteps, absl::StrCat("trial ", k));
    const auto fused_model = LoadModel("mlp", dir.path() / absl::StrCat("fused", k) / "model.pt");
    const auto alone_model = LoadModel("mlp", dir.path() / absl::StrCat("alone", k) / "model.pt");
    EXPECT_LE(MaxWeightDifference(*fused_model, *alone_model), kTolerance);
  }
}

TEST(FusedTrainTest, SharedDataOrderDiffersOnlyInOrder) {
  const TempDir dir("fused_test");
  auto executor = MakeExecutor(dir.path().string());
  // A learning rate so small that the weights stay put, no dropout: an epoch's mean loss then
  // depends on which examples it saw, not on their order.
  std::vector<mpsd::v1::SubmitJobRequest> specs = {Trial("mlp", "sgd", 1e-9, 0, 1),
                                                   Trial("mlp", "sgd", 1e-9, 0, 2)};
  for (auto& spec : specs) {
    spec.mutable_train_job()->mutable_model()->set_dropout(0);
    spec.mutable_train_job()->mutable_dataset()->set_subset("first");  // the seed picks no data
  }
  const std::vector<Result> own = RunFused(*executor, "own", specs, /*shared=*/false);
  const std::vector<Result> shared = RunFused(*executor, "shared", specs, /*shared=*/true);
  for (size_t k = 0; k < 2; ++k) {
    ASSERT_TRUE(own[k].status.ok()) << own[k].status;
    ASSERT_TRUE(shared[k].status.ok()) << shared[k].status;
  }
  // Trial 0 keeps its order; trial 1 takes trial 0's, so its batches differ...
  EXPECT_EQ(shared[0].losses(), own[0].losses());
  EXPECT_NE(shared[1].losses(), own[1].losses());
  // ...but not what an epoch holds.
  EXPECT_NEAR(shared[1].epochs()[0].train_loss(), own[1].epochs()[0].train_loss(), 1e-5);
  EXPECT_EQ(shared[1].losses().size(), own[1].losses().size());
  // And trial 1's first batch under the shared order is trial 0's first batch through trial
  // 1's model: its loss differs from trial 0's (other weights) but its examples are trial 0's.
  EXPECT_NE(shared[1].losses()[0], shared[0].losses()[0]);
}

TEST(FusedTrainTest, PlanFusionAcceptsShapePreservingDifferencesAndCaps) {
  const TempDir dir("fused_test");
  auto executor = MakeExecutor(dir.path().string());
  std::vector<mpsd::v1::SubmitJobRequest> specs = ThreeTrials("convnet", "adamw");
  specs[1].mutable_train_job()->set_label_smoothing(0.1);
  specs[2].mutable_train_job()->mutable_model()->set_dropout(0.3);
  specs[2].mutable_train_job()->mutable_schedule()->set_name("cosine");
  // Early stopping is each trial's own (its patience swept, or on for some trials only).
  for (int i : {0, 1}) {
    mpsd::v1::EarlyStoppingSpec& stopping = *specs[i].mutable_train_job()->mutable_early_stopping();
    stopping.set_monitor("train_loss");
    stopping.set_patience(i + 1);
  }
  absl::StatusOr<std::vector<int>> plan = executor->PlanFusion(specs, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, (std::vector<int>{0, 1, 2}));
  plan = executor->PlanFusion(specs, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, (std::vector<int>{0, 1}));
  // A trial that differs in its batch size is left out; the trials after it still join.
  specs[1].mutable_train_job()->set_batch_size(16);
  plan = executor->PlanFusion(specs, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, (std::vector<int>{0, 2}));
}

// fp16 fails validation on this CPU LibTorch before fusion is asked; FusionRefusal is asked
// directly with the precision of a CUDA job. bf16 fuses.
TEST(FusedTrainTest, FusionRefusesFp16AndTakesBf16) {
  const DeviceInventory inventory = ProbeDevices();
  api::JobContext context;
  context.job_id = "precision";
  const mpsd::v1::SubmitJobRequest spec = ThreeTrials("convnet", "adam")[0];
  absl::StatusOr<TrainJobConfig> config =
      ResolveTrainJob(spec.train_job(), inventory, api::Executor::Options{}, &context);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(FusionRefusal(*config), "");
  config->precision = Precision::kBf16;
  EXPECT_EQ(FusionRefusal(*config), "");
  config->precision = Precision::kFp16;
  EXPECT_EQ(FusionRefusal(*config), "train_job.precision fp16 is not supported fused yet");
}

struct Refusal {
  std::string name;
  void (*mutate)(std::vector<mpsd::v1::SubmitJobRequest>&);
  std::string message;
};

TEST(FusedTrainTest, PlanFusionRefusalsNameTheModelOrField) {
  const TempDir dir("fused_test");
  auto executor = MakeExecutor(dir.path().string());
  const std::vector<Refusal> cases = {
      {"model without a fused form",
       [](auto& s) {
         for (auto& spec : s) {
           mpsd::v1::TrainJob& job = *spec.mutable_train_job();
           job.mutable_model()->set_name("vgg11");  // 32×32 at least
           SmallSequences(job);
           job.mutable_dataset()->mutable_synthetic()->clear_input_shape();
           for (const int64_t size : {3, 32, 32}) {
             job.mutable_dataset()->mutable_synthetic()->add_input_shape(size);
           }
         }
       },
       "trial 0: model vgg11 has no fused form yet (fused: mlp, convnet, cifar_cnn, resnet18, "
       "resnet34, resnet50, lstm, transformer, bert_base)"},
      {"batch size differs",
       [](auto& s) {
         for (size_t i = 1; i < s.size(); ++i) s[i].mutable_train_job()->set_batch_size(16);
       },
       "trial 1 differs in train_job.batch_size"},
      {"optimizer differs",
       [](auto& s) {
         for (size_t i = 1; i < s.size(); ++i) {
           s[i].mutable_train_job()->mutable_optimizer()->set_name("adamw");
         }
       },
       "trial 1 differs in train_job.optimizer.name"},
      {"model differs",
       [](auto& s) {
         for (size_t i = 1; i < s.size(); ++i) {
           s[i].mutable_train_job()->mutable_model()->set_name("mlp");
         }
       },
       "trial 1 differs in train_job.model.name"},
      {"checkpoints",
       [](auto& s) {
         for (auto& spec : s) spec.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
       },
       "trial 0: train_job.checkpoint is not supported fused yet"},
      {"clipping",
       [](auto& s) {
         for (auto& spec : s) spec.mutable_train_job()->set_grad_clip_norm(1.0);
       },
       "trial 0: train_job.grad_clip_norm is not supported fused yet"},
      {"mixup",
       [](auto& s) {
         for (auto& spec : s) {
           spec.mutable_train_job()
               ->mutable_dataset()
               ->mutable_augmentation()
               ->mutable_mixup()
               ->set_alpha(0.2);
         }
       },
       "trial 0: train_job.dataset.augmentation mixup/cutmix is not supported fused yet"},
      {"one trial", [](auto& s) { s.resize(1); }, "fewer than 2 trials to fuse"},
  };
  for (const Refusal& c : cases) {
    std::vector<mpsd::v1::SubmitJobRequest> specs = ThreeTrials("convnet", "adam");
    c.mutate(specs);
    const absl::StatusOr<std::vector<int>> plan = executor->PlanFusion(specs, 8);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << c.name;
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr(c.message)) << c.name;
    // A trial named in the message is named as data too: its index and the text after its name.
    if (absl::StartsWith(c.message, "trial ")) {
      const std::optional<api::ErrorCause> cause = api::CauseOf(plan.status());
      ASSERT_TRUE(cause.has_value()) << c.name;
      EXPECT_EQ(cause->kind(), api::ErrorCause::TRIAL_NOT_FUSABLE) << c.name;
      EXPECT_EQ(absl::StrCat("trial ", cause->trial(), cause->reason()),
                std::string(plan.status().message()))
          << c.name;
    }
  }
}

}  // namespace
}  // namespace mpsd::trainer
