// End-to-end tests of issue 5 (durable jobs) against real mpsd processes: restart after SIGKILL,
// SIGTERM with a stream nobody reads, resuming streams, subscriptions that leave nothing
// behind, heartbeats, the queue (priority, max_queued, request_id) and ListJobs paging.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;
using mpsd::v1::ListJobsRequest;
using mpsd::v1::SubmitJobRequest;

// 1 step: for jobs that only need to run, or to wait in the queue.
SubmitJobRequest TinyJob(int32_t priority = 0) {
  SubmitJobRequest request = TrainJobRequest(64, 64, 1, 64);
  request.set_priority(priority);
  return request;
}

// 5 steps an epoch for 500 epochs: RUNNING, with step events, until cancelled.
SubmitJobRequest LongJob() { return TrainJobRequest(320, 64, 500, 64); }

// `steps` steps of 4 examples through the MLP: many small events, fast (about 100 a second on
// a loaded 2-core machine).
SubmitJobRequest FastJob(int64_t steps) { return TrainJobRequest(steps * 4, 64, 1, 4, "mlp"); }

absl::Time ToTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

std::vector<Job::State> States(const std::vector<JobEvent>& events) {
  std::vector<Job::State> states;
  for (const JobEvent& event : events) {
    if (event.has_state()) states.push_back(event.state().state());
  }
  return states;
}

// Every event's seq, in order, is 1, 2, 3, … (no gap, no duplicate).
void ExpectSeqsFromOne(const std::vector<JobEvent>& events) {
  for (size_t i = 0; i < events.size(); ++i) {
    ASSERT_EQ(events[i].seq(), static_cast<int64_t>(i + 1)) << "at index " << i;
  }
}

std::vector<std::string> Ids(const mpsd::v1::ListJobsResponse& response) {
  std::vector<std::string> ids;
  for (const Job& job : response.jobs()) ids.push_back(job.id());
  return ids;
}

class DurableE2eTest : public ::testing::Test {
 protected:
  // Starts mpsd with these config file lines (YAML; empty = defaults).
  void StartDaemon(const std::string& config = "") {
    config_path_ = dir_.str() + "/mpsd.yaml";
    WriteFile(config_path_, config);
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start({"--config", config_path_}));
  }
  // Starts it again on the same state dir and config, after Stop().
  void Restart() { ASSERT_NO_FATAL_FAILURE(daemon_->Start({"--config", config_path_})); }

  // Every test's daemon must stop cleanly on SIGTERM: a stream left behind would hold it.
  void TearDown() override {
    if (daemon_ == nullptr || daemon_->pid() <= 0) return;
    const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  // The calls on this test's daemon (tests/e2e/daemon.h, rpc_ok).
  Job Submit(const SubmitJobRequest& request) { return rpc_ok::Submit(*daemon_, request); }
  Job Get(const std::string& id) { return rpc_ok::Get(*daemon_, id); }
  Job WaitForEnd(const std::string& id) { return rpc_ok::WaitForEnd(*daemon_, id); }
  // Waits until the job runs and has reported at least `steps` steps.
  void WaitForSteps(const std::string& id, int64_t steps) {
    ASSERT_TRUE(WaitUntil([&] {
      const Job job = Get(id);
      return job.state() == Job::RUNNING && job.last_step().step() >= steps;
    })) << "job "
        << id << " did not reach step " << steps;
  }
  mpsd::v1::ServerStatus Status() {
    absl::StatusOr<mpsd::v1::ServerStatus> status = rpc::Status(*daemon_);
    EXPECT_TRUE(status.ok()) << status.status();
    return status.value_or(mpsd::v1::ServerStatus());
  }
  mpsd::v1::ListJobsResponse List(const ListJobsRequest& request) {
    absl::StatusOr<mpsd::v1::ListJobsResponse> response = rpc::List(*daemon_, request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.value_or(mpsd::v1::ListJobsResponse());
  }

  TempDir dir_;
  std::string config_path_;
  std::unique_ptr<Daemon> daemon_;
};

// ---------------------------------------------------------------------------------------------
// Restart and shutdown.

TEST_F(DurableE2eTest, AfterSigkillEveryJobResolvesWithAnExplicitState) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const Job done = Submit(TinyJob());
  ASSERT_EQ(WaitForEnd(done.id()).state(), Job::SUCCEEDED);
  const Job running = Submit(LongJob());
  ASSERT_NO_FATAL_FAILURE(WaitForSteps(running.id(), 3));
  // Queued behind it: runs second, first, third (priority, then submission order).
  const Job second = Submit(TinyJob(0));
  const Job first = Submit(TinyJob(5));
  const Job third = Submit(TinyJob(0));
  const Job cancelled = Submit(TinyJob());
  ASSERT_TRUE(rpc::Cancel(*daemon_, cancelled.id()).ok());
  ASSERT_NO_FATAL_FAILURE(WaitForSteps(running.id(), 10));
  const int64_t done_seq = Get(done.id()).last_seq();

  const int status = daemon_->Stop(SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  const absl::Time restarted = absl::Now();
  ASSERT_NO_FATAL_FAILURE(Restart());

  for (const Job* job : {&done, &running, &first, &second, &third, &cancelled}) {
    EXPECT_NE(Get(job->id()).state(), Job::STATE_UNSPECIFIED) << "job " << job->id();
  }
  EXPECT_EQ(Get(done.id()).state(), Job::SUCCEEDED);
  EXPECT_EQ(Get(done.id()).last_seq(), done_seq);
  EXPECT_EQ(Get(cancelled.id()).state(), Job::CANCELLED);

  // The running job is INTERRUPTED with its last stored step, which its events agree with.
  const Job interrupted = Get(running.id());
  EXPECT_EQ(interrupted.state(), Job::INTERRUPTED);
  EXPECT_GE(interrupted.last_step().step(), 10);
  EXPECT_TRUE(absl::StrContains(interrupted.message(),
                                absl::StrCat("last step ", interrupted.last_step().step())))
      << interrupted.message();
  std::vector<JobEvent> events = rpc::StreamAll(*daemon_, running.id());
  ASSERT_NO_FATAL_FAILURE(ExpectSeqsFromOne(events));
  ASSERT_EQ(events.back().state().state(), Job::INTERRUPTED);
  int64_t last_step = 0;
  for (const JobEvent& e : events) last_step = e.has_step() ? e.step().step() : last_step;
  EXPECT_EQ(last_step, interrupted.last_step().step());

  // The queued jobs were still queued: they run after the restart, in their order.
  std::vector<std::pair<absl::Time, std::string>> starts;
  for (const Job* job : {&first, &second, &third}) {
    const Job ended = WaitForEnd(job->id());
    EXPECT_EQ(ended.state(), Job::SUCCEEDED) << "job " << job->id();
    EXPECT_GT(ToTime(ended.started_at()), restarted) << "job " << job->id();
    events = rpc::StreamAll(*daemon_, job->id());
    ASSERT_NO_FATAL_FAILURE(ExpectSeqsFromOne(events));
    EXPECT_EQ(States(events), (std::vector<Job::State>{Job::QUEUED, Job::RUNNING, Job::SUCCEEDED}));
    starts.emplace_back(ToTime(ended.started_at()), job->id());
  }
  std::sort(starts.begin(), starts.end());
  EXPECT_EQ(starts[0].second, first.id());
  EXPECT_EQ(starts[1].second, second.id());
  EXPECT_EQ(starts[2].second, third.id());
}

TEST_F(DurableE2eTest, SigtermWithAStreamNobodyReadsExitsWithinTheGrace) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("shutdown_grace_s: 2\n"));
  const Job job = Submit(FastJob(50000));
  ASSERT_NO_FATAL_FAILURE(WaitForSteps(job.id(), 1));

  // A stream on its own connection whose Read is never called. Without BDP probing the
  // connection keeps HTTP/2's 64 KiB stream window, which 1,500 step events (~100 bytes
  // each) overfill.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto channel =
      grpc::CreateCustomChannel(daemon_->address(), grpc::InsecureChannelCredentials(), args);
  auto stub = mpsd::v1::JobService::NewStub(channel);
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  mpsd::v1::StreamEventsRequest request;
  request.set_job_id(job.id());
  auto never_read = stub->StreamEvents(context.get(), request);
  ASSERT_NO_FATAL_FAILURE(WaitForSteps(job.id(), 1500));
  EXPECT_EQ(Status().open_streams(), 1);

  const absl::Time sent = absl::Now();
  const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
  const absl::Duration exit_time = absl::Now() - sent;
  std::printf("time to exit on SIGTERM with a stream nobody reads (grace 2 s): %.0f ms\n",
              absl::ToDoubleMilliseconds(exit_time));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(exit_time, absl::Seconds(2 + 15));  // the grace, plus a loaded machine's slack
  // The stream was indeed stuck, and the grace is what ended it.
  std::ifstream log_file(daemon_->log_path());
  const std::string log((std::istreambuf_iterator<char>(log_file)),
                        std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(log, "streams still open after 2 s")) << log;
  context->TryCancel();
  never_read->Finish();

  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_EQ(Get(job.id()).state(), Job::INTERRUPTED);
}

// ---------------------------------------------------------------------------------------------
// Streams.

TEST_F(DurableE2eTest, ReconnectingWithAfterSeqMissesNothingAndRepeatsNothing) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const Job job = Submit(FastJob(1000));
  std::vector<JobEvent> seen;
  int connections = 0;
  // Each connection reads a different number of events, then drops the stream.
  for (bool ended = false; !ended && connections < 10000; ++connections) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    mpsd::v1::StreamEventsRequest request;
    request.set_job_id(job.id());
    request.set_after_seq(seen.empty() ? 0 : seen.back().seq());
    auto reader = daemon_->stub().StreamEvents(&context, request);
    JobEvent event;
    for (int read = 0; read < 1 + connections * 37 % 101;) {
      if (!reader->Read(&event)) {
        ended = true;
        break;
      }
      if (event.has_heartbeat()) continue;
      seen.push_back(event);
      ++read;
    }
    context.TryCancel();
    reader->Finish();
  }
  ASSERT_NO_FATAL_FAILURE(ExpectSeqsFromOne(seen));
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().state().state(), Job::SUCCEEDED);
  const std::vector<JobEvent> stored = rpc::StreamAll(*daemon_, job.id());
  ASSERT_EQ(seen.size(), stored.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].SerializeAsString(), stored[i].SerializeAsString()) << "seq " << i + 1;
  }
  std::printf("followed %zu events over %d connections\n", seen.size(), connections);
  EXPECT_GT(connections, 10);
}

TEST_F(DurableE2eTest, AThousandSubscribeAndCancelLoopsLeaveNoSubscriptionBehind) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const Job running = Submit(LongJob());
  const Job queued = Submit(TinyJob());
  ASSERT_NO_FATAL_FAILURE(WaitForSteps(running.id(), 1));
  const int64_t rss_before = Status().rss_bytes();

  const absl::Time start = absl::Now();
  for (int i = 0; i < 1000; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    mpsd::v1::StreamEventsRequest request;
    request.set_job_id(i % 2 == 0 ? running.id() : queued.id());
    request.set_after_seq(i % 4 < 2 ? 0 : 1);  // 1: the queued job's stream has nothing yet
    auto reader = daemon_->stub().StreamEvents(&context, request);
    JobEvent event;
    // Half read events first, so the daemon surely has the stream: cancelled mid-replay (the
    // running job) or while waiting for more (the queued one). The rest cancel at once.
    if (request.after_seq() == 0) ASSERT_TRUE(reader->Read(&event));
    for (int more = i % 5; more > 0 && i % 2 == 0 && request.after_seq() == 0; --more) {
      ASSERT_TRUE(reader->Read(&event));
    }
    context.TryCancel();
    reader->Finish();
  }
  const absl::Duration took = absl::Now() - start;

  mpsd::v1::ServerStatus status;
  const bool drained = WaitUntil(
      [&] {
        status = Status();
        return status.open_streams() == 0 && status.event_watches() == 0;
      },
      absl::Seconds(30));
  std::printf(
      "1000 subscribe-and-cancel loops: %.0f ms; open streams after: %d, watches: %d; "
      "daemon RSS %.1f -> %.1f MiB\n",
      absl::ToDoubleMilliseconds(took), status.open_streams(), status.event_watches(),
      rss_before / 1048576.0, status.rss_bytes() / 1048576.0);
  EXPECT_TRUE(drained) << "open_streams " << status.open_streams() << ", event_watches "
                       << status.event_watches();

  // The daemon still serves streams.
  ASSERT_TRUE(rpc::Cancel(*daemon_, running.id()).ok());
  const std::vector<JobEvent> events = rpc::StreamAll(*daemon_, running.id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state().state(), Job::CANCELLED);
}

TEST_F(DurableE2eTest, HeartbeatsOnAnIdleStreamCarryTheQueuePositionAndAreNotStored) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("heartbeat_interval_s: 0.3\n"));
  const Job running = Submit(LongJob());
  const Job ahead = Submit(TinyJob());
  const Job job = Submit(TinyJob());

  grpc::ClientContext context;  // a deadline, so that missing heartbeats fail, not hang
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  mpsd::v1::StreamEventsRequest request;
  request.set_job_id(job.id());
  auto reader = daemon_->stub().StreamEvents(&context, request);
  JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.seq(), 1);
  EXPECT_EQ(event.state().state(), Job::QUEUED);

  // Heartbeats: seq 0, the job's id, QUEUED at position 2 (behind `ahead`).
  absl::Time last = absl::Now();
  std::vector<absl::Duration> gaps;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(reader->Read(&event));
    ASSERT_TRUE(event.has_heartbeat()) << event.ShortDebugString();
    gaps.push_back(absl::Now() - last);
    last = absl::Now();
    EXPECT_EQ(event.seq(), 0);
    EXPECT_EQ(event.job_id(), job.id());
    EXPECT_EQ(event.heartbeat().state(), Job::QUEUED);
    EXPECT_EQ(event.heartbeat().queue_position(), 2);
  }
  for (absl::Duration gap : gaps) EXPECT_GT(gap, absl::Milliseconds(200));  // not a busy loop

  // The job ahead leaves the queue: the next heartbeats say 1.
  ASSERT_TRUE(rpc::Cancel(*daemon_, ahead.id()).ok());
  int position = 2;
  for (int i = 0; i < 20 && position != 1; ++i) {
    ASSERT_TRUE(reader->Read(&event));
    ASSERT_TRUE(event.has_heartbeat());
    position = event.heartbeat().queue_position();
  }
  EXPECT_EQ(position, 1);

  // Its end still comes through, with the next stored seq; heartbeats were never stored.
  ASSERT_TRUE(rpc::Cancel(*daemon_, job.id()).ok());
  do {
    ASSERT_TRUE(reader->Read(&event));
  } while (event.has_heartbeat());
  EXPECT_EQ(event.seq(), 2);
  EXPECT_EQ(event.state().state(), Job::CANCELLED);
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(Get(job.id()).last_seq(), 2);
  EXPECT_EQ(rpc::StreamAll(*daemon_, job.id()).size(), 2u);
  ASSERT_TRUE(rpc::Cancel(*daemon_, running.id()).ok());
}

// ---------------------------------------------------------------------------------------------
// The queue.

TEST_F(DurableE2eTest, QueueFullIsResourceExhaustedWithTheLimit) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("max_queued: 2\n"));
  const Job running = Submit(LongJob());
  ASSERT_NO_FATAL_FAILURE(WaitForSteps(running.id(), 1));
  SubmitJobRequest with_id = TinyJob();
  with_id.set_request_id("first");
  const Job first = Submit(with_id);
  const Job second = Submit(TinyJob());

  absl::StatusOr<Job> refused = rpc::Submit(*daemon_, TinyJob());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(), "queue full (2)");
  // A retry of a submit that went through still gets its job.
  absl::StatusOr<Job> retried = rpc::Submit(*daemon_, with_id);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->id(), first.id());

  // A cancel makes room.
  ASSERT_TRUE(rpc::Cancel(*daemon_, first.id()).ok());
  absl::StatusOr<Job> third = rpc::Submit(*daemon_, TinyJob());
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(Status().queued_jobs(), 2);
  ASSERT_TRUE(rpc::Cancel(*daemon_, running.id()).ok());
  EXPECT_EQ(WaitForEnd(second.id()).state(), Job::SUCCEEDED);
  EXPECT_EQ(WaitForEnd(third->id()).state(), Job::SUCCEEDED);
}

TEST_F(DurableE2eTest, HigherPriorityRunsFirstAndEqualPrioritiesInSubmissionOrder) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const Job running = Submit(LongJob());
  ASSERT_NO_FATAL_FAILURE(WaitForSteps(running.id(), 1));
  const Job low = Submit(TinyJob(1));
  const Job high = Submit(TinyJob(10));
  const Job mid = Submit(TinyJob(5));
  const Job mid2 = Submit(TinyJob(5));
  const Job unset = Submit(TinyJob(0));
  const Job negative = Submit(TinyJob(-3));
  const mpsd::v1::ServerStatus status = Status();
  EXPECT_EQ(status.queued_jobs(), 6);
  EXPECT_EQ(status.running_job_id(), running.id());

  ASSERT_TRUE(rpc::Cancel(*daemon_, running.id()).ok());
  std::vector<std::pair<absl::Time, std::string>> starts;
  for (const Job* job : {&low, &high, &mid, &mid2, &unset, &negative}) {
    const Job ended = WaitForEnd(job->id());
    EXPECT_EQ(ended.state(), Job::SUCCEEDED) << "job " << job->id();
    starts.emplace_back(ToTime(ended.started_at()), job->id());
  }
  std::sort(starts.begin(), starts.end());
  std::vector<std::string> order;
  for (const auto& [time, id] : starts) order.push_back(id);
  EXPECT_EQ(order, (std::vector<std::string>{high.id(), mid.id(), mid2.id(), low.id(), unset.id(),
                                             negative.id()}));
}

TEST_F(DurableE2eTest, RequestIdMakesSubmitIdempotentAlsoAfterARestart) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  SubmitJobRequest request = TinyJob(3);
  request.set_request_id("nightly-2024-05-01");
  const Job job = Submit(request);
  const Job again = Submit(request);
  EXPECT_EQ(again.id(), job.id());

  // Concurrent retries of one request create one job.
  SubmitJobRequest burst = TinyJob();
  burst.set_request_id("burst");
  std::vector<std::string> ids(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ids.size(); ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<Job> submitted = rpc::Submit(*daemon_, burst);
      ids[i] = submitted.ok() ? submitted->id() : submitted.status().ToString();
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 1u) << ids[0];
  const int jobs = List(ListJobsRequest()).jobs_size();
  EXPECT_EQ(jobs, 2);

  // The same request_id with another request is refused, naming the job it belongs to.
  SubmitJobRequest changed = request;
  changed.mutable_train_job()->set_epochs(2);
  absl::StatusOr<Job> refused = rpc::Submit(*daemon_, changed);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StartsWith(refused.status().message(), "request_id: ")) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "job " + job.id())) << refused.status();
  changed = request;
  changed.set_priority(4);
  EXPECT_EQ(rpc::Submit(*daemon_, changed).status().code(), absl::StatusCode::kAlreadyExists);
  SubmitJobRequest too_long = TinyJob();
  too_long.set_request_id(std::string(129, 'x'));
  absl::StatusOr<Job> invalid = rpc::Submit(*daemon_, too_long);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(invalid.status().message(), "request_id: ")) << invalid.status();

  // After a kill and a restart the ids still lead to the same jobs.
  WaitForEnd(job.id());
  daemon_->Stop(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_EQ(Submit(request).id(), job.id());
  EXPECT_EQ(Submit(burst).id(), ids[0]);
  EXPECT_EQ(List(ListJobsRequest()).jobs_size(), jobs);
  EXPECT_EQ(Get(job.id()).state(), Job::SUCCEEDED);
}

// ---------------------------------------------------------------------------------------------
// ListJobs.

TEST_F(DurableE2eTest, ListJobsFiltersByStateAndKindAndPagesNewestFirst) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const Job running = Submit(LongJob());
  ASSERT_NO_FATAL_FAILURE(WaitForSteps(running.id(), 1));
  std::vector<Job> queued;
  for (int i = 0; i < 5; ++i) queued.push_back(Submit(TinyJob()));
  ASSERT_TRUE(rpc::Cancel(*daemon_, queued[1].id()).ok());
  ASSERT_TRUE(rpc::Cancel(*daemon_, queued[3].id()).ok());

  ListJobsRequest request;
  request.add_states(Job::QUEUED);
  EXPECT_EQ(Ids(List(request)),
            (std::vector<std::string>{queued[4].id(), queued[2].id(), queued[0].id()}));
  request.add_states(Job::CANCELLED);
  EXPECT_EQ(List(request).jobs_size(), 5);
  request.clear_states();
  request.add_states(Job::RUNNING);
  EXPECT_EQ(Ids(List(request)), std::vector<std::string>{running.id()});
  request.clear_states();
  request.set_kind(Job::TRAIN_JOB);
  EXPECT_EQ(List(request).jobs_size(), 6);
  request.set_kind(Job::BENCH_JOB);
  EXPECT_EQ(List(request).jobs_size(), 0);
  EXPECT_TRUE(List(request).next_page_token().empty());

  // Pages of 2 walk the same list as one page; a job submitted meanwhile is on none of them.
  const std::vector<std::string> all = Ids(List(ListJobsRequest()));
  ASSERT_EQ(all.size(), 6u);
  std::vector<std::string> paged;
  ListJobsRequest page_request;
  page_request.set_page_size(2);
  int pages = 0;
  do {
    const mpsd::v1::ListJobsResponse page = List(page_request);
    ASSERT_LE(page.jobs_size(), 2);
    for (const Job& job : page.jobs()) paged.push_back(job.id());
    page_request.set_page_token(page.next_page_token());
    if (++pages == 1) Submit(TinyJob());
  } while (!page_request.page_token().empty() && pages < 10);
  EXPECT_EQ(paged, all);
  EXPECT_EQ(pages, 3);

  // Filtered paging; a token is only good for the filter it was issued for.
  ListJobsRequest cancelled;
  cancelled.add_states(Job::CANCELLED);
  cancelled.set_page_size(1);
  const mpsd::v1::ListJobsResponse first_page = List(cancelled);
  EXPECT_EQ(Ids(first_page), std::vector<std::string>{queued[3].id()});
  cancelled.set_page_token(first_page.next_page_token());
  const mpsd::v1::ListJobsResponse second_page = List(cancelled);
  EXPECT_EQ(Ids(second_page), std::vector<std::string>{queued[1].id()});
  EXPECT_TRUE(second_page.next_page_token().empty());
  ListJobsRequest other_filter;
  other_filter.set_page_token(first_page.next_page_token());
  absl::StatusOr<mpsd::v1::ListJobsResponse> refused = rpc::List(*daemon_, other_filter);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(refused.status().message(), "page_token: ")) << refused.status();
  ListJobsRequest garbage;
  garbage.set_page_token("not a token");
  EXPECT_EQ(rpc::List(*daemon_, garbage).status().code(), absl::StatusCode::kInvalidArgument);
  ListJobsRequest negative;
  negative.set_page_size(-1);
  refused = rpc::List(*daemon_, negative);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(refused.status().message(), "page_size: ")) << refused.status();
  ListJobsRequest huge;
  huge.set_page_size(1000000);
  EXPECT_EQ(List(huge).jobs_size(), 7);

  ASSERT_TRUE(rpc::Cancel(*daemon_, running.id()).ok());
}

}  // namespace
}  // namespace mpsd::testing
