// Results a researcher can trust (issue 27), through a real mpsd: a limit on a class-ordered
// image folder keeps every class (stratified subsets), "first" subsets that drop classes fail
// naming them, and a job whose loss blows up ends FAILED with DIVERGED at the step it happened.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

namespace fs = std::filesystem;
using mpsd::v1::Job;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kPython[] = MPSD_PIL_PYTHON;

bool LogSays(const std::vector<mpsd::v1::JobEvent>& events, const std::string& text) {
  for (const mpsd::v1::JobEvent& event : events) {
    if (event.has_log() && absl::StrContains(event.log().text(), text)) return true;
  }
  return false;
}

// An image_folder job on the colours folder: 4 classes (blue, green, red, yellow) of 25
// training images each, listed class by class as ImageFolder (and an MNIST digits folder) is.
mpsd::v1::SubmitJobRequest ColoursJob(const std::string& root, int64_t limit_train) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("mlp");
  mpsd::v1::DatasetSpec& dataset = *job.mutable_dataset();
  dataset.set_name("image_folder");
  dataset.set_root(root);
  dataset.mutable_image_folder()->add_image_size(12);
  dataset.mutable_image_folder()->add_image_size(12);
  dataset.set_limit_train(limit_train);
  job.set_batch_size(8);
  job.set_epochs(4);
  job.mutable_optimizer()->set_name("adam");
  job.mutable_optimizer()->set_learning_rate(0.003);
  job.set_seed(1);
  job.set_device("cpu");
  return request;
}

class TrainingOutcomesE2eTest : public ::testing::Test {
 protected:
  void SetUp() override { daemon_.Start(); }
  TempDir dir_;
  Daemon daemon_{dir_.str() + "/state", dir_.str() + "/mpsd.sock"};
};

TEST_F(TrainingOutcomesE2eTest, ALimitOnAClassOrderedFolderKeepsEveryClass) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with PIL";
  const std::string root = dir_.str() + "/colours";
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", SourcePath("examples/make_own_data.py"), " ",
                                     root, " --classes 4 --train-per-class 25 --val-per-class 6")
                            .c_str()),
            0);
  // The default, stratified: 40 of 100 keeps 10 of each class.
  const Job stratified = rpc_ok::Submit(daemon_, ColoursJob(root, 40));
  const Job done = rpc_ok::WaitForEnd(daemon_, stratified.id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.message();
  EXPECT_THAT(done.summary().train_class_counts(), ElementsAre(10, 10, 10, 10));
  EXPECT_EQ(done.summary().train_examples(), 40);
  EXPECT_TRUE(LogSays(rpc::StreamAll(daemon_, stratified.id()),
                      "train subset: stratified, 40 of 100 examples (seed 1); per class: blue "
                      "10, green 10, red 10, yellow 10"));

  // "first", as before: the first 40 files are 25 blue and 15 green. A failure naming the
  // classes it leaves out...
  mpsd::v1::SubmitJobRequest first = ColoursJob(root, 40);
  first.mutable_train_job()->mutable_dataset()->set_subset("first");
  const Job refused = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, first).id());
  EXPECT_EQ(refused.state(), Job::FAILED);
  EXPECT_EQ(refused.failure_reason(), Job::INVALID_SPEC);
  EXPECT_THAT(refused.message(),
              HasSubstr("train_job.dataset.limit_train: the train subset (first 40 of 100 "
                        "examples) has no example of \"red\" (class 2), \"yellow\" (class 3)"));

  // ...or, allowed, a model that never saw half the classes.
  first.mutable_train_job()->mutable_dataset()->set_allow_missing_classes(true);
  const Job skewed = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, first).id());
  ASSERT_EQ(skewed.state(), Job::SUCCEEDED) << skewed.message();
  EXPECT_THAT(skewed.summary().train_class_counts(), ElementsAre(25, 15, 0, 0));
  EXPECT_TRUE(LogSays(rpc::StreamAll(daemon_, skewed.id()), "warning: the train subset"));
  // Half the (balanced) validation images are of classes it never saw.
  EXPECT_LE(skewed.summary().test_accuracy(), 0.5 + 1e-9);
  EXPECT_GE(done.summary().test_accuracy(), 0.9);
  std::cout << "test accuracy, 40 of 100 class-ordered images: stratified "
            << done.summary().test_accuracy() << ", first " << skewed.summary().test_accuracy()
            << "\n";
}

// SGD at learning rate 1e6 on Fashion-MNIST: the loss overflows within a few steps. The job
// ends FAILED with DIVERGED; its step events stop at the first non-finite loss, which the
// message names with the learning rate and the last finite loss.
TEST_F(TrainingOutcomesE2eTest, ALearningRateOf1e6EndsTheJobDivergedAtTheStepItHappened) {
  mpsd::v1::SubmitJobRequest request = TrainJobRequest(640, 100, 3, 64, "mlp");
  request.mutable_train_job()->mutable_optimizer()->set_name("sgd");
  request.mutable_train_job()->mutable_optimizer()->set_learning_rate(1e6);
  const Job submitted = rpc_ok::Submit(daemon_, request);
  const Job ended = rpc_ok::WaitForEnd(daemon_, submitted.id());
  ASSERT_EQ(ended.state(), Job::FAILED) << ended.message();
  EXPECT_EQ(ended.failure_reason(), Job::DIVERGED);
  std::vector<int64_t> steps;
  double last_finite = 0;
  for (const mpsd::v1::JobEvent& event : rpc::StreamAll(daemon_, submitted.id())) {
    if (!event.has_step()) continue;
    steps.push_back(event.step().step());
    if (std::isfinite(event.step().loss())) last_finite = event.step().loss();
  }
  ASSERT_FALSE(steps.empty());
  const int64_t diverged = steps.back();
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<int64_t>(i) + 1);
  EXPECT_LT(diverged, 30) << "the loss never overflowed";
  EXPECT_THAT(ended.message(), HasSubstr(absl::StrCat("diverged at step ", diverged, " of 30")));
  EXPECT_THAT(ended.message(), HasSubstr("at learning rate 1e+06"));
  if (diverged > 1) {
    EXPECT_THAT(ended.message(), HasSubstr(absl::StrFormat("last finite loss %.6g at step %d",
                                                           last_finite, diverged - 1)));
  }
}

// ---- Validation, evaluate_test, early stopping ---------------------------------------------

class ValidationE2eTest : public TrainingOutcomesE2eTest {
 protected:
  void SetUp() override {
    if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with PIL";
    TrainingOutcomesE2eTest::SetUp();
    root_ = dir_.str() + "/colours";
    ASSERT_EQ(std::system(absl::StrCat(kPython, " ", SourcePath("examples/make_own_data.py"), " ",
                                       root_, " --classes 4 --train-per-class 25 --val-per-class 6")
                              .c_str()),
              0);
  }
  std::vector<mpsd::v1::EpochMetrics> Epochs(const std::string& id) {
    std::vector<mpsd::v1::EpochMetrics> epochs;
    for (const mpsd::v1::JobEvent& event : rpc::StreamAll(daemon_, id)) {
      if (event.has_epoch()) epochs.push_back(event.epoch());
    }
    return epochs;
  }
  std::string root_;
};

// A fifth of the training images held out: every epoch reports val_loss / val_accuracy, the
// test split is evaluated once, after the last epoch (evaluate_test's default with a
// validation split), and the summary says what was measured.
TEST_F(ValidationE2eTest, AFractionReportsValidationEveryEpochAndTheTestSplitAtTheEnd) {
  mpsd::v1::SubmitJobRequest request = ColoursJob(root_, 0);
  request.mutable_train_job()->set_epochs(3);
  request.mutable_train_job()->mutable_dataset()->mutable_validation()->set_fraction(0.2);
  const Job done = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.message();
  const std::vector<mpsd::v1::EpochMetrics> epochs = Epochs(done.id());
  ASSERT_EQ(epochs.size(), 3u);
  for (const mpsd::v1::EpochMetrics& epoch : epochs) {
    EXPECT_TRUE(epoch.has_val_loss() && epoch.has_val_accuracy()) << epoch.epoch();
    EXPECT_EQ(epoch.evaluated(), epoch.epoch() == 3) << epoch.epoch();
  }
  const mpsd::v1::JobSummary& s = done.summary();
  EXPECT_EQ(s.train_examples(), 80);
  EXPECT_EQ(s.val_examples(), 20);
  EXPECT_EQ(s.validation(), "fraction 0.2 of train (seed 1)");
  EXPECT_TRUE(s.has_val_accuracy());
  EXPECT_EQ(s.val_accuracy(), epochs.back().val_accuracy());
  EXPECT_TRUE(s.has_test_accuracy());
  EXPECT_EQ(s.stop_reason(), "epochs_completed");
  // The same seed holds out the same examples: the same validation figures.
  const Job again = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
  EXPECT_EQ(again.summary().val_loss(), s.val_loss());

  // evaluate_test: never: no test figures anywhere, and mpsctl does not print a 0.00.
  request.mutable_train_job()->set_evaluate_test("never");
  const Job blind = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
  ASSERT_EQ(blind.state(), Job::SUCCEEDED) << blind.message();
  EXPECT_FALSE(blind.summary().has_test_accuracy());
  EXPECT_FALSE(blind.summary().has_test_loss());
  for (const mpsd::v1::EpochMetrics& epoch : Epochs(blind.id())) EXPECT_FALSE(epoch.evaluated());
  const CommandResult shown =
      RunCommand({MpsctlPath(), "--server", daemon_.address(), "get", blind.id()});
  EXPECT_THAT(shown.out, HasSubstr("test not evaluated"));
  EXPECT_THAT(shown.out, ::testing::Not(HasSubstr("test accuracy")));
}

// validation.source "val": val/ validates, test/ tests.
TEST_F(ValidationE2eTest, AnImageFolderValidatesOnValAndTestsOnTest) {
  fs::copy(root_ + "/val", root_ + "/test", fs::copy_options::recursive);
  fs::remove_all(root_ + "/test/red");  // a test split without one class is still a test split
  fs::create_directories(root_ + "/test/red");
  fs::copy(root_ + "/val/red", root_ + "/test/red", fs::copy_options::recursive);
  fs::remove(root_ + "/test/red/img_000.png");
  mpsd::v1::SubmitJobRequest request = ColoursJob(root_, 0);
  request.mutable_train_job()->set_epochs(2);
  request.mutable_train_job()->mutable_dataset()->mutable_validation()->set_source("val");
  const Job done = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
  ASSERT_EQ(done.state(), Job::SUCCEEDED) << done.message();
  EXPECT_EQ(done.summary().train_examples(), 100);
  EXPECT_EQ(done.summary().val_examples(), 24);
  EXPECT_EQ(done.summary().test_examples(), 23);
  EXPECT_EQ(done.summary().validation(), "val/");
}

// Bad settings fail at submit, each naming its field; the daemon takes the next job.
TEST_F(ValidationE2eTest, BadSettingsAreRefusedAtSubmitNamingTheField) {
  struct Case {
    std::function<void(mpsd::v1::TrainJob&)> set;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto& j) { j.mutable_dataset()->mutable_validation()->set_fraction(1.5); },
       "train_job.dataset.validation.fraction: must be in (0, 1)"},
      {[](auto& j) { j.mutable_dataset()->mutable_validation()->set_fraction(0); },
       "train_job.dataset.validation.fraction: must be in (0, 1)"},
      {[](auto& j) { j.mutable_dataset()->mutable_validation()->set_source("holdout"); },
       "train_job.dataset.validation.source: unknown source \"holdout\""},
      {[](auto& j) { j.mutable_dataset()->mutable_validation()->set_source("val"); },
       "train_job.dataset.validation.source: "},  // no test/ beside val/
      {[](auto& j) {
         j.mutable_dataset()->mutable_validation()->set_source("val");
         j.mutable_dataset()->mutable_validation()->set_fraction(0.1);
       },
       "train_job.dataset.validation: set one of fraction"},
      {[](auto& j) { j.mutable_dataset()->set_subset("random"); },
       "train_job.dataset.subset: unknown subset \"random\""},
      {[](auto& j) { j.set_evaluate_test("sometimes"); },
       "train_job.evaluate_test: unknown value \"sometimes\""},
      {[](auto& j) { j.set_divergence_threshold(-1); },
       "train_job.divergence_threshold: must be > 0"},
      {[](auto& j) { j.mutable_early_stopping()->set_patience(0); },
       "train_job.early_stopping.monitor: val_loss is measured only with a validation split"},
      {[](auto& j) {
         j.mutable_dataset()->mutable_validation()->set_fraction(0.2);
         j.mutable_early_stopping()->set_patience(0);
       },
       "train_job.early_stopping.patience: must be > 0, got 0"},
      {[](auto& j) { j.mutable_early_stopping()->set_monitor("f1"); },
       "train_job.early_stopping.monitor: unknown epoch metric \"f1\""},
      {[](auto& j) {
         j.mutable_early_stopping()->set_monitor("train_loss");
         j.mutable_early_stopping()->set_mode("lowest");
       },
       "train_job.early_stopping.mode: must be \"min\" or \"max\""},
      {[](auto& j) {
         j.mutable_early_stopping()->set_monitor("train_loss");
         j.mutable_early_stopping()->set_mode("max");
       },
       "train_job.early_stopping.mode: max for train_loss, where lower is better: write min, or "
       "leave mode out for the default"},
  };
  for (const Case& c : cases) {
    mpsd::v1::SubmitJobRequest request = ColoursJob(root_, 0);
    c.set(*request.mutable_train_job());
    const absl::StatusOr<Job> refused = rpc::Submit(daemon_, request);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(refused.status().message(), HasSubstr(c.field));
  }
  // A dataset without a val split of its own.
  mpsd::v1::SubmitJobRequest mnist = TrainJobRequest(64, 64, 1, 64, "mlp");
  mnist.mutable_train_job()->mutable_dataset()->mutable_validation()->set_source("val");
  EXPECT_THAT(rpc::Submit(daemon_, mnist).status().message(),
              HasSubstr("train_job.dataset.validation.source: fashion-mnist has no validation "
                        "split of its own"));
  EXPECT_EQ(rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, ColoursJob(root_, 0)).id()).state(),
            Job::SUCCEEDED);
}

// min_delta so large that nothing after epoch 1 improves: with patience 2 training stops after
// epoch 3 of 8, the test split is evaluated then (evaluate_test: end), and best.pt is epoch 1's
// model: bitwise the model.pt of the same job run for 1 epoch.
TEST_F(ValidationE2eTest, EarlyStoppingStopsAfterThePatienceAndKeepsTheBestEpochsModel) {
  mpsd::v1::SubmitJobRequest request = ColoursJob(root_, 0);
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.set_epochs(8);
  job.mutable_dataset()->mutable_validation()->set_fraction(0.2);
  job.mutable_early_stopping()->set_monitor("val_loss");
  job.mutable_early_stopping()->set_patience(2);
  job.mutable_early_stopping()->set_min_delta(100);
  const Job stopped = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
  ASSERT_EQ(stopped.state(), Job::SUCCEEDED) << stopped.message();
  const mpsd::v1::JobSummary& s = stopped.summary();
  EXPECT_EQ(s.epochs(), 3);
  EXPECT_EQ(s.stop_reason(), "early_stopped");
  EXPECT_EQ(s.monitor(), "val_loss");
  EXPECT_EQ(s.best_epoch(), 1);
  const std::vector<mpsd::v1::EpochMetrics> epochs = Epochs(stopped.id());
  ASSERT_EQ(epochs.size(), 3u);
  EXPECT_EQ(s.best_value(), epochs[0].val_loss());
  EXPECT_TRUE(epochs[2].evaluated());
  EXPECT_TRUE(s.has_test_accuracy());
  ASSERT_THAT(s.best_model_path(), ::testing::EndsWith("/best.pt"));
  ASSERT_TRUE(fs::exists(s.best_model_path()));

  job.clear_early_stopping();
  job.set_epochs(1);
  const Job one = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
  ASSERT_EQ(one.state(), Job::SUCCEEDED) << one.message();
  // A LibTorch archive is a zip whose records sit under a folder named after the file
  // ("best.pt/data/0"): every record, folder name aside, must be the same bytes.
  const std::string script = absl::StrCat(
      "import sys, zipfile\n"
      "def records(p):\n"
      "    z = zipfile.ZipFile(p)\n"
      "    return {n.split('/', 1)[1]: z.read(n) for n in z.namelist()}\n"
      "a, b = records(sys.argv[1]), records(sys.argv[2])\n"
      "sys.exit(0 if a and a == b else 1)\n");
  const std::string script_path = dir_.str() + "/same_records.py";
  WriteFile(script_path, script);
  const CommandResult same =
      RunCommand({kPython, script_path, s.best_model_path(), one.summary().model_path()});
  EXPECT_EQ(same.exit_code, 0) << "best.pt differs from epoch 1's model: " << same.err;
}

}  // namespace
}  // namespace mpsd::testing
