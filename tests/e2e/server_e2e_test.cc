// End-to-end tests of the daemon through its gRPC API: a real mpsd process, real Fashion-MNIST
// files, a real unix socket.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/client_context.h>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/status.h"
#include "gtest/gtest.h"
#include "tests/common/files.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;

// 2,000 examples at batch 64: 32 steps (the last batch has 16).
mpsd::v1::SubmitJobRequest SmallTrainJob() {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob* job = request.mutable_train_job();
  job->mutable_model()->set_name("convnet");
  job->mutable_dataset()->set_name("fashion-mnist");
  job->mutable_dataset()->set_root("/usr/share/datasets/fashion-mnist");
  job->mutable_dataset()->set_limit_train(2000);
  job->mutable_dataset()->set_limit_test(500);
  job->set_batch_size(64);
  job->set_epochs(1);
  job->mutable_optimizer()->set_name("adam");
  job->mutable_optimizer()->set_learning_rate(0.001);
  job->set_seed(1);
  job->set_device("cpu");
  return request;
}

class ServerE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start());
  }

  absl::StatusOr<Job> Submit(const mpsd::v1::SubmitJobRequest& request) {
    grpc::ClientContext context;
    Job job;
    grpc::Status status = daemon_->stub().SubmitJob(&context, request, &job);
    if (!status.ok()) return api::FromGrpcStatus(status);
    return job;
  }

  // Reads the whole stream of a job from after_seq until the server ends it.
  std::vector<JobEvent> Stream(const std::string& job_id, int64_t after_seq,
                               grpc::Status* final_status = nullptr) {
    grpc::ClientContext context;
    mpsd::v1::StreamEventsRequest request;
    request.set_job_id(job_id);
    request.set_after_seq(after_seq);
    auto reader = daemon_->stub().StreamEvents(&context, request);
    std::vector<JobEvent> events;
    JobEvent event;
    while (reader->Read(&event)) events.push_back(event);
    grpc::Status status = reader->Finish();
    if (final_status != nullptr) *final_status = status;
    return events;
  }

  grpc::Status Cancel(const std::string& job_id, Job* job) {
    grpc::ClientContext context;
    mpsd::v1::CancelJobRequest request;
    request.set_job_id(job_id);
    return daemon_->stub().CancelJob(&context, request, job);
  }

  grpc::Status Get(const std::string& job_id, Job* job) {
    grpc::ClientContext context;
    mpsd::v1::GetJobRequest request;
    request.set_job_id(job_id);
    return daemon_->stub().GetJob(&context, request, job);
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(ServerE2eTest, TrainJobStreamsEveryStepAndSucceeds) {
  absl::StatusOr<Job> job = Submit(SmallTrainJob());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), Job::QUEUED);
  EXPECT_EQ(job->kind(), Job::TRAIN_JOB);

  grpc::Status status;
  std::vector<JobEvent> events = Stream(job->id(), 0, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(events.empty());

  // seq runs 1..N with no gap, every event names the job.
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(events[i].job_id(), job->id());
  }
  // One step event per step, in order.
  std::vector<float> losses;
  for (const JobEvent& event : events) {
    if (!event.has_step()) continue;
    EXPECT_EQ(event.step().step(), static_cast<int64_t>(losses.size() + 1));
    EXPECT_EQ(event.step().total_steps(), 32);
    EXPECT_GT(event.step().samples_per_second(), 0);
    losses.push_back(event.step().loss());
  }
  ASSERT_EQ(losses.size(), 32u);
  const float first10 = std::accumulate(losses.begin(), losses.begin() + 10, 0.0f);
  const float last10 = std::accumulate(losses.end() - 10, losses.end(), 0.0f);
  EXPECT_LT(last10, first10);

  // States in order: QUEUED, RUNNING, then SUCCEEDED as the very last event.
  std::vector<Job::State> states;
  for (const JobEvent& event : events) {
    if (event.has_state()) states.push_back(event.state().state());
  }
  EXPECT_EQ(states, (std::vector<Job::State>{Job::QUEUED, Job::RUNNING, Job::SUCCEEDED}));
  ASSERT_TRUE(events.back().has_state());

  // The summary carries the test accuracy and memory figures.
  auto summary =
      std::find_if(events.begin(), events.end(), [](const JobEvent& e) { return e.has_summary(); });
  ASSERT_NE(summary, events.end());
  EXPECT_GT(summary->summary().test_accuracy(), 0.6);
  EXPECT_EQ(summary->summary().steps(), 32);

  Job finished;
  ASSERT_TRUE(Get(job->id(), &finished).ok());
  EXPECT_EQ(finished.state(), Job::SUCCEEDED);
  EXPECT_EQ(finished.last_seq(), events.back().seq());
  EXPECT_GT(finished.summary().test_accuracy(), 0.6);

  // Replaying after seq K gives exactly the events after K.
  const int64_t k = 7;
  std::vector<JobEvent> replay = Stream(job->id(), k);
  ASSERT_EQ(replay.size(), events.size() - k);
  for (size_t i = 0; i < replay.size(); ++i) {
    EXPECT_EQ(replay[i].SerializeAsString(), events[i + k].SerializeAsString());
  }
  // After the last event of a finished job there is nothing more to say; a seq the job never
  // reached is out of range rather than waited for.
  EXPECT_TRUE(Stream(job->id(), finished.last_seq()).empty());
  grpc::Status beyond;
  EXPECT_TRUE(Stream(job->id(), finished.last_seq() + 100, &beyond).empty());
  EXPECT_EQ(beyond.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_NE(beyond.error_message().find("after_seq"), std::string::npos) << beyond.error_message();

  // mpsctl resuming at the very end reports how the job ended.
  const std::string last = std::to_string(finished.last_seq());
  CommandResult resumed = RunCommand({MpsctlPath(), "--server", daemon_->address(), "logs",
                                      job->id(), "--follow", "--after", last});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("SUCCEEDED"), std::string::npos) << resumed.out;
}

TEST_F(ServerE2eTest, BadJobIsRejectedAndTheNextJobSucceeds) {
  mpsd::v1::SubmitJobRequest bad = SmallTrainJob();
  bad.mutable_train_job()->mutable_dataset()->set_root(dir_.str() + "/no-such-dir");
  absl::StatusOr<Job> rejected = Submit(bad);
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("dataset.root"), std::string::npos)
      << rejected.status();
  EXPECT_NE(rejected.status().message().find("no-such-dir"), std::string::npos)
      << rejected.status();

  mpsd::v1::SubmitJobRequest zero_batch = SmallTrainJob();
  zero_batch.mutable_train_job()->set_batch_size(0);
  absl::StatusOr<Job> zero = Submit(zero_batch);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("batch_size"), std::string::npos) << zero.status();

  absl::StatusOr<Job> good = Submit(SmallTrainJob());
  ASSERT_TRUE(good.ok()) << good.status();
  std::vector<JobEvent> events = Stream(good->id(), 0);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_state());
  EXPECT_EQ(events.back().state().state(), Job::SUCCEEDED);
}

TEST_F(ServerE2eTest, CorruptDatasetFailsTheJobAndTheDaemonCarriesOn) {
  // A dataset dir whose training images are cut short: found at submit, failed at run time.
  const std::string root = dir_.str() + "/corrupt";
  std::filesystem::create_directories(root);
  for (const char* name :
       {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    std::filesystem::copy_file(std::string("/usr/share/datasets/fashion-mnist/") + name,
                               root + "/" + name);
  }
  WriteFile(root + "/train-images-idx3-ubyte", std::string("\x00\x00\x08\x03", 4) + "short");
  mpsd::v1::SubmitJobRequest request = SmallTrainJob();
  request.mutable_train_job()->mutable_dataset()->set_root(root);
  absl::StatusOr<Job> job = Submit(request);
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<JobEvent> events = Stream(job->id(), 0);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_state());
  EXPECT_EQ(events.back().state().state(), Job::FAILED);
  EXPECT_EQ(events.back().state().failure_reason(), Job::DATASET_ERROR);
  EXPECT_NE(events.back().state().message().find("train-images-idx3-ubyte"), std::string::npos)
      << events.back().state().message();

  absl::StatusOr<Job> good = Submit(SmallTrainJob());
  ASSERT_TRUE(good.ok()) << good.status();
  events = Stream(good->id(), 0);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state().state(), Job::SUCCEEDED);
}

TEST_F(ServerE2eTest, CancelQueuedRunningAndFinishedJobs) {
  mpsd::v1::SubmitJobRequest longer = SmallTrainJob();
  longer.mutable_train_job()->set_epochs(50);
  absl::StatusOr<Job> running = Submit(longer);
  absl::StatusOr<Job> queued = Submit(SmallTrainJob());
  ASSERT_TRUE(running.ok() && queued.ok());

  // A queued job becomes CANCELLED at once and never runs.
  Job cancelled;
  ASSERT_TRUE(Cancel(queued->id(), &cancelled).ok());
  EXPECT_EQ(cancelled.state(), Job::CANCELLED);
  std::vector<JobEvent> queued_events = Stream(queued->id(), 0);
  ASSERT_EQ(queued_events.size(), 2u);
  EXPECT_EQ(queued_events[1].state().state(), Job::CANCELLED);

  // A running job stops at a step boundary once it has started stepping.
  grpc::ClientContext context;
  mpsd::v1::StreamEventsRequest request;
  request.set_job_id(running->id());
  auto reader = daemon_->stub().StreamEvents(&context, request);
  JobEvent event;
  bool asked = false;
  std::vector<JobEvent> events;
  while (reader->Read(&event)) {
    events.push_back(event);
    if (event.has_step() && !asked) {
      Job job;
      ASSERT_TRUE(Cancel(running->id(), &job).ok());
      asked = true;
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_TRUE(asked);
  EXPECT_EQ(events.back().state().state(), Job::CANCELLED);
  int64_t steps = 0;
  for (const JobEvent& e : events) steps += e.has_step();
  EXPECT_LT(steps, 50 * 32);

  // A finished job cannot be cancelled; an unknown one is not found.
  Job job;
  EXPECT_EQ(Cancel(running->id(), &job).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Cancel("999", &job).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Get("999", &job).error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::Status status;
  Stream("999", 0, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerE2eTest, JobsSurviveARestart) {
  absl::StatusOr<Job> done = Submit(SmallTrainJob());
  ASSERT_TRUE(done.ok());
  std::vector<JobEvent> events = Stream(done->id(), 0);
  ASSERT_EQ(events.back().state().state(), Job::SUCCEEDED);

  const int status = daemon_->Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_NO_FATAL_FAILURE(daemon_->Start());

  Job job;
  ASSERT_TRUE(Get(done->id(), &job).ok());
  EXPECT_EQ(job.state(), Job::SUCCEEDED);
  std::vector<JobEvent> replay = Stream(done->id(), 0);
  ASSERT_EQ(replay.size(), events.size());
  EXPECT_EQ(replay.back().SerializeAsString(), events.back().SerializeAsString());
  // Ids are not reused after a restart.
  absl::StatusOr<Job> next = Submit(SmallTrainJob());
  ASSERT_TRUE(next.ok());
  EXPECT_NE(next->id(), done->id());
}

TEST_F(ServerE2eTest, SigtermEndsEveryStreamAndKeepsQueuedJobs) {
  mpsd::v1::SubmitJobRequest longer = SmallTrainJob();
  longer.mutable_train_job()->set_epochs(50);
  absl::StatusOr<Job> running = Submit(longer);
  absl::StatusOr<Job> queued = Submit(SmallTrainJob());
  ASSERT_TRUE(running.ok() && queued.ok());

  // Follow both; once the first job steps, stop the daemon.
  grpc::Status queued_status;
  std::vector<JobEvent> queued_events;
  std::thread follower([&] { queued_events = Stream(queued->id(), 0, &queued_status); });
  grpc::ClientContext context;
  mpsd::v1::StreamEventsRequest request;
  request.set_job_id(running->id());
  auto reader = daemon_->stub().StreamEvents(&context, request);
  std::vector<JobEvent> events;
  JobEvent event;
  absl::Time stop_sent;
  int exit_status = -1;
  std::thread stopper;
  while (reader->Read(&event)) {
    events.push_back(event);
    if (event.has_step() && !stopper.joinable()) {
      stop_sent = absl::Now();
      stopper = std::thread([&] { exit_status = daemon_->Stop(SIGTERM); });
    }
  }
  EXPECT_TRUE(reader->Finish().ok());
  follower.join();
  ASSERT_TRUE(stopper.joinable());
  stopper.join();
  const absl::Duration exit_time = absl::Now() - stop_sent;
  std::printf("time to exit on SIGTERM during a job: %.0f ms\n",
              absl::ToDoubleMilliseconds(exit_time));
  EXPECT_TRUE(WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 0) << exit_status;
  EXPECT_LT(exit_time, absl::Seconds(10));

  // The running job's stream ends with its terminal state; the queued job's stream says why.
  ASSERT_TRUE(events.back().has_state());
  EXPECT_EQ(events.back().state().state(), Job::INTERRUPTED);
  EXPECT_EQ(queued_status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(queued_status.error_message().find("after_seq=1"), std::string::npos)
      << queued_status.error_message();

  // After a restart the interrupted job says so and the queued job runs.
  ASSERT_NO_FATAL_FAILURE(daemon_->Start());
  Job job;
  ASSERT_TRUE(Get(running->id(), &job).ok());
  EXPECT_EQ(job.state(), Job::INTERRUPTED);
  std::vector<JobEvent> rest = Stream(queued->id(), queued_events.back().seq());
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.front().seq(), queued_events.back().seq() + 1);
  EXPECT_EQ(rest.back().state().state(), Job::SUCCEEDED);
}

TEST_F(ServerE2eTest, SocketIsPrivate) {
  struct stat info {};
  ASSERT_EQ(stat((dir_.str() + "/mpsd.sock").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600);
}

// A fresh user's pass: SIGUSR1 (a log-rotation script meant for another daemon) killed mpsd
// and its running job. SIGUSR1 and SIGUSR2 are logged and ignored; SIGTERM still stops it.
TEST_F(ServerE2eTest, SigusrIsLoggedAndIgnored) {
  mpsd::v1::SubmitJobRequest request = TrainJobRequest(512, 64, 1, 64, "mlp");
  absl::StatusOr<Job> job = rpc::Submit(*daemon_, request);
  ASSERT_TRUE(job.ok()) << job.status();
  for (int sig : {SIGUSR1, SIGUSR2, SIGUSR1}) ASSERT_EQ(kill(daemon_->pid(), sig), 0);
  absl::StatusOr<Job> done = rpc::WaitForEnd(*daemon_, job->id());
  ASSERT_TRUE(done.ok()) << "mpsd died on SIGUSR: " << done.status();
  EXPECT_EQ(done->state(), Job::SUCCEEDED) << done->message();
  const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(ReadFile(daemon_->log_path()).find("received SIGUSR2 and ignored it"),
            std::string::npos);
}

TEST(ServerStartTest, RefusesNonLoopbackTcpAndASecondDaemonOnOneStateDir) {
  TempDir dir;
  CommandResult tcp =
      RunCommand({MpsdPath(), "--listen", "0.0.0.0:50051", "--state-dir", dir.str() + "/state"});
  EXPECT_NE(tcp.exit_code, 0);
  EXPECT_NE(tcp.err.find("loopback"), std::string::npos) << tcp.err;

  Daemon first(dir.str() + "/state", dir.str() + "/a.sock");
  ASSERT_NO_FATAL_FAILURE(first.Start());
  CommandResult second = RunCommand({MpsdPath(), "--listen", "unix://" + dir.str() + "/b.sock",
                                     "--state-dir", dir.str() + "/state"});
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find("another mpsd"), std::string::npos) << second.err;
}

// gRPC's default SO_REUSEPORT let a second daemon listen on the first one's TCP port, and the
// kernel then split connections between them (a fresh user's pass: 4 of 6 calls reached the
// other daemon and were refused its token).
TEST(ServerStartTest, RefusesATcpPortAnotherDaemonListensOn) {
  TempDir dir;
  const std::string tcp = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  Daemon first(dir.str() + "/a", dir.str() + "/a.sock");
  ASSERT_NO_FATAL_FAILURE(first.Start({"--listen", tcp}));
  CommandResult second = RunCommandWithin(
      {MpsdPath(), "--listen", tcp, "--state-dir", dir.str() + "/b"}, absl::Seconds(30));
  EXPECT_NE(second.exit_code, 0) << "a second mpsd started on " << tcp;
  EXPECT_NE(second.err.find("cannot listen"), std::string::npos) << second.err;
}

}  // namespace
}  // namespace mpsd::testing
