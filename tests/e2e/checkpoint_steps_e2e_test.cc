// Checkpoints that lose no finished step (issue 27), against real mpsd processes on the CPU:
// checkpoint.every_steps writes inside epochs, a SIGTERM writes one at the step boundary where
// the job stops, and a job resumed from either continues the epoch in the same order, with
// exactly one step event per step and the final weights of an uninterrupted run. keep_last and
// keep_best decide which files stay; early stopping's state travels in the checkpoint;
// nan_policy skip_step skips, counts and fails after max_skipped_steps.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

namespace fs = std::filesystem;
using mpsd::v1::Job;
using mpsd::v1::JobEvent;
using mpsd::v1::SubmitJobRequest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kPython[] = MPSD_PIL_PYTHON;

// Compares two zip archives written by LibTorch record by record, the archive's folder name
// aside; the metadata record of a checkpoint without its job_id line (a job's own id).
constexpr char kSameRecords[] = R"(import sys, zipfile
def records(p):
    z = zipfile.ZipFile(p)
    out = {}
    for n in z.namelist():
        data = z.read(n)
        if n.endswith('mpsd_checkpoint.txt'):
            data = b''.join(l for l in data.splitlines(True) if not l.startswith(b'job_id:'))
        out[n.split('/', 1)[1]] = data
    return out
a, b = records(sys.argv[1]), records(sys.argv[2])
for n in sorted(set(a) | set(b)):
    if a.get(n) != b.get(n):
        print('record %s differs' % n)
        if n.endswith('.txt'):
            print(a.get(n), b.get(n))
        if n == 'state.pt':
            import io
            inner = lambda d: {m.split('/', 1)[1]: zipfile.ZipFile(io.BytesIO(d)).read(m)
                               for m in zipfile.ZipFile(io.BytesIO(d)).namelist()}
            ia, ib = inner(a[n]), inner(b.get(n, b''))
            print(' inside:', [m for m in sorted(set(ia) | set(ib)) if ia.get(m) != ib.get(m)])
sys.exit(0 if a and a == b else 1)
)";

// The model inside a checkpoint against a LibTorch model archive (best.pt, model.pt): the
// checkpoint's state.pt numbers the model's tensors first, in the order the model archive does,
// and they must be the same bytes. (The optimizer's state is keyed by tensor addresses in
// LibTorch 1.x, so two jobs' checkpoints never match whole.) Prints the checkpoint's metadata.
constexpr char kSameModel[] = R"(import io, sys, zipfile
def records(z):
    return {n.split('/', 1)[1]: z.read(n) for n in z.namelist()}
model = records(zipfile.ZipFile(sys.argv[1]))
checkpoint = records(zipfile.ZipFile(sys.argv[2]))
sys.stdout.write(checkpoint['mpsd_checkpoint.txt'].decode())
state = records(zipfile.ZipFile(io.BytesIO(checkpoint['state.pt'])))
tensors = [n for n in model if n.startswith('data/')]
differ = [n for n in tensors if model[n] != state.get(n)]
print('tensors %d, differing %s' % (len(tensors), differ))
sys.exit(0 if tensors and not differ else 1)
)";

// convnet on 1,600 Fashion-MNIST images, batch 16: 100 steps an epoch, 2 epochs. Enough for a
// checkpoint every 10 steps and a stop well inside epoch 1 (the first checkpoint is at step 10),
// and the SIGTERM test's three runs take ~20 s on 2 cores, not ~65 s at 3,200 images.
constexpr int64_t kEpochSteps = 100;
constexpr int64_t kSteps = 2 * kEpochSteps;
SubmitJobRequest StepsJob() {
  SubmitJobRequest request = TrainJobRequest(16 * kEpochSteps, 200, 2, 16);
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_checkpoint()->set_every_steps(10);
  job.mutable_checkpoint()->set_keep_last(2);
  return request;
}

std::vector<int64_t> StepNumbers(const std::vector<JobEvent>& events) {
  std::vector<int64_t> steps;
  for (const JobEvent& e : events) {
    if (e.has_step()) steps.push_back(e.step().step());
  }
  return steps;
}

std::vector<int64_t> OneToN(int64_t n) {
  std::vector<int64_t> steps(n);
  for (int64_t i = 0; i < n; ++i) steps[i] = i + 1;
  return steps;
}

// The checkpoint files of a job's folder under their own names, sorted.
std::vector<std::string> CheckpointFiles(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "checkpoint-epoch-") || absl::StartsWith(name, "checkpoint-step-")) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class CheckpointStepsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start({"--enable-fault-injection"}));
    WriteFile(dir_.str() + "/same_records.py", kSameRecords);
    WriteFile(dir_.str() + "/same_model.py", kSameModel);
  }
  void TearDown() override {
    if (daemon_->pid() <= 0) return;
    const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  std::string JobDir(const std::string& id) { return dir_.str() + "/state/artifacts/" + id; }

  // Whether two LibTorch archives hold the same records (kSameRecords); the records that differ
  // are added to the test's output.
  bool SameRecords(const std::string& a, const std::string& b) {
    const CommandResult same = RunCommand({kPython, dir_.str() + "/same_records.py", a, b});
    if (same.exit_code != 0) ADD_FAILURE() << a << " vs " << b << ": " << same.out << same.err;
    return same.exit_code == 0;
  }

  // Whether `checkpoint` holds the model of the archive `model` (kSameModel); its metadata.
  bool SameModel(const std::string& model, const std::string& checkpoint,
                 std::string* metadata = nullptr) {
    const CommandResult same =
        RunCommand({kPython, dir_.str() + "/same_model.py", model, checkpoint});
    if (metadata != nullptr) *metadata = same.out;
    if (same.exit_code != 0) {
      ADD_FAILURE() << model << " vs " << checkpoint << ": " << same.out << same.err;
    }
    return same.exit_code == 0;
  }

  // Submits `request`, waits for its first checkpoint, stops the daemon with `signal`, starts it
  // again and waits for the job's end (restart_policy: resume runs it on).
  Job StopAfterFirstCheckpointAndResume(SubmitJobRequest request, int signal) {
    request.mutable_train_job()->set_restart_policy("resume");
    const Job submitted = rpc_ok::Submit(*daemon_, request);
    Job job;
    EXPECT_TRUE(WaitUntil([&] {
      job = rpc_ok::Get(*daemon_, submitted.id());
      return job.has_last_checkpoint() ||
             (job.state() != Job::RUNNING && job.state() != Job::QUEUED);
    }));
    EXPECT_EQ(job.state(), Job::RUNNING) << "the job ended before mpsd could be stopped";
    daemon_->Stop(signal, absl::Seconds(60));
    daemon_->Start({"--enable-fault-injection"});
    return rpc_ok::WaitForEnd(*daemon_, submitted.id());
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

// The uninterrupted run: every 10 steps a checkpoint, keep_last 2 leaves the newest two. Then the
// same job stopped by SIGTERM: it writes a checkpoint at the step where it stopped, inside epoch
// 1, goes QUEUED, resumes from it on the next start at the following step, and ends with the
// same weights; its stream has every step once.
TEST_F(CheckpointStepsE2eTest, ASigtermCheckpointResumesAtTheNextStepWithTheSameWeights) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3";
  const Job reference = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, StepsJob()).id());
  ASSERT_EQ(reference.state(), Job::SUCCEEDED) << reference.message();
  // Steps 190 and 200 (200 ends epoch 2: an epoch file); checkpoint-latest.pt is the newest.
  EXPECT_THAT(
      CheckpointFiles(JobDir(reference.id())),
      ElementsAre("checkpoint-epoch-2.pt", absl::StrCat("checkpoint-step-", kSteps - 10, ".pt")));
  EXPECT_TRUE(fs::equivalent(JobDir(reference.id()) + "/checkpoint-latest.pt",
                             JobDir(reference.id()) + "/checkpoint-epoch-2.pt"));
  EXPECT_EQ(StepNumbers(rpc::StreamAll(*daemon_, reference.id())), OneToN(kSteps));

  const Job resumed = StopAfterFirstCheckpointAndResume(StepsJob(), SIGTERM);
  ASSERT_EQ(resumed.state(), Job::SUCCEEDED) << resumed.message();
  const std::vector<JobEvent> events = rpc::StreamAll(*daemon_, resumed.id());
  EXPECT_EQ(StepNumbers(events), OneToN(kSteps));
  // The stop's checkpoint is the last one before the job was queued again, at its last step.
  int64_t stop_step = 0, last_step_before = 0;
  std::string stop_path;
  bool requeued = false;
  for (const JobEvent& e : events) {
    if (e.has_state() && e.state().state() == Job::QUEUED && !e.state().message().empty()) {
      requeued = true;
    }
    if (requeued) continue;
    if (e.has_step()) last_step_before = e.step().step();
    if (e.has_checkpoint()) stop_step = e.checkpoint().step(), stop_path = e.checkpoint().path();
  }
  ASSERT_TRUE(requeued);
  std::cout << "stopped by SIGTERM after step " << stop_step << " of " << kSteps << "; checkpoint "
            << stop_path << "\n";
  EXPECT_EQ(stop_step, last_step_before) << "no checkpoint at the step where the job stopped";
  EXPECT_EQ(resumed.summary().resumed_at_step(), stop_step);
  if (stop_step % kEpochSteps != 0) {
    EXPECT_THAT(stop_path, HasSubstr("/checkpoint-step-"));
  }
  EXPECT_TRUE(SameRecords(reference.summary().model_path(), resumed.summary().model_path()))
      << "resumed at step " << stop_step << ": the final weights differ";

  // Without restart_policy the stopped job stays INTERRUPTED; `resume_from: <its id>` takes its
  // newest checkpoint (checkpoint-latest.pt: the stop's) and goes on from the next step.
  const Job submitted = rpc_ok::Submit(*daemon_, StepsJob());
  ASSERT_TRUE(
      WaitUntil([&] { return rpc_ok::Get(*daemon_, submitted.id()).has_last_checkpoint(); }));
  daemon_->Stop(SIGTERM, absl::Seconds(60));
  daemon_->Start({"--enable-fault-injection"});
  const Job interrupted = rpc_ok::Get(*daemon_, submitted.id());
  ASSERT_EQ(interrupted.state(), Job::INTERRUPTED);
  const int64_t stopped_at = StepNumbers(rpc::StreamAll(*daemon_, submitted.id())).back();
  EXPECT_EQ(interrupted.last_checkpoint().step(), stopped_at);
  SubmitJobRequest rest = StepsJob();
  rest.mutable_train_job()->set_resume_from(submitted.id());
  const Job finished = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, rest).id());
  ASSERT_EQ(finished.state(), Job::SUCCEEDED) << finished.message();
  EXPECT_EQ(finished.summary().resumed_at_step(), stopped_at);
  const std::vector<int64_t> rest_steps = StepNumbers(rpc::StreamAll(*daemon_, finished.id()));
  ASSERT_FALSE(rest_steps.empty());
  EXPECT_EQ(rest_steps.front(), stopped_at + 1);
  EXPECT_EQ(rest_steps.back(), kSteps);
  EXPECT_TRUE(SameRecords(reference.summary().model_path(), finished.summary().model_path()));
}

// Killed outright after its first checkpoint (step 10 or a later one): the job resumes from the
// newest every_steps checkpoint, inside epoch 1, and still ends with the uninterrupted weights;
// the steps run twice are shown once to a reader of the latest attempt.
TEST_F(CheckpointStepsE2eTest, AKilledJobResumesFromItsNewestStepCheckpointWithTheSameWeights) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3";
  const Job reference = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, StepsJob()).id());
  ASSERT_EQ(reference.state(), Job::SUCCEEDED) << reference.message();
  const Job resumed = StopAfterFirstCheckpointAndResume(StepsJob(), SIGKILL);
  ASSERT_EQ(resumed.state(), Job::SUCCEEDED) << resumed.message();
  EXPECT_GT(resumed.summary().resumed_at_step(), 0);
  EXPECT_EQ(resumed.summary().resumed_at_step() % 10, 0);
  // The stored log keeps the abandoned attempt's steps after the checkpoint; a reader asking
  // for the latest attempt (as mpsctl does) sees each step once.
  const std::vector<int64_t> stored = StepNumbers(rpc::StreamAll(*daemon_, resumed.id()));
  EXPECT_GE(stored.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(StepNumbers(rpc::StreamAll(*daemon_, resumed.id(), 0, nullptr,
                                       /*latest_attempt_only=*/true)),
            OneToN(kSteps));
  EXPECT_TRUE(SameRecords(reference.summary().model_path(), resumed.summary().model_path()))
      << "resumed at step " << resumed.summary().resumed_at_step() << ": the final weights differ";
}

// keep_best with early stopping on val_loss (min_delta so large that only epoch 1 counts):
// training stops after epoch 3; keep_last 1 leaves epoch 3's file, checkpoint-best.pt is epoch
// 1's checkpoint: its metadata says so, and its model is bitwise best.pt and the model a
// 1-epoch run ends with. A job resumed from a 2-epoch
// run's checkpoint stops after epoch 3 as well (its patience carried over, not restarted), with
// the uninterrupted run's weights.
TEST_F(CheckpointStepsE2eTest, KeepBestKeepsTheBestEpochsCheckpointAndEarlyStoppingResumes) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3";
  const auto job = [](int epochs) {
    SubmitJobRequest request = TrainJobRequest(640, 100, epochs, 64, "mlp");
    mpsd::v1::TrainJob& j = *request.mutable_train_job();
    j.mutable_dataset()->mutable_validation()->set_fraction(0.2);
    j.mutable_early_stopping()->set_patience(2);
    j.mutable_early_stopping()->set_min_delta(100);
    j.mutable_checkpoint()->set_every_epochs(1);
    j.mutable_checkpoint()->set_keep_last(1);
    j.mutable_checkpoint()->set_keep_best(true);
    return request;
  };
  const Job stopped = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, job(8)).id());
  ASSERT_EQ(stopped.state(), Job::SUCCEEDED) << stopped.message();
  EXPECT_EQ(stopped.summary().epochs(), 3);
  EXPECT_EQ(stopped.summary().stop_reason(), "early_stopped");
  EXPECT_EQ(stopped.summary().best_epoch(), 1);
  // The log line that says why comes after the epoch that decided it, as the terminal reads.
  std::vector<std::string> order;
  for (const JobEvent& e : rpc::StreamAll(*daemon_, stopped.id())) {
    if (e.has_epoch()) order.push_back(absl::StrCat("epoch ", e.epoch().epoch()));
    if (e.has_log() && absl::StartsWith(e.log().text(), "early stopping")) order.push_back("stop");
  }
  EXPECT_THAT(order, ElementsAre("epoch 1", "epoch 2", "epoch 3", "stop"));
  const std::string dir = JobDir(stopped.id());
  EXPECT_THAT(CheckpointFiles(dir), ElementsAre("checkpoint-epoch-3.pt"));
  ASSERT_TRUE(fs::exists(dir + "/checkpoint-best.pt"));

  const Job one = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, job(1)).id());
  ASSERT_EQ(one.state(), Job::SUCCEEDED) << one.message();
  std::string metadata;
  EXPECT_TRUE(
      SameModel(stopped.summary().best_model_path(), dir + "/checkpoint-best.pt", &metadata));
  EXPECT_THAT(metadata, HasSubstr("\nepoch: 1\nstep: 8\nepoch_step: 0\n"));
  EXPECT_TRUE(SameModel(one.summary().model_path(), dir + "/checkpoint-best.pt"))
      << "checkpoint-best.pt does not hold epoch 1's model";

  const Job two = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, job(2)).id());
  ASSERT_EQ(two.state(), Job::SUCCEEDED) << two.message();
  SubmitJobRequest rest = job(8);
  rest.mutable_train_job()->set_resume_from(two.id());
  const Job resumed = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, rest).id());
  ASSERT_EQ(resumed.state(), Job::SUCCEEDED) << resumed.message();
  EXPECT_EQ(resumed.summary().stop_reason(), "early_stopped");
  EXPECT_EQ(resumed.summary().best_epoch(), 1);
  std::vector<int> epochs;
  for (const JobEvent& e : rpc::StreamAll(*daemon_, resumed.id())) {
    if (e.has_epoch()) epochs.push_back(e.epoch().epoch());
  }
  EXPECT_THAT(epochs, ElementsAre(3));
  EXPECT_TRUE(SameRecords(stopped.summary().model_path(), resumed.summary().model_path()));
  // The best epoch lies in the job it resumed from: its best.pt came along.
  ASSERT_EQ(resumed.summary().best_model_path(), JobDir(resumed.id()) + "/best.pt");
  EXPECT_TRUE(
      SameRecords(stopped.summary().best_model_path(), resumed.summary().best_model_path()));
}

// nan_policy skip_step with NaN losses planted at steps 5 and 6 (fault injection): both are
// skipped and counted, the job succeeds, and a job resumed from it counts them too. NaN from step 5
// on: steps 5-7 are skipped (max_skipped_steps 3) and step 8 ends the job DIVERGED. The default
// policy fails at step 5.
TEST_F(CheckpointStepsE2eTest, SkipStepSkipsCountsAndFailsAfterMaxSkippedSteps) {
  const auto job = [](int64_t steps) {
    SubmitJobRequest request = TrainJobRequest(640, 100, 1, 64, "mlp");
    mpsd::v1::TrainJob& j = *request.mutable_train_job();
    j.set_nan_policy("skip_step");
    j.set_max_skipped_steps(3);
    j.mutable_fault_injection()->set_kind("nan_loss");
    j.mutable_fault_injection()->set_at_step(5);
    j.mutable_fault_injection()->set_steps(steps);
    return request;
  };
  SubmitJobRequest checkpointed = job(2);
  checkpointed.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  const Job skipped = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, checkpointed).id());
  ASSERT_EQ(skipped.state(), Job::SUCCEEDED) << skipped.message();
  EXPECT_EQ(skipped.summary().skipped_steps(), 2);
  // Resumed for a second epoch (no NaN in it): the summary counts the whole run's skipped
  // steps, those before the checkpoint too.
  SubmitJobRequest more = job(2);
  more.mutable_train_job()->clear_fault_injection();
  more.mutable_train_job()->set_epochs(2);
  more.mutable_train_job()->set_resume_from(skipped.id());
  const Job resumed = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, more).id());
  ASSERT_EQ(resumed.state(), Job::SUCCEEDED) << resumed.message();
  EXPECT_EQ(resumed.summary().resumed_at_step(), 10);
  EXPECT_EQ(resumed.summary().skipped_steps(), 2);
  std::set<int64_t> skipped_steps;
  int64_t epoch_skipped = -1;
  for (const JobEvent& e : rpc::StreamAll(*daemon_, skipped.id())) {
    if (e.has_step() && e.step().skipped()) skipped_steps.insert(e.step().step());
    if (e.has_epoch()) {
      epoch_skipped = e.epoch().skipped_steps();
      EXPECT_TRUE(std::isfinite(e.epoch().train_loss()));
    }
  }
  EXPECT_THAT(skipped_steps, ElementsAre(5, 6));
  EXPECT_EQ(epoch_skipped, 2);

  const Job failed = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, job(0)).id());
  ASSERT_EQ(failed.state(), Job::FAILED) << failed.message();
  EXPECT_EQ(failed.failure_reason(), Job::DIVERGED);
  EXPECT_THAT(failed.message(), HasSubstr("diverged at step 8 of 10 (epoch 1): training loss nan"));
  EXPECT_THAT(failed.message(), HasSubstr("3 step(s) with a non-finite loss skipped before it"));

  SubmitJobRequest fail = job(2);
  fail.mutable_train_job()->clear_nan_policy();
  fail.mutable_train_job()->clear_max_skipped_steps();
  const Job default_policy = rpc_ok::WaitForEnd(*daemon_, rpc_ok::Submit(*daemon_, fail).id());
  EXPECT_EQ(default_policy.failure_reason(), Job::DIVERGED);
  EXPECT_THAT(default_policy.message(), HasSubstr("diverged at step 5 of 10"));
}

// Bad checkpoint and nan_policy settings fail at submit naming the field.
TEST_F(CheckpointStepsE2eTest, BadSettingsAreRefusedAtSubmitNamingTheField) {
  struct Case {
    std::function<void(mpsd::v1::TrainJob&)> set;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](auto& j) { j.mutable_checkpoint()->set_every_epochs(-1); },
       "train_job.checkpoint.every_epochs: must be >= 0"},
      {[](auto& j) { j.mutable_checkpoint()->set_every_steps(-5); },
       "train_job.checkpoint.every_steps: must be >= 0"},
      {[](auto& j) { j.mutable_checkpoint()->set_keep_last(-1); },
       "train_job.checkpoint.keep_last: must be >= 0"},
      {[](auto& j) {
         j.mutable_checkpoint()->set_every_steps(10);
         j.mutable_checkpoint()->set_keep_last(0);
         j.mutable_checkpoint()->set_keep_best(true);
         j.mutable_dataset()->mutable_validation()->set_fraction(0.2);
         j.set_restart_policy("resume");
       },
       "train_job.checkpoint.keep_last: 0 keeps no checkpoint to resume from"},
      {[](auto& j) {
         j.mutable_checkpoint()->set_every_epochs(1);
         j.mutable_checkpoint()->set_keep_last(0);
       },
       "train_job.checkpoint.keep_last: 0 keeps none of the checkpoints"},
      {[](auto& j) { j.mutable_checkpoint()->set_keep_best(true); },
       "train_job.checkpoint.keep_best: needs a metric to pick the best epoch by"},
      {[](auto& j) { j.set_nan_policy("ignore"); },
       "train_job.nan_policy: unknown policy \"ignore\" (known: fail, skip_step)"},
      {[](auto& j) { j.set_max_skipped_steps(3); },
       "train_job.max_skipped_steps: only with nan_policy: skip_step"},
      {[](auto& j) {
         j.set_nan_policy("skip_step");
         j.set_max_skipped_steps(-1);
       },
       "train_job.max_skipped_steps: must be >= 0"},
      {[](auto& j) {
         j.mutable_fault_injection()->set_kind("nan_loss");
         j.mutable_fault_injection()->set_steps(-1);
       },
       "train_job.fault_injection.steps: must be >= 0"},
  };
  for (const Case& c : cases) {
    SubmitJobRequest request = TrainJobRequest(64, 64, 1, 64, "mlp");
    c.set(*request.mutable_train_job());
    const absl::StatusOr<Job> refused = rpc::Submit(*daemon_, request);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_THAT(refused.status().message(), HasSubstr(c.error));
  }
}

}  // namespace
}  // namespace mpsd::testing
