// Tests of server/core/scheduler.cc alone: a real JobStore in a temp dir, a FakeExecutor that plays
// scripted jobs. Queue order, idempotent submits, cancellation, failure reasons, and recovery of
// the jobs a previous daemon left in the store.
#include "server/core/scheduler.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/error_cause.h"
#include "api/failure_reason.h"
#include "api/job_state.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "server/core/job_store.h"
#include "tests/common/temp_dir.h"
#include "tests/server/fake_executor.h"

namespace mpsd::server {
namespace {

using ::mpsd::testing::FakeExecutor;
using ::mpsd::testing::TempDir;
using ::mpsd::v1::Job;
using ::mpsd::v1::JobEvent;
using ::mpsd::v1::SubmitJobRequest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

SubmitJobRequest TrainRequest(int priority = 0, const std::string& request_id = "") {
  return ::mpsd::testing::FakeTrainRequest(priority, request_id);
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override { OpenStore(); }

  void OpenStore() {
    JobStore::Options options;
    options.path = dir_ / "mpsd.db";
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  std::unique_ptr<Scheduler> Start(int max_queued = 1000) {
    Scheduler::Options options;
    options.max_queued = max_queued;
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create(options, store_.get(), &executor_);
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    return scheduler.ok() ? *std::move(scheduler) : nullptr;
  }

  Job Submit(Scheduler& scheduler, const SubmitJobRequest& request) {
    absl::StatusOr<Job> job = scheduler.Submit(request);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : Job();
  }

  // Waits until the job reached a terminal state; returns it as the scheduler has it.
  Job WaitForEnd(Scheduler& scheduler, const std::string& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    for (;;) {
      absl::StatusOr<Job> job = scheduler.Get(id);
      if (!job.ok()) {
        ADD_FAILURE() << job.status();
        return Job();
      }
      if (api::IsTerminal(job->state()) || absl::Now() > deadline) return *job;
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  std::vector<std::string> RunOrder() const {
    std::vector<std::string> ids;
    for (const FakeExecutor::RunRecord& run : executor_.runs()) ids.push_back(run.context.job_id);
    return ids;
  }

  TempDir dir_{"scheduler_test"};
  std::unique_ptr<JobStore> store_;
  FakeExecutor executor_;
};

TEST_F(SchedulerTest, RunsAJobAndStoresItsEvents) {
  auto scheduler = Start();
  const Job queued = Submit(*scheduler, TrainRequest());
  EXPECT_EQ(queued.id(), "1");
  EXPECT_EQ(queued.state(), Job::QUEUED);
  EXPECT_EQ(queued.kind(), Job::TRAIN_JOB);
  const Job done = WaitForEnd(*scheduler, queued.id());
  EXPECT_EQ(done.state(), Job::SUCCEEDED);
  EXPECT_EQ(done.last_step().step(), 2);
  EXPECT_EQ(done.summary().device(), "fake");
  scheduler->Shutdown();
  // QUEUED, RUNNING, two steps, the summary, SUCCEEDED: numbered 1.. with no gap, all stored.
  absl::StatusOr<std::vector<JobEvent>> events = store_->ReadEvents("1", 0, 100);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 6u);
  for (size_t i = 0; i < events->size(); ++i) EXPECT_EQ((*events)[i].seq(), int64_t(i) + 1);
  EXPECT_EQ((*events)[0].state().state(), Job::QUEUED);
  EXPECT_EQ((*events)[1].state().state(), Job::RUNNING);
  EXPECT_TRUE((*events)[2].has_step());
  EXPECT_TRUE((*events)[4].has_summary());
  EXPECT_EQ((*events)[5].state().state(), Job::SUCCEEDED);
  absl::StatusOr<Job> stored = store_->GetJob("1");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state(), Job::SUCCEEDED);
  EXPECT_EQ(stored->last_seq(), 6);
}

// The job keeps the spec as submitted and, beside it, the spec with every default written out
// (api/effective_spec.h), stored with it: what clients show and compare it by.
TEST_F(SchedulerTest, AJobStoresItsEffectiveSpecBesideTheSubmittedOne) {
  auto scheduler = Start();
  SubmitJobRequest request = TrainRequest();
  request.mutable_train_job()->mutable_optimizer()->set_name("sgd");
  const Job queued = Submit(*scheduler, request);
  EXPECT_FALSE(queued.spec().train_job().has_batch_size());
  EXPECT_FALSE(queued.spec().train_job().optimizer().has_learning_rate());
  const mpsd::v1::TrainJob& effective = queued.effective_spec().train_job();
  EXPECT_EQ(effective.batch_size(), 64);
  EXPECT_DOUBLE_EQ(effective.optimizer().learning_rate(), 0.01);  // sgd's
  EXPECT_EQ(effective.dataset().root(), "/usr/share/datasets/fashion-mnist");
  WaitForEnd(*scheduler, queued.id());
  scheduler->Shutdown();
  absl::StatusOr<Job> stored = store_->GetJob(queued.id());
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(stored->effective_spec(),
                                                                 queued.effective_spec()));
  EXPECT_FALSE(stored->spec().train_job().has_batch_size());
}

TEST_F(SchedulerTest, HigherPriorityFirstThenFirstInFirstOut) {
  executor_.QueueScript(FakeExecutor::Held(1));
  auto scheduler = Start();
  const Job first = Submit(*scheduler, TrainRequest(0));
  ASSERT_TRUE(executor_.WaitUntilHeld());
  const Job low_a = Submit(*scheduler, TrainRequest(0));
  const Job high = Submit(*scheduler, TrainRequest(5));
  const Job low_b = Submit(*scheduler, TrainRequest(0));
  const Job higher = Submit(*scheduler, TrainRequest(9));
  EXPECT_EQ(scheduler->HeartbeatOf(higher.id()).queue_position(), 1);
  EXPECT_EQ(scheduler->HeartbeatOf(high.id()).queue_position(), 2);
  EXPECT_EQ(scheduler->HeartbeatOf(low_a.id()).queue_position(), 3);
  EXPECT_EQ(scheduler->HeartbeatOf(low_b.id()).queue_position(), 4);
  EXPECT_EQ(scheduler->HeartbeatOf(first.id()).state(), Job::RUNNING);
  EXPECT_EQ(scheduler->GetQueueStats().queued_jobs, 4);
  EXPECT_EQ(scheduler->GetQueueStats().running_job_id, first.id());
  executor_.Release();
  EXPECT_EQ(WaitForEnd(*scheduler, low_b.id()).state(), Job::SUCCEEDED);
  EXPECT_THAT(RunOrder(), ElementsAre(first.id(), higher.id(), high.id(), low_a.id(), low_b.id()));
}

TEST_F(SchedulerTest, SameRequestIdReturnsTheSameJob) {
  auto scheduler = Start();
  const Job job = Submit(*scheduler, TrainRequest(0, "retry-1"));
  const Job again = Submit(*scheduler, TrainRequest(0, "retry-1"));
  EXPECT_EQ(again.id(), job.id());
  WaitForEnd(*scheduler, job.id());
  const Job after_end = Submit(*scheduler, TrainRequest(0, "retry-1"));
  EXPECT_EQ(after_end.id(), job.id());
  EXPECT_EQ(after_end.state(), Job::SUCCEEDED);
  EXPECT_EQ(scheduler->GetQueueStats().jobs_total, 1);
  EXPECT_EQ(executor_.runs().size(), 1u);
}

TEST_F(SchedulerTest, SameRequestIdWithAnotherRequestIsRefused) {
  auto scheduler = Start();
  const Job job = Submit(*scheduler, TrainRequest(0, "once"));
  absl::StatusOr<Job> other = scheduler->Submit(TrainRequest(3, "once"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(other.status().message(), HasSubstr("job " + job.id()));
  absl::StatusOr<Job> too_long = scheduler->Submit(TrainRequest(0, std::string(129, 'x')));
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(), HasSubstr("request_id"));
}

TEST_F(SchedulerTest, RequestIdsSurviveARestart) {
  {
    auto scheduler = Start();
    WaitForEnd(*scheduler, Submit(*scheduler, TrainRequest(0, "durable")).id());
  }
  auto scheduler = Start();
  EXPECT_EQ(Submit(*scheduler, TrainRequest(0, "durable")).id(), "1");
  EXPECT_EQ(scheduler->GetQueueStats().jobs_total, 1);
}

TEST_F(SchedulerTest, InvalidSpecsAreRefusedBeforeQueueing) {
  executor_.FailValidation("nonsense",
                           absl::InvalidArgumentError("train_job.model.name: unknown model"));
  auto scheduler = Start();
  SubmitJobRequest bad = TrainRequest();
  bad.mutable_train_job()->mutable_model()->set_name("nonsense");
  absl::StatusOr<Job> refused = scheduler->Submit(bad);
  EXPECT_EQ(refused.status(), absl::InvalidArgumentError("train_job.model.name: unknown model"));
  absl::StatusOr<Job> empty = scheduler->Submit(SubmitJobRequest());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("spec"));
  EXPECT_EQ(scheduler->GetQueueStats().jobs_total, 0);
  absl::StatusOr<std::vector<Job>> stored = store_->ListJobs();
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(stored->empty());
}

TEST_F(SchedulerTest, FullQueueIsResourceExhausted) {
  executor_.QueueScript(FakeExecutor::Held(0));
  auto scheduler = Start(/*max_queued=*/2);
  Submit(*scheduler, TrainRequest());
  ASSERT_TRUE(executor_.WaitUntilHeld());
  Submit(*scheduler, TrainRequest());
  Submit(*scheduler, TrainRequest());
  absl::StatusOr<Job> third = scheduler->Submit(TrainRequest());
  EXPECT_EQ(third.status(), absl::ResourceExhaustedError("queue full (2)"));
  executor_.Release();
}

TEST_F(SchedulerTest, CancelQueuedRunningAndFinished) {
  executor_.QueueScript(FakeExecutor::Held(1));
  auto scheduler = Start();
  const Job running = Submit(*scheduler, TrainRequest());
  ASSERT_TRUE(executor_.WaitUntilHeld());
  const Job queued = Submit(*scheduler, TrainRequest());

  absl::StatusOr<Job> cancelled_queued = scheduler->Cancel(queued.id());
  ASSERT_TRUE(cancelled_queued.ok()) << cancelled_queued.status();
  EXPECT_EQ(cancelled_queued->state(), Job::CANCELLED);
  EXPECT_EQ(cancelled_queued->message(), "cancelled while queued");

  absl::StatusOr<Job> cancelling = scheduler->Cancel(running.id());
  ASSERT_TRUE(cancelling.ok()) << cancelling.status();
  EXPECT_EQ(cancelling->state(), Job::RUNNING);  // stops at its next step boundary
  const Job ended = WaitForEnd(*scheduler, running.id());
  EXPECT_EQ(ended.state(), Job::CANCELLED);
  EXPECT_EQ(ended.message(), "cancelled by request");

  EXPECT_EQ(scheduler->Cancel(running.id()).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler->Cancel("99").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler->Get("99").status().code(), absl::StatusCode::kNotFound);
  // The cancelled queued job never ran.
  EXPECT_THAT(RunOrder(), ElementsAre(running.id()));
}

TEST_F(SchedulerTest, FailureReasonComesWithTheError) {
  executor_.QueueScript(FakeExecutor::EndsWith(absl::DataLossError("train-images: truncated")));
  executor_.QueueScript(FakeExecutor::EndsWith(absl::ResourceExhaustedError("out of memory")));
  executor_.QueueScript(FakeExecutor::EndsWith(
      api::WithFailureReason(absl::UnavailableError("executor crashed"), Job::EXECUTOR_CRASHED)));
  executor_.QueueScript(FakeExecutor::EndsWith(absl::UnavailableError("no reason attached")));
  auto scheduler = Start();
  const Job data = Submit(*scheduler, TrainRequest());
  const Job memory = Submit(*scheduler, TrainRequest());
  const Job crash = Submit(*scheduler, TrainRequest());
  const Job other = Submit(*scheduler, TrainRequest());
  const Job data_end = WaitForEnd(*scheduler, data.id());
  EXPECT_EQ(data_end.state(), Job::FAILED);
  EXPECT_EQ(data_end.failure_reason(), Job::DATASET_ERROR);
  EXPECT_EQ(data_end.message(), "train-images: truncated");
  EXPECT_EQ(WaitForEnd(*scheduler, memory.id()).failure_reason(), Job::OUT_OF_MEMORY);
  const Job crash_end = WaitForEnd(*scheduler, crash.id());
  EXPECT_EQ(crash_end.failure_reason(), Job::EXECUTOR_CRASHED);
  EXPECT_EQ(crash_end.message(), "executor crashed");
  EXPECT_EQ(WaitForEnd(*scheduler, other.id()).failure_reason(), Job::INTERNAL);
}

// The executor's "cancel not honoured" is read from the status's cause (api/error_cause.h),
// never from its words: reworded, it is still reported; the words alone, without the cause,
// are not.
TEST_F(SchedulerTest, ACancelNotHonouredIsReadFromItsCauseNotItsWords) {
  executor_.QueueScript(FakeExecutor::EndsWith(
      api::WithCause(absl::CancelledError("executor killed after 3 s (words of any kind)"),
                     api::ErrorCause::CANCEL_NOT_HONOURED)));
  executor_.QueueScript(
      FakeExecutor::EndsWith(absl::CancelledError("cancel not honoured within 1 s")));
  auto scheduler = Start();
  const Job with_cause = Submit(*scheduler, TrainRequest());
  const Job words_only = Submit(*scheduler, TrainRequest());
  const Job with_cause_end = WaitForEnd(*scheduler, with_cause.id());
  EXPECT_EQ(with_cause_end.state(), Job::CANCELLED);
  EXPECT_EQ(with_cause_end.message(),
            "cancelled by request; executor killed after 3 s (words of any kind)");
  const Job words_only_end = WaitForEnd(*scheduler, words_only.id());
  EXPECT_EQ(words_only_end.state(), Job::CANCELLED);
  EXPECT_EQ(words_only_end.message(), "cancelled by request");
}

TEST_F(SchedulerTest, ShutdownInterruptsTheRunningJobAndKeepsTheQueue) {
  executor_.QueueScript(FakeExecutor::Held(1));
  std::string running_id, queued_low, queued_high;
  {
    auto scheduler = Start();
    running_id = Submit(*scheduler, TrainRequest()).id();
    ASSERT_TRUE(executor_.WaitUntilHeld());
    queued_low = Submit(*scheduler, TrainRequest(0)).id();
    queued_high = Submit(*scheduler, TrainRequest(1)).id();
    scheduler->Shutdown();
    EXPECT_EQ(scheduler->Get(running_id)->state(), Job::INTERRUPTED);
    EXPECT_EQ(scheduler->Submit(TrainRequest()).status().code(), absl::StatusCode::kUnavailable);
  }
  absl::StatusOr<Job> interrupted = store_->GetJob(running_id);
  ASSERT_TRUE(interrupted.ok());
  EXPECT_EQ(interrupted->state(), Job::INTERRUPTED);
  EXPECT_EQ(interrupted->message(), "interrupted: mpsd shut down");
  EXPECT_EQ(store_->GetJob(queued_low)->state(), Job::QUEUED);
  // The next daemon runs what was queued, in queue order.
  auto scheduler = Start();
  EXPECT_EQ(WaitForEnd(*scheduler, queued_low).state(), Job::SUCCEEDED);
  EXPECT_THAT(RunOrder(), ElementsAre(running_id, queued_high, queued_low));
}

// A sweep over four learning rates, its trials queued behind a paused queue so that all are
// queued when the first starts. `fuse` as SweepSpec.fuse.
SubmitJobRequest SweepRequest(const std::string& fuse, int trials = 4) {
  SubmitJobRequest request = TrainRequest();
  mpsd::v1::SweepParameter* lr = request.mutable_sweep()->add_grid();
  lr->set_path("optimizer.learning_rate");
  for (int i = 0; i < trials; ++i) lr->add_values(absl::StrCat("0.0", i + 1));
  request.mutable_sweep()->set_fuse(fuse);
  return request;
}

std::vector<std::string> LogTexts(JobStore& store, const std::string& id) {
  std::vector<std::string> texts;
  absl::StatusOr<std::vector<JobEvent>> events = store.ReadEvents(id, 0, 1000);
  if (!events.ok()) return texts;
  for (const JobEvent& event : *events) {
    if (event.has_log()) texts.push_back(event.log().text());
  }
  return texts;
}

TEST_F(SchedulerTest, QueuedTrialsOfASweepRunFusedUpToWhatTheExecutorPlans) {
  executor_.FuseUpTo(3);
  auto scheduler = Start();
  ASSERT_TRUE(scheduler->Pause().ok());
  const Job sweep = Submit(*scheduler, SweepRequest("auto"));
  ASSERT_EQ(sweep.trial_job_ids_size(), 4);
  ASSERT_TRUE(scheduler->Resume().ok());
  EXPECT_EQ(WaitForEnd(*scheduler, sweep.id()).state(), Job::SUCCEEDED);
  const std::vector<std::string> t(sweep.trial_job_ids().begin(), sweep.trial_job_ids().end());
  // The first three together (the executor's plan), the fourth alone: every trial ran once.
  EXPECT_THAT(executor_.fused_runs(), ElementsAre(ElementsAre(t[0], t[1], t[2])));
  EXPECT_THAT(RunOrder(), ElementsAre(t[0], t[1], t[2], t[3]));
  for (int i = 0; i < 3; ++i) {
    const Job trial = *scheduler->Get(t[i]);
    EXPECT_EQ(trial.state(), Job::SUCCEEDED);
    EXPECT_EQ(trial.last_step().step(), 2);
    EXPECT_EQ(trial.summary().device(), "fake");
  }
  scheduler->Shutdown();
  EXPECT_THAT(
      LogTexts(*store_, t[1]),
      ElementsAre(HasSubstr(absl::StrCat("trained fused with 2 other trial(s) of sweep ",
                                         sweep.id(), ": jobs ", t[0], ", ", t[1], ", ", t[2]))));
  // The fourth, queued last, had no trial left to fuse with: it ran alone and says why.
  EXPECT_THAT(LogTexts(*store_, t[3]),
              ElementsAre(absl::StrCat("not trained fused with other trials of sweep ", sweep.id(),
                                       ": no other of its trials is still queued (the others "
                                       "have started or ended)")));
}

// Trials the executor cannot fuse with the lead (here: another model) are left for a group of
// their own, and the lead's group still takes the fusable ones queued behind them.
TEST_F(SchedulerTest, TrialsThatCannotFuseWithTheLeadFormTheirOwnGroup) {
  executor_.FuseUpTo(8);
  auto scheduler = Start();
  ASSERT_TRUE(scheduler->Pause().ok());
  SubmitJobRequest request = SweepRequest("auto", 2);                     // lr 0.01, 0.02 ...
  mpsd::v1::SweepParameter* model = request.mutable_sweep()->add_grid();  // ... × model
  model->set_path("model.name");
  model->add_values("mlp");
  model->add_values("convnet");
  const Job sweep = Submit(*scheduler, request);
  ASSERT_EQ(sweep.trial_job_ids_size(), 4);  // (0.01, mlp) (0.01, convnet) (0.02, mlp) ...
  ASSERT_TRUE(scheduler->Resume().ok());
  EXPECT_EQ(WaitForEnd(*scheduler, sweep.id()).state(), Job::SUCCEEDED);
  const std::vector<std::string> t(sweep.trial_job_ids().begin(), sweep.trial_job_ids().end());
  EXPECT_THAT(executor_.fused_runs(),
              ElementsAre(ElementsAre(t[0], t[2]), ElementsAre(t[1], t[3])));
}

TEST_F(SchedulerTest, WhyTrialsWereNotFusedIsInTheTrialsLog) {
  auto scheduler = Start();  // FakeExecutor fuses nothing by default
  ASSERT_TRUE(scheduler->Pause().ok());
  const Job sweep = Submit(*scheduler, SweepRequest("", 2));
  ASSERT_TRUE(scheduler->Resume().ok());
  EXPECT_EQ(WaitForEnd(*scheduler, sweep.id()).state(), Job::SUCCEEDED);
  EXPECT_THAT(executor_.fused_runs(), IsEmpty());
  scheduler->Shutdown();
  EXPECT_THAT(LogTexts(*store_, sweep.trial_job_ids(0)),
              ElementsAre(absl::StrCat("not trained fused with other trials of sweep ", sweep.id(),
                                       ": fake: fusing off")));
}

// The executor names a trial by its place among those offered; the log names its job.
TEST_F(SchedulerTest, WhyATrialWasNotFusedNamesTheOtherTrialsJob) {
  executor_.FuseUpTo(8);
  auto scheduler = Start();
  ASSERT_TRUE(scheduler->Pause().ok());
  SubmitJobRequest request = SweepRequest("auto", 1);
  mpsd::v1::SweepParameter* model = request.mutable_sweep()->add_grid();
  model->set_path("model.name");
  model->add_values("mlp");
  model->add_values("convnet");
  const Job sweep = Submit(*scheduler, request);
  ASSERT_EQ(sweep.trial_job_ids_size(), 2);
  ASSERT_TRUE(scheduler->Resume().ok());
  EXPECT_EQ(WaitForEnd(*scheduler, sweep.id()).state(), Job::SUCCEEDED);
  scheduler->Shutdown();
  EXPECT_THAT(executor_.fused_runs(), IsEmpty());
  EXPECT_THAT(LogTexts(*store_, sweep.trial_job_ids(0)),
              ElementsAre(absl::StrCat("not trained fused with other trials of sweep ", sweep.id(),
                                       ": job ", sweep.trial_job_ids(1),
                                       " differs in train_job.model.name")));
}

TEST_F(SchedulerTest, FuseOffAndAFuseLimitAreHonoured) {
  executor_.FuseUpTo(64);
  auto scheduler = Start();
  ASSERT_TRUE(scheduler->Pause().ok());
  const Job off = Submit(*scheduler, SweepRequest("off", 2));
  const Job two = Submit(*scheduler, SweepRequest("2", 3));
  ASSERT_TRUE(scheduler->Resume().ok());
  EXPECT_EQ(WaitForEnd(*scheduler, off.id()).state(), Job::SUCCEEDED);
  EXPECT_EQ(WaitForEnd(*scheduler, two.id()).state(), Job::SUCCEEDED);
  EXPECT_THAT(executor_.fused_runs(),
              ElementsAre(ElementsAre(two.trial_job_ids(0), two.trial_job_ids(1))));
  // Each trial that ran alone says why: fuse off, or the limit left it for a group of one.
  scheduler->Shutdown();
  EXPECT_THAT(LogTexts(*store_, off.trial_job_ids(1)),
              ElementsAre(absl::StrCat("not trained fused with other trials of sweep ", off.id(),
                                       ": sweep.fuse is off")));
  EXPECT_THAT(LogTexts(*store_, two.trial_job_ids(2)),
              ElementsAre(absl::StrCat("not trained fused with other trials of sweep ", two.id(),
                                       ": no other of its trials is still queued (the others "
                                       "have started or ended)")));
  scheduler.reset();
  scheduler = Start();
  for (const std::string& bad : {"1", "65", "many", "2x"}) {
    absl::StatusOr<Job> refused = scheduler->Submit(SweepRequest(bad, 2));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("sweep.fuse")) << bad;
  }
  SubmitJobRequest order = SweepRequest("auto", 2);
  order.mutable_sweep()->set_data_order("random");
  EXPECT_THAT(scheduler->Submit(order).status().message(), HasSubstr("sweep.data_order"));
}

TEST_F(SchedulerTest, ACancelledOrFailedFusedTrialEndsAloneAndTheOthersGoOn) {
  executor_.FuseUpTo(3);
  executor_.QueueScript(FakeExecutor::Held(1));
  executor_.QueueScript(FakeExecutor::Held(1));
  FakeExecutor::Script fails = FakeExecutor::EndsWith(
      api::WithFailureReason(absl::InternalError("trial blew up"), Job::DIVERGED));
  executor_.QueueScript(fails);
  auto scheduler = Start();
  ASSERT_TRUE(scheduler->Pause().ok());
  const Job sweep = Submit(*scheduler, SweepRequest("auto", 3));
  ASSERT_TRUE(scheduler->Resume().ok());
  ASSERT_TRUE(executor_.WaitUntilHeld());
  const std::vector<std::string> t(sweep.trial_job_ids().begin(), sweep.trial_job_ids().end());
  // While the first two are held, the third has not ended: its result comes after the holds.
  ASSERT_TRUE(scheduler->Cancel(t[1]).ok());
  const Job cancelled = WaitForEnd(*scheduler, t[1]);
  EXPECT_EQ(cancelled.state(), Job::CANCELLED);
  EXPECT_EQ(cancelled.message(), "cancelled by request");
  EXPECT_EQ(scheduler->Get(t[0])->state(), Job::RUNNING);
  EXPECT_EQ(scheduler->Get(sweep.id())->state(), Job::RUNNING);
  executor_.Release();
  EXPECT_EQ(WaitForEnd(*scheduler, t[0]).state(), Job::SUCCEEDED);
  const Job failed = WaitForEnd(*scheduler, t[2]);
  EXPECT_EQ(failed.state(), Job::FAILED);
  EXPECT_EQ(failed.message(), "trial blew up");
  // The sweep fails for its first failed trial's reason, not as INTERNAL.
  const Job ended = WaitForEnd(*scheduler, sweep.id());
  EXPECT_EQ(ended.state(), Job::FAILED);
  EXPECT_EQ(ended.failure_reason(), Job::DIVERGED);
}

TEST_F(SchedulerTest, ShutdownQueuesEveryFusedTrialAgainToStartOver) {
  executor_.FuseUpTo(2);
  executor_.QueueScript(FakeExecutor::Held(1));
  executor_.QueueScript(FakeExecutor::Held(1));
  auto scheduler = Start();
  ASSERT_TRUE(scheduler->Pause().ok());
  const Job sweep = Submit(*scheduler, SweepRequest("auto", 2));
  ASSERT_TRUE(scheduler->Resume().ok());
  ASSERT_TRUE(executor_.WaitUntilHeld());
  scheduler->Shutdown();
  // Sweep trials without a checkpoint are queued again to train from their start (a plain
  // job would end INTERRUPTED): the next start runs them, and the sweep is whole.
  for (const std::string& id : sweep.trial_job_ids()) {
    EXPECT_EQ(scheduler->Get(id)->state(), Job::QUEUED) << id;
    EXPECT_EQ(store_->GetJob(id)->message(),
              "queued again: mpsd shut down while the trial ran; a sweep's trial without a "
              "checkpoint to resume from trains again from its start");
    EXPECT_FALSE(store_->GetJob(id)->has_last_step()) << id;
  }
  auto restarted = Start();
  EXPECT_EQ(WaitForEnd(*restarted, sweep.id()).state(), Job::SUCCEEDED);
  for (const std::string& id : sweep.trial_job_ids()) {
    EXPECT_EQ(restarted->Get(id)->state(), Job::SUCCEEDED) << id;
  }
}

// SweepSpec.scheduler asha with grace_period 1 and reduction_factor 2 on 3-epoch trials: rungs at
// epochs 1 and 2. The trials' val_loss per epoch, scripted, and what the rule makes of them:
//   trial  epoch 1  epoch 2  epoch 3  rung 1 (cutoff)           rung 2 (cutoff)
//   0      0.5      0.4      0.3      first there: on           first there: on  → SUCCEEDED
//   1      0.9      (0.8)    (0.7)    0.5: stops                                 → EARLY_STOPPED
//   2      0.45     0.6      (0.2)    0.7 (of 0.5 and 0.9): on  0.4: stops       → EARLY_STOPPED
// The same one after another and fused (epoch events interleaved: 0, 1, 2 at each epoch).
SubmitJobRequest AshaSweep(const std::string& fuse, int trials = 3) {
  SubmitJobRequest request = SweepRequest(fuse, trials);
  request.mutable_train_job()->set_epochs(3);
  mpsd::v1::SweepScheduler* scheduler = request.mutable_sweep()->mutable_scheduler();
  scheduler->set_type("asha");
  scheduler->set_metric("val_loss");
  scheduler->set_grace_period(1);
  scheduler->set_reduction_factor(2);
  return request;
}

FakeExecutor::Script Epochs(std::vector<double> losses, bool hold = false) {
  FakeExecutor::Script script;
  script.epoch_losses = std::move(losses);
  script.hold = hold;
  return script;
}

TEST_F(SchedulerTest, AshaStopsTrialsEarlyFusedOrNotAndTheSweepSucceeds) {
  executor_.FuseUpTo(3);
  for (const std::string fuse : {"off", "auto"}) {
    SCOPED_TRACE(fuse);
    executor_.QueueScript(Epochs({0.5, 0.4, 0.3}));
    executor_.QueueScript(Epochs({0.9, 0.8, 0.7}));
    executor_.QueueScript(Epochs({0.45, 0.6, 0.2}));
    auto scheduler = Start();
    ASSERT_TRUE(scheduler->Pause().ok());
    const Job sweep = Submit(*scheduler, AshaSweep(fuse));
    ASSERT_TRUE(scheduler->Resume().ok());
    const Job done = WaitForEnd(*scheduler, sweep.id());
    EXPECT_EQ(done.state(), Job::SUCCEEDED);
    EXPECT_EQ(done.message(),
              "1 of 3 trials succeeded; 2 were stopped early by the sweep's scheduler");
    const std::vector<std::string> t(sweep.trial_job_ids().begin(), sweep.trial_job_ids().end());
    if (fuse == "auto") EXPECT_THAT(executor_.fused_runs().back(), ElementsAre(t[0], t[1], t[2]));
    const Job first = *scheduler->Get(t[0]);
    EXPECT_EQ(first.state(), Job::SUCCEEDED);
    EXPECT_EQ(first.last_epoch().epoch(), 3);
    const Job second = *scheduler->Get(t[1]);
    EXPECT_EQ(second.state(), Job::CANCELLED);
    EXPECT_EQ(second.failure_reason(), Job::EARLY_STOPPED);
    // Fused, the three reach rung 1 together and each is judged against the other two.
    EXPECT_EQ(second.message(),
              fuse == "off"
                  ? "asha stopped the trial at its rung of epoch 1: val_loss 0.9 is worse than "
                    "the cutoff 0.5 for the best 1/2 at this rung (1 trial(s) recorded there "
                    "before it; mode min, grace_period 1, reduction_factor 2)"
                  : "asha stopped the trial at its rung of epoch 1: val_loss 0.9 is worse than "
                    "the cutoff 0.475 for the best 1/2 at this rung (2 trial(s) recorded there "
                    "besides it, 2 of them at the same time; mode min, grace_period 1, "
                    "reduction_factor 2)");
    EXPECT_EQ(second.last_epoch().epoch(), 1);  // stopped at its next step: epoch 2 never came
    const Job third = *scheduler->Get(t[2]);
    EXPECT_EQ(third.state(), Job::CANCELLED);
    EXPECT_EQ(third.failure_reason(), Job::EARLY_STOPPED);
    EXPECT_THAT(third.message(), HasSubstr("rung of epoch 2: val_loss 0.6 is worse than the "
                                           "cutoff 0.4"));
    EXPECT_EQ(third.last_epoch().epoch(), 2);
    scheduler->Shutdown();
    EXPECT_THAT(LogTexts(*store_, t[1]),
                ::testing::Contains(absl::StrCat(
                    "early stopped by the scheduler of sweep ", sweep.id(), ": ", second.message(),
                    "; the trial stops at its next step and ends CANCELLED (EARLY_STOPPED)")));
    // The stored state event says so too.
    absl::StatusOr<std::vector<JobEvent>> events = store_->ReadEvents(t[1], 0, 1000);
    ASSERT_TRUE(events.ok());
    EXPECT_EQ(events->back().state().failure_reason(), Job::EARLY_STOPPED);
  }
}

// Fused trials reach a rung together: the first of them is judged like the rest (fed in trial
// order, the first at a rung always went on, so asha never stopped a fused run's first trial),
// and the decisions are those of any order. The worst trial leads here.
TEST_F(SchedulerTest, AshaJudgesAFusedRunsFirstTrialLikeTheOthers) {
  executor_.FuseUpTo(4);
  executor_.QueueScript(Epochs({0.9, 0.8, 0.7}));
  executor_.QueueScript(Epochs({0.5, 0.4, 0.3}));
  executor_.QueueScript(Epochs({0.7, 0.6, 0.5}));
  executor_.QueueScript(Epochs({0.4, 0.3, 0.2}));
  auto scheduler = Start();
  ASSERT_TRUE(scheduler->Pause().ok());
  const Job sweep = Submit(*scheduler, AshaSweep("auto", 4));
  ASSERT_TRUE(scheduler->Resume().ok());
  const Job done = WaitForEnd(*scheduler, sweep.id());
  const std::vector<std::string> t(sweep.trial_job_ids().begin(), sweep.trial_job_ids().end());
  ASSERT_THAT(executor_.fused_runs().back(), ElementsAre(t[0], t[1], t[2], t[3]));
  // Rung 1 keeps the better half (0.5, 0.4); rung 2 the better of those two (0.3).
  const Job first = *scheduler->Get(t[0]);
  EXPECT_EQ(first.failure_reason(), Job::EARLY_STOPPED);
  EXPECT_THAT(first.message(), HasSubstr("rung of epoch 1: val_loss 0.9 is worse than the cutoff "
                                         "0.5 for the best 1/2 at this rung (3 trial(s) recorded "
                                         "there besides it, 3 of them at the same time;"));
  EXPECT_EQ(scheduler->Get(t[2])->failure_reason(), Job::EARLY_STOPPED);
  EXPECT_EQ(scheduler->Get(t[2])->last_epoch().epoch(), 1);
  const Job second = *scheduler->Get(t[1]);
  EXPECT_EQ(second.failure_reason(), Job::EARLY_STOPPED);
  EXPECT_THAT(second.message(), HasSubstr("rung of epoch 2: val_loss 0.4 is worse than the "
                                          "cutoff 0.3"));
  EXPECT_EQ(scheduler->Get(t[3])->state(), Job::SUCCEEDED);
  EXPECT_EQ(done.message(),
            "1 of 4 trials succeeded; 3 were stopped early by the sweep's scheduler");
  // Each trial's stored record names the run it trained in: a restarted daemon decides the
  // stored epochs as they were decided.
  for (const std::string& id : t) EXPECT_EQ(store_->GetJob(id)->trial().fused_lead(), t[0]);
}

// Without a scheduler the same trials all run to their end.
TEST_F(SchedulerTest, WithoutASchedulerNoTrialStopsEarly) {
  executor_.QueueScript(Epochs({0.5, 0.4, 0.3}));
  executor_.QueueScript(Epochs({0.9, 0.8, 0.7}));
  auto scheduler = Start();
  SubmitJobRequest request = AshaSweep("off", 2);
  request.mutable_sweep()->clear_scheduler();
  const Job sweep = Submit(*scheduler, request);
  EXPECT_EQ(WaitForEnd(*scheduler, sweep.id()).message(), "all 2 trials succeeded");
  EXPECT_EQ(scheduler->Get(sweep.trial_job_ids(1))->last_epoch().epoch(), 3);
}

// A trial's user cancel stays a cancel; a sweep with a cancelled trial and early-stopped ones
// ends CANCELLED, counting only the cancelled one as unfinished.
TEST_F(SchedulerTest, AUserCancelIsNotAnEarlyStop) {
  executor_.QueueScript(Epochs({0.5, 0.4, 0.3}, /*hold=*/true));
  executor_.QueueScript(Epochs({0.9, 0.8, 0.7}));
  auto scheduler = Start();
  const Job sweep = Submit(*scheduler, AshaSweep("off", 3));
  ASSERT_TRUE(executor_.WaitUntilHeld());
  ASSERT_TRUE(scheduler->Cancel(sweep.trial_job_ids(0)).ok());
  const Job cancelled = WaitForEnd(*scheduler, sweep.trial_job_ids(0));
  EXPECT_EQ(cancelled.failure_reason(), Job::FAILURE_REASON_UNSPECIFIED);
  EXPECT_EQ(cancelled.message(), "cancelled by request");
  EXPECT_EQ(WaitForEnd(*scheduler, sweep.trial_job_ids(1)).failure_reason(), Job::EARLY_STOPPED);
  const Job done = WaitForEnd(*scheduler, sweep.id());
  EXPECT_EQ(done.state(), Job::CANCELLED);
  EXPECT_EQ(done.message(), "1 of 3 trials did not finish (cancelled or interrupted)");
}

// The rule's state outlives a restart: rebuilt from the stored epoch events, it stops the trial
// that runs after the restart as it would have without one (a fresh rule would let it go on: it
// would be the first at rung 1).
TEST_F(SchedulerTest, TheRuleIsRebuiltFromStoredEpochsAfterARestart) {
  executor_.QueueScript(Epochs({0.5, 0.4, 0.3}, /*hold=*/true));
  executor_.QueueScript(Epochs({0.9, 0.8, 0.7}));
  Job sweep;
  {
    auto scheduler = Start();
    sweep = Submit(*scheduler, AshaSweep("off", 2));
    ASSERT_TRUE(executor_.WaitUntilHeld());
    ASSERT_TRUE(scheduler->Pause().ok());  // the second trial waits for the restart
    executor_.Release();
    EXPECT_EQ(WaitForEnd(*scheduler, sweep.trial_job_ids(0)).state(), Job::SUCCEEDED);
    scheduler->Shutdown();
  }
  EXPECT_EQ(store_->GetJob(sweep.trial_job_ids(1))->state(), Job::QUEUED);
  auto scheduler = Start();
  ASSERT_TRUE(scheduler->Resume().ok());
  const Job second = WaitForEnd(*scheduler, sweep.trial_job_ids(1));
  EXPECT_EQ(second.state(), Job::CANCELLED);
  EXPECT_EQ(second.failure_reason(), Job::EARLY_STOPPED);
  EXPECT_THAT(second.message(), HasSubstr("val_loss 0.9 is worse than the cutoff 0.5"));
  EXPECT_EQ(WaitForEnd(*scheduler, sweep.id()).state(), Job::SUCCEEDED);
}

// What a daemon that ran trial `id` stored: its RUNNING event, one epoch event per loss (val_loss;
// epochs 1, 2, ...), and `state`'s event unless it still runs; the row in `state`, trained in
// the fused run `fused_lead` leads (empty: alone). Each event 1 µs after the one before.
void StoreEpochs(JobStore& store, const std::string& id, Job::State state,
                 const std::vector<double>& losses, const std::string& fused_lead,
                 int64_t& time_us) {
  Job job = *store.GetJob(id);
  job.mutable_trial()->set_fused_lead(fused_lead);
  std::vector<JobEvent> events;
  const auto add = [&](JobEvent event) {
    event.set_job_id(id);
    event.set_seq(job.last_seq() + 1);
    *event.mutable_time() = google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(time_us++);
    job.set_last_seq(event.seq());
    events.push_back(event);
  };
  JobEvent running;
  running.mutable_state()->set_state(Job::RUNNING);
  add(running);
  for (size_t i = 0; i < losses.size(); ++i) {
    JobEvent epoch;
    epoch.mutable_epoch()->set_epoch(static_cast<int>(i) + 1);
    epoch.mutable_epoch()->set_val_loss(losses[i]);
    *job.mutable_last_epoch() = epoch.epoch();
    add(epoch);
  }
  if (state != Job::RUNNING) {
    JobEvent end;
    end.mutable_state()->set_state(state);
    add(end);
  }
  job.set_state(state);
  ASSERT_TRUE(store.Commit({job}, events).ok());
}

// What a daemon killed just after its sweep's rule stopped a trial leaves: the trial RUNNING, its
// stopping epoch stored. At the next start the rebuilt rule stops it again from the stored
// epochs, so it ends EARLY_STOPPED (not INTERRUPTED), and the sweep SUCCEEDED.
TEST_F(SchedulerTest, ATrialStoppedWhenTheDaemonDiedEndsEarlyStoppedAtTheNextStart) {
  Job sweep;
  {
    auto scheduler = Start();
    ASSERT_TRUE(scheduler->Pause().ok());
    sweep = Submit(*scheduler, AshaSweep("off", 2));
    scheduler->Shutdown();
  }
  ASSERT_TRUE(store_->PutSetting("queue_paused", "0").ok());
  int64_t time_us = 1700000000000000;
  const auto stored = [&](const std::string& id, Job::State state,
                          const std::vector<double>& losses) {
    StoreEpochs(*store_, id, state, losses, "", time_us);
  };
  stored(sweep.trial_job_ids(0), Job::SUCCEEDED, {0.5, 0.4, 0.3});
  stored(sweep.trial_job_ids(1), Job::RUNNING, {0.9});  // rung 1, cutoff 0.5: stopped
  auto scheduler = Start();
  const Job stopped = *scheduler->Get(sweep.trial_job_ids(1));
  EXPECT_EQ(stopped.state(), Job::CANCELLED);
  EXPECT_EQ(stopped.failure_reason(), Job::EARLY_STOPPED);
  EXPECT_THAT(stopped.message(), HasSubstr("val_loss 0.9 is worse than the cutoff 0.5"));
  EXPECT_THAT(stopped.message(), HasSubstr("; mpsd stopped before the trial ended"));
  EXPECT_EQ(WaitForEnd(*scheduler, sweep.id()).state(), Job::SUCCEEDED);
  EXPECT_TRUE(executor_.runs().empty());
}

// A fused run's stored epochs are replayed as they were decided: together. The lead (worse)
// and the other trial reached rung 1 in one fused run before the daemon died; replayed one by
// one the lead would go on (the first at the rung), together it is stopped.
TEST_F(SchedulerTest, AFusedRunsStoredEpochsAreReplayedTogether) {
  Job sweep;
  {
    auto scheduler = Start();
    ASSERT_TRUE(scheduler->Pause().ok());
    sweep = Submit(*scheduler, AshaSweep("auto", 2));
    scheduler->Shutdown();
  }
  ASSERT_TRUE(store_->PutSetting("queue_paused", "1").ok());
  const std::string lead = sweep.trial_job_ids(0), other = sweep.trial_job_ids(1);
  int64_t time_us = 1700000000000000;
  StoreEpochs(*store_, lead, Job::RUNNING, {0.9}, lead, time_us);
  StoreEpochs(*store_, other, Job::RUNNING, {0.5}, lead, time_us);
  auto scheduler = Start();
  const Job stopped = *scheduler->Get(lead);
  EXPECT_EQ(stopped.state(), Job::CANCELLED);
  EXPECT_EQ(stopped.failure_reason(), Job::EARLY_STOPPED);
  EXPECT_THAT(stopped.message(), HasSubstr("val_loss 0.9 is worse than the cutoff 0.5 for the "
                                           "best 1/2 at this rung (1 trial(s) recorded there "
                                           "besides it, 1 of them at the same time;"));
  // The other was running, without a checkpoint: queued again to train from its start.
  const Job again = *scheduler->Get(other);
  EXPECT_EQ(again.state(), Job::QUEUED);
  EXPECT_EQ(again.message(),
            "queued again: mpsd stopped while the trial ran; a sweep's trial without a "
            "checkpoint to resume from trains again from its start");
  EXPECT_FALSE(again.has_last_epoch());
}

// A name that would display as another (a right-to-left override reversing "gpj.exe", a
// zero-width space inside "admin") or hide text (a C1 control) is refused, as ASCII controls
// are; other Unicode is a name like any other, zero-width joiners of emoji sequences included.
TEST_F(SchedulerTest, NamesAndLabelsRefuseControlAndBidiCharacters) {
  auto scheduler = Start();
  for (const std::string& bad : {std::string("run\x07"), std::string("evil\xE2\x80\xAEgpj.exe"),
                                 std::string("a\xE2\x81\xA6"
                                             "b"),
                                 std::string("x\xC2\x85y"), std::string("\xE2\x80\x8Fname"),
                                 std::string("ad\xE2\x80\x8Bmin"), std::string("\xEF\xBB\xBFrun"),
                                 std::string("a\xE2\x81\xA0"
                                             "b")}) {
    SubmitJobRequest named = TrainRequest();
    named.set_name(bad);
    const absl::Status refused = scheduler->Submit(named).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.message(), HasSubstr("name: ")) << bad;
    SubmitJobRequest labelled = TrainRequest();
    (*labelled.mutable_labels())["owner"] = bad;
    EXPECT_THAT(scheduler->Submit(labelled).status().message(), HasSubstr("labels.owner: ")) << bad;
  }
  SubmitJobRequest unicode = TrainRequest();
  // "für Renée — 测试"
  unicode.set_name(
      "f\xC3\xBCr Ren\xC3\xA9"
      "e \xE2\x80\x94 \xE6\xB5\x8B\xE8\xAF\x95");
  EXPECT_TRUE(scheduler->Submit(unicode).ok());
  SubmitJobRequest family = TrainRequest();
  family.set_name("\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7");  // woman ZWJ girl
  EXPECT_TRUE(scheduler->Submit(family).ok());
}

TEST_F(SchedulerTest, RecoversJobsADeadDaemonLeftRunning) {
  // What a daemon killed mid-job leaves behind: RUNNING rows, one with a checkpoint and
  // restart_policy: resume, and a QUEUED row whose QUEUED event was never stored.
  auto insert = [&](Job::State state, const SubmitJobRequest& spec, int64_t last_seq) {
    Job job;
    job.set_kind(Job::TRAIN_JOB);
    job.set_state(state);
    *job.mutable_spec() = spec;
    absl::StatusOr<Job> stored = store_->InsertJob(job);
    EXPECT_TRUE(stored.ok()) << stored.status();
    Job updated = *stored;
    updated.set_last_seq(last_seq);
    updated.mutable_last_step()->set_step(7);
    std::vector<JobEvent> events;
    for (int64_t seq = 1; seq <= last_seq; ++seq) {
      JobEvent event;
      event.set_job_id(updated.id());
      event.set_seq(seq);
      events.push_back(event);
    }
    EXPECT_TRUE(store_->Commit({updated}, events).ok());
    return updated;
  };
  const Job lost = insert(Job::RUNNING, TrainRequest(), 3);
  SubmitJobRequest resumable_spec = TrainRequest();
  resumable_spec.mutable_train_job()->set_restart_policy("resume");
  Job resumable = insert(Job::RUNNING, resumable_spec, 4);
  resumable.mutable_last_checkpoint()->set_path("/state/artifacts/2/checkpoint-epoch-1.pt");
  resumable.mutable_last_checkpoint()->set_epoch(1);
  ASSERT_TRUE(store_->Commit({resumable}, {}).ok());
  const Job unannounced = insert(Job::QUEUED, TrainRequest(), 0);

  auto scheduler = Start();
  const Job lost_now = *scheduler->Get(lost.id());
  EXPECT_EQ(lost_now.state(), Job::INTERRUPTED);
  EXPECT_EQ(lost_now.message(), "interrupted: mpsd stopped while the job ran (last step 7)");
  EXPECT_EQ(lost_now.last_seq(), 4);  // its events continue from the stored seq
  EXPECT_EQ(WaitForEnd(*scheduler, resumable.id()).state(), Job::SUCCEEDED);
  EXPECT_EQ(WaitForEnd(*scheduler, unannounced.id()).state(), Job::SUCCEEDED);
  const std::vector<FakeExecutor::RunRecord> runs = executor_.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].context.job_id, resumable.id());
  EXPECT_EQ(runs[0].context.resume_checkpoint, "/state/artifacts/2/checkpoint-epoch-1.pt");
  EXPECT_EQ(runs[1].context.job_id, unannounced.id());
  EXPECT_EQ(runs[1].context.resume_checkpoint, "");
  EXPECT_EQ(scheduler->Get(resumable.id())->resumed_from_job_id(), resumable.id());
  scheduler->Shutdown();
  absl::StatusOr<std::vector<JobEvent>> events = store_->ReadEvents(unannounced.id(), 0, 10);
  ASSERT_TRUE(events.ok());
  ASSERT_FALSE(events->empty());
  EXPECT_EQ((*events)[0].seq(), 1);
  EXPECT_EQ((*events)[0].state().state(), Job::QUEUED);
}

TEST_F(SchedulerTest, ResumeFromAJobIdNamesThatJob) {
  auto scheduler = Start();
  SubmitJobRequest request = TrainRequest();
  request.mutable_train_job()->set_resume_from("12");
  EXPECT_EQ(Submit(*scheduler, request).resumed_from_job_id(), "12");
  request.mutable_train_job()->set_resume_from("runs/12.pt");
  EXPECT_EQ(Submit(*scheduler, request).resumed_from_job_id(), "");
}

TEST_F(SchedulerTest, ListIsNewestFirstAndDeviceCountsRuns) {
  auto scheduler = Start();
  for (int i = 0; i < 3; ++i) Submit(*scheduler, TrainRequest());
  WaitForEnd(*scheduler, "3");
  JobQuery query;
  query.limit = 2;
  std::vector<std::string> ids;
  for (const Job& job : scheduler->List(query)) ids.push_back(job.id());
  EXPECT_THAT(ids, ElementsAre("3", "2"));
  query.before_id = 2;
  ids.clear();
  for (const Job& job : scheduler->List(query)) ids.push_back(job.id());
  EXPECT_THAT(ids, ElementsAre("1"));
  const mpsd::v1::DeviceInfo device = scheduler->GetDevice();
  EXPECT_EQ(device.kind(), "fake");
  EXPECT_EQ(device.jobs_run(), 3);
  absl::StatusOr<mpsd::v1::ListModelsResponse> models = scheduler->ListModels({});
  ASSERT_TRUE(models.ok());
  EXPECT_EQ(models->models(0).name(), "fake");
}

}  // namespace
}  // namespace mpsd::server
