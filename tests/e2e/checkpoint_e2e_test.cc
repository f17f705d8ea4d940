// End-to-end tests of checkpoints across daemon restarts (issue 5's restart_policy: resume)
// against real mpsd processes: a job killed with its daemon resumes from its newest checkpoint on
// the next start and succeeds; without the policy it stays INTERRUPTED.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;
using mpsd::v1::SubmitJobRequest;

// convnet, 8 steps an epoch for 6 epochs, a checkpoint after every epoch.
SubmitJobRequest CheckpointedJob(const std::string& restart_policy) {
  SubmitJobRequest request = TrainJobRequest(512, 64, 6, 64);
  request.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  request.mutable_train_job()->set_restart_policy(restart_policy);
  return request;
}

class CheckpointE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start());
  }
  void TearDown() override {
    if (daemon_->pid() <= 0) return;
    const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  Job Get(const std::string& id) {
    absl::StatusOr<Job> job = rpc::Get(*daemon_, id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.value_or(Job());
  }

  // Submits `request`, waits for its first stored checkpoint, stops the daemon with `signal` and
  // starts it again. Returns the job as it was when stopped.
  // Whether a checkpoint event of the job is in the store, not only in the daemon's memory: what
  // a restart reads (a job's row is written with its events). Killed before that commit, a job
  // rightly ends INTERRUPTED, with no checkpoint to resume from.
  bool CheckpointStored(const std::string& id) {
    grpc::ClientContext context;
    mpsd::v1::StreamEventsRequest request;
    request.set_job_id(id);
    request.set_stored_only(true);
    auto reader = daemon_->stub().StreamEvents(&context, request);
    bool stored = false;
    JobEvent event;
    while (reader->Read(&event)) stored |= event.has_checkpoint();
    return reader->Finish().ok() && stored;
  }

  Job RunUntilFirstCheckpointThenKill(const SubmitJobRequest& request, int signal = SIGKILL) {
    absl::StatusOr<Job> submitted = rpc::Submit(*daemon_, request);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    Job job;
    EXPECT_TRUE(WaitUntil([&] {
      job = Get(submitted->id());
      return (job.has_last_checkpoint() && CheckpointStored(job.id())) ||
             (job.state() != Job::RUNNING && job.state() != Job::QUEUED);
    }));
    EXPECT_EQ(job.state(), Job::RUNNING) << "the job ended before the daemon could be killed";
    const int status = daemon_->Stop(signal, absl::Seconds(60));
    if (signal == SIGKILL) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    daemon_->Start();
    return job;
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(CheckpointE2eTest, KilledJobWithRestartPolicyResumesFromItsCheckpointAndSucceeds) {
  const Job killed = RunUntilFirstCheckpointThenKill(CheckpointedJob("resume"));
  ASSERT_TRUE(killed.has_last_checkpoint());
  const mpsd::v1::CheckpointSaved checkpoint = killed.last_checkpoint();
  EXPECT_TRUE(absl::StartsWith(checkpoint.path(),
                               absl::StrCat(dir_.str(), "/state/artifacts/", killed.id(), "/")))
      << checkpoint.path();

  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, killed.id());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state(), Job::SUCCEEDED) << ended->message();
  EXPECT_EQ(ended->resumed_from_job_id(), killed.id());
  EXPECT_GE(ended->summary().resumed_at_step(), checkpoint.step());
  EXPECT_EQ(ended->summary().epochs(), 6);
  EXPECT_FALSE(ended->summary().model_path().empty());

  // The stream tells the story: RUNNING, then QUEUED again naming the checkpoint, then RUNNING
  // from the step after it, then SUCCEEDED.
  const std::vector<JobEvent> events = rpc::StreamAll(*daemon_, killed.id());
  std::vector<Job::State> states;
  std::string requeued_message;
  for (const JobEvent& e : events) {
    if (!e.has_state()) continue;
    states.push_back(e.state().state());
    if (states.size() == 3) requeued_message = e.state().message();
  }
  EXPECT_EQ(states, (std::vector<Job::State>{Job::QUEUED, Job::RUNNING, Job::QUEUED, Job::RUNNING,
                                             Job::SUCCEEDED}));
  EXPECT_TRUE(absl::StrContains(requeued_message, "resumes from checkpoint ")) << requeued_message;
  int64_t first_step_after_resume = 0;
  bool resumed = false;
  for (const JobEvent& e : events) {
    if (e.has_state() && e.state().state() == Job::QUEUED && !e.state().message().empty()) {
      resumed = true;
    }
    if (resumed && e.has_step() && first_step_after_resume == 0) {
      first_step_after_resume = e.step().step();
    }
  }
  EXPECT_EQ(first_step_after_resume, ended->summary().resumed_at_step() + 1);
}

// Killed after steps past its checkpoint, the job runs those steps again after the resume: the
// stored log has them twice, and a stream with latest_attempt_only has each step and epoch once,
// the later attempt's (issue 27: `mpsctl logs` drew the abandoned steps too).
TEST_F(CheckpointE2eTest, ALatestAttemptStreamHasEachStepAndEpochOnce) {
  absl::StatusOr<Job> submitted = rpc::Submit(*daemon_, CheckpointedJob("resume"));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  Job job;
  ASSERT_TRUE(WaitUntil([&] {
    job = Get(submitted->id());
    return (job.has_last_checkpoint() &&
            job.last_step().step() > job.last_checkpoint().step() + 1) ||
           (job.state() != Job::RUNNING && job.state() != Job::QUEUED);
  }));
  ASSERT_EQ(job.state(), Job::RUNNING) << "the job ended before the daemon could be killed";
  const int status = daemon_->Stop(SIGKILL, absl::Seconds(60));
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  daemon_->Start();
  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, job.id());
  ASSERT_TRUE(ended.ok()) << ended.status();
  ASSERT_EQ(ended->state(), Job::SUCCEEDED) << ended->message();

  const auto steps_and_epochs = [](const std::vector<JobEvent>& events) {
    std::pair<std::vector<int64_t>, std::vector<int64_t>> out;
    for (const JobEvent& e : events) {
      if (e.has_step()) out.first.push_back(e.step().step());
      if (e.has_epoch()) out.second.push_back(e.epoch().epoch());
    }
    return out;
  };
  std::vector<int64_t> all_steps_expected(48), epochs_expected(6);
  for (int i = 0; i < 48; ++i) all_steps_expected[i] = i + 1;
  for (int i = 0; i < 6; ++i) epochs_expected[i] = i + 1;

  // The summary covers the whole run, not only the attempt after the resume.
  EXPECT_EQ(ended->summary().steps(), 48);
  EXPECT_EQ(ended->summary().epochs(), 6);
  EXPECT_GT(ended->summary().resumed_at_step(), 0);
  const std::vector<JobEvent> all = rpc::StreamAll(*daemon_, job.id());
  EXPECT_GT(steps_and_epochs(all).first.size(), 48u) << "no step was run twice";
  const std::vector<JobEvent> latest =
      rpc::StreamAll(*daemon_, job.id(), 0, nullptr, /*latest_attempt_only=*/true);
  EXPECT_EQ(steps_and_epochs(latest).first, all_steps_expected);
  EXPECT_EQ(steps_and_epochs(latest).second, epochs_expected);
  // Every other event is still there, and the stream ends with the terminal state.
  EXPECT_EQ(latest.back().seq(), ended->last_seq());
  ASSERT_TRUE(latest.back().has_state());
  EXPECT_EQ(latest.back().state().state(), Job::SUCCEEDED);
  // The step the killed attempt ran last is the resumed attempt's event (a later seq).
  const int64_t twice = job.last_step().step();
  int64_t last_seq_of_twice = 0;
  for (const JobEvent& e : all) {
    if (e.has_step() && e.step().step() == twice) last_seq_of_twice = e.seq();
  }
  for (const JobEvent& e : latest) {
    if (e.has_step() && e.step().step() == twice) EXPECT_EQ(e.seq(), last_seq_of_twice);
  }
  // From the middle of the abandoned attempt: the rest, each step once.
  int64_t middle = 0;
  for (const JobEvent& e : all) {
    if (e.has_step() && e.step().step() == twice - 1 && middle == 0) middle = e.seq();
  }
  const std::vector<JobEvent> rest =
      rpc::StreamAll(*daemon_, job.id(), middle, nullptr, /*latest_attempt_only=*/true);
  std::vector<int64_t> rest_steps = steps_and_epochs(rest).first;
  EXPECT_TRUE(std::is_sorted(rest_steps.begin(), rest_steps.end()));
  EXPECT_EQ(std::adjacent_find(rest_steps.begin(), rest_steps.end()), rest_steps.end());
  EXPECT_EQ(rest_steps.back(), 48);
}

TEST_F(CheckpointE2eTest, JobStoppedBySigtermWithRestartPolicyResumesOnTheNextStart) {
  const Job stopped = RunUntilFirstCheckpointThenKill(CheckpointedJob("resume"), SIGTERM);
  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, stopped.id());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state(), Job::SUCCEEDED) << ended->message();
  EXPECT_GE(ended->summary().resumed_at_step(), stopped.last_checkpoint().step());
  EXPECT_GT(ended->summary().resumed_at_step(), 0);
  bool said_so = false;
  for (const JobEvent& e : rpc::StreamAll(*daemon_, stopped.id())) {
    said_so |= e.has_state() && e.state().state() == Job::QUEUED &&
               absl::StrContains(e.state().message(), "mpsd shut down while the job ran");
  }
  EXPECT_TRUE(said_so);
}

// A fresh user's pass: an automatic resume from a truncated checkpoint failed as INVALID_SPEC
// naming train_job.resume_from, which the user never set.
TEST_F(CheckpointE2eTest, AnAutomaticResumeFromADamagedCheckpointSaysSo) {
  absl::StatusOr<Job> submitted = rpc::Submit(*daemon_, CheckpointedJob("resume"));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  ASSERT_TRUE(WaitUntil([&] { return CheckpointStored(submitted->id()); }));
  daemon_->Stop(SIGKILL, absl::Seconds(60));
  // The executor dies of its parent's death a moment later; until then it may still finish a
  // checkpoint (and remove the one the store names), so the files are cut once it is gone.
  ASSERT_TRUE(WaitUntil([&] { return FindExecutor(dir_.str() + "/state") == 0; }));
  // Every checkpoint it wrote, cut to half: whichever the store names is damaged.
  const std::string job_dir = dir_.str() + "/state/artifacts/" + submitted->id();
  for (const auto& entry : std::filesystem::directory_iterator(job_dir)) {
    if (!absl::StartsWith(entry.path().filename().string(), "checkpoint")) continue;
    if (!entry.is_regular_file()) continue;
    std::filesystem::resize_file(entry.path(), entry.file_size() / 2);
  }
  daemon_->Start();
  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, submitted->id());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state(), Job::FAILED);
  EXPECT_NE(ended->failure_reason(), Job::INVALID_SPEC) << ended->message();
  EXPECT_THAT(ended->message(),
              ::testing::HasSubstr("the automatic resume (restart_policy: resume) from "
                                   "checkpoint " +
                                   job_dir + "/checkpoint"));
  EXPECT_THAT(ended->message(), ::testing::HasSubstr("is not resumed again"));
  EXPECT_THAT(ended->message(), ::testing::Not(::testing::HasSubstr("train_job.resume_from")));
}

// A fresh user's pass: a resumed job counted its time only from the resume, and started_at
// was the resume's. Both cover the whole job now (the time between the kill and the restart,
// when nothing ran, is not counted).
TEST_F(CheckpointE2eTest, AResumedJobsTimesCoverItsRunBeforeTheResume) {
  const Job killed = RunUntilFirstCheckpointThenKill(CheckpointedJob("resume"));
  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, killed.id());
  ASSERT_TRUE(ended.ok()) << ended.status();
  ASSERT_EQ(ended->state(), Job::SUCCEEDED) << ended->message();
  auto to_time = [](const google::protobuf::Timestamp& t) {
    return absl::FromUnixMicros(google::protobuf::util::TimeUtil::TimestampToMicroseconds(t));
  };
  auto time_of = [&](const JobEvent& e) { return to_time(e.time()); };
  std::vector<absl::Time> running;  // each RUNNING event
  absl::Time first_run_end, last;
  for (const JobEvent& e : rpc::StreamAll(*daemon_, killed.id())) {
    if (e.has_state() && e.state().state() == Job::RUNNING) running.push_back(time_of(e));
    if (e.has_state() && e.state().state() == Job::QUEUED && running.size() == 1) {
      first_run_end = last;
    }
    last = time_of(e);
  }
  ASSERT_EQ(running.size(), 2u);
  EXPECT_LE(absl::AbsDuration(to_time(ended->started_at()) - running[0]), absl::Milliseconds(100))
      << "started_at is not the first run's";
  const double first_run = absl::ToDoubleSeconds(first_run_end - running[0]);
  const double second_run = absl::ToDoubleSeconds(last - running[1]);
  EXPECT_GE(ended->summary().total_time_s(), first_run + 0.8 * second_run)
      << "first run " << first_run << " s, second " << second_run << " s";
  EXPECT_LE(ended->summary().total_time_s(), first_run + second_run + 1.0);
}

TEST_F(CheckpointE2eTest, KilledJobWithoutRestartPolicyStaysInterrupted) {
  const Job killed = RunUntilFirstCheckpointThenKill(CheckpointedJob(""));
  const Job after = Get(killed.id());
  EXPECT_EQ(after.state(), Job::INTERRUPTED);
  EXPECT_TRUE(after.has_last_checkpoint());
  EXPECT_TRUE(after.resumed_from_job_id().empty());
}

}  // namespace
}  // namespace mpsd::testing
