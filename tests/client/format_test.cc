// Tests for client/format.cc: the exact text mpsctl shows.
#include "client/format.h"
#include "google/protobuf/util/json_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/time.h"

namespace mpsd::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(FormatTest, Thousands) {
  EXPECT_EQ(FormatThousands(0), "0");
  EXPECT_EQ(FormatThousands(999), "999");
  EXPECT_EQ(FormatThousands(1000), "1,000");
  EXPECT_EQ(FormatThousands(12345), "12,345");
  EXPECT_EQ(FormatThousands(1234567), "1,234,567");
  EXPECT_EQ(FormatThousands(-1234), "-1,234");
  EXPECT_EQ(FormatThousands(INT64_MIN), "-9,223,372,036,854,775,808");
  EXPECT_EQ(FormatRate(12345.4), "12,345 samples/s");
}

TEST(FormatTest, Durations) {
  EXPECT_EQ(FormatClock(42), "0:42");
  EXPECT_EQ(FormatClock(0), "0:00");
  EXPECT_EQ(FormatClock(3725), "1:02:05");
  EXPECT_EQ(FormatClock(-1), "-:--");
  EXPECT_EQ(FormatSeconds(9.84), "9.8 s");
  EXPECT_EQ(FormatSeconds(125), "2m 05s");
  EXPECT_EQ(FormatSeconds(7300), "2h 01m");
  EXPECT_EQ(FormatAge(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatAge(absl::Minutes(12)), "12m");
  EXPECT_EQ(FormatAge(absl::Hours(3)), "3h");
  EXPECT_EQ(FormatAge(absl::Hours(24 * 5)), "5d");
  EXPECT_EQ(FormatAge(absl::Seconds(-3)), "0s");
  EXPECT_EQ(FormatMiB(123 * 1024 * 1024 + 420000), "123.4 MiB");
}

v1::StepMetrics Step() {
  v1::StepMetrics step;
  step.set_epoch(1);
  step.set_step(120);
  step.set_total_steps(938);
  step.set_loss(0.4123f);
  step.set_accuracy(0.859f);
  step.set_samples_per_second(12345);
  step.set_step_time_ms(42000.0 / 818);  // 818 steps left → 42 s
  return step;
}

TEST(FormatTest, ProgressLine) {
  EXPECT_EQ(FormatProgress(Step(), 3),
            "epoch 1/3  step 120/938  loss 0.4123  acc 0.859  12,345 samples/s  ETA 0:42");
  v1::StepMetrics bare;
  bare.set_epoch(2);
  bare.set_step(7);
  EXPECT_EQ(FormatProgress(bare, 0), "epoch 2  step 7  loss 0.0000  acc 0.000");
  v1::StepMetrics fp16 = bare;
  fp16.set_learning_rate(0.00123456);
  fp16.set_loss_scale(32768);
  fp16.set_skipped(true);
  EXPECT_EQ(FormatProgress(fp16, 0),
            "epoch 2  step 7  loss 0.0000  acc 0.000  lr 0.00123  scale 32768 (skipped: inf/NaN "
            "gradients)");
}

TEST(FormatTest, EpochLine) {
  v1::EpochMetrics e;
  e.set_epoch(1);
  e.set_train_loss(0.41234);
  e.set_train_accuracy(0.8591);
  e.set_test_loss(0.3876);
  e.set_test_accuracy(0.8612);
  e.set_evaluated(true);
  e.set_epoch_time_s(9.81);
  e.set_samples_per_second(6123);
  EXPECT_EQ(FormatEpoch(e),
            "epoch 1: train loss 0.4123 acc 0.859, test loss 0.3876 acc 0.861, 9.8 s, "
            "6,123 samples/s");
}

// Issue 27: an epoch shows what it measured: validation when the job has it, the test split
// only when evaluated (no "test loss 0.0000 acc 0.000" for a skipped evaluation).
TEST(FormatTest, EpochLineShowsValidationAndOnlyAnEvaluatedTestSplit) {
  v1::EpochMetrics e;
  e.set_epoch(2);
  e.set_train_loss(0.41234);
  e.set_train_accuracy(0.8591);
  e.set_val_loss(0.5);
  e.set_val_accuracy(0.8);
  e.set_epoch_time_s(9.81);
  EXPECT_EQ(FormatEpoch(e),
            "epoch 2: train loss 0.4123 acc 0.859, val loss 0.5000 acc 0.800, "
            "9.8 s");
}

// Multilabel and regression epochs show their metrics map, split by split; regression has no
// accuracy to show.
TEST(FormatTest, EpochLineOfATaskShowsItsMetricsBySplit) {
  v1::EpochMetrics e;
  e.set_epoch(3);
  e.set_epoch_time_s(2.5);
  auto& m = *e.mutable_metrics();
  m["train_loss"] = 0.02134;
  m["val_loss"] = 0.0198;
  m["val_mse"] = 0.0396;
  m["val_mae"] = 0.158;
  m["val_r2"] = 0.98712;
  m["test_r2"] = 0.975;
  EXPECT_EQ(FormatEpoch(e),
            "epoch 3: train loss 0.0213, val loss 0.0198 mse 0.0396 mae 0.1580 "
            "r2 0.9871, test r2 0.9750, 2.5 s");
  v1::EpochMetrics multilabel;
  multilabel.set_epoch(1);
  multilabel.set_epoch_time_s(1);
  (*multilabel.mutable_metrics())["train_loss"] = 0.5;
  (*multilabel.mutable_metrics())["train_accuracy"] = 0.75;
  (*multilabel.mutable_metrics())["test_macro_f1"] = 0.625;
  EXPECT_EQ(FormatEpoch(multilabel),
            "epoch 1: train loss 0.5000 acc 0.7500, test macro_f1 0.6250, 1.0 s");
  // The user's metrics (TrainJob.metrics) follow each split's built-in ones, by name.
  v1::EpochMetrics own;
  own.set_epoch(2);
  own.set_epoch_time_s(1);
  auto& o = *own.mutable_metrics();
  o["train_loss"] = 0.5;
  o["train_accuracy"] = 0.75;
  o["val_loss"] = 0.25;
  o["val_accuracy"] = 0.875;
  o["val_top2"] = 0.96875;
  o["val_confident"] = 12;
  EXPECT_EQ(FormatEpoch(own),
            "epoch 2: train loss 0.5000 acc 0.7500, val loss 0.2500 acc 0.8750 confident 12.0000 "
            "top2 0.9688, 1.0 s");
  // A regression's steps measure no accuracy: its progress line shows none.
  v1::StepMetrics step;
  step.set_epoch(2);
  step.set_step(7);
  step.set_loss(0.25);
  v1::SubmitJobRequest regression;
  regression.mutable_train_job()->set_task("regression");
  EXPECT_FALSE(HasStepAccuracy(regression));
  EXPECT_TRUE(HasStepAccuracy(v1::SubmitJobRequest()));
  EXPECT_EQ(FormatProgress(step, 0, /*with_eta=*/true, HasStepAccuracy(regression)),
            "epoch 2  step 7  loss 0.2500");
}

TEST(FormatTest, LogLine) {
  v1::LogLine log;
  log.set_level(v1::LogLine::INFO);
  log.set_text("loaded 2,000 examples");
  EXPECT_EQ(FormatLog(log), "loaded 2,000 examples");
  log.set_level(v1::LogLine::WARNING);
  EXPECT_EQ(FormatLog(log), "warning: loaded 2,000 examples");
}

v1::JobSummary Summary() {
  v1::JobSummary s;
  s.set_device("cuda:0");
  s.set_epochs(1);
  s.set_steps(32);
  s.set_final_train_loss(0.5);
  s.set_test_loss(0.3876);
  s.set_test_accuracy(0.8612);
  s.set_total_time_s(42.1);
  s.set_median_epoch_time_s(9.8);
  s.set_samples_per_second(6123);
  s.set_train_examples(2000);
  s.set_test_examples(500);
  s.mutable_memory()->set_peak_allocated_bytes(100 * 1024 * 1024);
  s.mutable_memory()->set_allocated_after_bytes(1024 * 1024);
  return s;
}

TEST(FormatTest, FinalSucceeded) {
  v1::StateChange state;
  state.set_state(v1::Job::SUCCEEDED);
  const v1::JobSummary summary = Summary();
  EXPECT_EQ(FormatFinal("42", state, &summary),
            "job 42 SUCCEEDED in 42.1 s on cuda:0\n"
            "  test accuracy 0.8612, test loss 0.3876, final train loss 0.5000\n"
            "  1 epoch, 32 steps, 2,000 train / 500 test examples, 6,123 samples/s, median epoch "
            "9.8 s\n"
            "  memory: allocated before 0.0 MiB, peak 100.0 MiB, after 1.0 MiB; reserved before "
            "0.0 MiB, after 0.0 MiB\n");
}

TEST(FormatTest, FinalSaysTheTestSplitWasNotEvaluatedAndShowsValidation) {
  v1::StateChange state;
  state.set_state(v1::Job::SUCCEEDED);
  v1::JobSummary summary = Summary();
  summary.clear_test_accuracy();
  summary.clear_test_loss();
  summary.set_val_accuracy(0.9);
  summary.set_val_loss(0.25);
  summary.set_val_examples(200);
  const std::string out = FormatFinal("42", state, &summary);
  EXPECT_NE(out.find("\n  val accuracy 0.9000, val loss 0.2500, test not evaluated, final train "
                     "loss 0.5000\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("2,000 train / 200 val / 500 test examples"), std::string::npos) << out;
  EXPECT_EQ(out.find("test accuracy"), std::string::npos) << out;
}

// Skipped optimizer steps (nan_policy skip_step, fp16) are said, and only when there were some.
TEST(FormatTest, FinalCountsSkippedSteps) {
  v1::StateChange state;
  state.set_state(v1::Job::SUCCEEDED);
  v1::JobSummary summary = Summary();
  EXPECT_EQ(FormatFinal("42", state, &summary).find("skipped"), std::string::npos);
  summary.set_skipped_steps(3);
  EXPECT_THAT(FormatFinal("42", state, &summary), HasSubstr(", 3 steps skipped\n"));
}

TEST(FormatTest, FinalCancelledBeforeAnyEpochShowsNoTestResults) {
  v1::StateChange state;
  state.set_state(v1::Job::CANCELLED);
  v1::JobSummary summary = Summary();
  summary.set_epochs(0);
  summary.set_test_accuracy(0);
  summary.set_test_loss(0);
  const std::string out = FormatFinal("9", state, &summary);
  EXPECT_EQ(out.find("test accuracy"), std::string::npos) << out;
  EXPECT_NE(out.find("0 epochs, 32 steps"), std::string::npos) << out;
}

TEST(FormatTest, FinalFailedWithoutSummary) {
  v1::StateChange state;
  state.set_state(v1::Job::FAILED);
  state.set_failure_reason(v1::Job::OUT_OF_MEMORY);
  state.set_message("CUDA out of memory");
  EXPECT_EQ(FormatFinal("7", state, nullptr), "job 7 FAILED (OUT_OF_MEMORY): CUDA out of memory\n");
}

TEST(FormatTest, FinalShowsTheResumeStepTheModelAndTheCheckpoint) {
  v1::StateChange state;
  state.set_state(v1::Job::SUCCEEDED);
  v1::JobSummary summary = Summary();
  summary.set_resumed_at_step(64);
  summary.set_model_path("/s/artifacts/42/model.pt");
  summary.set_model_format("libtorch_archive");
  summary.set_checkpoint_path("/s/artifacts/42/checkpoint-epoch-3.pt");
  const std::string out = FormatFinal("42", state, &summary);
  EXPECT_THAT(out, HasSubstr("\n  resumed at step 64\n"
                             "  model: /s/artifacts/42/model.pt (libtorch_archive)\n"
                             "  checkpoint: /s/artifacts/42/checkpoint-epoch-3.pt\n"));
  EXPECT_EQ(FormatFinal("42", state, &(summary = Summary())).find("model:"), std::string::npos);
}

TEST(FormatTest, CheckpointLine) {
  v1::CheckpointSaved checkpoint;
  checkpoint.set_path("/s/artifacts/7/checkpoint-epoch-2.pt");
  checkpoint.set_epoch(2);
  checkpoint.set_step(64);
  checkpoint.set_size_bytes(3 * 1024 * 1024);
  EXPECT_EQ(FormatCheckpoint(checkpoint),
            "checkpoint /s/artifacts/7/checkpoint-epoch-2.pt (epoch 2, step 64, 3.0 MiB)");
}

TEST(FormatTest, FinalOnCpuSaysMemoryIsNotTracked) {
  v1::StateChange state;
  state.set_state(v1::Job::SUCCEEDED);
  v1::JobSummary summary = Summary();
  summary.set_device("cpu");
  summary.clear_memory();
  EXPECT_THAT(FormatFinal("7", state, &summary), HasSubstr("  memory: not tracked on cpu\n"));
}

v1::Job TrainJob(const std::string& id, v1::Job::State state, int64_t step, absl::Time created) {
  v1::Job job;
  job.set_id(id);
  job.set_kind(v1::Job::TRAIN_JOB);
  job.set_state(state);
  job.mutable_created_at()->set_seconds(absl::ToUnixSeconds(created));
  job.mutable_spec()->mutable_train_job()->mutable_model()->set_name("convnet");
  job.mutable_spec()->mutable_train_job()->set_epochs(3);
  if (step > 0) {
    job.mutable_last_step()->set_epoch(1);
    job.mutable_last_step()->set_step(step);
    job.mutable_last_step()->set_total_steps(938);
  }
  return job;
}

TEST(FormatTest, JobTable) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  v1::Job bench;
  bench.set_id("a-long-job-id");
  bench.set_state(v1::Job::QUEUED);
  bench.mutable_spec()->mutable_bench_job()->add_models("convnet");
  bench.mutable_spec()->mutable_bench_job()->add_models("resnet18");
  bench.mutable_created_at()->set_seconds(1700000000 - 5);
  EXPECT_EQ(FormatJobTable({TrainJob("7", v1::Job::RUNNING, 120, now - absl::Minutes(3)), bench,
                            TrainJob("6", v1::Job::SUCCEEDED, 938, now - absl::Hours(2))},
                           now),
            "ID             KIND      STATE      MODEL             PROGRESS  AGE\n"
            "7              TrainJob  RUNNING    convnet           12%       3m\n"
            "a-long-job-id  BenchJob  QUEUED     convnet,resnet18  -         5s\n"
            "6              TrainJob  SUCCEEDED  convnet           100%      2h\n");
  EXPECT_EQ(FormatJobTable({}, now), "no jobs\n");
  // Job.submitted_by gets a column once any job has one.
  v1::Job ci = TrainJob("9", v1::Job::QUEUED, 0, now - absl::Seconds(1));
  ci.set_submitted_by("ci");
  EXPECT_EQ(FormatJobTable({ci, TrainJob("8", v1::Job::QUEUED, 0, now - absl::Seconds(2))}, now),
            "ID  KIND      STATE   MODEL    PROGRESS  AGE  BY\n"
            "9   TrainJob  QUEUED  convnet  -         1s   ci\n"
            "8   TrainJob  QUEUED  convnet  -         2s   -\n");
}

// A trial its sweep's scheduler stopped: EARLY_STOPPED in tables, its reason beside CANCELLED
// where the state is spelled out; a trial a user cancelled stays CANCELLED.
TEST(FormatTest, AnEarlyStoppedTrialShowsWhy) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  v1::Job stopped = TrainJob("8", v1::Job::CANCELLED, 300, now - absl::Minutes(1));
  stopped.set_failure_reason(v1::Job::EARLY_STOPPED);
  stopped.set_message("asha stopped the trial at its rung of epoch 1: ...");
  const v1::Job cancelled = TrainJob("7", v1::Job::CANCELLED, 300, now - absl::Minutes(2));
  EXPECT_EQ(StateCell(stopped), "EARLY_STOPPED");
  EXPECT_EQ(StateCell(cancelled), "CANCELLED");
  EXPECT_EQ(FormatJobTable({stopped, cancelled}, now),
            "ID  KIND      STATE          MODEL    PROGRESS  AGE\n"
            "8   TrainJob  EARLY_STOPPED  convnet  31%       1m\n"
            "7   TrainJob  CANCELLED      convnet  31%       2m\n");
  EXPECT_THAT(FormatJobDetails(stopped, now),
              HasSubstr("state       CANCELLED (EARLY_STOPPED): asha stopped the trial at its "
                        "rung of epoch 1: ...\n"));
  EXPECT_THAT(FormatJobDetails(cancelled, now), HasSubstr("state       CANCELLED\n"));
  v1::StateChange state;
  state.set_state(v1::Job::CANCELLED);
  state.set_failure_reason(v1::Job::EARLY_STOPPED);
  state.set_message("asha stopped the trial");
  EXPECT_EQ(FormatFinal("8", state, nullptr),
            "job 8 CANCELLED (EARLY_STOPPED): asha stopped the trial\n");
}

// Names in CJK characters and with emoji take two terminal columns a character: the columns
// after them still line up (they were padded by UTF-8 bytes before).
TEST(FormatTest, JobTableLinesUpWideNames) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  v1::Job cjk = TrainJob("7", v1::Job::RUNNING, 120, now - absl::Minutes(3));
  cjk.mutable_spec()->set_name("画像分類");  // 4 characters, 8 columns, 12 bytes
  v1::Job emoji = TrainJob("8", v1::Job::QUEUED, 0, now - absl::Minutes(1));
  emoji.mutable_spec()->set_name("fire\xF0\x9F\x94\xA5");  // "fire" + U+1F525: 6 columns, 8 bytes
  v1::Job plain = TrainJob("9", v1::Job::QUEUED, 0, now - absl::Seconds(5));
  plain.mutable_spec()->set_name("mnist");
  EXPECT_EQ(FormatJobTable({cjk, emoji, plain}, now),
            "ID  NAME      KIND      STATE    MODEL    PROGRESS  AGE\n"
            "7   画像分類  TrainJob  RUNNING  convnet  12%       3m\n"
            "8   fire\xF0\x9F\x94\xA5    TrainJob  QUEUED   convnet  -         1m\n"
            "9   mnist     TrainJob  QUEUED   convnet  -         5s\n");
}

TEST(FormatTest, JobDetails) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  v1::Job job = TrainJob("7", v1::Job::FAILED, 120, now - absl::Minutes(3));
  job.set_failure_reason(v1::Job::DATASET_ERROR);
  job.set_message("no such directory");
  job.set_last_seq(130);
  const std::string text = FormatJobDetails(job, now);
  EXPECT_THAT(text, HasSubstr("id          7\n"));
  EXPECT_THAT(text, HasSubstr("kind        TrainJob\n"));
  EXPECT_THAT(text, HasSubstr("state       FAILED (DATASET_ERROR): no such directory\n"));
  EXPECT_THAT(text, HasSubstr("(3m ago)\n"));
  EXPECT_THAT(text, HasSubstr("started     -\n"));
  EXPECT_THAT(text, HasSubstr("progress    epoch 1/3  step 120/938"));
  EXPECT_THAT(text, HasSubstr("events      130\n"));
  EXPECT_THAT(text, HasSubstr("spec:\n  kind: TrainJob\n  model: {name: convnet}\n  epochs: 3\n"));
  EXPECT_THAT(text, Not(HasSubstr("summary")));
  EXPECT_THAT(text, Not(HasSubstr("by ")));
  job.set_submitted_by("ci");
  EXPECT_THAT(FormatJobDetails(job, now), HasSubstr("id          7\nkind        TrainJob\n"));
  EXPECT_THAT(FormatJobDetails(job, now), HasSubstr("by          ci\n"));
}

TEST(FormatTest, Device) {
  v1::DeviceInfo d;
  d.set_kind("cuda");
  d.set_name("NVIDIA H200");
  d.set_total_memory_bytes(int64_t{143771} * 1024 * 1024);
  d.add_available("cpu");
  d.add_available("cuda");
  d.add_available("cuda:0");
  d.set_torch_version("2.1.0");
  d.set_jobs_run(3);
  EXPECT_EQ(FormatDevice(d),
            "device       cuda\n"
            "name         NVIDIA H200\n"
            "available    cpu, cuda, cuda:0\n"
            "memory       total 143771.0 MiB, allocated 0.0 MiB, reserved 0.0 MiB\n"
            "torch        2.1.0\n"
            "jobs run     3\n");
}

TEST(FormatTest, DeviceWithExecutor) {
  v1::DeviceInfo d;
  d.set_kind("cpu");
  d.set_baseline_allocated_bytes(int64_t{3} * 1024 * 1024);
  d.set_baseline_reserved_bytes(int64_t{20} * 1024 * 1024);
  d.set_executor_pid(4242);
  d.set_executor_uptime_s(125);
  d.set_executor_jobs_run(1);
  d.set_executor_restarts(2);
  EXPECT_THAT(FormatDevice(d), HasSubstr("jobs run     0\n"
                                         "baseline     allocated 3.0 MiB, reserved 20.0 MiB\n"
                                         "executor     pid 4242, up 2m 05s, 1 job, 2 restarts\n"));
}

TEST(FormatTest, ServerStatus) {
  v1::ServerStatus s;
  s.set_open_streams(2);
  s.set_event_watches(1);
  s.set_queued_jobs(3);
  s.set_running_job_id("12");
  s.set_jobs_total(1057);
  s.set_rss_bytes(int64_t{45} * 1024 * 1024);
  s.set_uptime_s(7300);
  s.set_events_stored(12345);
  s.set_event_commits(456);
  s.set_commit_time_s(0.5);
  s.set_artifacts_bytes(int64_t{12} * 1024 * 1024);
  s.set_artifacts_deleted_bytes(int64_t{3} * 1024 * 1024);
  EXPECT_EQ(FormatServerStatus(s),
            "streams     2 open, 1 waiting for events\n"
            "queue       3 queued, job 12 running\n"
            "jobs        1,057\n"
            "artifacts   12.0 MiB; 3.0 MiB deleted since start\n"
            "memory      45.0 MiB resident\n"
            "uptime      2h 01m\n"
            "events      12,345 stored in 456 commits, 0 pending; 24,690 events/s of commit "
            "time\n");
  EXPECT_THAT(FormatServerStatus(v1::ServerStatus()),
              HasSubstr("queue       0 queued, no job running\n"));
}

TEST(FormatTest, JsonKeepsProtoFieldNames) {
  v1::StepMetrics step = Step();
  const std::string json = ToJsonLine(step);
  EXPECT_THAT(json, HasSubstr("\"total_steps\":938"));
  EXPECT_THAT(json, HasSubstr("\"samples_per_second\":12345"));
  EXPECT_THAT(json, Not(HasSubstr("\n")));
  EXPECT_THAT(json, Not(HasSubstr("totalSteps")));
}

TEST(FormatTest, JsonKeepsZerosAndWritesInt64sAsNumbers) {
  v1::JobEvent heartbeat;
  heartbeat.set_job_id("7");
  heartbeat.mutable_heartbeat()->set_state(v1::Job::QUEUED);
  EXPECT_EQ(
      ToJsonLine(heartbeat),
      "{\"job_id\":\"7\",\"seq\":0,\"heartbeat\":{\"state\":\"QUEUED\",\"queue_position\":0}}");
  v1::JobEvent step;
  step.set_seq(12);
  step.mutable_step()->set_step(3);
  const std::string json = ToJsonLine(step);
  EXPECT_THAT(json, HasSubstr("\"seq\":12,"));
  EXPECT_THAT(json, HasSubstr("\"step\":{\"epoch\":0,\"step\":3,\"total_steps\":0,\"loss\":0,"));
  EXPECT_THAT(json, HasSubstr("\"skipped\":false"));
  // An unset optional (an unmeasured metric) stays absent.
  v1::JobEvent epoch;
  epoch.mutable_epoch()->set_epoch(1);
  EXPECT_THAT(ToJsonLine(epoch), Not(HasSubstr("val_loss")));
  // A string that looks like a quoted int64 member is left alone.
  v1::JobEvent log;
  log.set_seq(5);
  log.mutable_log()->set_text("\"seq\":\"5\" and \\\"seq\\\":\"9\"");
  const std::string logged = ToJsonLine(log);
  v1::JobEvent back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(logged, &back).ok()) << logged;
  EXPECT_EQ(back.log().text(), log.log().text());
  EXPECT_EQ(back.seq(), 5);
  v1::JobSummary summary;
  summary.add_train_class_counts(6000);
  summary.add_train_class_counts(5999);
  EXPECT_THAT(ToJsonLine(summary), HasSubstr("\"train_class_counts\":[6000,5999]"));
}

TEST(FormatTest, KindAndEpochs) {
  v1::SubmitJobRequest spec;
  EXPECT_EQ(KindName(spec), "-");
  EXPECT_EQ(TotalEpochs(spec), 0);
  spec.mutable_train_job();
  EXPECT_EQ(KindName(spec), "TrainJob");
  EXPECT_EQ(TotalEpochs(spec), 1);
  spec.mutable_train_job()->set_epochs(4);
  EXPECT_EQ(TotalEpochs(spec), 4);
  spec.mutable_bench_job();
  EXPECT_EQ(KindName(spec), "BenchJob");
}

TEST(FormatTest, ArtifactSizesInTheUnitThatShowsThem) {
  EXPECT_EQ(FormatSize(0), "0 B");
  EXPECT_EQ(FormatSize(1023), "1023 B");
  EXPECT_EQ(FormatSize(2048), "2.0 KiB");
  EXPECT_EQ(FormatSize(3 << 20), "3.0 MiB");
  EXPECT_EQ(FormatSize(int64_t{3} << 29), "1.5 GiB");
  v1::ListArtifactsResponse response;
  v1::Artifact* json = response.add_artifacts();
  json->set_name("model.json");
  json->set_size_bytes(2100);
  json->set_kind("model");
  v1::Artifact* model = response.add_artifacts();
  model->set_name("model.pt");
  model->set_size_bytes(4800000);
  model->set_kind("model");
  const std::string text = FormatArtifacts(response);
  EXPECT_THAT(text, HasSubstr("2.1 KiB"));  // was "0.0 MiB"
  EXPECT_THAT(text, HasSubstr("4.6 MiB"));
}

}  // namespace
}  // namespace mpsd::client
