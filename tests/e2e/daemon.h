// Test fixture pieces for end-to-end tests: a real mpsd process on a temp unix socket with a
// temp state dir, and a way to run mpsctl (or any command) and capture what it prints.
#ifndef MPSD_TESTS_E2E_DAEMON_H_
#define MPSD_TESTS_E2E_DAEMON_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "mpsd/v1/mpsd.grpc.pb.h"

namespace mpsd::testing {

// A fresh directory under the test's temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What a finished command printed.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv[0] with the arguments (no shell) to completion, stdin from /dev/null.
CommandResult RunCommand(const std::vector<std::string>& argv);

// Writes `text` to `path`.
void WriteFile(const std::string& path, const std::string& text);

// One mpsd process. Start() returns once the daemon answers on its socket.
class Daemon {
 public:
  // state_dir: kept across restarts when the same path is passed again.
  Daemon(std::string state_dir, std::string socket_path);
  // Stops the daemon with SIGTERM if it still runs.
  ~Daemon();

  // Starts mpsd and waits (up to 60 s) until it answers GetDevice. Fails the test otherwise.
  void Start(const std::vector<std::string>& extra_args = {});
  // Sends `signal` and waits for the process; returns its exit status as waitpid gives it.
  int Stop(int signal);

  const std::string& address() const { return address_; }
  const std::string& log_path() const { return log_path_; }
  pid_t pid() const { return pid_; }
  mpsd::v1::JobService::Stub& stub() { return *stub_; }

 private:
  std::string state_dir_;
  std::string address_;
  std::string log_path_;
  pid_t pid_ = -1;
  std::unique_ptr<mpsd::v1::JobService::Stub> stub_;
};

// Paths of the built programs and of the source tree.
std::string MpsdPath();
std::string MpsctlPath();
std::string SourcePath(const std::string& relative);

// Parses one JSON object per line (protobuf's JSON mapping) into JobEvents; fails the test on
// a line that does not parse.
std::vector<mpsd::v1::JobEvent> ParseEventLines(const std::string& text);

}  // namespace mpsd::testing

#endif  // MPSD_TESTS_E2E_DAEMON_H_
