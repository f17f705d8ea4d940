// mpsd's top-level object: owns the job store, the executor, the scheduler, the gRPC server
// (JobService, health checking, reflection) with its listeners: unix sockets (mode 0600, callers
// act as admin) and TCP ports (bearer tokens with roles; TLS, required off loopback), and the
// optional HTTP(S) listener (the dashboard, /metrics, /healthz) with the same tokens and TLS files.
#ifndef MPSD_SERVER_SERVER_H_
#define MPSD_SERVER_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/config.h"

namespace grpc {
class HealthCheckServiceInterface;
class Server;
}  // namespace grpc

namespace mpsd::api {
class Executor;
}  // namespace mpsd::api

namespace mpsd::server {

class DataRoots;
class UploadStore;
class Dashboard;
class HttpServer;
class JobService;
class JobStore;
class Metrics;
class ReflectionService;
class TensorBoardWriter;
class Scheduler;
class StateDirWatch;
class TlsCredentials;
class TokenAuthProcessor;
class TokenStore;

class Server {
 public:
  struct Options {
    Config config;
    // Accept jobs' fault_injection (mpsd --enable-fault-injection; tests only).
    bool allow_fault_injection = false;
  };

  // Creates the state dir (mode 0700) and takes its lock, checks that its database was not lost
  // (server/core/state_dir.h: CheckDatabaseNotLost), opens the store (new ids above every job in
  // artifacts/), recovers jobs, starts the executor process (mpsd-executor,
  // server/executor/executor_supervisor.h) and listens on every address of config.listen. With a
  // TCP address it opens the tokens file (creating one with an admin token in
  // <state_dir>/admin.token on the first start, when there is none).
  // Errors: INVALID_ARGUMENT for a bad listen address or a non-loopback TCP address without
  // TLS (the message says what to configure); FAILED_PRECONDITION if another mpsd holds the
  // state dir or listens on the socket, the socket's folder is unsafe or its path is taken by
  // something that is not a socket (CheckSocketDir, RemoveStaleSocket), the database is missing
  // while artifacts are not, when mpsd-executor cannot be started, for TLS files that are
  // unreadable, mismatched or expired and for a tokens file that is unreadable, invalid or
  // group/world-accessible (each naming the file); the store's errors.
  static absl::StatusOr<std::unique_ptr<Server>> BuildAndStart(const Options& options);

  // Shuts down if still running. Must not run after Shutdown() returned false.
  ~Server();

  // What BuildAndStart refuses of `config`'s addresses before it touches anything: `listen`
  // over TCP on a non-loopback host, or malformed; `http_listen` (when set) as
  // CheckHttpListen (server/http/http_server.h) says. INVALID_ARGUMENT naming the key. `mpsd
  // --check-config` applies the same check, so that it never calls valid what start refuses.
  static absl::Status CheckListenAddresses(const Config& config);

  // The address clients connect to, e.g. "unix:///run/user/1000/mpsd/mpsd.sock" or
  // "127.0.0.1:40123" (the port chosen when 0 was asked for): the first of addresses().
  const std::string& address() const { return addresses_.front(); }
  // One per config.listen entry, in its order.
  const std::vector<std::string>& addresses() const { return addresses_; }

  // On SIGHUP: re-reads the TLS certificate, key and client CA (TlsCredentials::Reload); new
  // connections get them within about a second, open ones and their streams are kept. A bad
  // file is refused (the error names it) and the old ones stay. OK without TLS. (The tokens file
  // needs no reload: it is re-read whenever it changes.) Thread-safe.
  absl::Status Reload();

  // Refuses new jobs, stops the running job at its next step boundary (INTERRUPTED), ends
  // every stream (those still open after the configured grace are cancelled), commits every
  // event and closes the store. Thread-safe and idempotent.
  //
  // Returns false when gRPC has not ended the calls it cancelled within a few seconds (a
  // client that stopped reading, e.g. a stopped process, keeps a write pending until it reads
  // or goes away): then every event is committed and the socket removed, but gRPC, the store
  // and the executor are left as they are, and the caller must end the process without
  // destroying this Server (std::_Exit; SQLite's WAL keeps what was committed, the executor
  // dies with its parent). True when everything stopped.
  bool Shutdown();

  // Blocks until Shutdown() has finished.
  void Wait();

  // The HTTP listener's URL ("http://127.0.0.1:9464"); empty without http_listen.
  std::string http_url() const;

 private:
  Server();

  // BuildAndStart's steps, in its order; each returns the error that stops the start.
  // Checks the addresses, tries every TCP port and binds HTTP's, then creates and locks the state
  // dir, prepares the unix sockets and opens the tokens, data roots and TLS files.
  absl::Status ClaimListenersAndStateDir();
  // Opens the job database, past the highest job id an artifacts folder names, and removes the
  // temporaries of artifact writes that never finished.
  absl::Status OpenStore();
  // Starts mpsd-executor (ExecutorSupervisor) with the config's executor options.
  absl::Status StartExecutor();
  // The state dir's watch, metrics, TensorBoard writer, artifact retention and the scheduler,
  // which recovers the stored jobs.
  absl::Status StartScheduler();
  // The JobService (with the upload store) and reflection.
  absl::Status StartServices();
  // gRPC's server on every listener, and its health service.
  absl::Status StartGrpc();

  // Binds the HTTP listener's port (config.http_listen; nothing served yet), before anything is
  // written to the state dir. No-op without http_listen.
  absl::Status BindHttp();
  // Serves the HTTP listener bound by BindHttp with its routes: /healthz, /metrics, and those
  // other components register there (the dashboard).
  absl::Status StartHttp();
  // Health checking ("" and mpsd.v1.JobService): SERVING while an executor is ready and the
  // daemon is not shutting down. Called from the executor's monitor thread and Shutdown.
  void SetExecutorReady(bool ready);
  // grpc::Server's Shutdown (cancelling every call) and Wait, given kCancelledCallsWait; false
  // when they did not return by then (they go on, on a detached thread).
  bool ShutdownGrpc() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state dir or its database was deleted or replaced (StateDirWatch): submits are refused
  // and health turns NOT_SERVING for the rest of this process's life.
  void StateDirLost(const absl::Status& lost);
  // Events cannot be stored (the error), or can again (OK): health is NOT_SERVING meanwhile
  // (server/core/event_log.h keeps and retries them; the scheduler refuses submits).
  void SetStorageError(const absl::Status& error);
  void UpdateHealth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu_);
  bool Serving();

  // Constant after BuildAndStart.
  Options options_;
  std::vector<std::string> addresses_;
  std::vector<std::string> socket_paths_;  // Of the unix listeners.
  int lock_fd_ = -1;
  // Set when there is a TCP or an HTTP listener: the one tokens file both check.
  std::unique_ptr<TokenStore> tokens_;
  std::unique_ptr<DataRoots> data_roots_;
  std::shared_ptr<TokenAuthProcessor> auth_processor_;
  // Set when TLS is configured.
  std::unique_ptr<TlsCredentials> tls_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<mpsd::api::Executor> executor_;
  // Before the scheduler: the scheduler's event hook reaches it, and its thread reads the
  // scheduler (Shutdown stops it first).
  std::unique_ptr<ArtifactRetention> retention_;
  std::unique_ptr<UploadStore> uploads_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<JobService> service_;
  std::unique_ptr<ReflectionService> reflection_;
  std::unique_ptr<Metrics> metrics_;
  // Live TensorBoard files (config tensorboard_dir, TrainJob.tensorboard); outlives the
  // scheduler, which feeds it.
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<Dashboard> dashboard_;
  std::unique_ptr<HttpServer> http_server_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<StateDirWatch> state_dir_watch_;

  absl::Mutex health_mu_;
  bool executor_ready_ ABSL_GUARDED_BY(health_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(health_mu_) = false;
  bool state_dir_lost_ ABSL_GUARDED_BY(health_mu_) = false;
  bool storage_failing_ ABSL_GUARDED_BY(health_mu_) = false;
  // Set once the gRPC server runs; nullptr before and after.
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(health_mu_) = nullptr;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // BuildAndStart returned the server: only then does Shutdown say it stops (a start that failed
  // has nothing to stop, and its error says why).
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Shutdown() gave up waiting for gRPC (it returned false).
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_SERVER_H_
