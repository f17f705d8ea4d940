// TrainJob.task and loss (trainer/task.h): the losses and metrics against their PyTorch /
// torchmetrics definitions computed by hand, and multilabel and regression jobs through the real
// Executor on the CPU on small tensors files written here with LibTorch's pickler (the format
// torch.save writes): a regression of a noisy linear function reaches R² > 0.9, separable labels
// reach a high accuracy, classification is computed exactly as before tasks, and every bad
// spec or target file is refused at submit naming the field or the file.
#include "trainer/task.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/common/temp_dir.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {
namespace {

using mpsd::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace F = torch::nn::functional;

// ---- The file: {"train": {"x", "y"}, "test": {"x", "y"}}, as torch.save writes it ----------

c10::impl::GenericDict Split(const torch::Tensor& x, const torch::Tensor& y) {
  c10::impl::GenericDict split(c10::StringType::get(), c10::AnyType::get());
  split.insert("x", x);
  split.insert("y", y);
  return split;
}

void WriteTensors(const std::string& path, const torch::Tensor& train_x,
                  const torch::Tensor& train_y, const torch::Tensor& test_x,
                  const torch::Tensor& test_y) {
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("train", Split(train_x, train_y));
  root.insert("test", Split(test_x, test_y));
  const std::vector<char> bytes = torch::pickle_save(root);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// y = x W + 0.5 + noise: [N, 2] targets of [N, 8] inputs; the same W for every split.
void WriteRegression(const std::string& path, int64_t train, int64_t test, bool one_output) {
  torch::manual_seed(3);
  const torch::Tensor w = torch::randn({8, 2});
  const auto make = [&](int64_t n) {
    const torch::Tensor x = torch::randn({n, 8});
    torch::Tensor y = x.matmul(w) + 0.5 + 0.05 * torch::randn({n, 2});
    if (one_output) y = y.select(/*dim=*/1, 0).contiguous();
    return std::make_pair(x, y);
  };
  const auto [train_x, train_y] = make(train);
  const auto [test_x, test_y] = make(test);
  WriteTensors(path, train_x, train_y, test_x, test_y);
}

// Three labels, label k = (x_k > 0): separable.
void WriteMultilabel(const std::string& path, int64_t train, int64_t test) {
  torch::manual_seed(4);
  const auto make = [&](int64_t n) {
    const torch::Tensor x = torch::randn({n, 8});
    const torch::Tensor y = x.narrow(/*dim=*/1, 0, 3).gt(0).to(torch::kFloat32);
    return std::make_pair(x, y);
  };
  const auto [train_x, train_y] = make(train);
  const auto [test_x, test_y] = make(test);
  WriteTensors(path, train_x, train_y, test_x, test_y);
}

mpsd::v1::SubmitJobRequest Job(const std::string& path, const std::string& task, int epochs) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("mlp");
  job.mutable_model()->set_dropout(0);
  job.mutable_dataset()->set_name("tensors");
  job.mutable_dataset()->set_root(path);
  job.set_task(task);
  job.set_batch_size(32);
  job.set_epochs(epochs);
  job.mutable_optimizer()->set_learning_rate(1e-3);
  job.set_seed(1);
  job.set_device("cpu");
  return request;
}

std::unique_ptr<Executor> MakeExecutor() {
  Executor::Options options;
  options.steps_per_readback = 8;
  absl::StatusOr<std::unique_ptr<Executor>> executor = CreateTorchExecutor(options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return *std::move(executor);
}

struct RunResult {
  absl::Status status;
  std::vector<mpsd::v1::StepMetrics> steps;
  std::vector<mpsd::v1::EpochMetrics> epochs;
  std::vector<std::string> logs;
  mpsd::v1::JobSummary summary;
};

RunResult RunJob(const mpsd::v1::SubmitJobRequest& request) {
  RunResult result;
  CancelFlag cancelled;
  result.status = MakeExecutor()->Run(
      JobContext{"7", ""}, request,
      [&](mpsd::v1::JobEvent event) {
        if (event.has_step()) result.steps.push_back(event.step());
        if (event.has_epoch()) result.epochs.push_back(event.epoch());
        if (event.has_log()) result.logs.push_back(event.log().text());
        if (event.has_summary()) result.summary = event.summary();
      },
      cancelled);
  return result;
}

std::string ValidateError(const mpsd::v1::SubmitJobRequest& request) {
  const absl::Status status = MakeExecutor()->Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  return std::string(status.message());
}

// ---- Losses and metrics against their definitions ----------------------------------------

TaskConfig Regression(LossKind loss, int outputs) {
  TaskConfig config;
  config.kind = TaskKind::kRegression;
  config.loss = loss;
  config.outputs = outputs;
  return config;
}

TEST(TaskLossTest, RegressionLossesAreTorchsDefinitions) {
  const torch::Tensor x = torch::tensor({{0.0f, 2.0f}, {1.0f, -3.0f}});
  const torch::Tensor y = torch::tensor({{0.5f, 0.0f}, {1.0f, 0.0f}});
  // d = x - y = {-0.5, 2, 0, -3}
  const auto loss = [&](TaskConfig config) {
    return TaskLoss(config, torch::kCPU).Loss(x, y).item<double>();
  };
  EXPECT_NEAR(loss(Regression(LossKind::kMse, 2)), (0.25 + 4 + 0 + 9) / 4, 1e-6);
  EXPECT_NEAR(loss(Regression(LossKind::kL1, 2)), (0.5 + 2 + 0 + 3) / 4, 1e-6);
  TaskConfig smooth = Regression(LossKind::kSmoothL1, 2);
  smooth.beta = 1;  // 0.5 d² / beta below beta, else |d| - 0.5 beta
  EXPECT_NEAR(loss(smooth), (0.125 + 1.5 + 0 + 2.5) / 4, 1e-6);
  TaskConfig huber = Regression(LossKind::kHuber, 2);
  huber.delta = 2;  // 0.5 d² up to delta, else delta (|d| - 0.5 delta)
  EXPECT_NEAR(loss(huber), (0.125 + 2 + 0 + 4) / 4, 1e-6);
  // Targets [N] are the one output's column.
  EXPECT_NEAR(TaskLoss(Regression(LossKind::kMse, 1), torch::kCPU)
                  .Loss(torch::tensor({{1.0f}, {2.0f}}), torch::tensor({0.0f, 0.0f}))
                  .item<double>(),
              2.5, 1e-6);
}

TEST(TaskLossTest, RegressionMetricsAreTorchmetrics) {
  const torch::Tensor x = torch::tensor({{1.0f, 0.0f}, {2.0f, 1.0f}, {2.0f, 3.0f}});
  const torch::Tensor y = torch::tensor({{1.0f, 1.0f}, {2.0f, 2.0f}, {4.0f, 3.0f}});
  const TaskLoss task(Regression(LossKind::kMse, 2), torch::kCPU);
  // Two batches summed, as Evaluate does.
  const torch::Tensor sums = task.EvalSums(x.narrow(0, 0, 2), y.narrow(0, 0, 2)) +
                             task.EvalSums(x.narrow(0, 2, 1), y.narrow(0, 2, 1));
  const TaskMetrics m = task.Finish(sums, 3);
  // d: {0, -1}, {0, -1}, {-2, 0}: Σd² = 6 over 6 elements, Σ|d| = 4.
  EXPECT_NEAR(m.at("mse"), 1.0, 1e-9);
  EXPECT_NEAR(m.at("mae"), 4.0 / 6, 1e-9);
  EXPECT_NEAR(m.at("loss"), 1.0, 1e-6);
  // Output 0: y = 1, 2, 4 (mean 7/3), SS_tot = 14/3, SS_res = 4; output 1: y = 1, 2, 3,
  // SS_tot = 2, SS_res = 2. R² = mean(1 - 4 / (14/3), 1 - 2/2).
  EXPECT_NEAR(m.at("r2"), ((1 - 4 / (14.0 / 3)) + 0.0) / 2, 1e-9);
  EXPECT_EQ(m.count("accuracy"), 0u);
}

TEST(TaskLossTest, MultilabelLossAccuracyAndMacroF1) {
  TaskConfig config;
  config.kind = TaskKind::kMultilabel;
  config.loss = LossKind::kBceWithLogits;
  config.outputs = 2;
  config.pos_weight = {3.0, 1.0};
  const torch::Tensor x = torch::tensor({{2.0f, -1.0f}, {-0.5f, 1.0f}, {1.0f, 1.0f}});
  const torch::Tensor y = torch::tensor({{1.0f, 0.0f}, {1.0f, 1.0f}, {0.0f, 0.0f}});
  const TaskLoss task(config, torch::kCPU);
  // BCEWithLogitsLoss: -[p y log σ(x) + (1 - y) log(1 - σ(x))], mean over the 6 elements.
  double expected = 0;
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 2; ++k) {
      const double s = 1 / (1 + std::exp(-x[i][k].item<double>()));
      const double t = y[i][k].item<double>();
      expected += -(config.pos_weight[k] * t * std::log(s) + (1 - t) * std::log(1 - s));
    }
  }
  EXPECT_NEAR(task.Loss(x, y).item<double>(), expected / 6, 1e-5);
  // Predictions x > 0: {1, 0}, {0, 1}, {1, 1}; correct: 2, 1, 0 of 2 → 3 of 6.
  EXPECT_EQ(task.Correct(x, y).item<int64_t>(), 3);
  const TaskMetrics m = task.Finish(task.EvalSums(x, y), 3);
  EXPECT_NEAR(m.at("accuracy"), 0.5, 1e-9);
  // Label 0: TP 1, FP 1, FN 1 → F1 0.5; label 1: TP 1, FP 1, FN 0 → F1 2/3.
  EXPECT_NEAR(m.at("macro_f1"), (0.5 + 2.0 / 3) / 2, 1e-9);
  EXPECT_NEAR(m.at("loss"), expected / 6, 1e-5);
}

TEST(TaskLossTest, ClassificationIsTheCrossEntropyOfBeforeBitForBit) {
  torch::manual_seed(0);
  const torch::Tensor logits = torch::randn({16, 5});
  const torch::Tensor labels = torch::randint(5, {16}, torch::kInt64);
  TaskConfig config;
  config.label_smoothing = 0.1;
  config.outputs = 5;
  const torch::Tensor ours = TaskLoss(config, torch::kCPU).Loss(logits, labels);
  const torch::Tensor before =
      F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().label_smoothing(0.1));
  EXPECT_TRUE(torch::equal(ours, before));
  EXPECT_EQ(TaskLoss(config, torch::kCPU).Correct(logits, labels).item<int64_t>(),
            logits.argmax(1).eq(labels).sum().item<int64_t>());
  // Class weights: the weighted mean Σ w[y] ℓ / Σ w[y].
  config.label_smoothing = 0;
  config.class_weights = {1, 2, 0.5, 3, 1};
  const torch::Tensor w = torch::tensor({1.0f, 2.0f, 0.5f, 3.0f, 1.0f});
  const torch::Tensor per_example =
      F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kNone));
  const torch::Tensor wy = w.index_select(0, labels);
  EXPECT_NEAR(TaskLoss(config, torch::kCPU).Loss(logits, labels).item<double>(),
              ((per_example * wy).sum() / wy.sum()).item<double>(), 1e-6);
}

// ---- Jobs through the Executor -------------------------------------------------------------

TEST(TaskJobTest, RegressionLearnsALinearFunction) {
  TempDir dir("task-test");
  const std::string path = dir / "linear.pt";
  WriteRegression(path, 512, 128, /*one_output=*/false);
  mpsd::v1::SubmitJobRequest request = Job(path, "regression", 6);
  request.mutable_train_job()->mutable_dataset()->mutable_validation()->set_fraction(0.25);
  request.mutable_train_job()->mutable_early_stopping()->set_monitor("val_r2");
  request.mutable_train_job()->mutable_early_stopping()->set_patience(10);
  ASSERT_TRUE(MakeExecutor()->Validate(request).ok()) << MakeExecutor()->Validate(request);
  const RunResult run = RunJob(request);
  ASSERT_TRUE(run.status.ok()) << run.status;
  ASSERT_EQ(run.epochs.size(), 6u);
  const auto& first = run.epochs.front().metrics();
  const auto& last = run.epochs.back().metrics();
  for (const char* name : {"train_loss", "val_loss", "val_mse", "val_mae", "val_r2"}) {
    EXPECT_TRUE(last.contains(name)) << name;
  }
  EXPECT_FALSE(last.contains("train_accuracy"));
  EXPECT_FALSE(first.contains("test_r2"));  // evaluate_test: end with a validation split
  EXPECT_GT(last.at("val_r2"), 0.9);
  EXPECT_GT(last.at("test_r2"), 0.9);
  EXPECT_LT(last.at("val_mse"), first.at("val_mse"));
  // MSELoss is the default loss: the evaluated loss is the MSE.
  EXPECT_NEAR(last.at("val_loss"), last.at("val_mse"), 1e-4);
  EXPECT_EQ(run.summary.task(), "regression");
  EXPECT_GT(run.summary.metrics().at("test_r2"), 0.9);
  EXPECT_FALSE(run.summary.has_test_accuracy());
  EXPECT_EQ(run.summary.monitor(), "val_r2");
  EXPECT_GT(run.summary.best_value(), 0.9);
  for (const mpsd::v1::StepMetrics& step : run.steps) EXPECT_EQ(step.accuracy(), 0);
}

TEST(TaskJobTest, RegressionOfOneOutputWithHuberLoss) {
  TempDir dir("task-test");
  const std::string path = dir / "linear1.pt";
  WriteRegression(path, 256, 64, /*one_output=*/true);
  mpsd::v1::SubmitJobRequest request = Job(path, "regression", 4);
  request.mutable_train_job()->mutable_loss()->set_type("huber");
  request.mutable_train_job()->mutable_loss()->set_delta(0.5);
  const RunResult run = RunJob(request);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_TRUE(run.epochs.back().metrics().contains("test_r2"));
  EXPECT_GT(run.epochs.back().metrics().at("test_r2"), 0.8);
  bool logged = false;
  for (const std::string& line : run.logs) logged |= absl::StrContains(line, "huber(delta=0.5)");
  EXPECT_TRUE(logged);
}

TEST(TaskJobTest, MultilabelLearnsSeparableLabels) {
  TempDir dir("task-test");
  const std::string path = dir / "labels.pt";
  WriteMultilabel(path, 512, 128);
  mpsd::v1::SubmitJobRequest request = Job(path, "multilabel", 4);
  request.mutable_train_job()->mutable_loss()->add_pos_weight(1);
  request.mutable_train_job()->mutable_loss()->add_pos_weight(2);
  request.mutable_train_job()->mutable_loss()->add_pos_weight(1);
  const RunResult run = RunJob(request);
  ASSERT_TRUE(run.status.ok()) << run.status;
  const auto& last = run.epochs.back().metrics();
  EXPECT_GT(last.at("test_accuracy"), 0.9);
  EXPECT_GT(last.at("test_macro_f1"), 0.9);
  EXPECT_GT(last.at("train_accuracy"), 0.8);
  EXPECT_DOUBLE_EQ(run.epochs.back().test_accuracy(), last.at("test_accuracy"));
  EXPECT_GT(run.summary.metrics().at("test_macro_f1"), 0.9);
  EXPECT_EQ(run.summary.task(), "multilabel");
  // Step accuracy is over labels: a fraction, not a count over examples.
  for (const mpsd::v1::StepMetrics& step : run.steps) EXPECT_LE(step.accuracy(), 1.0f);
}

TEST(TaskJobTest, ExplicitClassificationRunsStepForStepAsTheDefault) {
  TempDir dir("task-test");
  const std::string path = dir / "classes.pt";
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({96, 8});
  const torch::Tensor y = x.select(1, 0).gt(0).to(torch::kInt64);
  WriteTensors(path, x, y, x.narrow(0, 0, 32), y.narrow(0, 0, 32));
  const RunResult plain = RunJob(Job(path, "", 2));
  mpsd::v1::SubmitJobRequest explicit_job = Job(path, "classification", 2);
  explicit_job.mutable_train_job()->mutable_loss()->set_type("cross_entropy");
  const RunResult same = RunJob(explicit_job);
  ASSERT_TRUE(plain.status.ok()) << plain.status;
  ASSERT_TRUE(same.status.ok()) << same.status;
  ASSERT_EQ(plain.steps.size(), same.steps.size());
  for (size_t i = 0; i < plain.steps.size(); ++i) {
    EXPECT_EQ(plain.steps[i].loss(), same.steps[i].loss()) << i;
  }
  EXPECT_TRUE(plain.epochs.back().metrics().empty());
  EXPECT_EQ(plain.summary.task(), "classification");
  EXPECT_TRUE(plain.summary.has_test_accuracy());
  // Class weights change the loss; the job runs.
  mpsd::v1::SubmitJobRequest weighted = Job(path, "", 2);
  weighted.mutable_train_job()->mutable_loss()->add_class_weights(1);
  weighted.mutable_train_job()->mutable_loss()->add_class_weights(3);
  const RunResult w = RunJob(weighted);
  ASSERT_TRUE(w.status.ok()) << w.status;
  EXPECT_NE(w.steps.front().loss(), plain.steps.front().loss());
}

// ---- Bad input at submit -------------------------------------------------------------------

TEST(TaskValidateTest, RefusesEachMismatchNamingTheField) {
  TempDir dir("task-test");
  const std::string regression = dir / "regression.pt";
  WriteRegression(regression, 32, 8, /*one_output=*/false);
  const std::string multilabel = dir / "multilabel.pt";
  WriteMultilabel(multilabel, 32, 8);

  mpsd::v1::SubmitJobRequest r = Job(regression, "regression", 1);
  EXPECT_TRUE(MakeExecutor()->Validate(r).ok()) << MakeExecutor()->Validate(r);
  r.mutable_train_job()->mutable_loss()->set_type("cross_entropy");
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.loss.type: \"cross_entropy\" is a "
                                           "classification loss; task regression takes mse"));
  r.mutable_train_job()->mutable_loss()->set_type("hinge");
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.loss.type: unknown loss \"hinge\""));
  r.mutable_train_job()->mutable_loss()->set_type("mse");
  r.mutable_train_job()->mutable_loss()->set_delta(1);
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.loss.delta: only loss huber"));
  r.mutable_train_job()->mutable_loss()->set_type("huber");
  r.mutable_train_job()->mutable_loss()->set_delta(-1);
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.loss.delta: "));
  r.mutable_train_job()->clear_loss();
  r.mutable_train_job()->mutable_model()->set_num_classes(3);
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.model.num_classes: 3, but the regression "
                                           "targets of " +
                                           regression + " have 2 outputs"));
  r.mutable_train_job()->mutable_model()->clear_num_classes();
  r.mutable_train_job()->set_label_smoothing(0.1);
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.label_smoothing: only task classification"));
  r.mutable_train_job()->set_label_smoothing(0);
  r.mutable_train_job()->mutable_early_stopping()->set_monitor("test_accuracy");
  r.mutable_train_job()->set_evaluate_test("every_epoch");
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.early_stopping.monitor: unknown epoch "
                                           "metric \"test_accuracy\""));
  // A typo is named with the nearest metric the task measures.
  r.mutable_train_job()->mutable_early_stopping()->set_monitor("test_rr2");
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.early_stopping.monitor: unknown epoch "
                                           "metric \"test_rr2\" (did you mean \"test_r2\"?)"));
  r.mutable_train_job()->mutable_early_stopping()->set_monitor("test_r2");
  EXPECT_TRUE(MakeExecutor()->Validate(r).ok()) << MakeExecutor()->Validate(r);
  r.mutable_train_job()->set_task("ranking");
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.task: unknown task \"ranking\""));
  r.mutable_train_job()->set_task("");
  EXPECT_THAT(ValidateError(r), StartsWith("train_job.task: classification needs int64 class "
                                           "indices in y"));

  // Multilabel: targets must be 0/1 [N, K]; pos_weight one per label.
  mpsd::v1::SubmitJobRequest m = Job(multilabel, "multilabel", 1);
  EXPECT_TRUE(MakeExecutor()->Validate(m).ok()) << MakeExecutor()->Validate(m);
  m.mutable_train_job()->mutable_loss()->add_pos_weight(2);
  EXPECT_THAT(ValidateError(m), StartsWith("train_job.loss.pos_weight: 1 weights, but the "
                                           "targets have 3 labels"));
  m.mutable_train_job()->mutable_loss()->add_class_weights(1);
  EXPECT_THAT(ValidateError(m), StartsWith("train_job.loss.class_weights: only task "
                                           "classification"));
  mpsd::v1::SubmitJobRequest not_binary = Job(regression, "multilabel", 1);
  EXPECT_THAT(ValidateError(not_binary),
              StartsWith("train_job.dataset.root: " + regression + ": train.y[0, 0]: "));
  EXPECT_THAT(ValidateError(not_binary), HasSubstr("multilabel targets must be 0 or 1"));

  // Classification: class_weights one per class; float tasks need float targets.
  mpsd::v1::SubmitJobRequest c;
  mpsd::v1::TrainJob& job = *c.mutable_train_job();
  job.mutable_model()->set_name("mlp");
  job.mutable_dataset()->set_name("synthetic");
  job.set_device("cpu");
  job.mutable_loss()->add_class_weights(1);
  EXPECT_THAT(ValidateError(c), StartsWith("train_job.loss.class_weights: 1 weights, but the "
                                           "model has 10 classes"));
  for (int i = 1; i < 10; ++i) job.mutable_loss()->add_class_weights(1);
  EXPECT_TRUE(MakeExecutor()->Validate(c).ok()) << MakeExecutor()->Validate(c);
  job.mutable_loss()->set_class_weights(3, -1);
  EXPECT_THAT(ValidateError(c), StartsWith("train_job.loss.class_weights[3]: must be finite"));
  job.clear_loss();
  job.set_task("regression");
  EXPECT_THAT(ValidateError(c), StartsWith("train_job.task: regression needs float targets"));
}

TEST(TaskValidateTest, RefusesNonFiniteTargetsNamingTheFileAndTheElement) {
  TempDir dir("task-test");
  const std::string path = dir / "nan.pt";
  torch::Tensor y = torch::zeros({8, 2});
  y[5][1] = std::nan("");
  WriteTensors(path, torch::randn({8, 4}), y, torch::randn({4, 4}), torch::zeros({4, 2}));
  EXPECT_EQ(ValidateError(Job(path, "regression", 1)),
            absl::StrCat("train_job.dataset.root: ", path,
                         ": train.y[5, 1]: nan; targets must be finite (no NaN or infinity)"));
  const std::string wide = dir / "wide.pt";
  WriteTensors(wide, torch::randn({8, 4}), torch::zeros({8, 2}), torch::randn({4, 4}),
               torch::zeros({4, 3}));
  EXPECT_THAT(ValidateError(Job(wide, "regression", 1)),
              HasSubstr(": test.y: shape [4, 3], but train.y is [8, 2]"));
}

}  // namespace
}  // namespace mpsd::trainer
