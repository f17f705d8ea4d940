// TrainJob.task through a real mpsd, mpsd-executor and mpsctl: examples/regression.yaml on the
// data examples/make_task_data.py writes (smaller), submitted and followed with mpsctl, whose
// epoch lines, `get` and `logs` show the regression's metrics; the stored summary holds them by
// name; a spec whose targets do not fit its task is refused at submit naming the field; and
// a regression on two ranks measures what it measures on one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

constexpr char kPython[] = MPSD_TORCH_PYTHON;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(TaskE2eTest, RegressionExampleShowsItsMetricsInMpsctl) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch";
  TempDir dir;
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", SourcePath("examples/make_task_data.py"), " ",
                                     dir.str(), " --train 320 --test 96")
                            .c_str()),
            0);
  // The example as it is, on this machine's cpu and the data just written, in fewer epochs.
  const std::string job_file = dir.str() + "/regression.yaml";
  WriteFile(job_file, absl::StrReplaceAll(
                          ReadText(SourcePath("examples/regression.yaml")),
                          {{"/usr/share/datasets/regression.pt", dir.str() + "/regression.pt"},
                           {"device: auto", "device: cpu"},
                           {"epochs: 10", "epochs: 5"}}));
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  daemon.Start();

  const CommandResult submitted =
      RunCommand({MpsctlPath(), "--server", daemon.address(), "submit", job_file});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.out << submitted.err;
  const std::string id(absl::StripSuffix(submitted.out, "\n"));
  const CommandResult followed =
      RunCommand({MpsctlPath(), "--server", daemon.address(), "logs", id, "--follow"});
  ASSERT_EQ(followed.exit_code, 0) << followed.out << followed.err;
  // Each epoch: the training loss, then the validation split's loss and metrics.
  EXPECT_THAT(followed.out, MatchesRegex("(.|\n)*epoch 1: train loss [0-9.]+, val loss [0-9.]+ "
                                         "mse [0-9.]+ mae [0-9.]+ r2 -?[0-9.]+, (.|\n)*"));
  // The last epoch also the test split's (evaluate_test: end with a validation split).
  EXPECT_THAT(followed.out, MatchesRegex("(.|\n)*epoch 5: .*, test loss [0-9.]+ mse [0-9.]+ "
                                         "mae [0-9.]+ r2 0[.]9[0-9]+(.|\n)*"));
  EXPECT_THAT(followed.out, HasSubstr("task regression, loss huber(delta=1)"));

  absl::StatusOr<mpsd::v1::Job> job = rpc::Get(daemon, id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), mpsd::v1::Job::SUCCEEDED) << job->message();
  EXPECT_EQ(job->summary().task(), "regression");
  ASSERT_TRUE(job->summary().metrics().contains("test_r2"));
  EXPECT_GT(job->summary().metrics().at("test_r2"), 0.9);
  EXPECT_GT(job->summary().metrics().at("val_r2"), 0.9);
  EXPECT_LT(job->summary().metrics().at("test_mse"), 0.5);
  EXPECT_FALSE(job->summary().has_test_accuracy());  // regression measures none
  EXPECT_EQ(job->summary().monitor(), "val_r2");
  // The finished model's card says what it was trained for.
  const std::string card = ReadText(job->summary().model_json_path());
  EXPECT_THAT(card, HasSubstr("\"regression\""));
  EXPECT_THAT(card, HasSubstr("huber(delta=1)"));
  EXPECT_THAT(card, HasSubstr("\"r2\""));

  const CommandResult got = RunCommand({MpsctlPath(), "--server", daemon.address(), "get", id});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_THAT(got.out, MatchesRegex("(.|\n)*regression: train loss [0-9.]+, val loss [0-9.]+ mse "
                                    "[0-9.]+ mae [0-9.]+ r2 0[.]9[0-9]+, test loss [0-9.]+ mse "
                                    "[0-9.]+ mae [0-9.]+ r2 0[.]9[0-9]+\n(.|\n)*"));
  EXPECT_THAT(got.out, Not(HasSubstr("test accuracy")));

  // Multilabel on the regression's targets: refused at submit, naming the file and the value.
  WriteFile(job_file, absl::StrReplaceAll(ReadText(job_file),
                                          {{"task: regression", "task: multilabel"},
                                           {"loss: {type: huber, delta: 1.0}", ""},
                                           {"monitor: val_r2", "monitor: val_macro_f1"}}));
  const CommandResult refused =
      RunCommand({MpsctlPath(), "--server", daemon.address(), "submit", job_file});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr(absl::StrCat("mpsd rejected the job: train_job.dataset.root: ",
                                                  dir.str(), "/regression.pt: train.y[0, 0]: ")));
  EXPECT_THAT(refused.err, HasSubstr("multilabel targets must be 0 or 1"));
}

// Data-parallel: two ranks of batch 16 take the examples one rank of batch 32 takes and their
// evaluation sums (TaskLoss::EvalSums) are all-reduced: the same step losses and the same
// validation and test metrics, up to float rounding.
TEST(TaskE2eTest, TwoRanksOfARegressionMatchOneRank) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch";
  TempDir dir;
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", SourcePath("examples/make_task_data.py"), " ",
                                     dir.str(), " --train 256 --test 64")
                            .c_str()),
            0);
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  daemon.Start();
  const auto run = [&](int nproc, int batch_size) {
    mpsd::v1::SubmitJobRequest request;
    mpsd::v1::TrainJob& job = *request.mutable_train_job();
    job.set_task("regression");
    job.mutable_model()->set_name("mlp");
    job.mutable_model()->set_dropout(0);
    job.mutable_dataset()->set_name("tensors");
    job.mutable_dataset()->set_root(dir.str() + "/regression.pt");
    job.mutable_dataset()->mutable_validation()->set_source("val");
    job.set_evaluate_test("every_epoch");
    job.set_batch_size(batch_size);
    job.set_epochs(2);
    job.set_seed(2);
    job.set_device("cpu");
    if (nproc > 1) {
      job.mutable_distributed()->set_nproc_per_node(nproc);
      job.mutable_distributed()->set_master_port(FreeLoopbackPort());
      job.mutable_distributed()->set_timeout_s(60);
    }
    absl::StatusOr<mpsd::v1::Job> submitted = rpc::Submit(daemon, request);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    absl::StatusOr<mpsd::v1::Job> ended = rpc::WaitForEnd(daemon, submitted->id());
    EXPECT_TRUE(ended.ok()) << ended.status();
    EXPECT_EQ(ended->state(), mpsd::v1::Job::SUCCEEDED) << ended->message();
    return rpc::StreamAll(daemon, submitted->id());
  };
  const std::vector<mpsd::v1::JobEvent> one = run(1, 32);
  const std::vector<mpsd::v1::JobEvent> two = run(2, 16);
  const auto of = [](const std::vector<mpsd::v1::JobEvent>& events, bool epochs) {
    std::vector<mpsd::v1::JobEvent> kept;
    for (const mpsd::v1::JobEvent& e : events) {
      if (epochs ? e.has_epoch() : e.has_step()) kept.push_back(e);
    }
    return kept;
  };
  bool two_ranks = false;
  for (const mpsd::v1::JobEvent& e : two) {
    two_ranks |= e.has_log() && absl::StrContains(e.log().text(), "rank 0 of 2");
  }
  EXPECT_TRUE(two_ranks);
  const std::vector<mpsd::v1::JobEvent> one_steps = of(one, false), two_steps = of(two, false);
  ASSERT_EQ(one_steps.size(), 16u);
  ASSERT_EQ(two_steps.size(), one_steps.size());
  for (size_t i = 0; i < one_steps.size(); ++i) {
    EXPECT_NEAR(two_steps[i].step().loss(), one_steps[i].step().loss(),
                1e-4 * std::max(1.0f, one_steps[i].step().loss()))
        << "step " << i + 1;
  }
  const std::vector<mpsd::v1::JobEvent> one_epochs = of(one, true), two_epochs = of(two, true);
  ASSERT_EQ(one_epochs.size(), 2u);
  ASSERT_EQ(two_epochs.size(), 2u);
  for (const char* name : {"val_loss", "val_mse", "val_mae", "val_r2", "test_mse", "test_r2"}) {
    const auto& a = one_epochs.back().epoch().metrics();
    const auto& b = two_epochs.back().epoch().metrics();
    ASSERT_TRUE(a.contains(name) && b.contains(name)) << name;
    EXPECT_NEAR(b.at(name), a.at(name), 1e-4 * std::max(1.0, std::abs(a.at(name)))) << name;
  }
}

}  // namespace
}  // namespace mpsd::testing
