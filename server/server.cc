// Server: state dir, store, executor, scheduler and the gRPC listener, started and stopped in
// that order and its reverse.
#include "server/server.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/executor_supervisor.h"
#include "server/job_service.h"
#include "server/job_store.h"
#include "server/scheduler.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

// Creates `dir` (mode 0700) if it is missing. An existing directory keeps its mode: it may be
// shared, like /tmp.
absl::Status MakePrivateDir(const std::string& dir) {
  std::error_code error;
  const bool created = std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create directory ", dir, ": ", error.message()));
  }
  if (created) chmod(dir.c_str(), 0700);
  return absl::OkStatus();
}

// Takes an exclusive lock on <state_dir>/mpsd.lock for the life of the process, so that two
// daemons never share one database. Returns the lock's fd.
absl::StatusOr<int> LockStateDir(const std::string& state_dir) {
  const std::string path = state_dir + "/mpsd.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("another mpsd is using the state dir ", state_dir, " (", path, " is locked)"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || write(fd, pid.data(), pid.size()) < 0) {
    spdlog::warn("cannot write the pid into {}", path);
  }
  return fd;
}

bool SomeoneListensOn(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return connected;
}

// For "unix:///abs/path" or "unix:rel/path": prepares the socket's directory and removes a
// stale socket file. Returns the socket's path.
absl::StatusOr<std::string> PrepareUnixSocket(const std::string& address) {
  std::string path = address.substr(std::strlen("unix:"));
  if (absl::StartsWith(path, "//")) path = path.substr(2);
  if (path.empty()) return absl::InvalidArgumentError("listen: empty unix socket path");
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("listen: unix socket path too long (",
                                                   path.size(), " bytes): ", path));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty()) {
    if (absl::Status status = MakePrivateDir(dir); !status.ok()) return status;
  }
  if (std::filesystem::exists(path)) {
    if (SomeoneListensOn(path)) {
      return absl::FailedPreconditionError(
          absl::StrCat("another process already listens on ", address));
    }
    std::filesystem::remove(path);
  }
  return path;
}

// Accepts "127.0.0.1:PORT", "localhost:PORT" and "[::1]:PORT"; refuses other hosts.
absl::Status CheckLoopback(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen: expected unix:///path/mpsd.sock or 127.0.0.1:PORT, got \"", address, "\""));
  }
  const std::string host = address.substr(0, colon);
  in_addr ipv4{};
  const bool loopback_ipv4 =
      inet_pton(AF_INET, host.c_str(), &ipv4) == 1 && (ntohl(ipv4.s_addr) >> 24) == 127;
  if (host == "localhost" || host == "[::1]" || loopback_ipv4) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "listen: ", address, " is not a loopback address; TCP on other interfaces needs TLS, "
      "which mpsd does not support yet (use a unix socket or 127.0.0.1:PORT)"));
}

}  // namespace

Server::Server() = default;

absl::StatusOr<std::unique_ptr<Server>> Server::BuildAndStart(const Options& options) {
  std::unique_ptr<Server> server(new Server());
  server->options_ = options;
  const Config& config = options.config;
  const bool unix_socket = absl::StartsWith(config.listen, "unix:");
  if (!unix_socket) {
    if (absl::Status status = CheckLoopback(config.listen); !status.ok()) return status;
  }
  if (absl::Status status = MakePrivateDir(config.state_dir); !status.ok()) return status;
  absl::StatusOr<int> lock_fd = LockStateDir(config.state_dir);
  if (!lock_fd.ok()) return lock_fd.status();
  server->lock_fd_ = *lock_fd;
  if (unix_socket) {
    absl::StatusOr<std::string> path = PrepareUnixSocket(config.listen);
    if (!path.ok()) return path.status();
    server->socket_path_ = *path;
  }

  JobStore::Options store_options;
  store_options.path = config.state_dir + "/mpsd.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(store_options);
  if (!store.ok()) return store.status();
  server->store_ = *std::move(store);
  // The executor is a child process (mpsd-executor) that owns the device.
  ExecutorSupervisor::Options executor_options;
  executor_options.executor_path =
      config.executor.path.empty() ? DefaultExecutorPath() : config.executor.path;
  executor_options.socket_path = config.state_dir + "/executor.sock";
  executor_options.executor.cpu_threads = config.cpu_threads;
  executor_options.executor.artifacts_dir = config.state_dir + "/artifacts";
  executor_options.executor.cache_dir = config.state_dir + "/cache";
  executor_options.executor.allow_fault_injection = options.allow_fault_injection;
  executor_options.per_job = config.executor.isolation == "per_job";
  executor_options.restart_after_jobs = config.executor.restart_after_jobs;
  executor_options.restart_above_baseline_bytes = config.executor.restart_above_baseline_bytes;
  executor_options.cancel_grace_s = config.executor.cancel_grace_s;
  executor_options.memory_limit_bytes = config.executor.memory_limit_bytes;
  executor_options.memory_fraction = config.executor.memory_fraction;
  executor_options.log_level = config.log_level;
  absl::StatusOr<std::unique_ptr<ExecutorSupervisor>> executor =
      ExecutorSupervisor::Start(executor_options);
  if (!executor.ok()) return executor.status();
  server->executor_ = *std::move(executor);
  Scheduler::Options scheduler_options;
  scheduler_options.max_queued = config.max_queued;
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(
      scheduler_options, server->store_.get(), server->executor_.get());
  if (!scheduler.ok()) return scheduler.status();
  server->scheduler_ = *std::move(scheduler);
  JobService::Options service_options;
  service_options.heartbeat_interval = absl::Seconds(config.heartbeat_interval_s);
  server->service_ = std::make_unique<JobService>(server->scheduler_.get(), service_options);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  // The socket is created with the process's umask: 0077 makes it 0600 from its first moment.
  const mode_t old_umask = umask(0077);
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(server->service_.get());
  server->grpc_server_ = builder.BuildAndStart();
  umask(old_umask);
  if (server->grpc_server_ == nullptr || (!unix_socket && port == 0)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", config.listen));
  }
  server->address_ =
      unix_socket ? config.listen
                  : absl::StrCat(config.listen.substr(0, config.listen.rfind(':')), ":", port);
  if (unix_socket) chmod(server->socket_path_.c_str(), 0600);
  // Both the overall status ("") and the service's own, for probes that name the service.
  server->grpc_server_->GetHealthCheckService()->SetServingStatus(true);
  server->grpc_server_->GetHealthCheckService()->SetServingStatus(
      mpsd::v1::JobService::service_full_name(), true);
  spdlog::info("mpsd listening on {} (state dir {})", server->address_, config.state_dir);
  return server;
}

Server::~Server() { Shutdown(); }

void Server::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  spdlog::info("shutting down");
  if (grpc_server_ != nullptr) grpc_server_->GetHealthCheckService()->SetServingStatus(false);
  // Stopping the scheduler ends the running job's stream with its terminal event; closing the
  // event log ends the streams of jobs that never ran with UNAVAILABLE once they have sent
  // what is stored. gRPC then cancels what is left (a client that stopped reading) and drops
  // idle connections, which it would otherwise wait for until the deadline.
  if (scheduler_ != nullptr) {
    scheduler_->Shutdown();
    scheduler_->events().Close();
  }
  if (service_ != nullptr &&
      !service_->WaitForStreamsToEnd(absl::Seconds(options_.config.shutdown_grace_s))) {
    spdlog::warn("streams still open after {} s; cancelling them",
                 options_.config.shutdown_grace_s);
  }
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now()));
    grpc_server_->Wait();
  }
  grpc_server_.reset();
  service_.reset();
  scheduler_.reset();
  executor_.reset();
  store_.reset();
  if (!socket_path_.empty()) std::filesystem::remove(socket_path_);
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
  shut_down_ = true;
  spdlog::info("mpsd stopped");
}

void Server::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

}  // namespace mpsd::server
