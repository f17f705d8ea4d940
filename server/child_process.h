// ChildProcess: a program mpsd starts and owns (mpsd-executor): fork and execve with a clean
// process state, signals, and reaping, with the exit status in words.
#ifndef MPSD_SERVER_CHILD_PROCESS_H_
#define MPSD_SERVER_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mpsd::server {

// "SIGKILL", "SIGSEGV", …, for the signals a crashed or stopped program dies of; "signal" for
// any other (sigabbrev_np is glibc-only).
const char* SignalName(int signal);

// A waitpid status in words: "killed by signal 9 (SIGKILL)", "exited with code 1".
std::string DescribeExitStatus(int wait_status);

// One child process, from Spawn until it is reaped. Thread-compatible: one thread at a time
// (the supervisor's monitor thread) may signal and reap it; pid() may be read from any thread.
// The destructor kills (SIGKILL) and reaps a child that is still running, so that no process
// outlives its owner.
class ChildProcess {
 public:
  // Starts `args[0]` (a path; no PATH search) with arguments `args` and exactly the environment
  // `env` ("NAME=value"). The child starts with every signal unblocked and at its default
  // action, in a process group of its own (a terminal's Ctrl-C reaches only the parent), stdin
  // on /dev/null, stdout onto stderr, no other inherited descriptors, and (Linux) is killed when
  // the parent dies. A program that cannot be executed exits with code 127. Errors:
  // INVALID_ARGUMENT for empty `args`; INTERNAL when fork fails.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(std::vector<std::string> args,
                                                             std::vector<std::string> env);

  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends `signal` unless the child was reaped already (its pid may belong to another process
  // by then).
  void Signal(int signal);

  // Reaps the child if it has exited; returns its wait status, or nullopt while it runs. Once
  // reaped, returns the same status again.
  std::optional<int> TryReap();

  // Waits up to `timeout` for the child to exit (checking every 10 ms: waitpid has no timeout);
  // returns its wait status, or nullopt if it still runs.
  std::optional<int> ReapWithin(absl::Duration timeout);

  // Waits for the child to exit and returns its wait status.
  int Reap();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}

  // waitpid, retried on EINTR; `block`: wait for the exit.
  std::optional<int> Wait(bool block);

  const pid_t pid_;
  // Set once reaped.
  std::optional<int> wait_status_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CHILD_PROCESS_H_
