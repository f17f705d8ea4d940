// Tests of server/executor/executor_supervisor.cc against the real mpsd-executor (built in
// trainer/): start-up and its errors, a job's events and summary, a crash reported as
// EXECUTOR_CRASHED and followed by a new executor, a cancel passed on, and a cancel ignored until
// the grace period ends and the executor is killed.
#include "server/executor/executor_supervisor.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/error_cause.h"
#include "api/failure_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace mpsd::server {
namespace {

using ::mpsd::testing::TempDir;
using ::mpsd::v1::Job;
using ::mpsd::v1::JobEvent;
using ::mpsd::v1::SubmitJobRequest;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kExecutor[] = MPSD_BINARY_DIR "/trainer/mpsd-executor";

// `epochs` epochs of 4 steps on random data (the "synthetic" dataset needs no files).
SubmitJobRequest SyntheticJob(int epochs = 1) {
  SubmitJobRequest request;
  mpsd::v1::TrainJob* job = request.mutable_train_job();
  job->mutable_model()->set_name("mlp");
  job->mutable_dataset()->set_name("synthetic");
  mpsd::v1::SyntheticSpec* synthetic = job->mutable_dataset()->mutable_synthetic();
  synthetic->add_input_shape(1);
  synthetic->add_input_shape(8);
  synthetic->add_input_shape(8);
  synthetic->set_num_classes(4);
  synthetic->set_train_examples(64);
  synthetic->set_test_examples(16);
  job->set_batch_size(16);
  job->set_epochs(epochs);
  job->set_device("cpu");
  return request;
}

SubmitJobRequest WithFault(SubmitJobRequest request, const std::string& kind, int64_t at_step) {
  request.mutable_train_job()->mutable_fault_injection()->set_kind(kind);
  request.mutable_train_job()->mutable_fault_injection()->set_at_step(at_step);
  return request;
}

struct RunResult {
  absl::Status status;
  std::vector<JobEvent> events;
};

class ExecutorSupervisorTest : public ::testing::Test {
 protected:
  ExecutorSupervisor::Options Options() const {
    ExecutorSupervisor::Options options;
    options.executor_path = kExecutor;
    options.socket_path = dir_ / "executor.sock";
    options.executor.cpu_threads = 1;
    options.executor.steps_per_readback = 1;
    options.executor.allow_fault_injection = true;
    options.log_level = "warn";
    return options;
  }

  std::unique_ptr<ExecutorSupervisor> Start(const ExecutorSupervisor::Options& options) {
    absl::StatusOr<std::unique_ptr<ExecutorSupervisor>> supervisor =
        ExecutorSupervisor::Start(options);
    EXPECT_TRUE(supervisor.ok()) << supervisor.status();
    return supervisor.ok() ? *std::move(supervisor) : nullptr;
  }

  // Runs `spec` as job `job_id`; `on_event` sees each event first and may cancel the job.
  static RunResult Run(api::Executor& executor, const SubmitJobRequest& spec,
                       const std::function<void(const JobEvent&, api::CancelFlag&)>& on_event = {},
                       const std::string& job_id = "1") {
    RunResult result;
    api::CancelFlag cancelled;
    result.status = executor.Run(
        api::JobContext{job_id, ""}, spec,
        [&](JobEvent event) {
          if (on_event) on_event(event, cancelled);
          result.events.push_back(std::move(event));
        },
        cancelled);
    return result;
  }

  TempDir dir_{"supervisor_test"};
};

TEST_F(ExecutorSupervisorTest, BadOptionsAndMissingProgramsFailToStart) {
  ExecutorSupervisor::Options options = Options();
  options.executor_path = "";
  EXPECT_EQ(ExecutorSupervisor::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = Options();
  options.socket_path = "/" + std::string(120, 's');
  EXPECT_EQ(ExecutorSupervisor::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = Options();
  options.executor_path = dir_ / "no-such-executor";
  absl::Status missing = ExecutorSupervisor::Start(options).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("no-such-executor is not an executable program"));
  options = Options();
  options.executor_path = "/bin/false";
  absl::Status exits = ExecutorSupervisor::Start(options).status();
  EXPECT_EQ(exits.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(exits.message()),
              HasSubstr("/bin/false exited with code 1 during start-up"));
}

TEST_F(ExecutorSupervisorTest, ForwardsAJobAndItsSummary) {
  std::unique_ptr<ExecutorSupervisor> supervisor = Start(Options());
  ASSERT_NE(supervisor, nullptr);
  const mpsd::v1::DeviceInfo device = supervisor->GetDevice();
  EXPECT_EQ(device.kind(), "cpu");
  EXPECT_GT(device.executor_pid(), 0);
  EXPECT_EQ(device.executor_restarts(), 0);

  SubmitJobRequest bad = SyntheticJob();
  bad.mutable_train_job()->set_batch_size(0);
  const absl::Status invalid = supervisor->Validate(bad);
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(invalid.message()), StartsWith("train_job.batch_size"));
  EXPECT_TRUE(supervisor->Validate(SyntheticJob()).ok());
  absl::StatusOr<mpsd::v1::ListModelsResponse> models = supervisor->ListModels({});
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_GT(models->models_size(), 0);

  const RunResult run = Run(*supervisor, SyntheticJob());
  EXPECT_TRUE(run.status.ok()) << run.status;
  int steps = 0;
  for (const JobEvent& event : run.events) steps += event.has_step();
  EXPECT_EQ(steps, 4);
  ASSERT_FALSE(run.events.empty());
  ASSERT_TRUE(run.events.back().has_summary());
  EXPECT_EQ(run.events.back().summary().executor_pid(), device.executor_pid());
  EXPECT_EQ(run.events.back().summary().executor_restart_reason(), "");
  EXPECT_EQ(supervisor->GetDevice().executor_pid(), device.executor_pid());
}

TEST_F(ExecutorSupervisorTest, CrashIsReportedAsDataAndTheExecutorReplaced) {
  std::unique_ptr<ExecutorSupervisor> supervisor = Start(Options());
  ASSERT_NE(supervisor, nullptr);
  const int64_t first_pid = supervisor->GetDevice().executor_pid();
  const RunResult crash = Run(*supervisor, WithFault(SyntheticJob(), "segfault", 3));
  EXPECT_EQ(crash.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(api::FailureReasonOf(crash.status), Job::EXECUTOR_CRASHED);
  EXPECT_EQ(crash.status.message(),
            absl::StrCat("executor crashed: pid ", first_pid,
                         " killed by signal 11 (SIGSEGV); last step reported: 2"));
  ASSERT_TRUE(crash.events.back().has_summary());
  EXPECT_EQ(crash.events.back().summary().executor_restart_reason(),
            "crashed: killed by signal 11 (SIGSEGV)");
  EXPECT_EQ(crash.events.back().summary().steps(), 2);

  const RunResult next = Run(*supervisor, SyntheticJob(), {}, "2");
  EXPECT_TRUE(next.status.ok()) << next.status;
  const mpsd::v1::DeviceInfo device = supervisor->GetDevice();
  EXPECT_NE(device.executor_pid(), first_pid);
  EXPECT_EQ(device.executor_restarts(), 1);
}

TEST_F(ExecutorSupervisorTest, CancelIsPassedOn) {
  std::unique_ptr<ExecutorSupervisor> supervisor = Start(Options());
  ASSERT_NE(supervisor, nullptr);
  const int64_t pid = supervisor->GetDevice().executor_pid();
  const RunResult run =
      Run(*supervisor, SyntheticJob(/*epochs=*/1000), [](const JobEvent& event, auto& cancel) {
        if (event.has_step() && event.step().step() == 2) cancel.Cancel();
      });
  EXPECT_EQ(run.status.code(), absl::StatusCode::kCancelled) << run.status;
  EXPECT_EQ(run.events.back().summary().executor_restart_reason(), "");
  EXPECT_EQ(supervisor->GetDevice().executor_pid(), pid);  // stopped, not killed
}

// A cancel that comes after the scheduler marked the job RUNNING and before the executor took it
// (seen once in ~40 tries, the window ~1 ms) found no job there, was dropped, and the job ran on
// to SUCCEEDED. The executor here waits 1.5 s before it takes each job; the flag is set before
// the run starts, as by a CancelJob in that window. The cancel must reach the job.
TEST_F(ExecutorSupervisorTest, ACancelWhileTheExecutorTakesTheJobIsNotLost) {
  ASSERT_EQ(setenv("MPSD_EXECUTOR_START_DELAY_MS", "1500", 1), 0);
  std::unique_ptr<ExecutorSupervisor> supervisor = Start(Options());
  unsetenv("MPSD_EXECUTOR_START_DELAY_MS");
  ASSERT_NE(supervisor, nullptr);
  const int64_t pid = supervisor->GetDevice().executor_pid();
  api::CancelFlag cancelled;
  cancelled.Cancel();
  std::vector<JobEvent> events;
  const absl::Status status = supervisor->Run(
      api::JobContext{"1", ""}, SyntheticJob(/*epochs=*/3),
      [&](JobEvent event) { events.push_back(std::move(event)); }, cancelled);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  int steps = 0;
  for (const JobEvent& event : events) steps += event.has_step() ? 1 : 0;
  EXPECT_LT(steps, 12) << "the job ran all 3 epochs of 4 steps";
  EXPECT_EQ(supervisor->GetDevice().executor_pid(), pid);  // stopped by the cancel, not killed
}

TEST_F(ExecutorSupervisorTest, CancelIgnoredBeyondTheGracePeriodKillsTheExecutor) {
  ExecutorSupervisor::Options options = Options();
  options.cancel_grace_s = 0.5;
  std::unique_ptr<ExecutorSupervisor> supervisor = Start(options);
  ASSERT_NE(supervisor, nullptr);
  const int64_t pid = supervisor->GetDevice().executor_pid();
  // "hang" sleeps before step 3, deaf to the cancel that comes with step 2.
  const RunResult run =
      Run(*supervisor, WithFault(SyntheticJob(), "hang", 3), [](const JobEvent& event, auto& c) {
        if (event.has_step() && event.step().step() == 2) c.Cancel();
      });
  // The words for people, the cause for the scheduler (api/error_cause.h).
  EXPECT_EQ(run.status, api::WithCause(absl::CancelledError(absl::StrCat(
                                           "cancel not honoured within 0.5 s; executor pid ", pid,
                                           " was killed and replaced")),
                                       api::ErrorCause::CANCEL_NOT_HONOURED));
  EXPECT_EQ(run.events.back().summary().executor_restart_reason(),
            "cancel not honoured within 0.5 s");
  EXPECT_NE(supervisor->GetDevice().executor_pid(), pid);
}

TEST_F(ExecutorSupervisorTest, PerJobIsolationReplacesTheExecutorAfterEachJob) {
  ExecutorSupervisor::Options options = Options();
  options.per_job = true;
  std::unique_ptr<ExecutorSupervisor> supervisor = Start(options);
  ASSERT_NE(supervisor, nullptr);
  const int64_t pid = supervisor->GetDevice().executor_pid();
  const RunResult run = Run(*supervisor, SyntheticJob());
  EXPECT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.events.back().summary().executor_restart_reason(), "isolation: per_job");
  EXPECT_NE(supervisor->GetDevice().executor_pid(), pid);
}

// A fused run through the real executor: every trial's events reach its own sink, its summary
// (with the executor's pid) comes last and `done` once, and a cancel reaches the one trial it
// names while the others finish.
TEST_F(ExecutorSupervisorTest, AFusedRunReportsEachTrialAloneAndCancelsOneByItsId) {
  std::unique_ptr<ExecutorSupervisor> supervisor = Start(Options());
  ASSERT_NE(supervisor, nullptr);
  const int64_t pid = supervisor->GetDevice().executor_pid();
  constexpr int kTrials = 3;
  std::vector<std::vector<JobEvent>> events(kTrials);
  std::vector<std::vector<absl::Status>> done(kTrials);
  std::vector<std::unique_ptr<api::CancelFlag>> flags;
  std::vector<api::TrialRun> trials(kTrials);
  for (int i = 0; i < kTrials; ++i) {
    flags.push_back(std::make_unique<api::CancelFlag>());
    trials[i].job.job_id = absl::StrCat(10 + i);
    trials[i].spec = SyntheticJob();
    trials[i].spec.mutable_train_job()->mutable_optimizer()->set_learning_rate(0.1 / (i + 1));
    trials[i].cancelled = flags[i].get();
    trials[i].sink = [&, i](JobEvent event) {
      EXPECT_TRUE(done[i].empty()) << "an event after trial " << i << " ended";
      EXPECT_EQ(event.job_id(), "");  // the receiver numbers and names events
      // The middle trial is cancelled at its first step.
      if (i == 1 && event.has_step()) flags[1]->Cancel();
      events[i].push_back(std::move(event));
    };
    // As the scheduler does: a settled trial's flag is destroyed at once.
    trials[i].done = [&, i](const absl::Status& status) {
      done[i].push_back(status);
      flags[i].reset();
    };
  }
  // The executor's plan, forwarded: trial 1's batch size leaves it out, trial 2 joins.
  std::vector<SubmitJobRequest> specs = {trials[0].spec, trials[1].spec, trials[2].spec};
  specs[1].mutable_train_job()->set_batch_size(8);
  absl::StatusOr<std::vector<int>> plan = supervisor->PlanFusion(specs, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, (std::vector<int>{0, 2}));
  for (SubmitJobRequest& spec : specs) {
    spec.mutable_train_job()->mutable_model()->set_name("vgg11");
    mpsd::v1::SyntheticSpec& synthetic =
        *spec.mutable_train_job()->mutable_dataset()->mutable_synthetic();
    synthetic.clear_input_shape();
    for (const int64_t size : {1, 32, 32}) synthetic.add_input_shape(size);  // vgg11's smallest
  }
  plan = supervisor->PlanFusion(specs, 8);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(), HasSubstr("trial 0: model vgg11 has no fused form yet"));
  // The trial as data, across the process boundary: what the scheduler names by job id.
  const std::optional<api::ErrorCause> cause = api::CauseOf(plan.status());
  ASSERT_TRUE(cause.has_value());
  EXPECT_EQ(cause->kind(), api::ErrorCause::TRIAL_NOT_FUSABLE);
  EXPECT_EQ(cause->trial(), 0);
  EXPECT_THAT(cause->reason(), ::testing::StartsWith(": model vgg11 has no fused form yet"));

  const std::vector<absl::Status> results = supervisor->RunFused(trials, {});
  ASSERT_EQ(results.size(), 3u);
  for (int i = 0; i < kTrials; ++i) {
    ASSERT_EQ(done[i].size(), 1u) << i;
    EXPECT_EQ(done[i][0], results[i]) << i;
    ASSERT_FALSE(events[i].empty()) << i;
    ASSERT_TRUE(events[i].back().has_summary()) << i;
    EXPECT_EQ(events[i].back().summary().executor_pid(), pid) << i;
    int steps = 0;
    for (const JobEvent& event : events[i]) steps += event.has_step();
    if (i == 1) {
      EXPECT_EQ(results[i].code(), absl::StatusCode::kCancelled) << results[i];
      EXPECT_LT(steps, 4);
    } else {
      EXPECT_TRUE(results[i].ok()) << i << ": " << results[i];
      EXPECT_EQ(steps, 4) << i;
    }
  }
  EXPECT_EQ(supervisor->GetDevice().executor_pid(), pid);
}

}  // namespace
}  // namespace mpsd::server
