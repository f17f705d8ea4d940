#include "tests/e2e/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "google/protobuf/util/json_util.h"

namespace mpsd::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// fork + exec with stdout/stderr redirected to files; returns the pid.
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

}  // namespace

TempDir::TempDir() {
  std::string pattern = std::filesystem::temp_directory_path().string() + "/mpsd-test-XXXXXX";
  path_ = mkdtemp(pattern.data());
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

CommandResult RunCommand(const std::vector<std::string>& argv) {
  TempDir dir;
  const std::string out_path = dir.path() + "/out", err_path = dir.path() + "/err";
  const pid_t pid = Spawn(argv, out_path, err_path);
  int status = 0;
  waitpid(pid, &status, 0);
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

Daemon::Daemon(std::string state_dir, std::string socket_path)
    : state_dir_(std::move(state_dir)),
      address_("unix://" + socket_path),
      log_path_(state_dir_ + ".log") {}

Daemon::~Daemon() {
  if (pid_ > 0) Stop(SIGTERM);
}

void Daemon::Start(const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = {MpsdPath(), "--listen", address_, "--state-dir", state_dir_};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  pid_ = Spawn(argv, log_path_ + ".out", log_path_);
  // Wait for the socket file first: a channel that fails to connect backs off for seconds.
  const std::string socket_path = address_.substr(std::strlen("unix://"));
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
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
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

int Daemon::Stop(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

std::string MpsdPath() { return std::string(MPSD_BINARY_DIR) + "/server/mpsd"; }
std::string MpsctlPath() { return std::string(MPSD_BINARY_DIR) + "/client/mpsctl"; }
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

}  // namespace mpsd::testing
