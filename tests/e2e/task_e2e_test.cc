// TrainJob.task through a real mpsd, mpsd-executor and mpsctl: examples/regression.yaml on the
// data examples/make_task_data.py writes (smaller), submitted and followed with mpsctl, whose
// epoch lines, `get` and `logs` show the regression's metrics; the stored summary holds them by
// name; and a spec whose targets do not fit its task is refused at submit naming the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

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
  WriteFile(job_file,
            absl::StrReplaceAll(ReadText(SourcePath("examples/regression.yaml")),
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

}  // namespace
}  // namespace mpsd::testing
