// ChildProcess: fork, execve, signals, waitpid.
#include "server/executor/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mpsd::server {
namespace {

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// In the forked child, which may only call async-signal-safe functions until execve: a clean
// signal state (mpsd blocks SIGTERM/SIGINT and ignores SIGPIPE, and both survive execve), its
// own process group, death with the parent, stdout onto stderr, no inherited descriptors.
[[noreturn]] void ExecChild(char* const* argv, char* const* envp) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2}) {
    signal(sig, SIG_DFL);
  }
  setpgid(0, 0);
#if defined(__linux__)
  prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
  dup2(STDERR_FILENO, STDOUT_FILENO);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  const long max_fd = std::min(sysconf(_SC_OPEN_MAX), 65536L);
  for (int fd = 3; fd < max_fd; ++fd) close(fd);
  execve(argv[0], argv, envp);
  _exit(127);
}

}  // namespace

const char* SignalName(int signal) {
  switch (signal) {
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGILL:
      return "SIGILL";
    case SIGFPE:
      return "SIGFPE";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "signal";
  }
}

std::string DescribeExitStatus(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return absl::StrFormat("killed by signal %d (%s)", sig, SignalName(sig));
  }
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  return absl::StrCat("ended with wait status ", wait_status);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(std::vector<std::string> args,
                                                                  std::vector<std::string> env,
                                                                  std::function<void()> on_exit) {
  if (args.empty()) return absl::InvalidArgumentError("ChildProcess::Spawn: no program");
  // Built before fork(): the child may not allocate.
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(env);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) ExecChild(argv.data(), envp.data());
  std::unique_ptr<ChildProcess> child(new ChildProcess(pid));
  ChildProcess* raw = child.get();
  child->watcher_ = std::thread(
      [raw, on_exit = std::move(on_exit)]() mutable { raw->Watch(std::move(on_exit)); });
  return child;
}

void ChildProcess::Watch(std::function<void()> on_exit) {
  siginfo_t info;
  // WNOWAIT: the child stays a zombie until its owner reaps it. ECHILD: the owner reaped it
  // first (Reap, or the destructor's); either way it has exited.
  while (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  {
    absl::MutexLock lock(&mu_);
    exited_ = true;
  }
  if (on_exit) on_exit();
}

bool ChildProcess::HasExited() const {
  absl::MutexLock lock(&mu_);
  return exited_;
}

ChildProcess::~ChildProcess() {
  if (!wait_status_.has_value()) {
    Signal(SIGKILL);
    Reap();
  }
  if (watcher_.joinable()) watcher_.join();
}

void ChildProcess::Signal(int signal) {
  if (!wait_status_.has_value()) kill(pid_, signal);
}

std::optional<int> ChildProcess::Wait(bool block) {
  if (wait_status_.has_value()) return wait_status_;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, block ? 0 : WNOHANG);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return std::nullopt;
    // r < 0: not our child any more (reaped elsewhere): gone.
    wait_status_ = r == pid_ ? status : 0;
    // The watcher has seen the exit, or sees ECHILD now: it ends at once.
    if (watcher_.joinable()) watcher_.join();
    return wait_status_;
  }
}

std::optional<int> ChildProcess::TryReap() { return Wait(/*block=*/false); }

std::optional<int> ChildProcess::ReapWithin(absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&exited_), timeout);
    if (!exited_) return std::nullopt;
  }
  return Wait(/*block=*/true);  // it has exited: returns at once
}

int ChildProcess::Reap() { return *Wait(/*block=*/true); }

}  // namespace mpsd::server
