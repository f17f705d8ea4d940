// Tests of server/grpc/job_service.cc alone: the real service over real gRPC on a unix socket in a
// temp dir, with a real scheduler and job store, and a FakeExecutor instead of mpsd-executor.
#include "server/grpc/job_service.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/job_store.h"
#include "server/core/scheduler.h"
#include "tests/common/temp_dir.h"
#include "tests/server/fake_executor.h"

namespace mpsd::server {
namespace {

using ::mpsd::testing::FakeExecutor;
using ::mpsd::testing::TempDir;
using ::mpsd::v1::Job;
using ::mpsd::v1::JobEvent;
using ::testing::HasSubstr;

mpsd::v1::SubmitJobRequest TrainRequest(const std::string& model = "mlp") {
  return ::mpsd::testing::FakeTrainRequest(0, "", model);
}

// What one StreamEvents call received.
struct Stream {
  std::vector<JobEvent> events;
  grpc::Status status;
};

class JobServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobStore::Options store_options;
    store_options.path = dir_ / "mpsd.db";
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(store_options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create(Scheduler::Options(), store_.get(), &executor_);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = *std::move(scheduler);
    JobService::Options options;
    options.heartbeat_interval = absl::Milliseconds(50);
    service_ = std::make_unique<JobService>(scheduler_.get(), options);
    const std::string address = "unix://" + (dir_ / "mpsd.sock");
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = mpsd::v1::JobService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }

  void TearDown() override { StopDaemon(); }

  // As Server::Shutdown does it: scheduler, event log, streams, then gRPC.
  void StopDaemon() {
    if (server_ == nullptr) return;
    scheduler_->Shutdown();  // a held job is cancelled by it, and becomes INTERRUPTED
    scheduler_->events().Close();
    EXPECT_TRUE(service_->WaitForStreamsToEnd(absl::Seconds(10)));
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
    server_->Wait();
    server_.reset();
  }

  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return context;
  }

  Job Submit(const mpsd::v1::SubmitJobRequest& request) {
    Job job;
    const grpc::Status status = stub_->SubmitJob(Context().get(), request, &job);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return job;
  }

  // Submits a job that holds after `steps` steps and a second one queued behind it, and opens
  // the queued job's stream, whose first event (QUEUED) it reads. Returns the held job's id.
  std::string HoldOneAndFollowTheNext(int steps) {
    executor_.QueueScript(FakeExecutor::Held(steps));
    const Job held = Submit(TrainRequest());
    EXPECT_TRUE(executor_.WaitUntilHeld());
    queued_ = Submit(TrainRequest());
    mpsd::v1::StreamEventsRequest request;
    request.set_job_id(queued_.id());
    follow_context_ = Context();
    follower_ = stub_->StreamEvents(follow_context_.get(), request);
    JobEvent event;
    EXPECT_TRUE(follower_->Read(&event));
    EXPECT_EQ(event.state().state(), Job::QUEUED);
    return held.id();
  }

  Stream ReadStream(const std::string& job_id, int64_t after_seq, bool heartbeats = false) {
    mpsd::v1::StreamEventsRequest request;
    request.set_job_id(job_id);
    request.set_after_seq(after_seq);
    auto context = Context();
    auto reader = stub_->StreamEvents(context.get(), request);
    Stream stream;
    JobEvent event;
    while (reader->Read(&event)) {
      if (event.has_heartbeat() && !heartbeats) continue;
      stream.events.push_back(event);
    }
    stream.status = reader->Finish();
    return stream;
  }

  TempDir dir_{"job_service_test"};
  FakeExecutor executor_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<JobService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<mpsd::v1::JobService::Stub> stub_;
  // HoldOneAndFollowTheNext's queued job and its open stream.
  Job queued_;
  std::unique_ptr<grpc::ClientContext> follow_context_;
  std::unique_ptr<grpc::ClientReader<JobEvent>> follower_;
};

TEST_F(JobServiceTest, SubmitThenStreamToTheEnd) {
  const Job job = Submit(TrainRequest());
  EXPECT_EQ(job.id(), "1");
  EXPECT_EQ(job.state(), Job::QUEUED);
  const Stream stream = ReadStream(job.id(), 0);
  EXPECT_TRUE(stream.status.ok()) << stream.status.error_message();
  ASSERT_EQ(stream.events.size(), 6u);  // QUEUED, RUNNING, 2 steps, summary, SUCCEEDED
  for (size_t i = 0; i < stream.events.size(); ++i) {
    EXPECT_EQ(stream.events[i].seq(), int64_t(i) + 1);
    EXPECT_EQ(stream.events[i].job_id(), job.id());
  }
  EXPECT_EQ(stream.events.back().state().state(), Job::SUCCEEDED);

  Job got;
  mpsd::v1::GetJobRequest get;
  get.set_job_id(job.id());
  ASSERT_TRUE(stub_->GetJob(Context().get(), get, &got).ok());
  EXPECT_EQ(got.state(), Job::SUCCEEDED);
  EXPECT_EQ(got.last_seq(), 6);

  // Resuming after seq 4 replays the rest; after the last event there is nothing more.
  const Stream rest = ReadStream(job.id(), 4);
  EXPECT_TRUE(rest.status.ok());
  ASSERT_EQ(rest.events.size(), 2u);
  EXPECT_EQ(rest.events[0].seq(), 5);
  const Stream none = ReadStream(job.id(), 6);
  EXPECT_TRUE(none.status.ok());
  EXPECT_TRUE(none.events.empty());
}

TEST_F(JobServiceTest, ErrorsCarryTheSchedulersCodes) {
  executor_.FailValidation("nonsense", absl::InvalidArgumentError("train_job.model.name: no"));
  Job job;
  grpc::Status status = stub_->SubmitJob(Context().get(), TrainRequest("nonsense"), &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "train_job.model.name: no");

  mpsd::v1::GetJobRequest get;
  get.set_job_id("42");
  status = stub_->GetJob(Context().get(), get, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("42"));

  const Job done = Submit(TrainRequest());
  EXPECT_TRUE(ReadStream(done.id(), 0).status.ok());
  mpsd::v1::CancelJobRequest cancel;
  cancel.set_job_id(done.id());
  status = stub_->CancelJob(Context().get(), cancel, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  EXPECT_EQ(ReadStream("42", 0).status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ReadStream(done.id(), -1).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const Stream beyond = ReadStream(done.id(), 7);
  EXPECT_EQ(beyond.status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(beyond.status.error_message(), HasSubstr("beyond job 1's last event (seq 6)"));

  mpsd::v1::ListJobsRequest list;
  list.set_page_size(-1);
  mpsd::v1::ListJobsResponse page;
  EXPECT_EQ(stub_->ListJobs(Context().get(), list, &page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, IdleStreamGetsHeartbeatsAndEndsWithTheCancel) {
  // The second job waits behind the held one: its heartbeats carry its place in the queue.
  const std::string held_id = HoldOneAndFollowTheNext(/*steps=*/1);
  const Job& queued = queued_;
  auto& reader = follower_;
  JobEvent event;
  ASSERT_TRUE(reader->Read(&event));  // nothing else happens: a heartbeat, after 50 ms
  ASSERT_TRUE(event.has_heartbeat()) << event.DebugString();
  EXPECT_EQ(event.seq(), 0);
  EXPECT_EQ(event.heartbeat().state(), Job::QUEUED);
  EXPECT_EQ(event.heartbeat().queue_position(), 1);

  mpsd::v1::CancelJobRequest cancel;
  cancel.set_job_id(queued.id());
  Job cancelled;
  ASSERT_TRUE(stub_->CancelJob(Context().get(), cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), Job::CANCELLED);
  JobEvent last;
  while (reader->Read(&event)) last = event;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(last.state().state(), Job::CANCELLED);

  cancel.set_job_id(held_id);
  ASSERT_TRUE(stub_->CancelJob(Context().get(), cancel, &cancelled).ok());
  const Stream running = ReadStream(held_id, 0);
  EXPECT_EQ(running.events.back().state().state(), Job::CANCELLED);
}

TEST_F(JobServiceTest, ShutdownEndsTheStreamOfAJobThatNeverRan) {
  HoldOneAndFollowTheNext(/*steps=*/0);
  auto& reader = follower_;
  JobEvent event;
  StopDaemon();
  while (reader->Read(&event)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("resume with after_seq=1"));
}

TEST_F(JobServiceTest, ListsPagesAndReportsStatus) {
  for (int i = 0; i < 3; ++i) Submit(TrainRequest());
  EXPECT_TRUE(ReadStream("3", 0).status.ok());
  mpsd::v1::ListJobsRequest list;
  list.set_page_size(2);
  mpsd::v1::ListJobsResponse page;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), list, &page).ok());
  ASSERT_EQ(page.jobs_size(), 2);
  EXPECT_EQ(page.jobs(0).id(), "3");
  EXPECT_EQ(page.jobs(1).id(), "2");
  ASSERT_FALSE(page.next_page_token().empty());
  list.set_page_token(page.next_page_token());
  ASSERT_TRUE(stub_->ListJobs(Context().get(), list, &page).ok());
  ASSERT_EQ(page.jobs_size(), 1);
  EXPECT_EQ(page.jobs(0).id(), "1");
  EXPECT_TRUE(page.next_page_token().empty());

  // The server ends a stream (OnDone) just after its client saw the end.
  ASSERT_TRUE(service_->WaitForStreamsToEnd(absl::Seconds(10)));
  mpsd::v1::ServerStatus status;
  ASSERT_TRUE(stub_->GetServerStatus(Context().get(), {}, &status).ok());
  EXPECT_EQ(status.jobs_total(), 3);
  EXPECT_EQ(status.queued_jobs(), 0);
  EXPECT_EQ(status.open_streams(), 0);
  EXPECT_EQ(status.events_stored(), 18);
  if (std::filesystem::exists("/proc/self/statm")) EXPECT_GT(status.rss_bytes(), 0);

  mpsd::v1::DeviceInfo device;
  ASSERT_TRUE(stub_->GetDevice(Context().get(), {}, &device).ok());
  EXPECT_EQ(device.kind(), "fake");
  EXPECT_EQ(device.jobs_run(), 3);
  mpsd::v1::ListModelsResponse models;
  ASSERT_TRUE(stub_->ListModels(Context().get(), {}, &models).ok());
  EXPECT_EQ(models.models(0).name(), "fake");
}

}  // namespace
}  // namespace mpsd::server
