// Test fixture pieces for end-to-end tests: a real mpsd process on a temp unix socket with a
// temp state dir, and a way to run mpsctl (or any command) and capture what it prints.
#ifndef MPSD_TESTS_E2E_DAEMON_H_
#define MPSD_TESTS_E2E_DAEMON_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mpsd/v1/mpsd.grpc.pb.h"
#include "tests/common/temp_dir.h"  // TempDir, for the tests that include this

namespace mpsd::testing {

// What a finished command printed.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv[0] with the arguments (no shell) to completion, stdin from /dev/null.
CommandResult RunCommand(const std::vector<std::string>& argv);
// RunCommand for at most `limit`: a program still running then is killed (SIGKILL) and its
// exit_code is -1; out and err hold what it printed until then.
CommandResult RunCommandWithin(const std::vector<std::string>& argv, absl::Duration limit);

// Starts argv[0] with the arguments (no shell): stdin from /dev/null, stdout into `out_path`
// (truncated), stderr appended to `err_path`, each created 0600 ("/dev/null" discards). Returns
// the pid; the caller waits for it.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::string& err_path);

// A TCP port on 127.0.0.1 that nobody listens on now (bound once and released).
int FreeLoopbackPort();

// The pid of a live mpsd-executor whose command line names `state_dir` and also holds `also`
// (e.g. ".rank1 " for local rank 1's), or 0. A zombie's command line is empty, so it is not found.
pid_t FindExecutor(const std::string& state_dir, const std::string& also = "");

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
  // A socket file left by a killed daemon is removed first.
  void Start(const std::vector<std::string>& extra_args = {});
  // Sends `signal` and waits for the process; returns its exit status as waitpid gives it.
  // A daemon still running after `limit` fails the test and is killed with SIGKILL.
  int Stop(int signal, absl::Duration limit = absl::InfiniteDuration());

  // A program and its arguments that Start runs mpsd under, e.g. {"/usr/bin/prlimit",
  // "--fsize=262144", "--"}; empty (the default): mpsd itself.
  void set_wrapper(std::vector<std::string> wrapper) { wrapper_ = std::move(wrapper); }

  const std::string& address() const { return address_; }
  const std::string& log_path() const { return log_path_; }
  pid_t pid() const { return pid_; }
  mpsd::v1::JobService::Stub& stub() { return *stub_; }

 private:
  std::string state_dir_;
  std::string address_;
  std::string log_path_;
  std::vector<std::string> wrapper_;
  pid_t pid_ = -1;
  std::unique_ptr<mpsd::v1::JobService::Stub> stub_;
};

// Paths of the built programs and of the source tree. mpsd finds mpsd-executor itself (in the
// build tree's trainer/, beside its server/: server/executor/executor_supervisor.h).
std::string MpsdPath();
std::string MpsctlPath();
std::string ExecutorPath();
std::string SourcePath(const std::string& relative);

// Parses one JSON object per line (protobuf's JSON mapping) into JobEvents; fails the test on
// a line that does not parse.
std::vector<mpsd::v1::JobEvent> ParseEventLines(const std::string& text);

// ---------------------------------------------------------------------------------------------
// gRPC helpers for tests that talk to the daemon directly. Unary calls have a 30 s deadline.

// A Fashion-MNIST TrainJob on the CPU: limit_train / batch_size steps per epoch (the last
// partial batch counts), seed 1, Adam.
mpsd::v1::SubmitJobRequest TrainJobRequest(int64_t limit_train, int64_t limit_test, int epochs,
                                           int batch_size, const std::string& model = "convnet");

// Calls `done` every 20 ms until it returns true (then true) or `timeout` passed (then false).
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(120));

// One call each; errors are the daemon's, as absl statuses (the codes are the same numbers).
// "127.0.0.1:PORT" of the daemon's TCP listener (started with --listen 127.0.0.1:0), from its
// log: waits up to 30 s for the line, since the unix socket may answer before it is written; ""
// and a test failure without it.
std::string TcpAddress(const Daemon& daemon);

namespace rpc {

absl::StatusOr<mpsd::v1::Job> Submit(Daemon& daemon, const mpsd::v1::SubmitJobRequest& request);
absl::StatusOr<mpsd::v1::Job> Get(Daemon& daemon, const std::string& job_id);
absl::StatusOr<mpsd::v1::Job> Cancel(Daemon& daemon, const std::string& job_id);
absl::StatusOr<mpsd::v1::ListJobsResponse> List(Daemon& daemon,
                                                const mpsd::v1::ListJobsRequest& request);
absl::StatusOr<mpsd::v1::ServerStatus> Status(Daemon& daemon);
absl::StatusOr<mpsd::v1::DeviceInfo> Device(Daemon& daemon);

// Reads a job's stream from after_seq until the server ends it (at most 300 s), leaving out
// heartbeats; `final_status` gets how it ended.
std::vector<mpsd::v1::JobEvent> StreamAll(Daemon& daemon, const std::string& job_id,
                                          int64_t after_seq = 0,
                                          grpc::Status* final_status = nullptr,
                                          bool latest_attempt_only = false);

// Polls Get until the job is in a terminal state; returns it then, or an error (the call's,
// or DEADLINE_EXCEEDED after `timeout`).
absl::StatusOr<mpsd::v1::Job> WaitForEnd(Daemon& daemon, const std::string& job_id,
                                         absl::Duration timeout = absl::Seconds(300));

}  // namespace rpc

// rpc:: calls for tests that expect them to succeed: a failed call is a non-fatal test failure
// naming the call's error, and the result is then an empty Job.
namespace rpc_ok {

mpsd::v1::Job Submit(Daemon& daemon, const mpsd::v1::SubmitJobRequest& request);
mpsd::v1::Job Get(Daemon& daemon, const std::string& job_id);
// rpc::WaitForEnd with its default timeout.
mpsd::v1::Job WaitForEnd(Daemon& daemon, const std::string& job_id);

}  // namespace rpc_ok

}  // namespace mpsd::testing

#endif  // MPSD_TESTS_E2E_DAEMON_H_
