// ChildProcess: a program mpsd starts and owns (mpsd-executor): fork and execve with a clean
// process state, signals, and reaping, with the exit status in words.
#ifndef MPSD_SERVER_EXECUTOR_CHILD_PROCESS_H_
#define MPSD_SERVER_EXECUTOR_CHILD_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mpsd::server {

// "SIGKILL", "SIGSEGV", …, for the signals a crashed or stopped program dies of; "signal" for
// any other (sigabbrev_np is glibc-only).
const char* SignalName(int signal);

// A waitpid status in words: "killed by signal 9 (SIGKILL)", "exited with code 1".
std::string DescribeExitStatus(int wait_status);

// One child process, from Spawn until it is reaped. Its exit is an event, not something polled
// for: a watcher thread of its own blocks in waitid(WNOWAIT) until the child exits (leaving it
// unreaped, so that its pid cannot be reused while the owner may still signal it), then wakes
// ReapWithin and runs the `on_exit` callback given to Spawn.
// Thread-compatible: one thread at a time (the supervisor's monitor thread) may signal and reap
// it; pid() and HasExited() may be called from any thread. The destructor kills (SIGKILL) and
// reaps a child that is still running, so that no process outlives its owner.
class ChildProcess {
 public:
  // Starts `args[0]` (a path; no PATH search) with arguments `args` and exactly the environment
  // `env` ("NAME=value"). The child starts with every signal unblocked and at its default
  // action, in a process group of its own (a terminal's Ctrl-C reaches only the parent), stdin
  // on /dev/null, stdout onto stderr, no other inherited descriptors, and (Linux) is killed when
  // the parent dies. A program that cannot be executed exits with code 127. `on_exit`, when
  // set, runs once on the watcher thread as soon as the child has exited (before it is reaped);
  // it may take a lock, but then the owner must not hold that lock while it reaps (TryReap,
  // ReapWithin, Reap and the destructor wait for the watcher thread once the child is reaped).
  // Errors: INVALID_ARGUMENT for empty `args`; INTERNAL when fork fails.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(
      std::vector<std::string> args, std::vector<std::string> env,
      std::function<void()> on_exit = nullptr);

  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends `signal` unless the child was reaped already (its pid may belong to another process
  // by then).
  void Signal(int signal);

  // Whether the child has exited (reaped or not). Thread-safe.
  bool HasExited() const;

  // Reaps the child if it has exited; returns its wait status, or nullopt while it runs. Once
  // reaped, returns the same status again.
  std::optional<int> TryReap();

  // Waits up to `timeout` for the child to exit (woken by the watcher thread, no polling);
  // returns its wait status, or nullopt if it still runs.
  std::optional<int> ReapWithin(absl::Duration timeout);

  // Waits for the child to exit and returns its wait status.
  int Reap();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}

  // The watcher thread: blocks until the child exits, then sets exited_ and runs on_exit.
  void Watch(std::function<void()> on_exit);

  // waitpid, retried on EINTR; `block`: wait for the exit. Joins the watcher once reaped.
  std::optional<int> Wait(bool block);

  const pid_t pid_;
  // Set once reaped.
  std::optional<int> wait_status_;
  std::thread watcher_;

  mutable absl::Mutex mu_;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_EXECUTOR_CHILD_PROCESS_H_
