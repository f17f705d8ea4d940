// Tests for trainer/bench.cc through the public Executor interface: BenchJobs of small models on
// the CPU (a few milliseconds per row), their rows, events, validation and fault injection.
#include "trainer/bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/job_file.h"
#include "trainer/compat/autocast.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {
namespace {

using mpsd::v1::BenchJob;
using mpsd::v1::BenchRow;
using mpsd::v1::JobEvent;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::unique_ptr<Executor> MakeExecutor(bool allow_fault_injection = false) {
  Executor::Options options;
  options.allow_fault_injection = allow_fault_injection;
  absl::StatusOr<std::unique_ptr<Executor>> executor = CreateTorchExecutor(options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return *std::move(executor);
}

// mlp and convnet at their natural 1×28×28 input, batch sizes 4 and 8, on the cpu.
mpsd::v1::SubmitJobRequest SmallBench() {
  mpsd::v1::SubmitJobRequest request;
  BenchJob& job = *request.mutable_bench_job();
  job.add_models("mlp");
  job.add_models("convnet");
  job.add_batch_sizes(4);
  job.add_batch_sizes(8);
  job.add_devices("cpu");
  job.set_warmup_iters(1);
  job.set_iters(5);
  job.set_seed(3);
  return request;
}

struct BenchResult {
  absl::Status status;
  std::vector<JobEvent> events;

  std::vector<BenchRow> rows() const {
    std::vector<BenchRow> rows;
    for (const JobEvent& event : events) {
      if (event.has_bench_row()) rows.push_back(event.bench_row());
    }
    return rows;
  }
  const mpsd::v1::JobSummary* summary() const {
    for (const JobEvent& event : events) {
      if (event.has_summary()) return &event.summary();
    }
    return nullptr;
  }
};

// Runs `request`; `on_event` (if set) sees each event as it is emitted, with the flag that
// cancels the job.
BenchResult RunBench(Executor& executor, const mpsd::v1::SubmitJobRequest& request,
                     std::function<void(const JobEvent&, CancelFlag&)> on_event = {}) {
  BenchResult result;
  CancelFlag cancelled;
  result.status = executor.Run(
      JobContext{"1", ""}, request,
      [&](JobEvent event) {
        if (on_event) on_event(event, cancelled);
        result.events.push_back(std::move(event));
      },
      cancelled);
  return result;
}

int64_t ParametersOf(Executor& executor, const std::string& model) {
  absl::StatusOr<mpsd::v1::ListModelsResponse> models = executor.ListModels({});
  EXPECT_TRUE(models.ok()) << models.status();
  for (const mpsd::v1::ModelInfo& info : models->models()) {
    if (info.name() == model) return info.parameters();
  }
  return -1;
}

TEST(BenchTest, CpuBenchOfTwoModelsAndTwoBatchSizesMeasuresEveryRow) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallBench();
  request.mutable_bench_job()->set_mode("both");
  const BenchResult result = RunBench(*executor, request);
  ASSERT_TRUE(result.status.ok()) << result.status;

  const std::vector<BenchRow> rows = result.rows();
  ASSERT_EQ(rows.size(), 8u);  // 2 models × 2 batch sizes × 2 modes × 1 device
  // Run order: model, batch size, mode.
  const std::vector<std::string> models = {"mlp",     "mlp",     "mlp",     "mlp",
                                           "convnet", "convnet", "convnet", "convnet"};
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& row = rows[i];
    SCOPED_TRACE(row.ShortDebugString());
    EXPECT_EQ(row.status(), BenchRow::OK);
    EXPECT_EQ(row.model(), models[i]);
    EXPECT_EQ(row.batch_size(), i % 4 < 2 ? 4 : 8);
    EXPECT_EQ(row.mode(), i % 2 == 0 ? "inference" : "train_step");
    EXPECT_EQ(row.device(), "cpu");
    EXPECT_EQ(row.precision(), "fp32");
    EXPECT_EQ(row.memory_format(), "contiguous");
    EXPECT_EQ(row.iters(), 5);
    EXPECT_GT(row.p10_ms(), 0);
    EXPECT_LE(row.p10_ms(), row.median_ms());
    EXPECT_LE(row.median_ms(), row.p90_ms());
    EXPECT_GT(row.mean_ms(), 0);
    EXPECT_DOUBLE_EQ(row.samples_per_second(), row.batch_size() * 1000.0 / row.median_ms());
    EXPECT_GT(row.cpu_threads(), 0);
    EXPECT_EQ(row.peak_memory_bytes(), 0);  // the cpu keeps no statistics
    EXPECT_EQ(row.speedup_vs_cpu(), 0);     // the cpu row itself
    EXPECT_EQ(row.parameters(), ParametersOf(*executor, row.model()));
    // A train_step row runs the TrainJob's step; on the cpu its eager one, with nothing to say
    // about a graph.
    EXPECT_EQ(row.step(), row.mode() == "train_step" ? "eager" : "");
    EXPECT_EQ(row.step_note(), "");
  }

  // The rows stream before the summary, which holds the same rows in the same order, last.
  ASSERT_FALSE(result.events.empty());
  ASSERT_TRUE(result.events.back().has_summary());
  const mpsd::v1::JobSummary& summary = *result.summary();
  ASSERT_EQ(summary.bench_rows_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(summary.bench_rows(i).SerializeAsString(), rows[i].SerializeAsString());
  }
  EXPECT_EQ(summary.device(), "cpu");
  EXPECT_GT(summary.total_time_s(), 0);
}

TEST(BenchTest, EachRowIsAnEventAsSoonAsMeasuredAndCancellationStopsBetweenIterations) {
  auto executor = MakeExecutor();
  int rows_seen = 0;
  const BenchResult result =
      RunBench(*executor, SmallBench(), [&](const JobEvent& event, CancelFlag& cancel) {
        if (event.has_bench_row() && ++rows_seen == 1) cancel.Cancel();
      });
  EXPECT_EQ(result.status.code(), absl::StatusCode::kCancelled) << result.status;
  // The first row arrived while the job still ran (it cancelled the rest); the summary has it.
  EXPECT_EQ(result.rows().size(), 1u);
  ASSERT_NE(result.summary(), nullptr);
  EXPECT_EQ(result.summary()->bench_rows_size(), 1);
}

TEST(BenchTest, OutOfMemoryInARowIsRecordedAndTheNextRowRuns) {
  auto executor = MakeExecutor(/*allow_fault_injection=*/true);
  mpsd::v1::SubmitJobRequest request = SmallBench();
  request.mutable_bench_job()->mutable_fault_injection()->set_kind("oom");
  request.mutable_bench_job()->mutable_fault_injection()->set_at_step(2);
  const BenchResult result = RunBench(*executor, request);
  ASSERT_TRUE(result.status.ok()) << result.status;
  const std::vector<BenchRow> rows = result.rows();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].status(), BenchRow::OK);
  EXPECT_EQ(rows[1].status(), BenchRow::OUT_OF_MEMORY);
  EXPECT_THAT(rows[1].message(), HasSubstr("out of memory"));
  EXPECT_EQ(rows[1].median_ms(), 0);  // no figures for a row that did not finish
  EXPECT_EQ(rows[1].iters(), 0);
  EXPECT_EQ(rows[1].model(), "mlp");
  EXPECT_EQ(rows[1].batch_size(), 8);
  EXPECT_EQ(rows[2].status(), BenchRow::OK);
  EXPECT_EQ(rows[3].status(), BenchRow::OK);
  EXPECT_GT(rows[2].median_ms(), 0);
  // A warning says which row failed.
  bool warned = false;
  for (const JobEvent& event : result.events) {
    warned |= event.has_log() && event.log().level() == mpsd::v1::LogLine::WARNING &&
              absl::StrContains(event.log().text(), "mlp batch 8 on cpu: OUT_OF_MEMORY");
  }
  EXPECT_TRUE(warned);
}

TEST(BenchTest, PrecisionsAndMemoryFormatsTheDeviceCannotRunAreUnsupportedRows) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request;
  BenchJob& job = *request.mutable_bench_job();
  job.add_models("mlp");
  job.add_models("convnet");
  job.add_batch_sizes(4);
  job.add_devices("cpu");
  job.add_precisions("bf16");
  job.add_precisions("fp16");
  job.add_memory_formats("channels_last");
  job.set_warmup_iters(0);
  job.set_iters(2);
  job.set_mode("train_step");
  const BenchResult result = RunBench(*executor, request);
  ASSERT_TRUE(result.status.ok()) << result.status;
  const std::vector<BenchRow> rows = result.rows();
  ASSERT_EQ(rows.size(), 4u);  // model × precision
  // mlp takes any shape, not images: channels_last does not apply.
  EXPECT_EQ(rows[0].status(), BenchRow::UNSUPPORTED);
  EXPECT_THAT(rows[0].message(), StartsWith("channels_last is for image models"));
  // convnet, bf16 autocast on the cpu: runs, NHWC.
  EXPECT_EQ(rows[2].model(), "convnet");
  EXPECT_EQ(rows[2].precision(), "bf16");
  EXPECT_EQ(rows[2].status(), BenchRow::OK) << rows[2].message();
  EXPECT_GT(rows[2].median_ms(), 0);
  // fp16 on the cpu: LibTorch's to say (before 2.4 its CPU autocast knows bf16 only). The row
  // follows the one decision, compat::AutocastUnsupportedReason.
  EXPECT_EQ(rows[3].precision(), "fp16");
  const std::string fp16_on_cpu =
      compat::AutocastUnsupportedReason(c10::DeviceType::CPU, c10::kHalf);
  if (fp16_on_cpu.empty()) {
    EXPECT_EQ(rows[3].status(), BenchRow::OK) << rows[3].message();
    EXPECT_GT(rows[3].median_ms(), 0);
  } else {
    EXPECT_EQ(rows[3].status(), BenchRow::UNSUPPORTED);
    EXPECT_THAT(rows[3].message(), HasSubstr("fp16 autocast is not available on cpu"));
    EXPECT_THAT(rows[3].message(), HasSubstr(fp16_on_cpu));
  }
}

// A precision that a BenchJob measures as UNSUPPORTED on a device is one that a TrainJob on that
// device is refused at submit, for the same reason, and the other way round: one decision for
// both job kinds (trainer/compat/autocast.h's AutocastUnsupportedReason).
TEST(BenchTest, TrainJobAndBenchJobAgreeOnWhichPrecisionsTheCpuRuns) {
  auto executor = MakeExecutor();
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    mpsd::v1::SubmitJobRequest bench;
    BenchJob& job = *bench.mutable_bench_job();
    job.add_models("mlp");
    job.add_batch_sizes(2);
    job.add_devices("cpu");
    job.add_precisions(precision);
    job.set_warmup_iters(0);
    job.set_iters(1);
    const BenchResult result = RunBench(*executor, bench);
    ASSERT_TRUE(result.status.ok()) << result.status;
    ASSERT_EQ(result.rows().size(), 1u);
    const BenchRow row = result.rows()[0];

    mpsd::v1::SubmitJobRequest train;
    mpsd::v1::TrainJob& train_job = *train.mutable_train_job();
    train_job.mutable_model()->set_name("mlp");
    train_job.mutable_dataset()->set_name("synthetic");
    train_job.set_device("cpu");
    train_job.set_precision(precision);
    const absl::Status validated = executor->Validate(train);
    EXPECT_EQ(validated.ok(), row.status() != BenchRow::UNSUPPORTED)
        << validated << " / " << row.message();
    if (!validated.ok()) {
      EXPECT_THAT(std::string(validated.message()),
                  StartsWith("train_job.precision: " + std::string(precision) +
                             " cannot run on device cpu: " + row.message()));
    }
  }
}

TEST(BenchTest, CpuThreadsAppliesToTheRowsAndIsRestored) {
  auto executor = MakeExecutor();
  const int default_threads = executor->GetDevice().cpu_threads();
  mpsd::v1::SubmitJobRequest request = SmallBench();
  request.mutable_bench_job()->clear_models();
  request.mutable_bench_job()->add_models("mlp");
  request.mutable_bench_job()->set_cpu_threads(default_threads + 1);
  const BenchResult with_threads = RunBench(*executor, request);
  ASSERT_TRUE(with_threads.status.ok()) << with_threads.status;
  ASSERT_EQ(with_threads.rows().size(), 2u);
  for (const BenchRow& row : with_threads.rows()) {
    EXPECT_EQ(row.cpu_threads(), default_threads + 1);
  }

  request.mutable_bench_job()->clear_cpu_threads();
  const BenchResult after = RunBench(*executor, request);
  ASSERT_TRUE(after.status.ok()) << after.status;
  ASSERT_EQ(after.rows().size(), 2u);
  for (const BenchRow& row : after.rows()) EXPECT_EQ(row.cpu_threads(), default_threads);
}

TEST(BenchTest, MinTimeKeepsIteratingUntilThatMuchIsMeasured) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request;
  BenchJob& job = *request.mutable_bench_job();
  job.add_models("convnet");
  job.add_batch_sizes(2);
  job.add_devices("all");  // this machine: the cpu only
  job.set_warmup_iters(0);
  job.set_iters(1);
  job.set_min_time_ms(30);
  const BenchResult result = RunBench(*executor, request);
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_GE(result.rows().size(), 1u);
  const BenchRow row = result.rows()[0];
  EXPECT_EQ(row.device(), "cpu");
  EXPECT_GE(row.mean_ms() * row.iters(), 30.0 * (1 - 1e-9));
}

struct BadBench {
  std::string name;
  void (*mutate)(BenchJob&);
  std::string message;
};

TEST(BenchValidateTest, RejectsEachBadFieldNamingItsPath) {
  const std::vector<BadBench> cases = {
      {"no models", [](BenchJob& j) { j.clear_models(); },
       "bench_job.models: at least one model required (known: mlp, convnet, cifar_cnn, resnet18, "
       "resnet34, resnet50, vgg11, vgg16, lstm, transformer, bert_base)"},
      {"unknown model", [](BenchJob& j) { j.add_models("resnet51"); },
       "bench_job.models[2]: unknown model \"resnet51\" (known: mlp, convnet, cifar_cnn, "
       "resnet18, resnet34, resnet50, vgg11, vgg16, lstm, transformer, bert_base)"},
      {"model that cannot take the input",
       [](BenchJob& j) {
         j.add_models("vgg16");
         for (int64_t dim : {1, 28, 28}) j.add_input_shape(dim);
       },
       "bench_job.models[2]: vgg16 cannot take 1×28×28 images"},
      {"bad input shape", [](BenchJob& j) { j.add_input_shape(0); }, "bench_job.input_shape: "},
      {"num_classes", [](BenchJob& j) { j.set_num_classes(0); }, "bench_job.num_classes: "},
      {"no batch sizes", [](BenchJob& j) { j.clear_batch_sizes(); },
       "bench_job.batch_sizes: at least one required"},
      {"batch size 0", [](BenchJob& j) { j.add_batch_sizes(0); },
       "bench_job.batch_sizes[2]: must be > 0, got 0"},
      {"unknown device", [](BenchJob& j) { j.add_devices("tpu"); },
       "bench_job.devices[1]: unknown device \"tpu\""},
      {"unavailable device", [](BenchJob& j) { j.add_devices("cuda:7"); },
       "bench_job.devices[1]: cuda:7 is not available (available: cpu"},
      {"mode", [](BenchJob& j) { j.set_mode("training"); },
       "bench_job.mode: unknown \"training\" (expected inference, train_step, both)"},
      {"precision", [](BenchJob& j) { j.add_precisions("fp8"); },
       "bench_job.precisions[0]: unknown \"fp8\" (expected fp32, fp16, bf16)"},
      {"memory format", [](BenchJob& j) { j.add_memory_formats("nhwc"); },
       "bench_job.memory_formats[0]: unknown \"nhwc\" (expected contiguous, channels_last)"},
      {"iters", [](BenchJob& j) { j.set_iters(0); },
       "bench_job.iters: must be in [1, 1000000], got 0"},
      {"too many iters", [](BenchJob& j) { j.set_iters(1'000'001); },
       "bench_job.iters: must be in [1, 1000000], got 1000001"},
      {"warmup", [](BenchJob& j) { j.set_warmup_iters(-1); },
       "bench_job.warmup_iters: must be in [0, 100000], got -1"},
      {"too many rows",
       [](BenchJob& j) {
         for (int i = 0; i < 40; ++i) j.add_batch_sizes(i + 1);
         for (int i = 0; i < 30; ++i) j.add_models(j.models(0));
       },
       "bench_job.batch_sizes: the job would measure"},
      {"min_time_ms", [](BenchJob& j) { j.set_min_time_ms(-5); },
       "bench_job.min_time_ms: must be in [0, 3600000], got -5"},
      {"cpu_threads", [](BenchJob& j) { j.set_cpu_threads(0); },
       "bench_job.cpu_threads: must be in [1, 4096], got 0"},
      {"optimizer", [](BenchJob& j) { j.mutable_optimizer()->set_name("lamb"); },
       "bench_job.optimizer.name: "},
      {"optimizer field of another optimizer",
       [](BenchJob& j) { j.mutable_optimizer()->set_momentum(0.9); },
       "bench_job.optimizer.momentum: "},
      {"fault injection without the option",
       [](BenchJob& j) { j.mutable_fault_injection()->set_kind("oom"); },
       "bench_job.fault_injection: accepted only when mpsd runs with --enable-fault-injection"},
  };
  auto executor = MakeExecutor();
  ASSERT_TRUE(executor->Validate(SmallBench()).ok()) << executor->Validate(SmallBench());
  for (const BadBench& c : cases) {
    SCOPED_TRACE(c.name);
    mpsd::v1::SubmitJobRequest request = SmallBench();
    c.mutate(*request.mutable_bench_job());
    const absl::Status status = executor->Validate(request);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), StartsWith(c.message));
    // Run refuses it the same way and emits nothing.
    const BenchResult result = RunBench(*executor, request);
    EXPECT_EQ(result.status, status);
    EXPECT_TRUE(result.events.empty());
  }
}

TEST(BenchValidateTest, FaultInjectionKindsWhenAllowed) {
  auto executor = MakeExecutor(/*allow_fault_injection=*/true);
  mpsd::v1::SubmitJobRequest request = SmallBench();
  for (const char* kind : {"oom", "segfault", "allocate_unbounded"}) {
    request.mutable_bench_job()->mutable_fault_injection()->set_kind(kind);
    EXPECT_TRUE(executor->Validate(request).ok()) << kind << ": " << executor->Validate(request);
  }
  request.mutable_bench_job()->mutable_fault_injection()->set_kind("explode");
  EXPECT_EQ(executor->Validate(request).message(),
            "bench_job.fault_injection.kind: expected oom, abort, segfault, allocate_unbounded or "
            "hang, got \"explode\"");
  request.mutable_bench_job()->mutable_fault_injection()->set_kind("oom");
  request.mutable_bench_job()->mutable_fault_injection()->set_at_step(-1);
  EXPECT_EQ(executor->Validate(request).message(),
            "bench_job.fault_injection.at_step: must be >= 0 (0 = 1; a 1-based row), got -1");
}

TEST(BenchValidateTest, AllAndDuplicatesMeanEachDeviceOnce) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallBench();
  request.mutable_bench_job()->clear_models();
  request.mutable_bench_job()->add_models("mlp");
  request.mutable_bench_job()->clear_batch_sizes();
  request.mutable_bench_job()->add_batch_sizes(2);
  request.mutable_bench_job()->add_devices("all");
  request.mutable_bench_job()->add_devices("cpu");
  const BenchResult result = RunBench(*executor, request);
  ASSERT_TRUE(result.status.ok()) << result.status;
  // One row per device: "cuda" and "cuda:0" are one device.
  size_t devices = 0;
  const mpsd::v1::DeviceInfo device = executor->GetDevice();
  for (const std::string& name : device.available()) devices += name != "cuda";
  EXPECT_EQ(result.rows().size(), devices);
  ASSERT_FALSE(result.rows().empty());
  EXPECT_EQ(result.rows()[0].device(), "cpu");
}

TEST(BenchValidateTest, TheBenchExamplesAreValidJobs) {
  auto executor = MakeExecutor();
  for (const char* name : {"resnet50-bench.yaml", "arch-bench.yaml"}) {
    const std::string path = std::string(MPSD_SOURCE_DIR) + "/examples/" + name;
    absl::StatusOr<mpsd::v1::SubmitJobRequest> request = client::ReadJobFile(path);
    ASSERT_TRUE(request.ok()) << request.status();
    ASSERT_TRUE(request->has_bench_job()) << path;
    EXPECT_TRUE(executor->Validate(*request).ok()) << path << ": " << executor->Validate(*request);
  }
}

}  // namespace
}  // namespace mpsd::trainer
