// End-to-end tests of what reaches mpsd from elsewhere (issue 12, the HTTP side): the HTTP
// listener (/healthz, /metrics parsed by Prometheus' own Python parser), gRPC health while the
// executor is killed and restarted, reflection from a client without the proto, artifacts over
// the API and mpsctl, and a followed stream that survives a daemon restart. Real mpsd
// processes, real sockets on 127.0.0.1, real files.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The port of the daemon's HTTP listener, from its log line "... on http://127.0.0.1:PORT".
int HttpPort(const Daemon& daemon) {
  int port = 0;
  WaitUntil(
      [&] {
        std::smatch match;
        const std::string log = ReadAll(daemon.log_path());
        static const std::regex kLine("/healthz on https?://127\\.0\\.0\\.1:([0-9]+)");
        if (!std::regex_search(log, match, kLine)) return false;
        return absl::SimpleAtoi(match[1].str(), &port);
      },
      absl::Seconds(30));
  return port;
}

// Prometheus' text format, parsed by the Prometheus Python client's parser
// (prometheus_client.parser): "name{label="value",...}" (labels sorted) -> value.
std::map<std::string, double> ParseMetrics(const std::string& text) {
  TempDir dir;
  const std::string path = dir.str() + "/metrics.txt";
  WriteFile(path, text);
  const CommandResult parsed =
      RunCommand({"/usr/bin/python3", SourcePath("tests/e2e/parse_metrics.py"), path});
  EXPECT_EQ(parsed.exit_code, 0) << parsed.err;
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(parsed.out, '\n', absl::SkipEmpty())) {
    const size_t space = line.rfind(' ');
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &value)) << line;
    samples[std::string(line.substr(0, space))] = value;
  }
  return samples;
}

// A small TrainJob: 2 epochs of 640 examples at batch 64 (20 steps), a checkpoint every
// epoch, the model saved at the end.
mpsd::v1::SubmitJobRequest CheckpointedJob(int epochs = 2, int64_t limit_train = 640) {
  mpsd::v1::SubmitJobRequest request = TrainJobRequest(limit_train, 200, epochs, 64, "mlp");
  request.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  return request;
}

// Runs argv in the background, stdout and stderr to files; Wait() returns the exit code.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::string& out_path,
             const std::string& err_path) {
    pid_ = fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec: the test has threads.
      dup2(open("/dev/null", O_RDONLY), STDIN_FILENO);
      dup2(open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), STDOUT_FILENO);
      dup2(open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), STDERR_FILENO);
      std::vector<char*> args;
      for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // The exit code, or -1 if it is still running after `limit` (then it is killed).
  int Wait(absl::Duration limit) {
    int status = 0;
    const absl::Time deadline = absl::Now() + limit;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) return -1;
      absl::SleepFor(absl::Milliseconds(20));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

class RemoteE2eTest : public ::testing::Test {
 protected:
  void StartDaemon(const std::vector<std::string>& extra_args = {}) {
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start(extra_args));
  }

  std::string state_dir() const { return dir_.str() + "/state"; }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

// ---- HTTP listener -------------------------------------------------------------------------

TEST_F(RemoteE2eTest, HttpOnANonLoopbackAddressWithoutTlsIsRefused) {
  const CommandResult result =
      RunCommand({MpsdPath(), "--listen", "unix://" + dir_.str() + "/s", "--state-dir", state_dir(),
                  "--http-listen", "0.0.0.0:0"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("http_listen: 0.0.0.0:0 is not a loopback address"));
  EXPECT_THAT(result.err, HasSubstr("--tls-cert"));
}

TEST_F(RemoteE2eTest, HttpListenWithABadAddressNamesIt) {
  const CommandResult result =
      RunCommand({MpsdPath(), "--listen", "unix://" + dir_.str() + "/s", "--state-dir", state_dir(),
                  "--http-listen", "localhost"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("http_listen: expected HOST:PORT"));
}

TEST_F(RemoteE2eTest, HealthzIsPublicAndMetricsNeedAToken) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--http-listen", "127.0.0.1:0"}));
  const int port = HttpPort(*daemon_);
  ASSERT_GT(port, 0) << ReadAll(daemon_->log_path());
  httplib::Client client("127.0.0.1", port);
  httplib::Result health = client.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "SERVING\n");

  httplib::Result anonymous = client.Get("/metrics");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_THAT(anonymous->get_header_value("WWW-Authenticate"), HasSubstr("Bearer"));
  EXPECT_THAT(anonymous->body, ::testing::Not(HasSubstr("mpsd_")));

  httplib::Result unknown =
      client.Get("/metrics", {{"Authorization", "Bearer mpsd_not_a_real_token"}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 401);
  EXPECT_THAT(unknown->body, ::testing::Not(HasSubstr("mpsd_not_a_real_token")));
  EXPECT_THAT(ReadAll(daemon_->log_path()), ::testing::Not(HasSubstr("mpsd_not_a_real_token")));

  httplib::Result missing = client.Get("/no-such-page");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

// A viewer token added to the daemon's tokens file with `mpsd token add` (remote-auth's CLI);
// returns the token.
std::string AddViewerToken(const std::string& tokens_file) {
  const CommandResult added = RunCommand({MpsdPath(), "token", "add", "--tokens", tokens_file,
                                          "--name", "prometheus", "--role", "viewer"});
  EXPECT_EQ(added.exit_code, 0) << added.err;
  std::string token = added.out;
  while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
  return token;
}

// One scrape of /metrics with `token`, parsed.
std::map<std::string, double> Scrape(int port, const std::string& token) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result response = client.Get("/metrics", {{"Authorization", "Bearer " + token}});
  EXPECT_TRUE(response);
  if (!response) return {};
  EXPECT_EQ(response->status, 200) << response->body;
  EXPECT_THAT(response->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
  return ParseMetrics(response->body);
}

TEST_F(RemoteE2eTest, MetricsAgreeWithServerStatusDuringAndAfterAJob) {
  const std::string tokens = dir_.str() + "/tokens.yaml";
  const std::string token = AddViewerToken(tokens);
  ASSERT_FALSE(token.empty());
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--http-listen", "127.0.0.1:0", "--tokens", tokens}));
  const int port = HttpPort(*daemon_);
  ASSERT_GT(port, 0);
  absl::StatusOr<mpsd::v1::DeviceInfo> device = rpc::Device(*daemon_);
  ASSERT_TRUE(device.ok());

  // 3 epochs of 3,200 examples at batch 64: 150 steps.
  absl::StatusOr<Job> job = rpc::Submit(*daemon_, TrainJobRequest(3200, 200, 3, 64, "mlp"));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitUntil([&] {
    absl::StatusOr<Job> now = rpc::Get(*daemon_, job->id());
    return now.ok() && now->state() == Job::RUNNING && now->last_step().step() > 0;
  }));
  // One open stream while the job runs.
  grpc::ClientContext stream_context;
  mpsd::v1::StreamEventsRequest stream_request;
  stream_request.set_job_id(job->id());
  auto stream = daemon_->stub().StreamEvents(&stream_context, stream_request);
  mpsd::v1::JobEvent first;
  ASSERT_TRUE(stream->Read(&first));

  std::map<std::string, double> during = Scrape(port, token);
  absl::StatusOr<mpsd::v1::ServerStatus> status = rpc::Status(*daemon_);
  ASSERT_TRUE(status.ok());
  stream_context.TryCancel();
  stream->Finish();
  if (status->running_job_id() == job->id()) {  // the job may have ended between the two
    EXPECT_EQ(
        during[absl::StrCat("mpsd_running_job_info{job_id=\"", job->id(), "\",model=\"mlp\"}")], 1);
    EXPECT_EQ(during["mpsd_jobs{kind=\"train_job\",state=\"running\"}"], 1);
  }
  EXPECT_EQ(during["mpsd_queue_depth"], status->queued_jobs());
  EXPECT_EQ(during["mpsd_event_streams_open"], status->open_streams());
  EXPECT_EQ(status->open_streams(), 1);
  EXPECT_EQ(during["mpsd_jobs_submitted_total"], 1);
  EXPECT_GT(during["mpsd_process_resident_memory_bytes"], 0);
  EXPECT_NEAR(during["mpsd_process_resident_memory_bytes"], status->rss_bytes(), 64 << 20);
  EXPECT_EQ(during[absl::StrCat("mpsd_build_info{torch=\"", device->torch_version(),
                                "\",version=\"0.1.0\"}")],
            1);
  EXPECT_EQ(during.count("mpsd_device_memory_allocated_bytes{device=\"cpu\"}"), 1u);
  EXPECT_EQ(during.count("mpsd_device_memory_reserved_bytes{device=\"cpu\"}"), 1u);
  // No NVIDIA driver here: no utilisation series.
  for (const auto& [name, value] : during) {
    EXPECT_FALSE(absl::StartsWith(name, "mpsd_device_utilization_ratio")) << name;
  }

  absl::StatusOr<Job> done = rpc::WaitForEnd(*daemon_, job->id());
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->state(), Job::SUCCEEDED) << done->message();
  ASSERT_TRUE(WaitUntil([&] {
    absl::StatusOr<mpsd::v1::ServerStatus> s = rpc::Status(*daemon_);
    return s.ok() && s->events_pending() == 0 && s->running_job_id().empty();
  }));
  std::map<std::string, double> after = Scrape(port, token);
  status = rpc::Status(*daemon_);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(after["mpsd_events_stored_total"], status->events_stored());
  EXPECT_EQ(after["mpsd_queue_depth"], 0);
  EXPECT_EQ(after["mpsd_event_streams_open"], status->open_streams());
  EXPECT_EQ(after["mpsd_jobs{kind=\"train_job\",state=\"succeeded\"}"], 1);
  EXPECT_EQ(after["mpsd_jobs{kind=\"train_job\",state=\"running\"}"], 0);
  double jobs = 0;
  for (const auto& [name, value] : after) {
    if (absl::StartsWith(name, "mpsd_jobs{")) jobs += value;
    // Job ids only on mpsd_running_job_info, and that series is gone once no job runs.
    EXPECT_FALSE(absl::StrContains(name, "job_id=")) << name;
  }
  EXPECT_EQ(jobs, status->jobs_total());
  EXPECT_EQ(after["mpsd_job_steps_total"], done->summary().steps());
  EXPECT_EQ(after["mpsd_job_steps_total"], 150);
  EXPECT_EQ(after["mpsd_samples_total"], 3 * 3200);
  EXPECT_EQ(after["mpsd_step_duration_seconds_count"], 150);
  EXPECT_GT(after["mpsd_step_duration_seconds_sum"], 0);
  EXPECT_EQ(after["mpsd_step_duration_seconds_bucket{le=\"+Inf\"}"], 150);
  EXPECT_EQ(after["mpsd_executor_restarts_total{reason=\"crash\"}"], 0);
}

// ---- gRPC health ---------------------------------------------------------------------------

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthCheckResponse::ServingStatus Check(Daemon& daemon, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

TEST_F(RemoteE2eTest, HealthIsNotServingWhileTheExecutorIsKilledAndRestarted) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--http-listen", "127.0.0.1:0"}));
  EXPECT_EQ(Check(*daemon_, "mpsd.v1.JobService"), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(*daemon_, ""), HealthCheckResponse::SERVING);
  absl::StatusOr<mpsd::v1::DeviceInfo> device = rpc::Device(*daemon_);
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_GT(device->executor_pid(), 0);

  // Watch delivers every change, however short the restart is.
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  HealthCheckRequest request;
  request.set_service("mpsd.v1.JobService");
  auto watch = stub->Watch(&context, request);
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);

  ASSERT_EQ(kill(device->executor_pid(), SIGKILL), 0);
  std::vector<HealthCheckResponse::ServingStatus> seen;
  while (watch->Read(&update)) {
    seen.push_back(update.status());
    if (update.status() == HealthCheckResponse::SERVING) break;
  }
  context.TryCancel();
  watch->Finish();
  EXPECT_THAT(
      seen, ::testing::ElementsAre(HealthCheckResponse::NOT_SERVING, HealthCheckResponse::SERVING));
  EXPECT_EQ(Check(*daemon_, "mpsd.v1.JobService"), HealthCheckResponse::SERVING);
  httplib::Client client("127.0.0.1", HttpPort(*daemon_));
  httplib::Result health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  absl::StatusOr<mpsd::v1::DeviceInfo> after = rpc::Device(*daemon_);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->executor_pid(), device->executor_pid());
  EXPECT_EQ(after->executor_restarts(), 1);
}

TEST_F(RemoteE2eTest, HealthIsNotServingDuringShutdown) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  HealthCheckRequest request;
  request.set_service("mpsd.v1.JobService");
  auto watch = stub->Watch(&context, request);
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);
  // A running job makes the shutdown last (it is stopped and its events committed), so that
  // the update is written before gRPC ends the call.
  absl::StatusOr<Job> job = rpc::Submit(*daemon_, TrainJobRequest(60000, 200, 50, 64, "mlp"));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(WaitUntil([&] {
    absl::StatusOr<Job> now = rpc::Get(*daemon_, job->id());
    return now.ok() && now->last_step().step() > 0;
  }));
  kill(daemon_->pid(), SIGTERM);
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  // The watcher goes away (gRPC's health service would keep its call open until the
  // client's deadline, holding the exiting process).
  context.TryCancel();
  watch->Finish();
  const int status = daemon_->Stop(SIGTERM, absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadAll(daemon_->log_path());
}

// ---- Reflection ----------------------------------------------------------------------------

std::string ReflectionClientPath() {
  return std::string(MPSD_BINARY_DIR) + "/tests/e2e/reflection_client";
}

TEST_F(RemoteE2eTest, ReflectionListsTheServiceToAClientWithoutTheProto) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const CommandResult list = RunCommand({ReflectionClientPath(), daemon_->address(), "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("mpsd.v1.JobService\n"));
  EXPECT_THAT(list.out, HasSubstr("grpc.health.v1.Health\n"));
  EXPECT_THAT(list.out, HasSubstr("grpc.reflection.v1alpha.ServerReflection\n"));
  EXPECT_THAT(list.out, HasSubstr("grpc.reflection.v1.ServerReflection\n"));

  const CommandResult service =
      RunCommand({ReflectionClientPath(), daemon_->address(), "describe", "mpsd.v1.JobService"});
  ASSERT_EQ(service.exit_code, 0) << service.err;
  EXPECT_THAT(service.out, HasSubstr("mpsd/v1/mpsd.proto\n"));
  EXPECT_THAT(service.out, HasSubstr("\nGetArtifact\n"));
}

// Newer clients (grpcurl >= 1.9, grpcio-reflection) ask for v1 first; the health service that gRPC
// runs resolves like mpsd's own.
TEST_F(RemoteE2eTest, ReflectionV1AndTheHealthServiceResolve) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const CommandResult list =
      RunCommand({ReflectionClientPath(), "--v1", daemon_->address(), "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("mpsd.v1.JobService\n"));
  const CommandResult method = RunCommand({ReflectionClientPath(), "--v1", daemon_->address(),
                                           "method", "mpsd.v1.JobService.StreamEvents"});
  ASSERT_EQ(method.exit_code, 0) << method.err;
  EXPECT_THAT(method.out, HasSubstr("after_seq"));
  for (const bool v1 : {false, true}) {
    std::vector<std::string> command = {ReflectionClientPath(), daemon_->address(), "method",
                                        "grpc.health.v1.Health.Watch"};
    if (v1) command.insert(command.begin() + 1, "--v1");
    const CommandResult health = RunCommand(command);
    ASSERT_EQ(health.exit_code, 0) << (v1 ? "v1: " : "v1alpha: ") << health.err;
    EXPECT_THAT(health.out, HasSubstr("grpc.health.v1.HealthCheckRequest "
                                      "grpc.health.v1.HealthCheckResponse (server streaming)"));
  }
  // The error details every error carries decode from reflection alone.
  const CommandResult info =
      RunCommand({ReflectionClientPath(), daemon_->address(), "describe", "google.rpc.ErrorInfo"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("field reason:"));
}

TEST_F(RemoteE2eTest, ReflectionCarriesTheProtosComments) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const CommandResult method = RunCommand(
      {ReflectionClientPath(), daemon_->address(), "method", "mpsd.v1.JobService.StreamEvents"});
  ASSERT_EQ(method.exit_code, 0) << method.err;
  EXPECT_THAT(method.out, HasSubstr("mpsd.v1.StreamEventsRequest mpsd.v1.JobEvent (server "
                                    "streaming)"));
  EXPECT_THAT(method.out, HasSubstr("heartbeat"));
  EXPECT_THAT(method.out, HasSubstr("after_seq"));

  // Defaults and units, as a client author would look them up.
  const CommandResult status =
      RunCommand({ReflectionClientPath(), daemon_->address(), "describe", "mpsd.v1.ServerStatus"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("field heartbeat_interval_s: An idle StreamEvents call"));
  EXPECT_THAT(status.out, HasSubstr("field rss_bytes: Resident set size"));
  const CommandResult event =
      RunCommand({ReflectionClientPath(), daemon_->address(), "describe", "mpsd.v1.JobEvent"});
  ASSERT_EQ(event.exit_code, 0) << event.err;
  EXPECT_THAT(event.out, HasSubstr("0 for a heartbeat, which is not stored"));

  const CommandResult missing =
      RunCommand({ReflectionClientPath(), daemon_->address(), "describe", "mpsd.v1.NoSuchThing"});
  EXPECT_EQ(missing.exit_code, 1);
}

// ---- Artifacts -----------------------------------------------------------------------------

class ArtifactsE2eTest : public RemoteE2eTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartDaemon());
    absl::StatusOr<Job> job = rpc::Submit(*daemon_, CheckpointedJob());
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<Job> done = rpc::WaitForEnd(*daemon_, job->id());
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_EQ(done->state(), Job::SUCCEEDED) << done->message();
    job_ = *done;
    job_dir_ = state_dir() + "/artifacts/" + job_.id();
  }

  absl::StatusOr<mpsd::v1::ListArtifactsResponse> List(const std::string& job_id) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    mpsd::v1::ListArtifactsRequest request;
    request.set_job_id(job_id);
    mpsd::v1::ListArtifactsResponse response;
    const grpc::Status status = daemon_->stub().ListArtifacts(&context, request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return response;
  }

  // GetArtifact's chunks from `offset`, concatenated; `status` gets how the stream ended.
  std::string Get(const std::string& name, int64_t offset, grpc::Status& status,
                  std::vector<mpsd::v1::ArtifactChunk>* chunks = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    mpsd::v1::GetArtifactRequest request;
    request.set_job_id(job_.id());
    request.set_name(name);
    request.set_offset(offset);
    auto reader = daemon_->stub().GetArtifact(&context, request);
    std::string data;
    mpsd::v1::ArtifactChunk chunk;
    while (reader->Read(&chunk)) {
      data += chunk.data();
      if (chunks != nullptr) chunks->push_back(chunk);
    }
    status = reader->Finish();
    return data;
  }

  Job job_;
  std::string job_dir_;
};

std::string Sha256(const std::string& path) {
  const CommandResult result = RunCommand({"/usr/bin/sha256sum", path});
  return result.out.substr(0, 64);
}

TEST_F(ArtifactsE2eTest, ListsTheModelAndCheckpointsWithSizesAndSha256) {
  absl::StatusOr<mpsd::v1::ListArtifactsResponse> list = List(job_.id());
  ASSERT_TRUE(list.ok()) << list.status();
  std::map<std::string, mpsd::v1::Artifact> by_name;
  for (const auto& artifact : list->artifacts()) by_name[artifact.name()] = artifact;
  ASSERT_EQ(by_name.count("model.pt"), 1u) << list->DebugString();
  ASSERT_EQ(by_name.count("checkpoint-latest.pt"), 1u) << list->DebugString();
  EXPECT_EQ(by_name["model.pt"].kind(), "model");
  EXPECT_EQ(by_name["checkpoint-latest.pt"].kind(), "checkpoint");
  for (const auto& [name, artifact] : by_name) {
    const std::string path = job_dir_ + "/" + name;
    EXPECT_EQ(artifact.size_bytes(), static_cast<int64_t>(std::filesystem::file_size(path)))
        << name;
    EXPECT_EQ(artifact.sha256(), Sha256(path)) << name;
  }
  EXPECT_EQ(job_.summary().model_path(), job_dir_ + "/model.pt");

  absl::StatusOr<mpsd::v1::ListArtifactsResponse> unknown = List("999999");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);

  const CommandResult table =
      RunCommand({MpsctlPath(), "--server", daemon_->address(), "artifacts", job_.id()});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("NAME"));
  EXPECT_THAT(table.out, HasSubstr("model.pt"));
  EXPECT_THAT(table.out, HasSubstr(by_name["model.pt"].sha256()));
}

TEST_F(ArtifactsE2eTest, GetArtifactStreamsTheBytesAndResumesFromAnOffset) {
  const std::string path = job_dir_ + "/model.pt";
  const std::string bytes = ReadAll(path);
  ASSERT_GT(bytes.size(), 1000u);
  grpc::Status status;
  std::vector<mpsd::v1::ArtifactChunk> chunks;
  EXPECT_EQ(Get("model.pt", 0, status, &chunks), bytes);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks[0].size_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(chunks[0].sha256(), Sha256(path));
  const int64_t offset = static_cast<int64_t>(bytes.size()) / 3;
  EXPECT_EQ(Get("model.pt", offset, status), bytes.substr(offset));
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(Get("model.pt", static_cast<int64_t>(bytes.size()), status), "");
  EXPECT_TRUE(status.ok());
  Get("model.pt", static_cast<int64_t>(bytes.size()) + 1, status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("offset"));
}

TEST_F(ArtifactsE2eTest, BadNamesAreRefusedAndNothingOutsideTheJobIsRead) {
  // A symbolic link inside the job's directory that leads out of it (to the job database).
  std::filesystem::create_symlink(state_dir() + "/mpsd.db", job_dir_ + "/escape.pt");
  std::filesystem::create_directories(job_dir_ + "/sub");
  std::filesystem::create_directory_symlink(state_dir(), job_dir_ + "/sub/up");
  grpc::Status status;
  for (const std::string& name :
       {std::string("../../mpsd.db"), std::string("/etc/passwd"), std::string(""),
        std::string("escape.pt"), std::string("sub/up/mpsd.db"), std::string("sub/../../x")}) {
    const std::string data = Get(name, 0, status);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "name " << name;
    EXPECT_THAT(status.error_message(), HasSubstr("name")) << name;
    EXPECT_EQ(data, "") << name;
  }
  Get("no-such-file.pt", 0, status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  // Links are not listed either.
  absl::StatusOr<mpsd::v1::ListArtifactsResponse> list = List(job_.id());
  ASSERT_TRUE(list.ok());
  for (const auto& artifact : list->artifacts()) {
    EXPECT_FALSE(absl::StrContains(artifact.name(), "escape")) << artifact.name();
    EXPECT_FALSE(absl::StrContains(artifact.name(), "up/")) << artifact.name();
  }
}

TEST_F(ArtifactsE2eTest, MpsctlDownloadChecksTheSha256AndResumesAPartialFile) {
  const std::string model = ReadAll(job_dir_ + "/model.pt");
  const std::string out = dir_.str() + "/downloads";
  std::filesystem::create_directories(out);
  const CommandResult whole =
      RunCommand({MpsctlPath(), "--server", daemon_->address(), "download", job_.id(), "-o", out});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_THAT(whole.out, HasSubstr("downloaded model.pt"));
  EXPECT_EQ(ReadAll(out + "/model.pt"), model);

  // A broken earlier download left its first third: only the rest is fetched.
  const std::string resumed = dir_.str() + "/resumed.pt";
  WriteFile(resumed + ".part", model.substr(0, model.size() / 3));
  const CommandResult rest = RunCommand({MpsctlPath(), "--server", daemon_->address(), "download",
                                         job_.id(), "model.pt", "-o", resumed});
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(ReadAll(resumed), model);
  EXPECT_FALSE(std::filesystem::exists(resumed + ".part"));

  // A partial file that is not the artifact's prefix fails the SHA-256 check and is removed.
  const std::string corrupt = dir_.str() + "/corrupt.pt";
  WriteFile(corrupt + ".part", std::string(model.size() / 3, 'x'));
  const CommandResult bad = RunCommand({MpsctlPath(), "--server", daemon_->address(), "download",
                                        job_.id(), "model.pt", "-o", corrupt});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("SHA-256"));
  EXPECT_FALSE(std::filesystem::exists(corrupt));
  EXPECT_FALSE(std::filesystem::exists(corrupt + ".part"));

  const CommandResult unknown =
      RunCommand({MpsctlPath(), "--server", daemon_->address(), "download", job_.id(), "nope.pt"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("no artifact \"nope.pt\""));
  EXPECT_THAT(unknown.err, HasSubstr("model.pt"));
}

// ---- Streams that survive restarts -----------------------------------------------------------

TEST_F(RemoteE2eTest, AFollowerResumesAfterTheDaemonIsKilledAndRestarted) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // restart_policy: resume, so that the job finishes after the restart.
  mpsd::v1::SubmitJobRequest request = CheckpointedJob(/*epochs=*/3, /*limit_train=*/3200);
  request.mutable_train_job()->set_restart_policy("resume");
  absl::StatusOr<Job> job = rpc::Submit(*daemon_, request);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string out = dir_.str() + "/follow.out", err = dir_.str() + "/follow.err";
  Background follower(
      {MpsctlPath(), "--server", daemon_->address(), "--json", "logs", job->id(), "--follow"}, out,
      err);
  // Kill the daemon once the first checkpoint is written and the follower has printed it.
  ASSERT_TRUE(WaitUntil([&] { return absl::StrContains(ReadAll(out), "\"checkpoint\""); },
                        absl::Seconds(240)))
      << ReadAll(err);
  daemon_->Stop(SIGKILL);
  absl::SleepFor(absl::Seconds(2));  // the follower sees the stream break and retries
  ASSERT_NO_FATAL_FAILURE(daemon_->Start());
  const int code = follower.Wait(absl::Seconds(300));
  EXPECT_EQ(code, 0) << ReadAll(err);
  EXPECT_THAT(ReadAll(err), HasSubstr("reconnecting, resuming after seq"));

  std::vector<mpsd::v1::JobEvent> events = ParseEventLines(ReadAll(out));
  std::vector<int64_t> seqs;
  for (const auto& event : events) {
    if (event.seq() != 0) seqs.push_back(event.seq());
  }
  ASSERT_FALSE(seqs.empty());
  for (size_t i = 0; i < seqs.size(); ++i) {
    ASSERT_EQ(seqs[i], static_cast<int64_t>(i + 1)) << "a gap or a duplicate at position " << i;
  }
  ASSERT_TRUE(events.back().has_state());
  EXPECT_EQ(events.back().state().state(), Job::SUCCEEDED);
  absl::StatusOr<Job> final = rpc::Get(*daemon_, job->id());
  ASSERT_TRUE(final.ok());
  EXPECT_EQ(final->last_seq(), seqs.back());
}

// A quiet stream on a channel that pings every `ping_interval`: how it ends after `quiet` of
// silence (a job queued behind a long one is cancelled then, which ends its stream with OK).
grpc::Status QuietStream(Daemon& daemon, absl::Duration ping_interval, absl::Duration quiet) {
  grpc::ChannelArguments arguments;
  const int ms = static_cast<int>(absl::ToInt64Milliseconds(ping_interval));
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, ms);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  arguments.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, ms);
  auto stub = mpsd::v1::JobService::NewStub(
      grpc::CreateCustomChannel(daemon.address(), grpc::InsecureChannelCredentials(), arguments));
  absl::StatusOr<Job> running = rpc::Submit(daemon, TrainJobRequest(60000, 200, 50, 64, "mlp"));
  absl::StatusOr<Job> queued = rpc::Submit(daemon, TrainJobRequest(640, 200, 1, 64, "mlp"));
  EXPECT_TRUE(running.ok() && queued.ok());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  mpsd::v1::StreamEventsRequest request;
  request.set_job_id(queued->id());
  auto stream = stub->StreamEvents(&context, request);
  mpsd::v1::JobEvent event;
  EXPECT_TRUE(stream->Read(&event));  // QUEUED, stored; then nothing until the cancel
  std::thread cancel([&] {
    absl::SleepFor(quiet);
    rpc::Cancel(daemon, queued->id());
  });
  while (stream->Read(&event)) {
  }
  cancel.join();
  rpc::Cancel(daemon, running->id());
  return stream->Finish();
}

// The documented policy: pings every 10 s keep a silent stream (heartbeats 60 s apart) alive.
// Before it, gRPC's default (5 min between pings without data) answered the third with GOAWAY.
TEST_F(RemoteE2eTest, KeepalivePingsAtThePermittedIntervalKeepAQuietStream) {
  const std::string config = dir_.str() + "/mpsd.yaml";
  WriteFile(config, "heartbeat_interval_s: 60\n");
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--config", config}));
  const grpc::Status status = QuietStream(*daemon_, absl::Seconds(10), absl::Seconds(35));
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
}

// Faster than the policy: gRPC's own defence ends the connection (GOAWAY "too_many_pings").
TEST_F(RemoteE2eTest, KeepalivePingsFasterThanThePolicyGetGoaway) {
  const std::string config = dir_.str() + "/mpsd.yaml";
  WriteFile(config, "heartbeat_interval_s: 60\n");
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--config", config}));
  const grpc::Status status = QuietStream(*daemon_, absl::Seconds(1), absl::Seconds(15));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(RemoteE2eTest, ServerStatusReportsTheStreamTiming) {
  const std::string config = dir_.str() + "/mpsd.yaml";
  WriteFile(config, "heartbeat_interval_s: 7\n");
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--config", config}));
  absl::StatusOr<mpsd::v1::ServerStatus> status = rpc::Status(*daemon_);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->heartbeat_interval_s(), 7);
  EXPECT_EQ(status->min_keepalive_interval_s(), 10);
  const CommandResult shown = RunCommand({MpsctlPath(), "--server", daemon_->address(), "status"});
  EXPECT_THAT(shown.out, HasSubstr("heartbeat after 7.0 s idle"));
}

}  // namespace
}  // namespace mpsd::testing
