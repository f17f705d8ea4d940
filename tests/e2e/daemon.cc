#include "tests/e2e/daemon.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "api/status.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/files.h"

namespace mpsd::testing {
namespace {

// A context whose deadline is 30 s from now.
std::unique_ptr<grpc::ClientContext> UnaryContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

// Runs one unary call of the stub and returns its response or its error.
template <typename Response, typename Request, typename Call>
absl::StatusOr<Response> Unary(Call call, const Request& request) {
  Response response;
  grpc::Status status = call(UnaryContext().get(), request, &response);
  if (!status.ok()) return api::FromGrpcStatus(status);
  return response;
}

}  // namespace

pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::string& err_path) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null_fd = open("/dev/null", O_RDONLY);
    const int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(null_fd, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

CommandResult RunCommandWithin(const std::vector<std::string>& argv, absl::Duration limit) {
  TempDir dir;
  const std::string out_path = dir.str() + "/out", err_path = dir.str() + "/err";
  const pid_t pid = Spawn(argv, out_path, err_path);
  int status = 0;
  bool killed = false;
  const absl::Time deadline = absl::Now() + limit;
  while (waitpid(pid, &status, limit == absl::InfiniteDuration() ? 0 : WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      killed = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  CommandResult result;
  result.exit_code =
      killed ? -1 : (WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

CommandResult RunCommand(const std::vector<std::string>& argv) {
  return RunCommandWithin(argv, absl::InfiniteDuration());
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t size = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size);
  close(fd);
  return ntohs(addr.sin_port);
}

pid_t FindExecutor(const std::string& state_dir, const std::string& also) {
  for (const std::filesystem::directory_entry& entry :
       std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadFile(entry.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (absl::StrContains(cmdline, "mpsd-executor") && absl::StrContains(cmdline, state_dir) &&
        absl::StrContains(cmdline, also)) {
      return static_cast<pid_t>(std::stoi(name));
    }
  }
  return 0;
}

Daemon::Daemon(std::string state_dir, std::string socket_path)
    : state_dir_(std::move(state_dir)),
      address_("unix://" + socket_path),
      log_path_(state_dir_ + ".log") {}

Daemon::~Daemon() {
  if (pid_ > 0) Stop(SIGTERM);
}

void Daemon::Start(const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = wrapper_;
  for (const std::string& arg :
       {MpsdPath(), std::string("--listen"), address_, std::string("--state-dir"), state_dir_}) {
    argv.push_back(arg);
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  const std::string socket_path = address_.substr(std::strlen("unix://"));
  std::error_code ignored;
  std::filesystem::remove(socket_path, ignored);  // left behind by SIGKILL
  pid_ = Spawn(argv, log_path_ + ".out", log_path_);
  // Wait for the socket file first: a channel that fails to connect backs off for seconds.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(socket_path)) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      FAIL() << "mpsd exited during start-up; its log:\n" << ReadFile(log_path_);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      FAIL() << "mpsd did not create " << socket_path << " within 60 s; its log:\n"
             << ReadFile(log_path_);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A subchannel pool of its own: gRPC's global pool could hand this channel the connection
  // to the daemon that listened on this path before a restart, which fails the first call with
  // UNAVAILABLE "Broken pipe" when that daemon's end is gone.
  grpc::ChannelArguments channel_args;
  channel_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel =
      grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), channel_args);
  stub_ = mpsd::v1::JobService::NewStub(channel);
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  mpsd::v1::DeviceInfo device;
  grpc::Status status = stub_->GetDevice(&context, mpsd::v1::GetDeviceRequest(), &device);
  ASSERT_TRUE(status.ok()) << "mpsd does not answer on " << address_ << ": "
                           << status.error_message() << "; its log:\n"
                           << ReadFile(log_path_);
}

int Daemon::Stop(int signal, absl::Duration limit) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  const absl::Time deadline = absl::Now() + limit;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      ADD_FAILURE() << "mpsd did not exit within " << absl::FormatDuration(limit) << " of signal "
                    << signal << "; killing it";
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  pid_ = -1;
  return status;
}

std::string MpsdPath() { return std::string(MPSD_BINARY_DIR) + "/server/mpsd"; }
std::string MpsctlPath() { return std::string(MPSD_BINARY_DIR) + "/client/mpsctl"; }
std::string ExecutorPath() { return std::string(MPSD_BINARY_DIR) + "/trainer/mpsd-executor"; }
std::string SourcePath(const std::string& relative) {
  return std::string(MPSD_SOURCE_DIR) + "/" + relative;
}

std::vector<mpsd::v1::JobEvent> ParseEventLines(const std::string& text) {
  std::vector<mpsd::v1::JobEvent> events;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    mpsd::v1::JobEvent event;
    auto status = google::protobuf::util::JsonStringToMessage(std::string(line), &event);
    EXPECT_TRUE(status.ok()) << "not a JobEvent: " << line << ": " << status.ToString();
    events.push_back(std::move(event));
  }
  return events;
}

mpsd::v1::SubmitJobRequest TrainJobRequest(int64_t limit_train, int64_t limit_test, int epochs,
                                           int batch_size, const std::string& model) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob* job = request.mutable_train_job();
  job->mutable_model()->set_name(model);
  job->mutable_dataset()->set_name("fashion-mnist");
  job->mutable_dataset()->set_root("/usr/share/datasets/fashion-mnist");
  job->mutable_dataset()->set_limit_train(limit_train);
  job->mutable_dataset()->set_limit_test(limit_test);
  job->set_batch_size(batch_size);
  job->set_epochs(epochs);
  job->mutable_optimizer()->set_name("adam");
  job->mutable_optimizer()->set_learning_rate(0.001);
  job->set_seed(1);
  job->set_device("cpu");
  return request;
}

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

std::string TcpAddress(const Daemon& daemon) {
  // The unix socket may answer before the TCP listener's line is in the log.
  std::string log;
  WaitUntil(
      [&] {
        log = ReadFile(daemon.log_path());
        return absl::StrContains(log, "mpsd listening on 127.0.0.1:");
      },
      absl::Seconds(30));
  const size_t at = log.find("mpsd listening on 127.0.0.1:");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no TCP listener in the log:\n" << log;
    return "";
  }
  const size_t start = at + std::strlen("mpsd listening on ");
  return log.substr(start, log.find(' ', start) - start);
}

namespace rpc {

absl::StatusOr<mpsd::v1::Job> Submit(Daemon& daemon, const mpsd::v1::SubmitJobRequest& request) {
  auto call = [&](auto* c, const auto& r, auto* o) { return daemon.stub().SubmitJob(c, r, o); };
  return Unary<mpsd::v1::Job>(call, request);
}

absl::StatusOr<mpsd::v1::Job> Get(Daemon& daemon, const std::string& job_id) {
  mpsd::v1::GetJobRequest request;
  request.set_job_id(job_id);
  auto call = [&](auto* c, const auto& r, auto* o) { return daemon.stub().GetJob(c, r, o); };
  return Unary<mpsd::v1::Job>(call, request);
}

absl::StatusOr<mpsd::v1::Job> Cancel(Daemon& daemon, const std::string& job_id) {
  mpsd::v1::CancelJobRequest request;
  request.set_job_id(job_id);
  auto call = [&](auto* c, const auto& r, auto* o) { return daemon.stub().CancelJob(c, r, o); };
  return Unary<mpsd::v1::Job>(call, request);
}

absl::StatusOr<mpsd::v1::ListJobsResponse> List(Daemon& daemon,
                                                const mpsd::v1::ListJobsRequest& request) {
  auto call = [&](auto* c, const auto& r, auto* o) { return daemon.stub().ListJobs(c, r, o); };
  return Unary<mpsd::v1::ListJobsResponse>(call, request);
}

absl::StatusOr<mpsd::v1::ServerStatus> Status(Daemon& daemon) {
  auto call = [&](auto* c, const auto& r, auto* o) {
    return daemon.stub().GetServerStatus(c, r, o);
  };
  return Unary<mpsd::v1::ServerStatus>(call, mpsd::v1::GetServerStatusRequest());
}

absl::StatusOr<mpsd::v1::DeviceInfo> Device(Daemon& daemon) {
  auto call = [&](auto* c, const auto& r, auto* o) { return daemon.stub().GetDevice(c, r, o); };
  return Unary<mpsd::v1::DeviceInfo>(call, mpsd::v1::GetDeviceRequest());
}

std::vector<mpsd::v1::JobEvent> StreamAll(Daemon& daemon, const std::string& job_id,
                                          int64_t after_seq, grpc::Status* final_status,
                                          bool latest_attempt_only) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  mpsd::v1::StreamEventsRequest request;
  request.set_job_id(job_id);
  request.set_after_seq(after_seq);
  request.set_latest_attempt_only(latest_attempt_only);
  auto reader = daemon.stub().StreamEvents(&context, request);
  std::vector<mpsd::v1::JobEvent> events;
  mpsd::v1::JobEvent event;
  while (reader->Read(&event)) {
    if (!event.has_heartbeat()) events.push_back(event);
  }
  grpc::Status status = reader->Finish();
  if (final_status != nullptr) *final_status = status;
  return events;
}

absl::StatusOr<mpsd::v1::Job> WaitForEnd(Daemon& daemon, const std::string& job_id,
                                         absl::Duration timeout) {
  absl::StatusOr<mpsd::v1::Job> job;
  auto ended = [&] {
    job = Get(daemon, job_id);
    if (!job.ok()) return true;
    const mpsd::v1::Job::State state = job->state();
    return state == mpsd::v1::Job::SUCCEEDED || state == mpsd::v1::Job::FAILED ||
           state == mpsd::v1::Job::CANCELLED || state == mpsd::v1::Job::INTERRUPTED;
  };
  if (!WaitUntil(ended, timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", job_id, " did not end within ", absl::FormatDuration(timeout)));
  }
  return job;
}

}  // namespace rpc

namespace rpc_ok {

mpsd::v1::Job Submit(Daemon& daemon, const mpsd::v1::SubmitJobRequest& request) {
  absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(daemon, request);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(mpsd::v1::Job());
}

mpsd::v1::Job Get(Daemon& daemon, const std::string& job_id) {
  absl::StatusOr<mpsd::v1::Job> job = rpc::Get(daemon, job_id);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(mpsd::v1::Job());
}

mpsd::v1::Job WaitForEnd(Daemon& daemon, const std::string& job_id) {
  absl::StatusOr<mpsd::v1::Job> job = rpc::WaitForEnd(daemon, job_id);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(mpsd::v1::Job());
}

}  // namespace rpc_ok

}  // namespace mpsd::testing
