// Every job file in examples/ parses (client/job_file) and passes the executor's Validate, so
// that the examples run as is. A file may need what this machine lacks: a device (fp16 on cuda)
// or a dataset this build does not have yet; those are reported, not failed, and every other
// validation error fails the test.
//
// MPSD_RUN_EXAMPLES=lstm.yaml,bert_base.yaml (file names, comma-separated) also runs those files
// through Executor::Run and expects them to succeed: minutes each on a CPU, so not by default.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/job_file.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> ExampleFiles() {
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(fs::path(MPSD_SOURCE_DIR) / "examples")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Errors that depend on the machine, not on the file.
bool NeedsWhatThisMachineLacks(const absl::Status& status) {
  const absl::string_view message = status.message();
  return (absl::StartsWith(message, "train_job.device: ") &&
          absl::StrContains(message, "is not available")) ||
         absl::StartsWith(message, "train_job.dataset.name: unknown dataset") ||
         absl::StartsWith(message, "train_job.dataset.root: directory /usr/share/datasets/") ||
         absl::StartsWith(message, "train_job.dataset.root: file /usr/share/datasets/") ||
         absl::StartsWith(message, "train_job.model.weights: /usr/share/datasets/") ||
         // examples/eval.yaml names a finished job of a daemon (this executor has none).
         absl::StartsWith(message, "eval_job.model: ");
}

bool ShouldRun(const fs::path& file) {
  const char* names = std::getenv("MPSD_RUN_EXAMPLES");
  if (names == nullptr) return false;
  for (absl::string_view name : absl::StrSplit(names, ',')) {
    if (name == file.filename().string()) return true;
  }
  return false;
}

void RunExample(Executor& executor, const fs::path& file,
                const mpsd::v1::SubmitJobRequest& request) {
  CancelFlag cancelled;
  mpsd::v1::JobSummary summary;
  const absl::Status status = executor.Run(
      JobContext{"example", ""}, request,
      [&](mpsd::v1::JobEvent event) {
        if (event.has_summary()) summary = event.summary();
      },
      cancelled);
  EXPECT_TRUE(status.ok()) << file.filename().string() << ": " << status;
  std::cout << "[ RAN      ] " << file.filename().string() << ": " << summary.steps()
            << " steps in " << summary.total_time_s() << " s, final train loss "
            << summary.final_train_loss() << ", test accuracy " << summary.test_accuracy() << " ("
            << summary.optimizer() << ", " << summary.schedule() << ", " << summary.precision()
            << ", " << summary.device() << ")\n";
}

TEST(ExamplesTest, EveryJobFileParsesAndValidates) {
  const std::vector<fs::path> files = ExampleFiles();
  ASSERT_GE(files.size(), 7u);
  Executor::Options options;
  absl::StatusOr<std::unique_ptr<Executor>> executor = CreateTorchExecutor(options);
  ASSERT_TRUE(executor.ok()) << executor.status();
  int validated = 0;
  for (const fs::path& file : files) {
    const absl::StatusOr<mpsd::v1::SubmitJobRequest> request = client::ReadJobFile(file.string());
    ASSERT_TRUE(request.ok()) << request.status();
    const absl::Status status = (*executor)->Validate(*request);
    if (!status.ok() && NeedsWhatThisMachineLacks(status)) {
      std::cout << "[ NOTE     ] " << file.filename().string() << " needs what this machine "
                << "lacks: " << status.message() << "\n";
      continue;
    }
    EXPECT_TRUE(status.ok()) << file.filename().string() << ": " << status;
    ++validated;
    if (status.ok() && ShouldRun(file)) RunExample(**executor, file, *request);
  }
  EXPECT_GE(validated, 5);
}

}  // namespace
}  // namespace mpsd::trainer
