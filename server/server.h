// mpsd's top-level object: owns the job store, the executor, the scheduler and the gRPC server
// (JobService, health checking, reflection), on a unix socket or a loopback TCP port.
#ifndef MPSD_SERVER_SERVER_H_
#define MPSD_SERVER_SERVER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/config.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace mpsd::api {
class Executor;
}  // namespace mpsd::api

namespace mpsd::server {

class JobService;
class JobStore;
class Scheduler;

class Server {
 public:
  struct Options {
    Config config;
    // Accept jobs' fault_injection (mpsd --enable-fault-injection; tests only).
    bool allow_fault_injection = false;
  };

  // Creates the state dir (mode 0700) and takes its lock, opens the store, recovers jobs,
  // starts the executor process (mpsd-executor, server/executor_supervisor.h) and listens. Errors: INVALID_ARGUMENT for a bad listen address (a
  // non-loopback TCP address is refused until TLS exists); FAILED_PRECONDITION if another mpsd
  // holds the state dir or listens on the socket, or when mpsd-executor cannot be started; the
  // store's errors.
  static absl::StatusOr<std::unique_ptr<Server>> BuildAndStart(const Options& options);

  // Shuts down if still running.
  ~Server();

  // The address clients connect to, e.g. "unix:///run/user/1000/mpsd/mpsd.sock" or
  // "127.0.0.1:40123" (the port chosen when 0 was asked for).
  const std::string& address() const { return address_; }

  // Refuses new jobs, stops the running job at its next step boundary (INTERRUPTED), ends
  // every stream (those still open after the configured grace are cancelled), commits every
  // event and closes the store. Thread-safe and idempotent.
  void Shutdown();

  // Blocks until Shutdown() has finished.
  void Wait();

 private:
  Server();

  // Constant after BuildAndStart.
  Options options_;
  std::string address_;
  std::string socket_path_;  // Empty for TCP.
  int lock_fd_ = -1;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<mpsd::api::Executor> executor_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<JobService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_SERVER_H_
