// EvalJob and PredictJob through a real mpsd, mpsd-executor and mpsctl: a small Fashion-MNIST
// TrainJob, then EvalJobs of its model on the test and train splits, whose metrics must equal the
// TrainJob's own final evaluation (the same model on the same examples) and whose confusion
// matrix rows must count each class's examples; `mpsctl predict` on PNG files and on a tensors
// file of the same pixels, whose top-1 classes an EvalJob on those examples labelled so must find
// all correct; bad models, datasets and images are refused naming the field or the file, and the
// daemon keeps serving.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/job_state.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr char kPython[] = MPSD_TORCH_PYTHON;
constexpr int kClasses = 10;
// Fashion-MNIST's test split holds exactly 1,000 images of each class.
constexpr int64_t kTestPerClass = 1000;

mpsd::v1::SubmitJobRequest EvalRequest(const std::string& model, const std::string& split) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::EvalJob* job = request.mutable_eval_job();
  job->set_model(model);
  job->mutable_dataset()->set_name("fashion-mnist");
  job->mutable_dataset()->set_root("/usr/share/datasets/fashion-mnist");
  job->mutable_dataset()->set_limit_train(600);
  job->set_split(split);
  job->set_device("cpu");
  return request;
}

// Row t of the K × K matrix summed: the examples of true class t.
std::vector<int64_t> RowSums(const mpsd::v1::JobSummary& summary) {
  const int k = summary.confusion_classes();
  std::vector<int64_t> sums(k, 0);
  for (int t = 0; t < k; ++t) {
    for (int p = 0; p < k; ++p) sums[t] += summary.confusion_matrix(t * k + p);
  }
  return sums;
}

int64_t Diagonal(const mpsd::v1::JobSummary& summary) {
  const int k = summary.confusion_classes();
  int64_t sum = 0;
  for (int t = 0; t < k; ++t) sum += summary.confusion_matrix(t * k + t);
  return sum;
}

class EvalE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_.Start();
    // mlp: fast on two CPU cores; the whole test split (10,000) is evaluated by both jobs.
    const mpsd::v1::Job train =
        rpc_ok::Submit(daemon_, TrainJobRequest(/*limit_train=*/600, /*limit_test=*/0,
                                                /*epochs=*/1, /*batch_size=*/64, "mlp"));
    trained_ = rpc_ok::WaitForEnd(daemon_, train.id());
    ASSERT_EQ(trained_.state(), mpsd::v1::Job::SUCCEEDED) << trained_.message();
    ASSERT_TRUE(trained_.summary().has_test_accuracy());
  }

  // The message of a submit that must be refused as INVALID_ARGUMENT.
  std::string Refused(const mpsd::v1::SubmitJobRequest& request) {
    absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(daemon_, request);
    EXPECT_FALSE(job.ok());
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
    return std::string(job.status().message());
  }

  TempDir dir_;
  Daemon daemon_{dir_.str() + "/state", dir_.str() + "/mpsd.sock"};
  mpsd::v1::Job trained_;
};

TEST_F(EvalE2eTest, TestSplitMatchesTheTrainJobsOwnEvaluation) {
  const mpsd::v1::Job submitted = rpc_ok::Submit(daemon_, EvalRequest(trained_.id(), "test"));
  EXPECT_EQ(submitted.kind(), mpsd::v1::Job::EVAL_JOB);
  const mpsd::v1::Job eval = rpc_ok::WaitForEnd(daemon_, submitted.id());
  ASSERT_EQ(eval.state(), mpsd::v1::Job::SUCCEEDED) << eval.message();
  const mpsd::v1::JobSummary& s = eval.summary();
  EXPECT_EQ(s.eval_split(), "test");
  EXPECT_EQ(s.eval_model_job_id(), trained_.id());
  EXPECT_EQ(s.task(), "classification");
  EXPECT_EQ(s.eval_examples(), kClasses * kTestPerClass);
  // The same model on the same examples in the same batches: the TrainJob's own figures, exactly.
  ASSERT_TRUE(s.metrics().contains("test_loss"));
  ASSERT_TRUE(s.metrics().contains("test_accuracy"));
  EXPECT_EQ(s.metrics().at("test_loss"), trained_.summary().test_loss());
  EXPECT_EQ(s.metrics().at("test_accuracy"), trained_.summary().test_accuracy());
  EXPECT_EQ(s.test_accuracy(), trained_.summary().test_accuracy());
  // The confusion matrix: each row counts one class's 1,000 examples; the diagonal is accuracy.
  ASSERT_EQ(s.confusion_classes(), kClasses);
  ASSERT_EQ(s.confusion_matrix_size(), kClasses * kClasses);
  EXPECT_EQ(RowSums(s), std::vector<int64_t>(kClasses, kTestPerClass));
  EXPECT_DOUBLE_EQ(static_cast<double>(Diagonal(s)) / s.eval_examples(),
                   s.metrics().at("test_accuracy"));

  // mpsctl: the metrics and the matrix, live (logs --follow) and afterwards (get).
  const CommandResult logs =
      RunCommand({MpsctlPath(), "--server", daemon_.address(), "logs", submitted.id()});
  ASSERT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr(absl::StrCat("evaluated job ", trained_.id(),
                                               "'s model (classification) on the test split: "
                                               "10,000 examples")));
  EXPECT_THAT(logs.out, MatchesRegex("(.|\n)*test loss [0-9.]+ acc [0-9.]+\n(.|\n)*"));
  EXPECT_THAT(logs.out, HasSubstr("confusion matrix (examples; rows: true class, columns: "
                                  "predicted class):"));
  EXPECT_THAT(logs.out, MatchesRegex("(.|\n)*\n +9 +( +[0-9]+){10} +1000\n(.|\n)*"));
  const CommandResult got =
      RunCommand({MpsctlPath(), "--server", daemon_.address(), "get", submitted.id()});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_THAT(got.out, HasSubstr("kind"));
  EXPECT_THAT(got.out, HasSubstr("EvalJob"));
  EXPECT_THAT(got.out, HasSubstr("confusion matrix"));
  const CommandResult listed =
      RunCommand({MpsctlPath(), "--server", daemon_.address(), "list", "--kind", "EvalJob"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr(absl::StrCat("job ", trained_.id())));
}

TEST_F(EvalE2eTest, TrainSplitRowsCountTheTrainingClasses) {
  // A job file through mpsctl submit, as a user writes one.
  const std::string job_file = dir_.str() + "/eval.yaml";
  WriteFile(job_file, absl::StrCat("kind: EvalJob\nmodel: \"", trained_.id(),
                                   "\"\ndataset: {name: fashion-mnist, limit_train: 600}\n"
                                   "split: train\nbatch_size: 100\ndevice: cpu\n"));
  const CommandResult submitted =
      RunCommand({MpsctlPath(), "--server", daemon_.address(), "submit", job_file});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.out << submitted.err;
  const std::string id(absl::StripSuffix(submitted.out, "\n"));
  const mpsd::v1::Job eval = rpc_ok::WaitForEnd(daemon_, id);
  ASSERT_EQ(eval.state(), mpsd::v1::Job::SUCCEEDED) << eval.message();
  const mpsd::v1::JobSummary& s = eval.summary();
  EXPECT_EQ(s.eval_examples(), 600);
  // The TrainJob counted its training examples per class as it loaded them.
  const auto& counts = trained_.summary().train_class_counts();
  ASSERT_EQ(counts.size(), kClasses);
  EXPECT_EQ(RowSums(s), std::vector<int64_t>(counts.begin(), counts.end()));
  EXPECT_GT(s.metrics().at("train_accuracy"), 0.5);  // it learned something from them
}

// Regression and multilabel (examples/make_task_data.py's data): the EvalJob's metrics of the
// test and validation splits are the TrainJob's own last ones, by the same names; no confusion
// matrix.
TEST_F(EvalE2eTest, RegressionAndMultilabelMatchTheTrainJobsMetrics) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch";
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", SourcePath("examples/make_task_data.py"), " ",
                                     dir_.str(), " --train 256 --test 64")
                            .c_str()),
            0);
  for (const char* task_name : {"regression", "multilabel"}) {
    const std::string task = task_name;
    SCOPED_TRACE(task);
    mpsd::v1::SubmitJobRequest train = TrainJobRequest(0, 0, /*epochs=*/2, 32, "mlp");
    mpsd::v1::DatasetSpec dataset;
    dataset.set_name("tensors");
    dataset.set_root(absl::StrCat(dir_.str(), "/", task, ".pt"));
    dataset.mutable_validation()->set_source("val");
    *train.mutable_train_job()->mutable_dataset() = dataset;
    train.mutable_train_job()->set_task(task);
    const mpsd::v1::Job trained = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, train).id());
    ASSERT_EQ(trained.state(), mpsd::v1::Job::SUCCEEDED) << trained.message();
    for (const char* split_name : {"test", "val"}) {
      const std::string split = split_name;
      mpsd::v1::SubmitJobRequest request = EvalRequest(trained.id(), split);
      *request.mutable_eval_job()->mutable_dataset() = dataset;
      const mpsd::v1::Job eval = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
      ASSERT_EQ(eval.state(), mpsd::v1::Job::SUCCEEDED) << eval.message();
      EXPECT_EQ(eval.summary().task(), task);
      EXPECT_EQ(eval.summary().eval_examples(), 64);
      EXPECT_EQ(eval.summary().confusion_matrix_size(), 0);
      int compared = 0;
      for (const auto& [name, value] : eval.summary().metrics()) {
        ASSERT_TRUE(absl::StartsWith(name, split + "_")) << name;
        ASSERT_TRUE(trained.summary().metrics().contains(name)) << name;
        EXPECT_DOUBLE_EQ(value, trained.summary().metrics().at(name)) << name;
        ++compared;
      }
      EXPECT_GE(compared, task == "regression" ? 4 : 3);  // loss, mse, mae, r2; loss, accuracy, f1
    }
  }
}

// An EvalJob is cancelled between its batches like any job: CANCELLED, with its summary, and the
// executor runs the next job.
TEST_F(EvalE2eTest, CancelStopsAnEvaluationBetweenBatches) {
  // convnet on the whole test split in batches of 10: seconds of work on a CPU.
  const mpsd::v1::Job convnet = rpc_ok::WaitForEnd(
      daemon_, rpc_ok::Submit(daemon_, TrainJobRequest(128, 100, 1, 64, "convnet")).id());
  ASSERT_EQ(convnet.state(), mpsd::v1::Job::SUCCEEDED) << convnet.message();
  mpsd::v1::SubmitJobRequest slow = EvalRequest(convnet.id(), "test");
  slow.mutable_eval_job()->set_batch_size(10);
  const mpsd::v1::Job submitted = rpc_ok::Submit(daemon_, slow);
  ASSERT_TRUE(WaitUntil([&] {
    const mpsd::v1::Job job = rpc_ok::Get(daemon_, submitted.id());
    return job.state() == mpsd::v1::Job::RUNNING || api::IsTerminal(job.state());
  }));
  absl::SleepFor(absl::Milliseconds(500));  // into the evaluation
  ASSERT_TRUE(rpc::Cancel(daemon_, submitted.id()).ok());
  const mpsd::v1::Job cancelled = rpc_ok::WaitForEnd(daemon_, submitted.id());
  EXPECT_EQ(cancelled.state(), mpsd::v1::Job::CANCELLED) << cancelled.message();
  EXPECT_TRUE(cancelled.has_summary());
  EXPECT_EQ(cancelled.summary().eval_split(), "test");
  EXPECT_TRUE(cancelled.summary().metrics().empty());  // unmeasured: absent, not 0
  const mpsd::v1::Job next =
      rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, EvalRequest(trained_.id(), "test")).id());
  EXPECT_EQ(next.state(), mpsd::v1::Job::SUCCEEDED) << next.message();
}

// A model.pt named by its path (its model.json beside it) is the job's model: the same figures.
// The path may hold a TorchScript module, so the submit-time check runs in a process of its own.
TEST_F(EvalE2eTest, AModelPtPathEvaluatesAsItsJob) {
  const std::string path = trained_.summary().model_path();
  ASSERT_FALSE(path.empty());
  const mpsd::v1::Job eval =
      rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, EvalRequest(path, "test")).id());
  ASSERT_EQ(eval.state(), mpsd::v1::Job::SUCCEEDED) << eval.message();
  EXPECT_EQ(eval.summary().eval_model(), path);
  EXPECT_EQ(eval.summary().eval_model_job_id(), trained_.id());
  EXPECT_EQ(eval.summary().metrics().at("test_accuracy"), trained_.summary().test_accuracy());
  EXPECT_EQ(eval.summary().metrics().at("test_loss"), trained_.summary().test_loss());
}

// A file of the job's other than model.pt named by its path (best.pt, which early stopping
// writes beside model.pt) is the one evaluated, not model.pt: here another job's weights copied
// in as best.pt give that job's figures. The files beside the weights (model.check.pt,
// model.state_dict.pt, model.json) are refused at submit saying what they are.
TEST_F(EvalE2eTest, TheWeightsFileNamedIsTheOneEvaluated) {
  mpsd::v1::SubmitJobRequest other_request = TrainJobRequest(600, 0, 1, 64, "mlp");
  other_request.mutable_train_job()->set_seed(7);
  other_request.mutable_train_job()->mutable_optimizer()->set_learning_rate(0.01);
  const mpsd::v1::Job other =
      rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, other_request).id());
  ASSERT_EQ(other.state(), mpsd::v1::Job::SUCCEEDED) << other.message();
  ASSERT_NE(other.summary().test_loss(), trained_.summary().test_loss());
  const std::filesystem::path dir =
      std::filesystem::path(trained_.summary().model_path()).parent_path();
  const std::string best = (dir / "best.pt").string();
  std::filesystem::copy_file(other.summary().model_path(), best);

  const mpsd::v1::Job eval =
      rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, EvalRequest(best, "test")).id());
  ASSERT_EQ(eval.state(), mpsd::v1::Job::SUCCEEDED) << eval.message();
  EXPECT_EQ(eval.summary().eval_model(), best);
  EXPECT_EQ(eval.summary().eval_model_job_id(), trained_.id());
  EXPECT_EQ(eval.summary().metrics().at("test_loss"), other.summary().test_loss());
  EXPECT_EQ(eval.summary().metrics().at("test_accuracy"), other.summary().test_accuracy());
  const CommandResult logs =
      RunCommand({MpsctlPath(), "--server", daemon_.address(), "logs", eval.id()});
  EXPECT_THAT(logs.out, HasSubstr(absl::StrCat("evaluating job ", trained_.id(),
                                               " best.pt (mlp) on the test split")));
  EXPECT_THAT(logs.out, HasSubstr(absl::StrCat("evaluated job ", trained_.id(),
                                               "'s best.pt (classification) on the test split")));

  // The job's other files are refused at submit, saying what they are.
  const std::string check = trained_.summary().model_check_path();
  const std::string state_dict = trained_.summary().model_state_dict_path();
  ASSERT_FALSE(check.empty());
  ASSERT_FALSE(state_dict.empty());
  for (const auto& [file, what] : std::vector<std::pair<std::string, std::string>>{
           {check, "the model's check"},
           {state_dict, "weights for PyTorch in Python"},
           {(dir / "model.json").string(), "the model's description"},
           {dir.string(), "a directory; name the model.pt (or best.pt) in it"}}) {
    SCOPED_TRACE(file);
    EXPECT_THAT(Refused(EvalRequest(file, "test")),
                HasSubstr(absl::StrCat("eval_job.model: ", file, ": ", what)));
  }
  // Weights alone, as a download of best.pt leaves them: the model.json they need is named, and
  // how to fetch it.
  const std::filesystem::path lone = std::filesystem::path(dir_.str()) / "downloads";
  std::filesystem::create_directories(lone);
  std::filesystem::copy_file(best, lone / "best.pt");
  EXPECT_THAT(Refused(EvalRequest((lone / "best.pt").string(), "test")),
              HasSubstr(absl::StrCat("eval_job.model: ", (lone / "best.pt").string(),
                                     ": no model.json beside it (mpsd writes one beside every "
                                     "model.pt it saves; for a model fetched with mpsctl "
                                     "download, fetch it too: mpsctl download JOB model.json)")));
}

// split: val held out by a fraction is the TrainJob's validation split only with its own
// limit_train, subset and fraction: the same fields give its figures; other values, or a model
// trained without a validation fraction, are refused naming the field (they would evaluate
// examples the model trained on).
TEST_F(EvalE2eTest, AValSplitMustBeTheOneTheModelHeldOut) {
  mpsd::v1::SubmitJobRequest request = TrainJobRequest(600, 0, 1, 64, "mlp");
  request.mutable_train_job()->mutable_dataset()->mutable_validation()->set_fraction(0.2);
  const mpsd::v1::Job held_out = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
  ASSERT_EQ(held_out.state(), mpsd::v1::Job::SUCCEEDED) << held_out.message();
  ASSERT_TRUE(held_out.summary().has_val_loss());

  const auto val_request = [&](const std::string& model) {
    mpsd::v1::SubmitJobRequest eval = EvalRequest(model, "val");
    eval.mutable_eval_job()->mutable_dataset()->mutable_validation()->set_fraction(0.2);
    return eval;
  };
  const mpsd::v1::Job same =
      rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, val_request(held_out.id())).id());
  ASSERT_EQ(same.state(), mpsd::v1::Job::SUCCEEDED) << same.message();
  EXPECT_EQ(same.summary().eval_examples(), 120);
  EXPECT_NEAR(same.summary().metrics().at("val_loss"), held_out.summary().val_loss(), 1e-6);

  mpsd::v1::SubmitJobRequest other_fraction = val_request(held_out.id());
  other_fraction.mutable_eval_job()->mutable_dataset()->mutable_validation()->set_fraction(0.5);
  EXPECT_THAT(
      Refused(other_fraction),
      HasSubstr(absl::StrCat("eval_job.dataset.validation.fraction: 0.5, but job ", held_out.id(),
                             " (mlp) held its validation examples out with fraction 0.2")));
  mpsd::v1::SubmitJobRequest other_limit = val_request(held_out.id());
  other_limit.mutable_eval_job()->mutable_dataset()->set_limit_train(1200);
  EXPECT_THAT(Refused(other_limit),
              HasSubstr("eval_job.dataset.limit_train: 1200, but job " + held_out.id() +
                        " (mlp) held its validation examples out with limit_train 600"));
  EXPECT_THAT(Refused(val_request(trained_.id())),
              HasSubstr(absl::StrCat("eval_job.dataset.validation.fraction: job ", trained_.id(),
                                     " (mlp) trained without a validation fraction")));
}

TEST_F(EvalE2eTest, BadModelsAndDatasetsAreRefusedNamingTheField) {
  EXPECT_THAT(Refused(EvalRequest("999", "test")), HasSubstr("eval_job.model: no job 999"));
  EXPECT_THAT(Refused(EvalRequest(dir_.str() + "/none.pt", "test")),
              HasSubstr(absl::StrCat("eval_job.model: ", dir_.str(), "/none.pt: no such file")));
  EXPECT_THAT(Refused(EvalRequest(trained_.id(), "dev")),
              HasSubstr("eval_job.split: unknown \"dev\" (expected test, train or val)"));
  EXPECT_THAT(Refused(EvalRequest(trained_.id(), "val")),
              HasSubstr("eval_job.split: \"val\" needs a validation split"));
  mpsd::v1::SubmitJobRequest no_dataset = EvalRequest(trained_.id(), "test");
  no_dataset.mutable_eval_job()->clear_dataset();
  EXPECT_THAT(Refused(no_dataset), HasSubstr("eval_job.dataset.name: required"));
  // Images of another shape than the model's [1, 28, 28].
  mpsd::v1::SubmitJobRequest wrong_shape = EvalRequest(trained_.id(), "test");
  mpsd::v1::DatasetSpec* data = wrong_shape.mutable_eval_job()->mutable_dataset();
  data->Clear();
  data->set_name("synthetic");
  for (int64_t d : {3, 32, 32}) data->mutable_synthetic()->add_input_shape(d);
  EXPECT_THAT(Refused(wrong_shape),
              HasSubstr(absl::StrCat("eval_job.dataset: one example is [3, 32, 32], but the "
                                     "model of job ",
                                     trained_.id(), " (mlp) takes [1, 28, 28]")));
  // The dataset's own errors name the EvalJob's field.
  mpsd::v1::SubmitJobRequest bad_root = EvalRequest(trained_.id(), "test");
  bad_root.mutable_eval_job()->mutable_dataset()->set_root(dir_.str() + "/missing");
  EXPECT_THAT(Refused(bad_root), HasSubstr("eval_job.dataset.root: "));

  // A TrainJob that has not finished (queued behind a paused queue) has no model yet.
  ASSERT_EQ(RunCommand({MpsctlPath(), "--server", daemon_.address(), "pause"}).exit_code, 0);
  const mpsd::v1::Job queued = rpc_ok::Submit(daemon_, TrainJobRequest(600, 100, 1, 64, "mlp"));
  EXPECT_THAT(Refused(EvalRequest(queued.id(), "test")),
              HasSubstr(absl::StrCat("eval_job.model: job ", queued.id(),
                                     " is QUEUED: the model of a TrainJob that SUCCEEDED is "
                                     "needed")));
  // Nor does an EvalJob leave one.
  ASSERT_EQ(RunCommand({MpsctlPath(), "--server", daemon_.address(), "resume"}).exit_code, 0);
  const mpsd::v1::Job eval = rpc_ok::Submit(daemon_, EvalRequest(trained_.id(), "test"));
  EXPECT_THAT(Refused(EvalRequest(eval.id(), "test")),
              HasSubstr(absl::StrCat("eval_job.model: job ", eval.id(),
                                     " is not a TrainJob "
                                     "(kind EVAL_JOB)")));
  // The daemon is still serving, and runs the jobs queued meanwhile.
  EXPECT_EQ(rpc_ok::WaitForEnd(daemon_, queued.id()).state(), mpsd::v1::Job::SUCCEEDED);
  EXPECT_EQ(rpc_ok::WaitForEnd(daemon_, eval.id()).state(), mpsd::v1::Job::SUCCEEDED);
  // A TrainJob whose artifacts were deleted left a model once: the refusal says where it went.
  const CommandResult rm =
      RunCommand({MpsctlPath(), "--server", daemon_.address(), "rm", queued.id()});
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_THAT(Refused(EvalRequest(queued.id(), "test")),
              HasSubstr(absl::StrCat("eval_job.model: job ", queued.id(),
                                     "'s artifacts were deleted (mpsctl rm, or the daemon's "
                                     "artifacts_retention): its model is gone")));
}

// The top-1 class of each input of `mpsctl predict --format csv` output (rows "input,rank,
// class,name,probability"), in input order.
std::vector<int> TopOne(const std::string& csv) {
  std::vector<int> classes;
  for (absl::string_view line : absl::StrSplit(csv, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> fields = absl::StrSplit(line, ',');
    if (fields.size() != 5 || fields[1] != "1") continue;
    int c = -1;
    EXPECT_TRUE(absl::SimpleAtoi(fields[2], &c)) << line;
    classes.push_back(c);
  }
  return classes;
}

TEST_F(EvalE2eTest, PredictAgreesWithAnEvalJobOnTheSameExamples) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch";
  constexpr int kImages = 8;
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", SourcePath("tests/e2e/predict_inputs.py"), " ",
                                     dir_.str(), " ", kImages)
                            .c_str()),
            0);
  const std::string mpsctl = MpsctlPath();
  // The images, one by one in a folder (sorted by name: img_0 … img_7), top 3 each.
  const CommandResult images =
      RunCommand({mpsctl, "--server", daemon_.address(), "predict", trained_.id(),
                  dir_.str() + "/images", "--top-k", "3", "--format", "csv"});
  ASSERT_EQ(images.exit_code, 0) << images.out << images.err;
  EXPECT_THAT(images.out, HasSubstr("input,rank,class,name,probability\n"));
  EXPECT_THAT(images.out, HasSubstr(absl::StrCat(dir_.str(), "/images/img_0.png,1,")));
  EXPECT_THAT(images.out, HasSubstr(absl::StrCat(dir_.str(), "/images/img_7.png,3,")));
  const std::vector<int> top1 = TopOne(images.out);
  ASSERT_EQ(top1.size(), static_cast<size_t>(kImages)) << images.out;
  // The same pixels as a tensors file: the same classes (decoding PNG loses nothing).
  const CommandResult tensors =
      RunCommand({mpsctl, "--server", daemon_.address(), "predict", trained_.id(),
                  dir_.str() + "/inputs.pt", "--format", "csv"});
  ASSERT_EQ(tensors.exit_code, 0) << tensors.out << tensors.err;
  EXPECT_EQ(TopOne(tensors.out), top1);
  EXPECT_THAT(tensors.out, HasSubstr(absl::StrCat(dir_.str(), "/inputs.pt[7],1,")));

  // Independently: an EvalJob (the dataset loader and the TrainJob's evaluation) on these
  // examples labelled with the predicted classes finds every one "correct".
  ASSERT_EQ(
      std::system(absl::StrCat(kPython, " ", SourcePath("tests/e2e/predict_inputs.py"), " ",
                               dir_.str(), " ", kImages, " --labels ", absl::StrJoin(top1, ","))
                      .c_str()),
      0);
  mpsd::v1::SubmitJobRequest request = EvalRequest(trained_.id(), "test");
  mpsd::v1::DatasetSpec* data = request.mutable_eval_job()->mutable_dataset();
  data->Clear();
  data->set_name("tensors");
  data->set_root(dir_.str() + "/labelled.pt");
  const mpsd::v1::Job eval = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
  ASSERT_EQ(eval.state(), mpsd::v1::Job::SUCCEEDED) << eval.message();
  EXPECT_EQ(eval.summary().eval_examples(), kImages);
  EXPECT_EQ(eval.summary().metrics().at("test_accuracy"), 1.0);

  // JSON: one Prediction per line, probabilities in [0, 1] and falling.
  const CommandResult json =
      RunCommand({mpsctl, "--server", daemon_.address(), "predict", trained_.id(),
                  dir_.str() + "/images/img_0.png", "--top-k", "2", "--format", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr(absl::StrCat("\"input\":\"", dir_.str(), "/images/img_0.png\"")));
  EXPECT_THAT(json.out, HasSubstr(absl::StrCat("\"classes\":[", top1[0], ",")));
  EXPECT_THAT(json.out, MatchesRegex("\\{.*\"probabilities\":\\[[0-9.e-]+,[0-9.e-]+\\].*\\}\n"));
  // The table, for people.
  const CommandResult table = RunCommand({mpsctl, "--server", daemon_.address(), "predict",
                                          trained_.id(), dir_.str() + "/images/img_0.png"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, MatchesRegex("INPUT +RANK +CLASS +NAME +PROBABILITY\n(.|\n)*"));

  // One image on the CPU: from the command to its printed result, and the executor's own
  // forward pass (its summary), for the notes.
  const absl::Time start = absl::Now();
  const CommandResult one = RunCommand({mpsctl, "--server", daemon_.address(), "predict",
                                        trained_.id(), dir_.str() + "/images/img_1.png"});
  const absl::Duration wall = absl::Now() - start;
  ASSERT_EQ(one.exit_code, 0) << one.err;
  mpsd::v1::ListJobsRequest list;
  list.set_kind(mpsd::v1::Job::PREDICT_JOB);
  absl::StatusOr<mpsd::v1::ListJobsResponse> jobs = rpc::List(daemon_, list);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_GE(jobs->jobs_size(), 1);
  const mpsd::v1::JobSummary& last = jobs->jobs(0).summary();
  EXPECT_EQ(last.predictions_size(), 1);
  EXPECT_GT(last.forward_time_ms(), 0);
  std::cout << "[ MEASURED ] mpsctl predict, one image, mlp on cpu: "
            << absl::ToDoubleMilliseconds(wall) << " ms from the command to its printed result; "
            << "the executor's forward pass " << last.forward_time_ms() << " ms, its job "
            << last.total_time_s() * 1000 << " ms\n";
}

// Your own images (examples/make_own_data.py's colours, PNG and JPEG of mixed sizes): predict
// names the classes, and its top-1 on every image of the held-out folders is right exactly as
// often as the EvalJob of that split says (the model's stored decoding, resizing and
// normalisation on both paths).
TEST_F(EvalE2eTest, PredictOnAnImageFolderModelNamesClassesAndAgreesWithItsEvalJob) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch";
  const std::string root = dir_.str() + "/colours";
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", SourcePath("examples/make_own_data.py"), " ",
                                     root, " > /dev/null")
                            .c_str()),
            0);
  mpsd::v1::SubmitJobRequest train = TrainJobRequest(0, 0, /*epochs=*/3, 16, "mlp");
  mpsd::v1::DatasetSpec dataset;
  dataset.set_name("image_folder");
  dataset.set_root(root);
  dataset.mutable_image_folder()->add_image_size(16);
  dataset.mutable_image_folder()->add_image_size(16);
  *train.mutable_train_job()->mutable_dataset() = dataset;
  const mpsd::v1::Job trained = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, train).id());
  ASSERT_EQ(trained.state(), mpsd::v1::Job::SUCCEEDED) << trained.message();
  mpsd::v1::SubmitJobRequest request = EvalRequest(trained.id(), "test");
  *request.mutable_eval_job()->mutable_dataset() = dataset;
  const mpsd::v1::Job eval = rpc_ok::WaitForEnd(daemon_, rpc_ok::Submit(daemon_, request).id());
  ASSERT_EQ(eval.state(), mpsd::v1::Job::SUCCEEDED) << eval.message();
  EXPECT_EQ(eval.summary().metrics().at("test_accuracy"), trained.summary().test_accuracy());
  ASSERT_EQ(eval.summary().class_names_size(), 3);

  std::vector<std::string> args = {MpsctlPath(), "--server",   daemon_.address(),
                                   "predict",    trained.id(), "--top-k",
                                   "1",          "--format",   "csv"};
  for (const std::string& name : eval.summary().class_names()) {
    args.push_back(absl::StrCat(root, "/val/", name));
  }
  const CommandResult predicted = RunCommand(args);
  ASSERT_EQ(predicted.exit_code, 0) << predicted.err;
  int64_t rows = 0, right = 0;
  for (absl::string_view line : absl::StrSplit(predicted.out, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> fields = absl::StrSplit(line, ',');
    if (fields.size() != 5 || fields[1] != "1") continue;
    ++rows;
    // input ".../val/<class>/img_003.png", name column: the predicted class's name.
    EXPECT_THAT(eval.summary().class_names(), ::testing::Contains(fields[3])) << line;
    if (absl::StrContains(fields[0], absl::StrCat("/val/", fields[3], "/"))) ++right;
  }
  EXPECT_EQ(rows, eval.summary().eval_examples());
  EXPECT_EQ(static_cast<double>(right) / static_cast<double>(rows),
            eval.summary().metrics().at("test_accuracy"))
      << predicted.out;
}

TEST_F(EvalE2eTest, PredictNamesWhatIsWrongAndTheDaemonStaysUp) {
  const std::string mpsctl = MpsctlPath();
  const auto predict = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {mpsctl, "--server", daemon_.address(), "predict"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  };
  WriteFile(dir_.str() + "/broken.png", "not an image at all");
  const CommandResult broken = predict({trained_.id(), dir_.str() + "/broken.png"});
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_THAT(broken.err, HasSubstr("(DATASET_ERROR)"));
  EXPECT_THAT(broken.err, HasSubstr(absl::StrCat(dir_.str(), "/broken.png: ")));
  EXPECT_EQ(broken.out, "");

  const CommandResult unknown = predict({"999", dir_.str() + "/broken.png"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("mpsd rejected the job: predict_job.model: no job 999"));

  const CommandResult missing = predict({trained_.id(), dir_.str() + "/nothing.png"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr(absl::StrCat("predict_job.inputs[0]: ", dir_.str(),
                                                  "/nothing.png: no such file or folder")));

  WriteFile(dir_.str() + "/notes.txt", "hello");
  const CommandResult text = predict({trained_.id(), dir_.str() + "/notes.txt"});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_THAT(text.err, HasSubstr("notes.txt: not a PNG or JPEG file"));

  const CommandResult format = predict({trained_.id(), dir_.str(), "--format", "xml"});
  EXPECT_EQ(format.exit_code, 64) << format.err;

  // A tensors file of the wrong example shape fails the job naming the file and both shapes.
  if (!std::string(kPython).empty()) {
    ASSERT_EQ(std::system(absl::StrCat(kPython,
                                       " -c 'import torch; torch.save({\"x\": "
                                       "torch.zeros(2, 3, 32, 32), \"note\": \"wide\"}, \"",
                                       dir_.str(), "/wide.pt\")'")
                              .c_str()),
              0);
    const CommandResult wide = predict({trained_.id(), dir_.str() + "/wide.pt"});
    EXPECT_EQ(wide.exit_code, 1);
    EXPECT_THAT(wide.err, HasSubstr(absl::StrCat(dir_.str(),
                                                 "/wide.pt: x: examples of shape "
                                                 "[3, 32, 32], but the model of job ",
                                                 trained_.id(), " (mlp) takes [1, 28, 28]")));
  }
  absl::StatusOr<mpsd::v1::ServerStatus> status = rpc::Status(daemon_);
  EXPECT_TRUE(status.ok()) << status.status();
}

}  // namespace
}  // namespace mpsd::testing
