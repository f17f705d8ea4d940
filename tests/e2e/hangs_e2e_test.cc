// Hangs a break-it pass found (issue 14, "Hangs" and "The executor's restarts"), each against a
// real mpsd: a client that stops reading its stream, a dataset file that blocks whoever opens it,
// config values that would start thousands of threads, submits while the executor restarts, and
// a cancel of a step longer than the grace.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/client_context.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/files.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using ::testing::HasSubstr;

// A long job that emits one step event per millisecond or so: mlp on 8 random numbers, batch 1.
mpsd::v1::SubmitJobRequest ChattyJob(int64_t steps) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob* job = request.mutable_train_job();
  job->mutable_model()->set_name("mlp");
  job->mutable_dataset()->set_name("synthetic");
  mpsd::v1::SyntheticSpec* synthetic = job->mutable_dataset()->mutable_synthetic();
  synthetic->add_input_shape(8);
  synthetic->set_num_classes(2);
  synthetic->set_train_examples(steps);
  synthetic->set_test_examples(10);
  job->set_batch_size(1);
  job->set_device("cpu");
  return request;
}

class HangsE2eTest : public ::testing::Test {
 protected:
  void StartDaemon(const std::string& config, const std::vector<std::string>& args = {}) {
    const std::string config_path = dir_.str() + "/mpsd.yaml";
    WriteFile(config_path, config);
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    std::vector<std::string> all = {"--config", config_path};
    all.insert(all.end(), args.begin(), args.end());
    ASSERT_NO_FATAL_FAILURE(daemon_->Start(all));
  }

  void TearDown() override {
    if (daemon_ != nullptr && daemon_->pid() > 0) daemon_->Stop(SIGKILL);
  }

  std::string ReadLog() const { return ReadFile(daemon_->log_path()); }

  // Writes `text` into the config file `config`; `mpsd --check-config` must refuse it (exit 2)
  // with an error containing `message`.
  void ExpectCheckConfigRefuses(const std::string& config, const std::string& text,
                                const std::string& message) {
    WriteFile(config, text);
    CommandResult check =
        RunCommandWithin({MpsdPath(), "--check-config", config}, absl::Seconds(30));
    EXPECT_EQ(check.exit_code, 2) << check.out << check.err;
    EXPECT_THAT(check.err, HasSubstr(message));
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

// Item 1: a client that stops reading its stream (a stopped `mpsctl logs --follow`: the socket
// fills, the daemon's write stays pending) must not keep mpsd from exiting on SIGTERM. Before
// the fix mpsd stayed in grpc::Server::Shutdown until that client went away.
TEST_F(HangsE2eTest, SigtermExitsWhileAStoppedClientHoldsAStream) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("shutdown_grace_s: 1\n"));
  absl::StatusOr<Job> job = rpc::Submit(*daemon_, ChattyJob(2'000'000));
  ASSERT_TRUE(job.ok()) << job.status();
  const pid_t follower =
      Spawn({MpsctlPath(), "--server", daemon_->address(), "--json", "logs", job->id(), "--follow"},
            "/dev/null", "/dev/null");
  ASSERT_GT(follower, 0);
  ASSERT_TRUE(WaitUntil([&] {
    absl::StatusOr<Job> now = rpc::Get(*daemon_, job->id());
    return now.ok() && now->last_seq() > 10;
  }));
  kill(follower, SIGSTOP);
  // Several hundred KB of step events: more than the socket's buffers and the stream's window.
  EXPECT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<Job> now = rpc::Get(*daemon_, job->id());
        return now.ok() && now->last_seq() > 8'000;
      },
      absl::Seconds(300)));
  // shutdown_grace_s, then 5 s for gRPC to end what it cancelled, and the executor's stop.
  const int status = daemon_->Stop(SIGTERM, absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  kill(follower, SIGKILL);
  waitpid(follower, nullptr, 0);
  const std::string log = ReadLog();
  EXPECT_THAT(log, HasSubstr("streams still open after 1 s")) << log;
}

// Item 2: a FIFO named as a dataset file is refused at submit, naming it, instead of blocking
// the executor in open() (the submit timed out, the queue stalled); the next job runs.
TEST_F(HangsE2eTest, AFifoAsADatasetFileIsRefusedAndTheQueueMovesOn) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(""));
  const std::string root = dir_.str() + "/fifo-data";
  std::filesystem::create_directory(root);
  const std::string real = "/usr/share/datasets/fashion-mnist/";
  for (const char* name :
       {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    std::filesystem::create_symlink(real + name, root + "/" + name);
  }
  const std::string fifo = root + "/train-images-idx3-ubyte";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  mpsd::v1::SubmitJobRequest request = TrainJobRequest(256, 64, 1, 64);
  request.mutable_train_job()->mutable_dataset()->set_root(root);
  absl::StatusOr<Job> refused = rpc::Submit(*daemon_, request);  // 30 s deadline
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().code(), absl::StatusCode::kDeadlineExceeded) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr(fifo));
  EXPECT_THAT(refused.status().message(), HasSubstr("not a regular file"));

  absl::StatusOr<Job> next = rpc::Submit(*daemon_, TrainJobRequest(256, 64, 1, 64));
  ASSERT_TRUE(next.ok()) << next.status();
  absl::StatusOr<Job> done = rpc::WaitForEnd(*daemon_, next->id());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), Job::SUCCEEDED);
}

// Item 3: a numeric config key beyond its bound is refused, naming it, by --check-config and at
// start (cpu_threads: 100000 started thousands of threads; mpsd never listened nor stopped).
TEST_F(HangsE2eTest, OutOfBoundsConfigValuesAreRefusedAtCheckAndAtStart) {
  const std::string config = dir_.str() + "/bad.yaml";
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"cpu_threads: 100000\n", "cpu_threads: must be >= 0 and <= 4096"},
           {"max_queued: 2000000000\n", "max_queued: must be >= 1 and <= 1000000"},
           {"shutdown_grace_s: 1e300\n", "shutdown_grace_s: must be >= 0 and <= 86400"},
           {"executor:\n  cancel_grace_s: .inf\n", "executor.cancel_grace_s: must be >= 0"},
           // Issue 26: a key given twice was accepted (the last won); an empty state_dir
           // silently meant the default one.
           {"max_queued: 5\nmax_queued: 6\n", "max_queued: duplicate key (line 2)"},
           {"executor:\n  cancel_grace_s: 1\n  cancel_grace_s: 2\n",
            "executor.cancel_grace_s: duplicate key (line 3)"},
           {"state_dir: ''\n", "state_dir: empty"}}) {
    SCOPED_TRACE(text);
    ExpectCheckConfigRefuses(config, text, message);
    CommandResult start = RunCommandWithin(
        {MpsdPath(), "--config", config, "--listen", "unix://" + dir_.str() + "/bad.sock",
         "--state-dir", dir_.str() + "/bad-state"},
        absl::Seconds(30));
    EXPECT_EQ(start.exit_code, 2) << start.err;
    EXPECT_THAT(start.err, HasSubstr(message));
  }
  // `--state-dir ''` (an unset shell variable) is refused rather than read as the default.
  CommandResult empty = RunCommandWithin(
      {MpsdPath(), "--listen", "unix://" + dir_.str() + "/bad.sock", "--state-dir", ""},
      absl::Seconds(30));
  EXPECT_EQ(empty.exit_code, 2) << empty.err;
  EXPECT_THAT(empty.err, HasSubstr("--state-dir: empty; name a directory"));
}

mpsd::v1::SubmitJobRequest WithFault(mpsd::v1::SubmitJobRequest request, const std::string& kind,
                                     int64_t at_step) {
  request.mutable_train_job()->mutable_fault_injection()->set_kind(kind);
  request.mutable_train_job()->mutable_fault_injection()->set_at_step(at_step);
  return request;
}

// Item 12: submits that arrive while the executor is being replaced after a crash succeed: the
// validation waits for the new executor instead of answering UNAVAILABLE ("executor: Broken
// pipe", about one submit in a hundred around a crash before the fix).
TEST_F(HangsE2eTest, SubmitsDuringAnExecutorRestartSucceed) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("max_queued: 100000\n", {"--enable-fault-injection"}));
  mpsd::v1::SubmitJobRequest tiny = ChattyJob(64);
  tiny.mutable_train_job()->set_batch_size(32);
  std::atomic<int> submitted{0};
  std::atomic<int> failed{0};
  std::string first_failure;
  absl::Mutex failure_mu;
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<mpsd::v1::DeviceInfo> before = rpc::Device(*daemon_);
    ASSERT_TRUE(before.ok()) << before.status();
    // Ahead of the small jobs the last round queued.
    mpsd::v1::SubmitJobRequest crashing = WithFault(ChattyJob(64'000), "segfault", 20);
    crashing.set_priority(10);
    absl::StatusOr<Job> crash = rpc::Submit(*daemon_, crashing);
    ASSERT_TRUE(crash.ok()) << crash.status();
    // Four clients submit without pause until a new executor answers, and a moment after.
    std::atomic<bool> stop{false};
    std::vector<std::thread> clients;
    for (int i = 0; i < 4; ++i) {
      clients.emplace_back([&] {
        while (!stop.load()) {
          absl::StatusOr<Job> job = rpc::Submit(*daemon_, tiny);
          ++submitted;
          if (!job.ok()) {
            ++failed;
            absl::MutexLock lock(&failure_mu);
            if (first_failure.empty()) first_failure = job.status().ToString();
          }
        }
      });
    }
    EXPECT_TRUE(WaitUntil([&] {
      absl::StatusOr<mpsd::v1::DeviceInfo> now = rpc::Device(*daemon_);
      return now.ok() && now->executor_pid() != 0 && now->executor_pid() != before->executor_pid();
    }));
    absl::SleepFor(absl::Seconds(1));
    stop = true;
    for (std::thread& client : clients) client.join();
    absl::StatusOr<Job> crashed = rpc::Get(*daemon_, crash->id());
    ASSERT_TRUE(crashed.ok());
    EXPECT_EQ(crashed->state(), Job::FAILED);
  }
  EXPECT_GT(submitted.load(), 0);
  EXPECT_EQ(failed.load(), 0) << failed.load() << " of " << submitted.load()
                              << " submits failed, the first: " << first_failure;
}

// Item 13: a cancel gets 3 × the job's step time when that is longer than cancel_grace_s (the
// executor looks for a cancel between steps): with cancel_grace_s 0 every cancel used to kill
// the executor; now the job stops at its next step and the executor stays.
TEST_F(HangsE2eTest, ACancelWaitsForTheStepInProgressWhenStepsAreSlowerThanTheGrace) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("executor:\n  cancel_grace_s: 0\n"));
  absl::StatusOr<Job> job = rpc::Submit(*daemon_, TrainJobRequest(60'000, 64, 100, 256));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitUntil([&] {
    absl::StatusOr<Job> now = rpc::Get(*daemon_, job->id());
    return now.ok() && now->last_step().step() >= 2 && now->last_step().step_time_ms() > 0;
  }));
  absl::StatusOr<mpsd::v1::DeviceInfo> before = rpc::Device(*daemon_);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(rpc::Cancel(*daemon_, job->id()).ok());
  absl::StatusOr<Job> cancelled = rpc::WaitForEnd(*daemon_, job->id());
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), Job::CANCELLED);
  EXPECT_EQ(cancelled->summary().executor_restart_reason(), "") << cancelled->message();
  EXPECT_EQ(cancelled->summary().executor_pid(), before->executor_pid());
}

// Item 13: a cancel the executor does ignore says that the executor was replaced.
TEST_F(HangsE2eTest, AnIgnoredCancelSaysTheExecutorWasReplaced) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon("executor:\n  cancel_grace_s: 1\n", {"--enable-fault-injection"}));
  // "hang" sleeps before step 3, deaf to a cancel.
  absl::StatusOr<Job> job =
      rpc::Submit(*daemon_, WithFault(TrainJobRequest(320, 64, 500, 64), "hang", 3));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitUntil([&] {
    absl::StatusOr<Job> now = rpc::Get(*daemon_, job->id());
    return now.ok() && now->last_step().step() >= 2;
  }));
  ASSERT_TRUE(rpc::Cancel(*daemon_, job->id()).ok());
  absl::StatusOr<Job> cancelled = rpc::WaitForEnd(*daemon_, job->id());
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), Job::CANCELLED);
  EXPECT_THAT(cancelled->message(),
              HasSubstr("cancelled by request; cancel not honoured within 1 s"));
  EXPECT_THAT(cancelled->message(), HasSubstr("was killed and replaced"));
}

// Item 4: mpsctl reads a job file only when it is a regular file of at most 1 MiB: /dev/zero
// was read without end (5 GB resident in 10 s), a FIFO blocked open(), a 20 MB file went out and
// came back as gRPC's message-size error. A 1 MiB job file still goes through.
TEST_F(HangsE2eTest, MpsctlReadsOnlyRegularJobFilesOfAtMostOneMebibyte) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(""));
  const std::string fifo = dir_.str() + "/job.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = dir_.str() + "/big.yaml";
  const std::string job_yaml =
      "kind: TrainJob\nmodel: {name: mlp}\ndataset: {name: synthetic, synthetic: "
      "{input_shape: [8], num_classes: 2, train_examples: 64, test_examples: 8}}\n"
      "batch_size: 32\ndevice: cpu\n";
  WriteFile(big, job_yaml + std::string(20 << 20, '#') + "\n");
  for (const auto& [path, message] : std::vector<std::pair<std::string, std::string>>{
           {big, "20971694 bytes; a job file is at most 1 MiB"},
           {dir_.str(), "not a regular file"},
           {fifo, "not a regular file"},
           {"/dev/zero", "not a regular file"}}) {
    SCOPED_TRACE(path);
    CommandResult submit = RunCommandWithin(
        {MpsctlPath(), "--server", daemon_->address(), "submit", path}, absl::Seconds(30));
    EXPECT_EQ(submit.exit_code, 1) << submit.err;
    EXPECT_THAT(submit.err, HasSubstr(path + ": " + message));
  }
  const std::string exact = dir_.str() + "/exact.yaml";
  WriteFile(exact, job_yaml + "#" + std::string((1 << 20) - job_yaml.size() - 2, '#') + "\n");
  ASSERT_EQ(std::filesystem::file_size(exact), 1u << 20);
  CommandResult submit = RunCommandWithin(
      {MpsctlPath(), "--server", daemon_->address(), "submit", exact}, absl::Seconds(60));
  EXPECT_EQ(submit.exit_code, 0) << submit.err;
}

// mpsctl says that "abc" is not a job id (a usage error, exit 64) instead of asking the daemon
// and reporting "job abc not found".
TEST_F(HangsE2eTest, MpsctlSaysWhatIsNotAJobId) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"get", "abc"}, {"cancel", "abc"}, {"logs", "abc"}, {"artifacts", "01"}}) {
    std::vector<std::string> argv = {MpsctlPath(), "--server",
                                     "unix://" + dir_.str() + "/nobody.sock"};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult result = RunCommandWithin(argv, absl::Seconds(30));
    EXPECT_EQ(result.exit_code, 64) << args[0] << ": " << result.err;
    EXPECT_THAT(result.err, HasSubstr("\"" + args[1] + "\" is not a job id")) << args[0];
  }
}

// A relative --state-dir works: mpsd makes it absolute before the executor's socket becomes a
// unix:// URI in it (a relative one read as an authority; the executor never answered).
TEST_F(HangsE2eTest, ARelativeStateDirWorks) {
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_.path());
  daemon_ = std::make_unique<Daemon>("relative-state", dir_.str() + "/mpsd.sock");
  daemon_->Start();
  std::filesystem::current_path(cwd);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  mpsd::v1::SubmitJobRequest tiny = ChattyJob(64);
  tiny.mutable_train_job()->set_batch_size(32);
  absl::StatusOr<Job> job = rpc::Submit(*daemon_, tiny);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<Job> done = rpc::WaitForEnd(*daemon_, job->id());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), Job::SUCCEEDED) << done->message();
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "relative-state" / "mpsd.db"));
}

// `mpsd --check-config` applies the start's check of the addresses: a non-loopback listen or
// http_listen was "valid" there and refused at start.
TEST_F(HangsE2eTest, CheckConfigRefusesTheAddressesTheStartRefuses) {
  const std::string config = dir_.str() + "/addresses.yaml";
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"listen: 0.0.0.0:50051\n", "listen: 0.0.0.0:50051 is not a loopback address"},
           {"http_listen: 0.0.0.0:9464\n", "http_listen: 0.0.0.0:9464 is not a loopback address"},
           {"http_listen: nine\n", "http_listen"}}) {
    SCOPED_TRACE(text);
    ExpectCheckConfigRefuses(config, text, message);
    std::vector<std::string> start = {MpsdPath(), "--config", config, "--state-dir",
                                      dir_.str() + "/addresses-state"};
    if (!absl::StartsWith(text, "listen:")) {
      start.insert(start.end(), {"--listen", "unix://" + dir_.str() + "/addresses.sock"});
    }
    CommandResult started = RunCommandWithin(start, absl::Seconds(30));
    EXPECT_NE(started.exit_code, 0) << started.err;
    EXPECT_THAT(started.err, HasSubstr(message));
  }
  WriteFile(config, "listen: 127.0.0.1:0\nhttp_listen: 127.0.0.1:0\n");
  CommandResult good = RunCommandWithin({MpsdPath(), "--check-config", config}, absl::Seconds(30));
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_THAT(good.out, HasSubstr(": valid"));
}

// Item 8: every mpsctl submit carries a request_id (made up when the file and --request-id give
// none), so that its retry after a timeout finds the job the first attempt created. Made-up ids
// are left out of the job file `mpsctl get` prints; two submits of one file are two jobs.
TEST_F(HangsE2eTest, MpsctlSubmitsCarryARequestId) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(""));
  const std::string file = dir_.str() + "/tiny.yaml";
  WriteFile(file,
            "kind: TrainJob\nmodel: {name: mlp}\ndataset: {name: synthetic, synthetic: "
            "{input_shape: [8], num_classes: 2, train_examples: 64, test_examples: 8}}\n"
            "batch_size: 32\ndevice: cpu\n");
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    CommandResult submit = RunCommandWithin(
        {MpsctlPath(), "--server", daemon_->address(), "submit", file}, absl::Seconds(60));
    ASSERT_EQ(submit.exit_code, 0) << submit.err;
    ids.push_back(std::string(absl::StripAsciiWhitespace(submit.out)));
  }
  EXPECT_NE(ids[0], ids[1]);
  std::vector<std::string> request_ids;
  for (const std::string& id : ids) {
    absl::StatusOr<Job> job = rpc::Get(*daemon_, id);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_THAT(job->spec().request_id(), ::testing::MatchesRegex("mpsctl-[0-9a-f]{32}"));
    request_ids.push_back(job->spec().request_id());
  }
  EXPECT_NE(request_ids[0], request_ids[1]);
  CommandResult get = RunCommandWithin(
      {MpsctlPath(), "--server", daemon_->address(), "get", ids[0]}, absl::Seconds(30));
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_THAT(get.out, ::testing::Not(HasSubstr("request_id")));
  // The same request_id again (what a retry sends) returns the first job.
  mpsd::v1::SubmitJobRequest again = (*rpc::Get(*daemon_, ids[0])).spec();
  absl::StatusOr<Job> retried = rpc::Submit(*daemon_, again);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->id(), ids[0]);
}

// Item 14 (part): a job id that cannot name a job ("", "abc") is INVALID_ARGUMENT naming
// job_id, for GetJob, CancelJob and StreamEvents alike; a well-formed unknown id stays
// NOT_FOUND.
TEST_F(HangsE2eTest, AMalformedJobIdIsInvalidArgumentNotNotFound) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(""));
  for (const std::string id : {"", "abc", "01", "-1"}) {
    SCOPED_TRACE("\"" + id + "\"");
    absl::StatusOr<Job> get = rpc::Get(*daemon_, id);
    EXPECT_EQ(get.status().code(), absl::StatusCode::kInvalidArgument) << get.status();
    EXPECT_THAT(get.status().message(), HasSubstr("job_id: \"" + id + "\" is not a job id"));
    EXPECT_EQ(rpc::Cancel(*daemon_, id).status().code(), absl::StatusCode::kInvalidArgument);
    grpc::Status streamed;
    rpc::StreamAll(*daemon_, id, 0, &streamed);
    EXPECT_EQ(streamed.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << streamed.error_message();
  }
  EXPECT_EQ(rpc::Get(*daemon_, "999").status().code(), absl::StatusCode::kNotFound);
  // Issue 26: an 8 KB id was echoed whole, and the answer's metadata outgrew gRPC's limit
  // (RESOURCE_EXHAUSTED "received initial metadata size exceeds limit"): it is cut.
  const std::string huge(8192, 'x');
  absl::StatusOr<Job> get = rpc::Get(*daemon_, huge);
  EXPECT_EQ(get.status().code(), absl::StatusCode::kInvalidArgument) << get.status();
  EXPECT_THAT(get.status().message(), HasSubstr("\"… (8192 bytes) is not a job id"));
  EXPECT_LT(get.status().message().size(), 300u);
  EXPECT_EQ(rpc::Cancel(*daemon_, huge).status().code(), absl::StatusCode::kInvalidArgument);
  grpc::Status streamed;
  rpc::StreamAll(*daemon_, huge, 0, &streamed);
  EXPECT_EQ(streamed.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << streamed.error_message();
}

// ---- Issue 26 item 1: user code that never returns ------------------------------------------

// A TorchScript classifier over ChattyJob's 8 inputs and 2 classes (write_script_module.cc says
// what each kind does), written into `dir`.
std::string WriteScript(const TempDir& dir, const std::string& kind) {
  const std::string path = dir.str() + "/" + kind + ".pt";
  const CommandResult written = RunCommand({MPSD_WRITE_SCRIPT_MODULE, kind, path, "8", "2"});
  EXPECT_EQ(written.exit_code, 0) << written.err;
  return path;
}

mpsd::v1::SubmitJobRequest ScriptJob(const std::string& path, int64_t steps) {
  mpsd::v1::SubmitJobRequest request = ChattyJob(steps);
  request.mutable_train_job()->mutable_model()->clear_name();
  request.mutable_train_job()->mutable_model()->set_torchscript(path);
  return request;
}

// A submit-time check whose forward never returns spun an executor thread forever; after two
// such submits every call (status, list) timed out for minutes. Now each check runs in a
// process of its own, killed at user_code_timeout_s; the submit fails naming the field and the
// limit, mpsd logs it, and meanwhile every other call answers and a normal job runs.
TEST_F(HangsE2eTest, UserCodeThatNeverReturnsAtSubmitCannotWedgeTheDaemon) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("executor:\n  user_code_timeout_s: 8\n"));
  const std::string hang = WriteScript(dir_, "hang");
  const std::string state = dir_.str() + "/state";
  std::vector<absl::StatusOr<Job>> hung(2, absl::UnknownError("not answered"));
  std::vector<std::thread> submitters;
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < hung.size(); ++i) {
    submitters.emplace_back([&, i] { hung[i] = rpc::Submit(*daemon_, ScriptJob(hang, 100)); });
  }
  // While both checks run, every other call answers at once and a normal job runs to its end.
  // (No ASSERT until the submitters are joined.)
  EXPECT_TRUE(
      WaitUntil([&] { return FindExecutor(state, "--validate-request") != 0; }, absl::Seconds(8)))
      << "no check process of its own";
  absl::StatusOr<Job> normal = rpc::Submit(*daemon_, ChattyJob(64));
  EXPECT_TRUE(normal.ok()) << normal.status();
  for (int i = 0; i < 5; ++i) {
    const absl::Time before = absl::Now();
    absl::StatusOr<mpsd::v1::ServerStatus> status = rpc::Status(*daemon_);
    absl::StatusOr<mpsd::v1::ListJobsResponse> list =
        rpc::List(*daemon_, mpsd::v1::ListJobsRequest());
    EXPECT_TRUE(status.ok()) << status.status();
    EXPECT_TRUE(list.ok()) << list.status();
    EXPECT_LT(absl::Now() - before, absl::Seconds(3)) << "status and list waited";
    absl::SleepFor(absl::Milliseconds(300));
  }
  if (normal.ok()) {
    absl::StatusOr<Job> done = rpc::WaitForEnd(*daemon_, normal->id(), absl::Seconds(60));
    EXPECT_TRUE(done.ok()) << done.status();
    if (done.ok()) EXPECT_EQ(done->state(), Job::SUCCEEDED) << done->message();
  }
  for (std::thread& submitter : submitters) submitter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(45));  // without the fix: over 60 s
  for (const absl::StatusOr<Job>& refused : hung) {
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr("train_job.model.torchscript: " + hang));
    EXPECT_THAT(refused.status().message(),
                HasSubstr("did not end within 8s (executor.user_code_timeout_s)"));
  }
  // The checks' processes are gone, their files too, and mpsd said what it killed.
  EXPECT_EQ(FindExecutor(state, "--validate-request"), 0);
  for (const auto& entry : std::filesystem::directory_iterator(state)) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr(".check")));
  }
  EXPECT_THAT(ReadLog(), HasSubstr("did not end within 8s (executor.user_code_timeout_s); "
                                   "killed its process pid"));
  // A module whose check returns is accepted through the same process.
  absl::StatusOr<Job> fine = rpc::Submit(*daemon_, ScriptJob(WriteScript(dir_, "linear"), 64));
  ASSERT_TRUE(fine.ok()) << fine.status();
  absl::StatusOr<Job> trained = rpc::WaitForEnd(*daemon_, fine->id(), absl::Seconds(60));
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_EQ(trained->state(), Job::SUCCEEDED) << trained->message();
}

// User code that passes its check (the all-zero example) and never returns on real data: the
// job reports nothing for user_code_stall_timeout_s, its executor is killed and replaced, the
// job FAILS with USER_CODE_TIMEOUT naming the field, and the next job runs.
TEST_F(HangsE2eTest, UserCodeThatNeverReturnsAtRunTimeFailsItsJobNamingIt) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("executor:\n  user_code_stall_timeout_s: 3\n"));
  const std::string path = WriteScript(dir_, "hang_on_data");
  absl::StatusOr<Job> job = rpc::Submit(*daemon_, ScriptJob(path, 100));
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, job->id(), absl::Seconds(120));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state(), Job::FAILED);
  EXPECT_EQ(ended->failure_reason(), Job::USER_CODE_TIMEOUT);
  EXPECT_THAT(ended->message(), HasSubstr("train_job.model.torchscript (" + path + ")"));
  EXPECT_THAT(ended->message(), HasSubstr("reported nothing for 3s "
                                          "(executor.user_code_stall_timeout_s)"));
  EXPECT_THAT(ReadLog(), HasSubstr("reported nothing for 3s"));
  absl::StatusOr<Job> next = rpc::Submit(*daemon_, ChattyJob(64));
  ASSERT_TRUE(next.ok()) << next.status();
  absl::StatusOr<Job> next_ended = rpc::WaitForEnd(*daemon_, next->id(), absl::Seconds(120));
  ASSERT_TRUE(next_ended.ok()) << next_ended.status();
  EXPECT_EQ(next_ended->state(), Job::SUCCEEDED) << next_ended->message();
}

// LossSpec.torchscript (issue 28): a user's cross-entropy trains step for step as the built-in
// one; a loss that returns one value per example, opens a file, or comes with the built-in
// loss's settings is refused at submit naming the field; one that hangs on real data fails its
// job as user code does (USER_CODE_TIMEOUT naming the field) and the next job runs.
TEST_F(HangsE2eTest, ATorchScriptLossTrainsAsTheBuiltInAndBadOnesAreRefusedNamingIt) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("executor:\n  user_code_stall_timeout_s: 3\n"));
  auto job = [](const std::string& loss) {
    mpsd::v1::SubmitJobRequest request = ChattyJob(96);
    request.mutable_train_job()->set_batch_size(16);
    request.mutable_train_job()->set_seed(3);
    request.mutable_train_job()->set_epochs(2);
    if (!loss.empty()) request.mutable_train_job()->mutable_loss()->set_torchscript(loss);
    return request;
  };
  auto step_losses = [&](const std::string& id) {
    std::vector<float> losses;
    for (const mpsd::v1::JobEvent& event : rpc::StreamAll(*daemon_, id)) {
      if (event.has_step()) losses.push_back(event.step().loss());
    }
    return losses;
  };
  std::vector<std::vector<float>> runs;
  for (const std::string& loss : {std::string(), WriteScript(dir_, "loss_ce")}) {
    absl::StatusOr<Job> submitted = rpc::Submit(*daemon_, job(loss));
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, submitted->id(), absl::Seconds(120));
    ASSERT_TRUE(ended.ok()) << ended.status();
    ASSERT_EQ(ended->state(), Job::SUCCEEDED) << ended->message();
    runs.push_back(step_losses(submitted->id()));
  }
  ASSERT_EQ(runs[0].size(), 12u);  // 96 examples / 16, 2 epochs
  ASSERT_EQ(runs[1].size(), runs[0].size());
  for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_NEAR(runs[1][i], runs[0][i], 1e-5) << i;

  const std::string per_example = WriteScript(dir_, "loss_per_example");
  absl::Status refused = rpc::Submit(*daemon_, job(per_example)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              HasSubstr(absl::StrCat("train_job.loss.torchscript: ", per_example,
                                     ": forward must return the loss as a scalar float tensor for "
                                     "logits [2, 2] float32 and targets [2] int64, got [2] ")));
  refused = rpc::Submit(*daemon_, job(WriteScript(dir_, "loss_reads_file"))).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("train_job.loss.torchscript: "));
  EXPECT_THAT(refused.message(), HasSubstr("aten::from_file"));
  mpsd::v1::SubmitJobRequest both = job(WriteScript(dir_, "loss_ce"));
  both.mutable_train_job()->mutable_loss()->set_type("cross_entropy");
  refused = rpc::Submit(*daemon_, both).status();
  EXPECT_THAT(refused.message(), HasSubstr("train_job.loss.type: set either loss.torchscript"));

  const std::string hang = WriteScript(dir_, "loss_hang_on_data");
  absl::StatusOr<Job> hung = rpc::Submit(*daemon_, job(hang));
  ASSERT_TRUE(hung.ok()) << hung.status();
  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, hung->id(), absl::Seconds(120));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state(), Job::FAILED);
  EXPECT_EQ(ended->failure_reason(), Job::USER_CODE_TIMEOUT);
  EXPECT_THAT(ended->message(), HasSubstr("train_job.loss.torchscript (" + hang + ")"));
  absl::StatusOr<Job> next = rpc::Submit(*daemon_, job(""));
  ASSERT_TRUE(next.ok()) << next.status();
  absl::StatusOr<Job> next_ended = rpc::WaitForEnd(*daemon_, next->id(), absl::Seconds(120));
  ASSERT_TRUE(next_ended.ok()) << next_ended.status();
  EXPECT_EQ(next_ended->state(), Job::SUCCEEDED) << next_ended->message();
}

// TrainJob.metrics (issue 28): the user's metrics appear in every evaluated epoch's event and in
// the summary beside the built-in ones, reduced as declared: a batch accuracy (mean) equals the
// built-in accuracy over the split, and a metric returning the batch size gives, over the test
// split's batches of 1000, 1000 and 500 examples (evaluations run in the job's batch_size),
// 2500 summed and (1000² + 1000² + 500²) / 2500 = 900 as the example-weighted mean.
TEST_F(HangsE2eTest, TheUsersMetricsAreReportedBesideTheBuiltInOnesAsDeclared) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(""));
  mpsd::v1::SubmitJobRequest request = ChattyJob(96);
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.set_batch_size(1000);  // one step an epoch (72 training examples)
  job.set_seed(5);
  job.set_epochs(2);
  job.mutable_dataset()->mutable_synthetic()->set_test_examples(2500);
  job.mutable_dataset()->mutable_validation()->set_fraction(0.25);  // 24 examples, one batch
  auto add = [&](const std::string& name, const std::string& kind, const std::string& reduction) {
    mpsd::v1::MetricSpec* metric = job.add_metrics();
    metric->set_name(name);
    metric->set_torchscript(WriteScript(dir_, kind));
    metric->set_reduction(reduction);
  };
  add("my_accuracy", "metric_accuracy", "");
  add("examples", "metric_batch_size", "sum");
  add("mean_batch", "metric_batch_size", "mean");
  // Model selection may watch one: the best epoch by it (patience long enough not to stop).
  job.mutable_early_stopping()->set_monitor("val_my_accuracy");
  job.mutable_early_stopping()->set_mode("max");
  job.mutable_early_stopping()->set_patience(5);
  absl::StatusOr<Job> submitted = rpc::Submit(*daemon_, request);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, submitted->id(), absl::Seconds(120));
  ASSERT_TRUE(ended.ok()) << ended.status();
  ASSERT_EQ(ended->state(), Job::SUCCEEDED) << ended->message();

  std::vector<mpsd::v1::EpochMetrics> epochs;
  mpsd::v1::JobSummary summary;
  for (const mpsd::v1::JobEvent& event : rpc::StreamAll(*daemon_, submitted->id())) {
    if (event.has_epoch()) epochs.push_back(event.epoch());
    if (event.has_summary()) summary = event.summary();
  }
  ASSERT_EQ(epochs.size(), 2u);
  for (const mpsd::v1::EpochMetrics& epoch : epochs) {
    const auto& m = epoch.metrics();
    SCOPED_TRACE(epoch.epoch());
    // Validation every epoch (24 examples, one batch); the built-in figures in the map too.
    ASSERT_TRUE(m.contains("val_my_accuracy") && m.contains("val_examples"));
    EXPECT_NEAR(m.at("val_my_accuracy"), epoch.val_accuracy(), 1e-6);
    EXPECT_DOUBLE_EQ(m.at("val_examples"), 24);
    EXPECT_DOUBLE_EQ(m.at("val_mean_batch"), 24);
    EXPECT_DOUBLE_EQ(m.at("val_loss"), epoch.val_loss());
    EXPECT_DOUBLE_EQ(m.at("train_loss"), epoch.train_loss());
    EXPECT_DOUBLE_EQ(m.at("train_accuracy"), epoch.train_accuracy());
  }
  // The test split (evaluate_test defaults to the end with a validation split): the last epoch.
  EXPECT_FALSE(epochs[0].metrics().contains("test_examples"));
  const auto& last = epochs[1].metrics();
  ASSERT_TRUE(last.contains("test_my_accuracy") && last.contains("test_examples"));
  EXPECT_NEAR(last.at("test_my_accuracy"), epochs[1].test_accuracy(), 1e-6);
  EXPECT_DOUBLE_EQ(last.at("test_examples"), 2500);
  EXPECT_DOUBLE_EQ(last.at("test_mean_batch"), 900);
  EXPECT_DOUBLE_EQ(last.at("test_accuracy"), epochs[1].test_accuracy());
  // The summary: the newest of each.
  EXPECT_EQ(summary.task(), "classification");
  EXPECT_DOUBLE_EQ(summary.metrics().at("test_examples"), 2500);
  EXPECT_DOUBLE_EQ(summary.metrics().at("test_mean_batch"), 900);
  EXPECT_DOUBLE_EQ(summary.metrics().at("val_examples"), 24);
  EXPECT_NEAR(summary.metrics().at("test_my_accuracy"), summary.test_accuracy(), 1e-6);
  EXPECT_EQ(summary.monitor(), "val_my_accuracy");
  EXPECT_EQ(summary.best_value(), std::max(epochs[0].metrics().at("val_my_accuracy"),
                                           epochs[1].metrics().at("val_my_accuracy")));
  // mpsctl shows them under the user's names.
  const CommandResult shown =
      RunCommand({MpsctlPath(), "--server", daemon_->address(), "get", submitted->id()});
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("examples 2500.0000"));
  EXPECT_THAT(shown.out, HasSubstr("mean_batch 900.0000"));
  const CommandResult logs =
      RunCommand({MpsctlPath(), "--server", daemon_->address(), "logs", submitted->id()});
  EXPECT_THAT(logs.out, HasSubstr("val loss "));
  EXPECT_THAT(logs.out, HasSubstr("examples 24.0000"));
}

// A sweep over a job with metrics: fused trials do not measure them, so the trials train one by
// one (the lead's log says why) and each reports its own metrics.
TEST_F(HangsE2eTest, ASweepOverAJobWithMetricsTrainsUnfusedAndEachTrialReportsThem) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(""));
  mpsd::v1::SubmitJobRequest request = ChattyJob(64);
  request.mutable_train_job()->set_batch_size(16);
  mpsd::v1::MetricSpec* metric = request.mutable_train_job()->add_metrics();
  metric->set_name("examples");
  metric->set_torchscript(WriteScript(dir_, "metric_batch_size"));
  metric->set_reduction("sum");
  mpsd::v1::SweepParameter* lr = request.mutable_sweep()->add_grid();
  lr->set_path("optimizer.learning_rate");
  for (const char* value : {"0.01", "0.001"}) lr->add_values(value);
  request.mutable_sweep()->set_fuse("auto");
  absl::StatusOr<Job> sweep = rpc::Submit(*daemon_, request);
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, sweep->id(), absl::Seconds(120));
  ASSERT_TRUE(ended.ok()) << ended.status();
  ASSERT_EQ(ended->state(), Job::SUCCEEDED) << ended->message();
  ASSERT_EQ(ended->trial_job_ids_size(), 2);
  std::string logs;
  for (const std::string& id : ended->trial_job_ids()) {
    absl::StatusOr<Job> trial = rpc::Get(*daemon_, id);
    ASSERT_TRUE(trial.ok()) << trial.status();
    EXPECT_EQ(trial->state(), Job::SUCCEEDED) << trial->message();
    EXPECT_DOUBLE_EQ(trial->summary().metrics().at("test_examples"), 10) << id;
    for (const mpsd::v1::JobEvent& event : rpc::StreamAll(*daemon_, id)) {
      if (event.has_log()) absl::StrAppend(&logs, event.log().text(), "\n");
    }
  }
  EXPECT_THAT(logs, HasSubstr("train_job.metrics is not supported fused yet"));
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("other trial(s) of sweep")));
}

// Metrics that cannot work are refused at submit naming the field: one value per example, a
// forward of one argument, a built-in metric's name, a name given twice, an unknown reduction, a
// name with a split's prefix (val_top2 would be reported as test_val_top2).
TEST_F(HangsE2eTest, BadMetricsAreRefusedAtSubmitNamingTheField) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(""));
  const std::string accuracy = WriteScript(dir_, "metric_accuracy");
  auto job = [&](const std::string& name, const std::string& path, const std::string& reduction) {
    mpsd::v1::SubmitJobRequest request = ChattyJob(32);
    mpsd::v1::MetricSpec* first = request.mutable_train_job()->add_metrics();
    first->set_name("fine");
    first->set_torchscript(accuracy);
    mpsd::v1::MetricSpec* second = request.mutable_train_job()->add_metrics();
    second->set_name(name);
    second->set_torchscript(path);
    second->set_reduction(reduction);
    return request;
  };
  struct Case {
    mpsd::v1::SubmitJobRequest request;
    std::string expected;
  };
  const std::string per_example = WriteScript(dir_, "metric_per_example");
  const std::string one_argument = WriteScript(dir_, "metric_one_argument");
  std::vector<Case> cases = {
      {job("top", per_example, ""),
       absl::StrCat("train_job.metrics[1].torchscript: ", per_example,
                    ": forward must return the batch's value as a scalar tensor for logits "
                    "[2, 2] float32 and targets [2] int64, got [2] Float")},
      {job("top", one_argument, ""),
       absl::StrCat("train_job.metrics[1].torchscript: ", one_argument,
                    ": forward failed on logits [2, 2] float32 and targets [2] int64: ")},
      {job("accuracy", accuracy, ""),
       "train_job.metrics[1].name: \"accuracy\" is a built-in metric's name"},
      {job("fine", accuracy, ""), "train_job.metrics[1].name: \"fine\" names an earlier metric"},
      {job("top", accuracy, "median"),
       "train_job.metrics[1].reduction: unknown \"median\" (known: mean, sum)"},
      {job("top-2", accuracy, ""), "train_job.metrics[1].name: \"top-2\" is not a metric name"},
      {job("val_top2", accuracy, ""),
       "train_job.metrics[1].name: \"val_top2\" starts with \"val_\": mpsd adds the split's "
       "prefix itself (a metric named \"top2\" is reported as val_top2 and test_top2)"},
  };
  // Early stopping on a metric of the job's own needs its direction: mpsd cannot tell.
  mpsd::v1::SubmitJobRequest monitored = job("top", accuracy, "");
  monitored.mutable_train_job()->mutable_dataset()->mutable_validation()->set_fraction(0.25);
  monitored.mutable_train_job()->mutable_early_stopping()->set_monitor("val_top");
  cases.push_back({monitored,
                   "train_job.early_stopping.mode: required for val_top, a metric of the job's "
                   "own: \"max\" where larger is better, else \"min\""});
  for (const Case& c : cases) {
    const absl::Status refused = rpc::Submit(*daemon_, c.request).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_THAT(refused.message(), HasSubstr(c.expected));
  }
}

// An exception raised by the user's code while the job runs (a loss that gives up after 3
// batches, a metric or a model that raises on real data) fails the job INVALID_SPEC naming the
// field and the script's own message, not INTERNAL; a metric that never returns is user code
// under the stall timeout as a model is; the daemon runs the next job.
TEST_F(HangsE2eTest, UserCodeThatRaisesAtRunTimeFailsItsJobNamingTheField) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("executor:\n  user_code_stall_timeout_s: 3\n"));
  auto run = [&](const mpsd::v1::SubmitJobRequest& request) {
    absl::StatusOr<Job> submitted = rpc::Submit(*daemon_, request);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    if (!submitted.ok()) return Job();
    absl::StatusOr<Job> ended = rpc::WaitForEnd(*daemon_, submitted->id(), absl::Seconds(120));
    EXPECT_TRUE(ended.ok()) << ended.status();
    return ended.ok() ? *ended : Job();
  };
  mpsd::v1::SubmitJobRequest with_loss = ChattyJob(96);
  with_loss.mutable_train_job()->set_batch_size(16);
  const std::string loss = WriteScript(dir_, "loss_raise_after_3");
  with_loss.mutable_train_job()->mutable_loss()->set_torchscript(loss);
  Job ended = run(with_loss);
  EXPECT_EQ(ended.state(), Job::FAILED);
  EXPECT_EQ(ended.failure_reason(), Job::INVALID_SPEC);
  EXPECT_THAT(ended.message(),
              HasSubstr(absl::StrCat("train_job.loss.torchscript: ", loss,
                                     ": forward on logits [16, 2] float32 and targets [16] int64 "
                                     "failed: ")));
  EXPECT_THAT(ended.message(), HasSubstr("my loss gives up after 3 batches"));
  EXPECT_THAT(ended.message(), ::testing::Not(HasSubstr("unexpected exception")));

  mpsd::v1::SubmitJobRequest with_metric = ChattyJob(32);
  with_metric.mutable_train_job()->set_batch_size(16);
  mpsd::v1::MetricSpec* metric = with_metric.mutable_train_job()->add_metrics();
  metric->set_name("ok");
  metric->set_torchscript(WriteScript(dir_, "metric_accuracy"));
  metric = with_metric.mutable_train_job()->add_metrics();
  metric->set_name("raises");
  metric->set_torchscript(WriteScript(dir_, "metric_raise_on_data"));
  ended = run(with_metric);
  EXPECT_EQ(ended.state(), Job::FAILED);
  EXPECT_EQ(ended.failure_reason(), Job::INVALID_SPEC);
  EXPECT_THAT(ended.message(), HasSubstr("train_job.metrics[1].torchscript: "));
  EXPECT_THAT(ended.message(), HasSubstr("my metric cannot count"));

  const std::string model = WriteScript(dir_, "raise_on_data");
  ended = run(ScriptJob(model, 8));
  EXPECT_EQ(ended.state(), Job::FAILED);
  EXPECT_EQ(ended.failure_reason(), Job::INVALID_SPEC);
  EXPECT_THAT(ended.message(), HasSubstr(absl::StrCat("train_job.model.torchscript: ", model,
                                                      ": forward on inputs [1, 8] failed: ")));
  EXPECT_THAT(ended.message(), HasSubstr("my model refuses real data"));

  mpsd::v1::SubmitJobRequest hanging = ChattyJob(32);
  hanging.mutable_train_job()->set_batch_size(16);
  metric = hanging.mutable_train_job()->add_metrics();
  metric->set_name("hangs");
  const std::string hang = WriteScript(dir_, "metric_hang_on_data");
  metric->set_torchscript(hang);
  ended = run(hanging);
  EXPECT_EQ(ended.state(), Job::FAILED);
  EXPECT_EQ(ended.failure_reason(), Job::USER_CODE_TIMEOUT);
  EXPECT_THAT(ended.message(), HasSubstr("train_job.metrics[0].torchscript (" + hang + ")"));

  EXPECT_EQ(run(ChattyJob(16)).state(), Job::SUCCEEDED);
}

// ---- Issue 26 item 4: bounds at submit ------------------------------------------------------

// Five BenchJobs with 1,000,000 batch sizes made every later `mpsctl list/get` fail with
// "Received message larger than max" forever. Every repeated field, the rows of a BenchJob, its
// iterations and a TrainJob's epochs are bounded at submit, the error names the field, and
// the daemon's answers stay sendable.
TEST_F(HangsE2eTest, RepeatedFieldsEpochsAndIterationsAreBoundedAtSubmit) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(""));
  auto bench = [] {
    mpsd::v1::SubmitJobRequest request;
    request.mutable_bench_job()->add_models("mlp");
    request.mutable_bench_job()->add_devices("cpu");
    return request;
  };
  struct Case {
    mpsd::v1::SubmitJobRequest request;
    std::string expected;
  };
  std::vector<Case> cases;
  {
    mpsd::v1::SubmitJobRequest r = bench();
    for (int i = 0; i < 100'000; ++i) r.mutable_bench_job()->add_batch_sizes(1 + i % 64);
    cases.push_back({r, "bench_job.batch_sizes: at most 64 values, got 100000"});
  }
  {
    mpsd::v1::SubmitJobRequest r = bench();
    r.mutable_bench_job()->add_batch_sizes(1);
    for (int i = 0; i < 65; ++i) r.mutable_bench_job()->add_input_shape(1);
    cases.push_back({r, "bench_job.input_shape: at most 64 values, got 65"});
  }
  {
    // 64 batch sizes × 16 models × 2 modes: 2048 rows.
    mpsd::v1::SubmitJobRequest r = bench();
    for (int i = 1; i < 16; ++i) r.mutable_bench_job()->add_models("mlp");
    for (int i = 1; i <= 64; ++i) r.mutable_bench_job()->add_batch_sizes(i);
    r.mutable_bench_job()->set_mode("both");
    cases.push_back({r, "bench_job.batch_sizes: the job would measure 2048 rows"});
  }
  {
    mpsd::v1::SubmitJobRequest r = bench();
    r.mutable_bench_job()->add_batch_sizes(1);
    r.mutable_bench_job()->set_iters(2'000'000'000);
    cases.push_back({r, "bench_job.iters: must be in [1, 1000000], got 2000000000"});
  }
  {
    mpsd::v1::SubmitJobRequest r = ChattyJob(64);
    r.mutable_train_job()->set_epochs(1'000'000);
    cases.push_back({r, "train_job.epochs: must be in [1, 100000], got 1000000"});
  }
  {
    mpsd::v1::SubmitJobRequest r = ChattyJob(64);
    mpsd::v1::SweepParameter* p = r.mutable_sweep()->add_grid();
    p->set_path("optimizer.learning_rate");
    for (int i = 0; i < 1001; ++i) p->add_values("0.1");
    cases.push_back({r, "sweep.grid[0].values: at most 1000 values, got 1001"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    absl::StatusOr<Job> job = rpc::Submit(*daemon_, c.request);
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
    EXPECT_THAT(job.status().message(), HasSubstr(c.expected));
  }
  // At the bounds a job is accepted, and every answer about it can be sent.
  mpsd::v1::SubmitJobRequest edge = bench();
  for (int i = 1; i <= 64; ++i) edge.mutable_bench_job()->add_batch_sizes(i);
  edge.mutable_bench_job()->set_iters(1);
  edge.mutable_bench_job()->set_warmup_iters(0);
  absl::StatusOr<Job> accepted = rpc::Submit(*daemon_, edge);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  const CommandResult list = RunCommand({MpsctlPath(), "--server", daemon_->address(), "list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  absl::StatusOr<Job> done = rpc::WaitForEnd(*daemon_, accepted->id(), absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), Job::SUCCEEDED) << done->message();
}

}  // namespace
}  // namespace mpsd::testing
