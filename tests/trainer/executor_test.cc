// Tests for trainer/executor.cc, through the public Executor interface, on the real
// Fashion-MNIST files and small temporary copies of them. CPU only, kept small for 2 cores.
#include "trainer/executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

std::unique_ptr<Executor> MakeExecutor(int steps_per_readback = 32) {
  Executor::Options options;
  options.steps_per_readback = steps_per_readback;
  absl::StatusOr<std::unique_ptr<Executor>> executor = Executor::Create(options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return *std::move(executor);
}

// A small, valid CPU job: 2000 training examples = 31 batches of 64 and one of 16.
mpsd::v1::SubmitJobRequest SmallJob() {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("convnet");
  job.mutable_dataset()->set_name("fashion-mnist");
  job.mutable_dataset()->set_root(kFashionMnist);
  job.mutable_dataset()->set_limit_train(2000);
  job.mutable_dataset()->set_limit_test(500);
  job.set_batch_size(64);
  job.set_epochs(1);
  job.mutable_optimizer()->set_name("adam");
  job.mutable_optimizer()->set_learning_rate(1e-3);
  job.set_seed(1);
  job.set_device("cpu");
  return request;
}

struct RunResult {
  absl::Status status;
  std::vector<mpsd::v1::JobEvent> events;

  std::vector<mpsd::v1::StepMetrics> steps() const {
    std::vector<mpsd::v1::StepMetrics> steps;
    for (const auto& event : events) {
      if (event.has_step()) steps.push_back(event.step());
    }
    return steps;
  }
  int CountEpochs() const {
    int count = 0;
    for (const auto& event : events) count += event.has_epoch() ? 1 : 0;
    return count;
  }
};

RunResult RunJob(Executor& executor, const mpsd::v1::SubmitJobRequest& request) {
  RunResult result;
  std::atomic<bool> cancelled{false};
  result.status = executor.Run(
      request, [&](mpsd::v1::JobEvent event) { result.events.push_back(std::move(event)); },
      cancelled);
  return result;
}

// A fresh directory under the test's temp dir, removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::path(::testing::TempDir()) / ("executor_test_" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void LinkFashionMnistFile(const fs::path& dir, const std::string& name) {
  fs::create_symlink(fs::path(kFashionMnist) / (name + ".gz"), dir / (name + ".gz"));
}

// ---- Validate ---------------------------------------------------------------------------------

TEST(ExecutorValidateTest, AcceptsTheSmallJobAndTheDefaults) {
  auto executor = MakeExecutor();
  EXPECT_TRUE(executor->Validate(SmallJob()).ok());

  mpsd::v1::SubmitJobRequest minimal;
  minimal.mutable_train_job()->mutable_model()->set_name("convnet");
  minimal.mutable_train_job()->mutable_dataset()->set_name("fashion-mnist");
  EXPECT_TRUE(executor->Validate(minimal).ok()) << executor->Validate(minimal);
}

struct BadField {
  std::string name;
  void (*mutate)(mpsd::v1::TrainJob&);
  std::string message_prefix;
};

TEST(ExecutorValidateTest, RejectsEachBadFieldNamingItsPath) {
  const std::vector<BadField> cases = {
      {"batch_size", [](auto& j) { j.set_batch_size(0); },
       "train_job.batch_size: must be > 0, got 0"},
      {"epochs", [](auto& j) { j.set_epochs(-2); }, "train_job.epochs: must be > 0, got -2"},
      {"model", [](auto& j) { j.mutable_model()->set_name("foo"); },
       "train_job.model.name: unknown model \"foo\" (known: convnet)"},
      {"no model", [](auto& j) { j.mutable_model()->clear_name(); },
       "train_job.model.name: required (known: convnet)"},
      {"dataset", [](auto& j) { j.mutable_dataset()->set_name("cifar10"); },
       "train_job.dataset.name: unknown dataset \"cifar10\" (known: fashion-mnist, mnist)"},
      {"optimizer", [](auto& j) { j.mutable_optimizer()->set_name("sgd"); },
       "train_job.optimizer.name: unknown optimizer \"sgd\" (known: adam)"},
      {"lr zero", [](auto& j) { j.mutable_optimizer()->set_learning_rate(0); },
       "train_job.optimizer.learning_rate: must be > 0, got 0"},
      {"lr negative", [](auto& j) { j.mutable_optimizer()->set_learning_rate(-0.1); },
       "train_job.optimizer.learning_rate: must be > 0, got -0.1"},
      {"lr nan",
       [](auto& j) {
         j.mutable_optimizer()->set_learning_rate(std::numeric_limits<double>::quiet_NaN());
       },
       "train_job.optimizer.learning_rate: must be > 0"},
      {"lr inf",
       [](auto& j) {
         j.mutable_optimizer()->set_learning_rate(std::numeric_limits<double>::infinity());
       },
       "train_job.optimizer.learning_rate: must be finite"},
      {"limit_train", [](auto& j) { j.mutable_dataset()->set_limit_train(-1); },
       "train_job.dataset.limit_train: must be >= 0, got -1"},
      {"limit_test", [](auto& j) { j.mutable_dataset()->set_limit_test(-5); },
       "train_job.dataset.limit_test: must be >= 0, got -5"},
      {"device", [](auto& j) { j.set_device("tpu"); },
       "train_job.device: unknown device \"tpu\" (expected auto, cpu, cuda, cuda:N or mps)"},
      {"device index", [](auto& j) { j.set_device("cuda:x"); },
       "train_job.device: unknown device \"cuda:x\""},
  };
  auto executor = MakeExecutor();
  for (const BadField& c : cases) {
    mpsd::v1::SubmitJobRequest request = SmallJob();
    c.mutate(*request.mutable_train_job());
    const absl::Status status = executor->Validate(request);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << status;
    EXPECT_THAT(std::string(status.message()), StartsWith(c.message_prefix)) << c.name;
  }
}

TEST(ExecutorValidateTest, RejectsADeviceThatIsNotAvailable) {
  auto executor = MakeExecutor();
  const mpsd::v1::DeviceInfo device = executor->GetDevice();
  if (std::find(device.available().begin(), device.available().end(), "cuda") !=
      device.available().end()) {
    GTEST_SKIP() << "this machine has CUDA";
  }
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->set_device("cuda");
  const absl::Status status = executor->Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("train_job.device: cuda is not available (available: cpu"));
}

TEST(ExecutorValidateTest, BenchJobIsUnimplementedAndAnEmptySpecInvalid) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest bench;
  bench.mutable_bench_job()->add_models("convnet");
  const absl::Status status = executor->Validate(bench);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(status.message(), "BenchJob is not implemented yet");

  EXPECT_EQ(executor->Validate(mpsd::v1::SubmitJobRequest()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExecutorValidateTest, MissingDatasetRootNamesTheDirectory) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_root("/nonexistent/fmnist");
  const absl::Status status = executor->Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(StartsWith("train_job.dataset.root: "), HasSubstr("/nonexistent/fmnist")));
}

TEST(ExecutorValidateTest, DatasetRootThatIsAFileIsNamed) {
  TempDir dir("root_is_file");
  const fs::path file = dir.path() / "not-a-dir";
  std::ofstream(file) << "x";
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_root(file.string());
  const absl::Status status = executor->Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "train_job.dataset.root: " + file.string() + " is not a directory");
}

TEST(ExecutorValidateTest, DefaultRootIsPerDataset) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_name("mnist");
  request.mutable_train_job()->mutable_dataset()->clear_root();
  const absl::Status status = executor->Validate(request);
  if (fs::exists("/usr/share/datasets/mnist/train-images-idx3-ubyte.gz")) {
    EXPECT_TRUE(status.ok()) << status;
  } else {
    EXPECT_THAT(std::string(status.message()), AllOf(StartsWith("train_job.dataset.root: "),
                                                     HasSubstr("/usr/share/datasets/mnist")));
  }
}

TEST(ExecutorValidateTest, MissingIdxFileIsNamed) {
  TempDir dir("missing_file");
  LinkFashionMnistFile(dir.path(), "train-images-idx3-ubyte");
  LinkFashionMnistFile(dir.path(), "train-labels-idx1-ubyte");
  LinkFashionMnistFile(dir.path(), "t10k-images-idx3-ubyte");
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_root(dir.path().string());
  const absl::Status status = executor->Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(StartsWith("train_job.dataset.root: "), HasSubstr("t10k-labels-idx1-ubyte")));
}

// ---- Run --------------------------------------------------------------------------------------

TEST(ExecutorRunTest, TrainsOneEpochReportingEveryStep) {
  auto executor = MakeExecutor();
  const RunResult result = RunJob(*executor, SmallJob());
  ASSERT_TRUE(result.status.ok()) << result.status;

  const std::vector<mpsd::v1::StepMetrics> steps = result.steps();
  ASSERT_EQ(steps.size(), 32u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(steps[i].epoch(), 1);
    EXPECT_EQ(steps[i].total_steps(), 32);
    EXPECT_EQ(steps[i].batch_size(), i + 1 < steps.size() ? 64 : 2000 - 31 * 64);
    EXPECT_DOUBLE_EQ(steps[i].learning_rate(), 1e-3);
    EXPECT_GT(steps[i].samples_per_second(), 0);
    EXPECT_GT(steps[i].step_time_ms(), 0);
    EXPECT_GE(steps[i].accuracy(), 0);
    EXPECT_LE(steps[i].accuracy(), 1);
    EXPECT_TRUE(std::isfinite(steps[i].loss()));
  }
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += steps[i].loss();
    last += steps[steps.size() - 10 + i].loss();
  }
  EXPECT_LT(last, first);

  // Logs, then the 32 steps, then the epoch, then the summary.
  ASSERT_GE(result.events.size(), 34u);
  EXPECT_TRUE(result.events.front().has_log());
  const mpsd::v1::JobEvent& epoch_event = result.events[result.events.size() - 2];
  ASSERT_TRUE(epoch_event.has_epoch());
  const mpsd::v1::EpochMetrics& epoch = epoch_event.epoch();
  EXPECT_EQ(epoch.epoch(), 1);
  EXPECT_GT(epoch.test_accuracy(), 0.6);
  EXPECT_GT(epoch.train_accuracy(), 0.3);
  EXPECT_GT(epoch.epoch_time_s(), 0);
  EXPECT_GT(epoch.samples_per_second(), 0);
  EXPECT_EQ(result.CountEpochs(), 1);

  ASSERT_TRUE(result.events.back().has_summary());
  const mpsd::v1::JobSummary& summary = result.events.back().summary();
  EXPECT_EQ(summary.device(), "cpu");
  EXPECT_EQ(summary.epochs(), 1);
  EXPECT_EQ(summary.steps(), 32);
  EXPECT_EQ(summary.train_examples(), 2000);
  EXPECT_EQ(summary.test_examples(), 500);
  EXPECT_EQ(summary.parameters(), 1199882);
  EXPECT_DOUBLE_EQ(summary.test_accuracy(), epoch.test_accuracy());
  EXPECT_DOUBLE_EQ(summary.final_train_loss(), epoch.train_loss());
  EXPECT_DOUBLE_EQ(summary.median_epoch_time_s(), epoch.epoch_time_s());
  EXPECT_GT(summary.samples_per_second(), 0);
  EXPECT_GE(summary.total_time_s(), epoch.epoch_time_s() + summary.data_load_time_s());
  EXPECT_GT(summary.data_load_time_s(), 0);

  const mpsd::v1::DeviceInfo device = executor->GetDevice();
  EXPECT_EQ(device.jobs_run(), 1);
}

TEST(ExecutorRunTest, CancelStopsAtTheNextStepBoundary) {
  // Read back at least every 4 steps (sooner when a step is slow): the flag set while step 5's
  // event is delivered stops the job after the group that holds step 5, at step 8 at most.
  auto executor = MakeExecutor(/*steps_per_readback=*/4);
  std::atomic<bool> cancelled{false};
  std::vector<mpsd::v1::JobEvent> events;
  const absl::Status status = executor->Run(
      SmallJob(),
      [&](mpsd::v1::JobEvent event) {
        if (event.has_step() && event.step().step() == 5) cancelled = true;
        events.push_back(std::move(event));
      },
      cancelled);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;

  std::vector<int64_t> steps;
  for (const auto& event : events) {
    if (event.has_step()) steps.push_back(event.step().step());
    EXPECT_FALSE(event.has_epoch());
  }
  ASSERT_GE(steps.size(), 5u);
  EXPECT_LE(steps.size(), 8u);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<int64_t>(i + 1));
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_summary());
  EXPECT_EQ(events.back().summary().steps(), static_cast<int64_t>(steps.size()));
  EXPECT_EQ(events.back().summary().epochs(), 0);
}

TEST(ExecutorRunTest, TruncatedIdxFileFailsWithDataLossNamingTheFile) {
  TempDir dir("truncated");
  LinkFashionMnistFile(dir.path(), "train-labels-idx1-ubyte");
  LinkFashionMnistFile(dir.path(), "t10k-images-idx3-ubyte");
  LinkFashionMnistFile(dir.path(), "t10k-labels-idx1-ubyte");
  // A raw images file whose header promises 60000 images of 28×28 but holds only 10.
  const fs::path images = dir.path() / "train-images-idx3-ubyte";
  {
    std::ofstream out(images, std::ios::binary);
    const unsigned char header[16] = {0, 0, 8, 3, 0, 0, 0xea, 0x60, 0, 0, 0, 28, 0, 0, 0, 28};
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    const std::string body(10 * 28 * 28, '\x7f');
    out.write(body.data(), static_cast<std::streamsize>(body.size()));
  }
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_root(dir.path().string());
  ASSERT_TRUE(executor->Validate(request).ok());

  const RunResult result = RunJob(*executor, request);
  EXPECT_EQ(result.status.code(), absl::StatusCode::kDataLoss) << result.status;
  EXPECT_THAT(std::string(result.status.message()), HasSubstr(images.string()));
  EXPECT_TRUE(result.steps().empty());
  ASSERT_FALSE(result.events.empty());
  EXPECT_TRUE(result.events.back().has_summary());

  // The executor stays usable after a failed job.
  mpsd::v1::SubmitJobRequest small = SmallJob();
  small.mutable_train_job()->mutable_dataset()->set_limit_train(128);
  small.mutable_train_job()->mutable_dataset()->set_limit_test(100);
  EXPECT_TRUE(RunJob(*executor, small).status.ok());
}

TEST(ExecutorRunTest, SameSeedGivesIdenticalLossesOnCpu) {
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_limit_train(320);
  request.mutable_train_job()->mutable_dataset()->set_limit_test(100);
  auto losses = [](const RunResult& result) {
    std::vector<float> losses;
    for (const auto& step : result.steps()) losses.push_back(step.loss());
    return losses;
  };
  auto executor = MakeExecutor();
  const RunResult a = RunJob(*executor, request);
  const RunResult b = RunJob(*executor, request);
  request.mutable_train_job()->set_seed(2);
  const RunResult c = RunJob(*executor, request);
  ASSERT_TRUE(a.status.ok() && b.status.ok() && c.status.ok());
  ASSERT_EQ(losses(a).size(), 5u);
  EXPECT_EQ(losses(a), losses(b));
  EXPECT_NE(losses(a), losses(c));
}

TEST(ExecutorDeviceTest, DescribesTheCpu) {
  auto executor = MakeExecutor();
  const mpsd::v1::DeviceInfo device = executor->GetDevice();
  EXPECT_THAT(device.available(), Contains("cpu"));
  EXPECT_FALSE(device.kind().empty());
  EXPECT_FALSE(device.name().empty());
  EXPECT_FALSE(device.torch_version().empty());
  EXPECT_GT(device.cpu_threads(), 0);
  if (device.kind() == "cpu") {
    EXPECT_GT(device.total_memory_bytes(), 0);
    EXPECT_EQ(device.allocated_bytes(), 0);
  }
  EXPECT_EQ(device.jobs_run(), 0);
}

}  // namespace
}  // namespace mpsd::trainer
