// Tests for client/commands.cc: mpsctl's commands against an in-process fake JobService on a
// temporary unix socket (the real daemon's end-to-end tests live in tests/e2e).
#include "client/commands.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace mpsd::client {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Job "42": a finished TrainJob of 4 steps. Job "7": RUNNING, 5 events stored so far; its stream
// then waits like a live job's until the client goes away.
class FakeJobService final : public v1::JobService::Service {
 public:
  FakeJobService() {
    v1::Job& done = jobs_["42"];
    done.set_id("42");
    done.set_state(v1::Job::SUCCEEDED);
    done.mutable_spec()->mutable_train_job()->mutable_model()->set_name("convnet");
    events_["42"] = TrainEvents("42", 4, v1::Job::SUCCEEDED);
    done.set_last_seq(static_cast<int64_t>(events_["42"].size()));

    v1::Job& running = jobs_["7"];
    running.set_id("7");
    running.set_state(v1::Job::RUNNING);
    running.mutable_spec()->mutable_train_job()->set_epochs(2);
    events_["7"] = TrainEvents("7", 8, v1::Job::SUCCEEDED);
    events_["7"].resize(5);
    running.set_last_seq(5);
  }

  static std::vector<v1::JobEvent> TrainEvents(const std::string& id, int steps,
                                               v1::Job::State end) {
    std::vector<v1::JobEvent> events;
    auto add = [&]() -> v1::JobEvent& {
      v1::JobEvent& e = events.emplace_back();
      e.set_job_id(id);
      e.set_seq(static_cast<int64_t>(events.size()));
      return e;
    };
    add().mutable_state()->set_state(v1::Job::QUEUED);
    add().mutable_state()->set_state(v1::Job::RUNNING);
    for (int i = 1; i <= steps; ++i) {
      v1::StepMetrics& s = *add().mutable_step();
      s.set_epoch(1);
      s.set_step(i);
      s.set_total_steps(steps);
      s.set_loss(0.5f);
    }
    add().mutable_epoch()->set_epoch(1);
    add().mutable_summary()->set_test_accuracy(0.861);
    v1::StateChange& state = *add().mutable_state();
    state.set_state(end);
    if (end == v1::Job::FAILED) {
      state.set_failure_reason(v1::Job::OUT_OF_MEMORY);
      state.set_message("CUDA out of memory");
    }
    return events;
  }

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                         v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    submitted_.push_back(*request);
    if (!submit_status_.ok()) return submit_status_;
    *job = jobs_["42"];
    job->set_state(v1::Job::QUEUED);
    return grpc::Status::OK;
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request->job_id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job \"" + request->job_id() + "\"");
    }
    *job = it->second;
    return grpc::Status::OK;
  }
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* response) override {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, job] : jobs_) *response->add_jobs() = job;
    return grpc::Status::OK;
  }
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                         v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    if (request->job_id() != "7") {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "job 42 already SUCCEEDED");
    }
    *job = jobs_["7"];
    return grpc::Status::OK;
  }
  grpc::Status StreamEvents(grpc::ServerContext* context, const v1::StreamEventsRequest* request,
                            grpc::ServerWriter<v1::JobEvent>* writer) override {
    std::vector<v1::JobEvent> events;
    std::optional<grpc::Status> end;
    {
      absl::MutexLock lock(&mu_);
      events = events_[request->job_id()];
      end = stream_end_;
    }
    for (const v1::JobEvent& e : events) {
      if (e.seq() > request->after_seq()) writer->Write(e);
    }
    if (end) return *end;
    if (events.empty() || !events.back().has_state() ||
        events.back().state().state() <= v1::Job::RUNNING) {
      // A live job: nothing more yet. Wait for the client to hang up (or give up after 10 s so
      // a client that never stops fails the test instead of hanging it).
      const absl::Time give_up = absl::Now() + absl::Seconds(10);
      while (!context->IsCancelled() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "fake: the client never stopped");
    }
    return grpc::Status::OK;
  }
  grpc::Status GetDevice(grpc::ServerContext*, const v1::GetDeviceRequest*,
                         v1::DeviceInfo* device) override {
    device->set_kind("cpu");
    device->set_name("cpu (2 threads)");
    device->add_available("cpu");
    device->set_torch_version("1.13.1");
    device->set_cpu_threads(2);
    return grpc::Status::OK;
  }

  void set_submit_status(grpc::Status s) {
    absl::MutexLock lock(&mu_);
    submit_status_ = std::move(s);
  }
  // Every stream ends with `s` after the stored events, also a live job's.
  void set_stream_end(grpc::Status s) {
    absl::MutexLock lock(&mu_);
    stream_end_ = std::move(s);
  }
  void set_events(const std::string& id, std::vector<v1::JobEvent> events) {
    absl::MutexLock lock(&mu_);
    events_[id] = std::move(events);
  }
  std::vector<v1::SubmitJobRequest> submitted() {
    absl::MutexLock lock(&mu_);
    return submitted_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<v1::JobEvent>> events_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitJobRequest> submitted_ ABSL_GUARDED_BY(mu_);
  grpc::Status submit_status_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> stream_end_ ABSL_GUARDED_BY(mu_);
};

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/mpsctl-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    address_ = "unix://" + dir_ + "/mpsd.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    job_file_ = dir_ + "/job.yaml";
    std::ofstream(job_file_) << "kind: TrainJob\nmodel: {name: convnet}\nbatch_size: 64\n";
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    unlink(job_file_.c_str());
    rmdir(dir_.c_str());
  }

  // Runs `command` on a fresh Commands; out() and err() hold what it printed.
  template <typename F>
  int Run(F command, bool json = false, bool live = false) {
    out_.str("");
    err_.str("");
    CommandOptions options;
    options.server = address_;
    options.json = json;
    options.live = live;
    options.rpc_timeout = absl::Seconds(5);
    return command(*Commands::Connect(options, out_, err_));
  }
  std::string out() const { return out_.str(); }
  std::string err() const { return err_.str(); }

  FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string dir_, address_, job_file_;
  std::ostringstream out_, err_;
};

TEST_F(CommandsTest, SubmitPrintsTheIdAndSendsTheParsedFile) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Submit(job_file_, false); }), kExitOk);
  EXPECT_EQ(out(), "42\n");
  EXPECT_EQ(err(), "");
  ASSERT_EQ(service_.submitted().size(), 1u);
  EXPECT_EQ(service_.submitted()[0].train_job().batch_size(), 64);
}

TEST_F(CommandsTest, SubmitJsonPrintsTheJob) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Submit(job_file_, false); }, /*json=*/true), kExitOk);
  EXPECT_THAT(out(), StartsWith(R"({"id":"42","state":"QUEUED","spec":{"train_job":)"));
}

TEST_F(CommandsTest, SubmitBadFileNeverReachesTheServer) {
  std::ofstream(job_file_) << "kind: TrainJob\nbatch_size: sixty\n";
  EXPECT_EQ(Run([&](Commands& c) { return c.Submit(job_file_, false); }), kExitFailed);
  EXPECT_EQ(err(), job_file_ + ":2:13: batch_size: expected an integer, got \"sixty\"\n");
  EXPECT_TRUE(service_.submitted().empty());
}

TEST_F(CommandsTest, SubmitRejectedByTheServerNamesTheFile) {
  service_.set_submit_status(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                          "train_job.dataset.root: no such directory"));
  EXPECT_EQ(Run([&](Commands& c) { return c.Submit(job_file_, false); }), kExitFailed);
  EXPECT_EQ(err(), "mpsctl: " + job_file_ +
                       ": mpsd rejected the job: train_job.dataset.root: no such directory\n");
}

TEST_F(CommandsTest, SubmitFollowSucceeded) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Submit(job_file_, true); }), kExitOk);
  EXPECT_THAT(out(), StartsWith("job 42 QUEUED\njob 42 RUNNING\n"));
  EXPECT_THAT(out(), HasSubstr("epoch 1/1  step 4/4  loss 0.5000"));
  EXPECT_THAT(out(), HasSubstr("epoch 1: train loss"));
  EXPECT_THAT(out(), HasSubstr("job 42 SUCCEEDED\n  test accuracy 0.8610"));
  EXPECT_EQ(err(), "");
}

TEST_F(CommandsTest, SubmitFollowFailedExitsOne) {
  service_.set_events("42", FakeJobService::TrainEvents("42", 2, v1::Job::FAILED));
  EXPECT_EQ(Run([&](Commands& c) { return c.Submit(job_file_, true); }), kExitFailed);
  EXPECT_THAT(out(), HasSubstr("job 42 FAILED (OUT_OF_MEMORY): CUDA out of memory\n"));
}

TEST_F(CommandsTest, SubmitFollowOnATerminalRedrawsTheProgressLine) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Submit(job_file_, true); }, false, /*live=*/true),
            kExitOk);
  EXPECT_THAT(out(), HasSubstr("\r\x1b[Kepoch 1/1  step 3/4"));
}

TEST_F(CommandsTest, SubmitFollowJsonPrintsOnlyEvents) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Submit(job_file_, true); }, /*json=*/true), kExitOk);
  const std::vector<std::string> lines = absl::StrSplit(absl::StripSuffix(out(), "\n"), '\n');
  ASSERT_EQ(lines.size(), 9u);
  for (const std::string& line : lines) EXPECT_THAT(line, StartsWith(R"({"job_id":"42","seq":)"));
  EXPECT_THAT(lines.back(), HasSubstr(R"("state":{"state":"SUCCEEDED"})"));
}

TEST_F(CommandsTest, LogsWithoutFollowStopsAtTheStoredEvents) {
  // Job 7 is running: the server would keep the stream open; the client stops after seq 5.
  EXPECT_EQ(Run([&](Commands& c) { return c.Logs("7", false, 0); }, /*json=*/true), kExitOk);
  const std::vector<std::string> lines = absl::StrSplit(absl::StripSuffix(out(), "\n"), '\n');
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_THAT(lines.back(), HasSubstr(R"("seq":"5")"));
  EXPECT_EQ(err(), "");
}

TEST_F(CommandsTest, LogsAfterSkipsEarlierEvents) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Logs("7", false, 3); }, /*json=*/true), kExitOk);
  EXPECT_THAT(out(), StartsWith(R"({"job_id":"7","seq":"4")"));
  EXPECT_EQ(Run([&](Commands& c) { return c.Logs("7", false, 5); }), kExitOk);
  EXPECT_EQ(out(), "");
}

TEST_F(CommandsTest, LogsOfAFinishedJobShowsTheSummary) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Logs("42", false, 0); }), kExitOk);
  EXPECT_THAT(out(), HasSubstr("job 42 SUCCEEDED"));
  // Its outcome decides the exit code only when following.
  service_.set_events("42", FakeJobService::TrainEvents("42", 2, v1::Job::FAILED));
  EXPECT_EQ(Run([&](Commands& c) { return c.Logs("42", false, 0); }), kExitOk);
  EXPECT_EQ(Run([&](Commands& c) { return c.Logs("42", true, 0); }), kExitFailed);
}

TEST_F(CommandsTest, LogsUsesTheSpecForTotalEpochs) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Logs("7", false, 0); }), kExitOk);
  EXPECT_THAT(out(), HasSubstr("epoch 1/2  step"));
}

TEST_F(CommandsTest, LostConnectionWhileFollowingSaysHowToResume) {
  service_.set_stream_end(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
  EXPECT_EQ(Run([&](Commands& c) { return c.Logs("7", true, 0); }), kExitUnreachable);
  EXPECT_THAT(err(), HasSubstr("is unavailable: shutting down\n"));
  EXPECT_THAT(err(), HasSubstr("resume with: mpsctl logs 7 --follow --after 5\n"));
}

TEST_F(CommandsTest, StreamThatEndsBeforeTheTerminalEventIsAnError) {
  service_.set_stream_end(grpc::Status::OK);  // job 7's stream ends after seq 5
  EXPECT_EQ(Run([&](Commands& c) { return c.Logs("7", true, 0); }), kExitFailed);
  EXPECT_THAT(err(), HasSubstr("the event stream of job 7 ended before the job did"));
}

TEST_F(CommandsTest, GetShowsTheJob) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Get("42"); }), kExitOk);
  EXPECT_THAT(out(), AllOf(HasSubstr("id          42\n"), HasSubstr("state       SUCCEEDED\n"),
                           HasSubstr("spec:\n  kind: TrainJob\n")));
  EXPECT_EQ(Run([&](Commands& c) { return c.Get("42"); }, /*json=*/true), kExitOk);
  EXPECT_THAT(out(), AllOf(StartsWith(R"({"id":"42")"), HasSubstr(R"("last_seq":"9")")));
}

TEST_F(CommandsTest, ServerErrorsPrintTheServersMessage) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Get("nope"); }), kExitFailed);
  EXPECT_EQ(err(), "mpsctl: no job \"nope\"\n");
  EXPECT_EQ(Run([&](Commands& c) { return c.Cancel("42"); }), kExitFailed);
  EXPECT_EQ(err(), "mpsctl: job 42 already SUCCEEDED\n");
}

TEST_F(CommandsTest, ListPrintsATable) {
  EXPECT_EQ(Run([&](Commands& c) { return c.List(); }), kExitOk);
  EXPECT_THAT(out(), StartsWith("ID  KIND      STATE      MODEL    PROGRESS  AGE\n"));
  EXPECT_THAT(out(), HasSubstr("\n42  TrainJob  SUCCEEDED  convnet  100%      -\n"));
  EXPECT_EQ(Run([&](Commands& c) { return c.List(); }, /*json=*/true), kExitOk);
  EXPECT_THAT(out(), StartsWith(R"({"jobs":[{"id":"42")"));
}

TEST_F(CommandsTest, CancelARunningJob) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Cancel("7"); }), kExitOk);
  EXPECT_EQ(out(), "job 7 stops at its next step (watch it: mpsctl logs 7 --follow)\n");
}

TEST_F(CommandsTest, Device) {
  EXPECT_EQ(Run([&](Commands& c) { return c.Device(); }), kExitOk);
  EXPECT_THAT(out(), StartsWith("device       cpu\nname         cpu (2 threads)\navailable    cpu\n"));
  EXPECT_EQ(Run([&](Commands& c) { return c.Device(); }, /*json=*/true), kExitOk);
  EXPECT_EQ(out(),
            R"json({"kind":"cpu","name":"cpu (2 threads)","available":["cpu"],)json"
            R"json("torch_version":"1.13.1","cpu_threads":2})json"
            "\n");
}

TEST(CommandsUnreachableTest, MissingSocketIsAClearOneLineError) {
  std::ostringstream out, err;
  CommandOptions options;
  options.server = "unix:///tmp/mpsctl-test-missing/mpsd.sock";
  const int code = Commands::Connect(options, out, err)->List();
  EXPECT_EQ(code, kExitUnreachable);
  EXPECT_EQ(err.str(),
            "mpsctl: cannot reach mpsd at unix:///tmp/mpsctl-test-missing/mpsd.sock (No such file "
            "or directory): is the daemon running? (start it with: mpsd --listen "
            "unix:///tmp/mpsctl-test-missing/mpsd.sock)\n");
  EXPECT_EQ(out.str(), "");
}

TEST(CommandsUnreachableTest, EveryCommandReportsIt) {
  std::ostringstream out, err;
  CommandOptions options;
  options.server = "unix:///tmp/mpsctl-test-missing/mpsd.sock";
  auto commands = Commands::Connect(options, out, err);
  EXPECT_EQ(commands->Get("1"), kExitUnreachable);
  EXPECT_EQ(commands->Cancel("1"), kExitUnreachable);
  EXPECT_EQ(commands->Logs("1", true, 0), kExitUnreachable);
  EXPECT_EQ(commands->Device(), kExitUnreachable);
  EXPECT_THAT(err.str(), Not(HasSubstr("mpsctl: failed to connect")));
}

TEST(AddressTest, Normalize) {
  EXPECT_EQ(NormalizeServerAddress("/run/mpsd.sock"), "unix:///run/mpsd.sock");
  EXPECT_EQ(NormalizeServerAddress("./mpsd.sock"), "unix:./mpsd.sock");
  EXPECT_EQ(NormalizeServerAddress("localhost:7070"), "localhost:7070");
  EXPECT_EQ(NormalizeServerAddress("unix:///x"), "unix:///x");
}

}  // namespace
}  // namespace mpsd::client
