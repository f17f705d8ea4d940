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
#include <memory>
#include <thread>
#include <system_error>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "httplib.h"
#include "server/auth.h"
#include "server/dashboard.h"
#include "server/executor_supervisor.h"
#include "server/http_server.h"
#include "server/job_service.h"
#include "server/job_store.h"
#include "server/metrics.h"
#include "server/reflection_service.h"
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

// The keepalive policy (documented on StreamEvents in mpsd.proto and in the README): clients
// may ping every kMinKeepaliveInterval, with or without calls in progress; the daemon pings an
// idle connection every kServerKeepaliveTime and drops it when no answer comes within
// kServerKeepaliveTimeout, so a client that vanished (a laptop closed) frees its streams.
constexpr absl::Duration kMinKeepaliveInterval = absl::Seconds(10);
constexpr absl::Duration kServerKeepaliveTime = absl::Seconds(60);
constexpr absl::Duration kServerKeepaliveTimeout = absl::Seconds(20);
// How long gRPC may take to end the calls Shutdown cancelled before mpsd exits without them.
constexpr absl::Duration kCancelledCallsWait = absl::Seconds(5);

void AddKeepalivePolicy(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kMinKeepaliveInterval)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kServerKeepaliveTime)));
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(kServerKeepaliveTimeout)));
}

}  // namespace

Server::Server() = default;

absl::StatusOr<std::unique_ptr<Server>> Server::BuildAndStart(const Options& options) {
  std::unique_ptr<Server> server(new Server());
  server->options_ = options;
  const Config& config = options.config;
  const bool unix_socket = absl::StartsWith(config.listen, "unix:");
  if (absl::Status status = CheckListenAddresses(config); !status.ok()) return status;
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
  executor_options.executor.allow_fault_injection = options.allow_fault_injection;
  executor_options.per_job = config.executor.isolation == "per_job";
  executor_options.restart_after_jobs = config.executor.restart_after_jobs;
  executor_options.restart_above_baseline_bytes = config.executor.restart_above_baseline_bytes;
  executor_options.cancel_grace_s = config.executor.cancel_grace_s;
  executor_options.memory_limit_bytes = config.executor.memory_limit_bytes;
  executor_options.memory_fraction = config.executor.memory_fraction;
  executor_options.mps_fallback = config.executor.mps_fallback;
  executor_options.log_level = config.log_level;
  Server* self = server.get();
  executor_options.on_ready_changed = [self](bool ready) { self->SetExecutorReady(ready); };
  absl::StatusOr<std::unique_ptr<ExecutorSupervisor>> executor =
      ExecutorSupervisor::Start(executor_options);
  if (!executor.ok()) return executor.status();
  server->executor_ = *std::move(executor);
  Scheduler::Options scheduler_options;
  scheduler_options.max_queued = config.max_queued;
  server->metrics_ = std::make_unique<Metrics>(MPSD_VERSION);
  scheduler_options.on_event = [metrics = server->metrics_.get()](const mpsd::v1::Job& job,
                                                                   const mpsd::v1::JobEvent& e) {
    metrics->ObserveEvent(job, e);
  };
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(
      scheduler_options, server->store_.get(), server->executor_.get());
  if (!scheduler.ok()) return scheduler.status();
  server->scheduler_ = *std::move(scheduler);
  JobService::Options service_options;
  service_options.heartbeat_interval = absl::Seconds(config.heartbeat_interval_s);
  service_options.min_keepalive_interval = kMinKeepaliveInterval;
  service_options.artifacts_dir = config.state_dir + "/artifacts";
  server->service_ = std::make_unique<JobService>(server->scheduler_.get(), service_options);

  absl::StatusOr<std::unique_ptr<ReflectionService>> reflection =
      ReflectionService::Create({"grpc.health.v1.Health"});
  if (!reflection.ok()) return reflection.status();
  server->reflection_ = *std::move(reflection);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  // The socket is created with the process's umask: 0077 makes it 0600 from its first moment.
  const mode_t old_umask = umask(0077);
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(server->service_.get());
  builder.RegisterService(server->reflection_.get());
  AddKeepalivePolicy(builder);
  server->grpc_server_ = builder.BuildAndStart();
  umask(old_umask);
  if (server->grpc_server_ == nullptr || (!unix_socket && port == 0)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", config.listen));
  }
  server->address_ =
      unix_socket ? config.listen
                  : absl::StrCat(config.listen.substr(0, config.listen.rfind(':')), ":", port);
  if (unix_socket) chmod(server->socket_path_.c_str(), 0600);
  {
    absl::MutexLock lock(&server->health_mu_);
    server->health_ = server->grpc_server_->GetHealthCheckService();
    server->UpdateHealth();
  }
  spdlog::info("mpsd listening on {} (state dir {})", server->address_, config.state_dir);
  if (absl::Status status = server->StartHttp(); !status.ok()) return status;
  return server;
}

Server::~Server() { Shutdown(); }

bool Server::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return !abandoned_;
  spdlog::info("shutting down");
  {
    absl::MutexLock health_lock(&health_mu_);
    stopping_ = true;
    UpdateHealth();
    // Freezes NOT_SERVING, so that gRPC's shutdown can end the Watch calls.
    if (health_ != nullptr) health_->Shutdown();
  }
  // The HTTP listener first: its handlers read the scheduler and the service.
  if (http_server_ != nullptr) http_server_->Shutdown();
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
  if (grpc_server_ != nullptr && !ShutdownGrpc()) {
    spdlog::error("gRPC still holds cancelled calls {} after cancelling them (a client that "
                  "stopped reading its stream); exiting without them: every event is committed",
                  absl::FormatDuration(kCancelledCallsWait));
    if (!socket_path_.empty()) std::filesystem::remove(socket_path_);
    abandoned_ = true;
    shut_down_ = true;
    return false;
  }
  {
    absl::MutexLock health_lock(&health_mu_);
    health_ = nullptr;
  }
  grpc_server_.reset();
  http_server_.reset();
  dashboard_.reset();
  tokens_.reset();
  reflection_.reset();
  service_.reset();
  scheduler_.reset();
  executor_.reset();
  store_.reset();
  if (!socket_path_.empty()) std::filesystem::remove(socket_path_);
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
  shut_down_ = true;
  spdlog::info("mpsd stopped");
  return true;
}

absl::Status Server::CheckListenAddresses(const Config& config) {
  if (!absl::StartsWith(config.listen, "unix:")) {
    if (absl::Status status = CheckLoopback(config.listen); !status.ok()) return status;
  }
  if (!config.http_listen.empty()) {
    return CheckHttpListen(config.http_listen, /*tls=*/false);  // mpsd has no TLS settings yet
  }
  return absl::OkStatus();
}

bool Server::ShutdownGrpc() {
  // Cancels what is left and waits for every call to end, on a thread of its own: a cancelled
  // call whose write is stuck behind a client that does not read ends only when that client
  // reads or disconnects (gRPC 1.51), and gRPC's Shutdown and Wait wait for it.
  auto done = std::make_shared<absl::Notification>();
  grpc::Server* const grpc_server = grpc_server_.get();
  std::thread shutdown([grpc_server, done] {
    grpc_server->Shutdown(absl::ToChronoTime(absl::Now()));
    grpc_server->Wait();
    done->Notify();
  });
  if (done->WaitForNotificationWithTimeout(kCancelledCallsWait)) {
    shutdown.join();
    return true;
  }
  shutdown.detach();  // the process ends without it
  return false;
}

std::string Server::http_url() const {
  return http_server_ == nullptr ? "" : http_server_->url();
}

void Server::SetExecutorReady(bool ready) {
  absl::MutexLock lock(&health_mu_);
  executor_ready_ = ready;
  UpdateHealth();
}

void Server::UpdateHealth() {
  if (health_ == nullptr) return;
  const bool serving = executor_ready_ && !stopping_;
  // Both the overall status ("") and the service's own, for probes that name the service; each
  // by name (the overload without one sets every service, so watchers would hear it twice).
  health_->SetServingStatus("", serving);
  health_->SetServingStatus(mpsd::v1::JobService::service_full_name(), serving);
}

bool Server::Serving() {
  absl::MutexLock lock(&health_mu_);
  return executor_ready_ && !stopping_;
}

absl::Status Server::StartHttp() {
  const Config& config = options_.config;
  if (config.http_listen.empty()) return absl::OkStatus();
  HttpServer::Options http_options;
  http_options.address = config.http_listen;
  // Bearer tokens from <state_dir>/tokens.yaml (server/auth.h): any role may view. Without the
  // file every protected route answers 401 saying how to make one; a file that is unsafe or
  // invalid stops the start.
  const std::string tokens_path = config.state_dir + "/tokens.yaml";
  absl::StatusOr<std::unique_ptr<TokenStore>> tokens = TokenStore::Open(tokens_path);
  if (tokens.ok()) {
    tokens_ = *std::move(tokens);
  } else if (tokens.status().code() != absl::StatusCode::kNotFound) {
    return tokens.status();
  }
  http_options.authorize =
      [store = tokens_.get(), tokens_path](
          absl::string_view authorization,
          absl::string_view action) -> absl::StatusOr<HttpCaller> {
    if (store == nullptr) {
      return absl::UnauthenticatedError(absl::StrCat(
          "no tokens on this daemon: add one to ", tokens_path,
          " (mpsd token add --tokens ", tokens_path, " --name NAME --role viewer)"));
    }
    absl::StatusOr<Principal> principal =
        store->Authenticate(authorization);
    if (!principal.ok()) return principal.status();
    if (absl::Status allowed = Authorize(*principal, Role::kViewer, action); !allowed.ok()) {
      return allowed;
    }
    return HttpCaller{principal->name, principal->role};
  };
  // Each open dashboard holds a worker for its event stream, and a browser keeps a few more
  // connections alive: room for a few dozen dashboards at once.
  http_options.threads = 64;
  absl::StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Create(http_options);
  if (!http.ok()) return http.status();
  http_server_ = *std::move(http);

  MetricsSources sources;
  sources.server_status = [this] { return service_->CurrentStatus(); };
  sources.job_counts = [this] { return scheduler_->CountJobs(); };
  sources.running_job = [this]() -> std::optional<mpsd::v1::Job> {
    const std::string id = scheduler_->GetQueueStats().running_job_id;
    if (id.empty()) return std::nullopt;
    absl::StatusOr<mpsd::v1::Job> job = scheduler_->Get(id);
    if (!job.ok()) return std::nullopt;
    return *std::move(job);
  };
  sources.device = [this]() -> std::optional<mpsd::v1::DeviceInfo> {
    if (!Serving()) return std::nullopt;  // GetDevice would wait for the next executor.
    return executor_->GetDevice();
  };
  auto* supervisor = static_cast<ExecutorSupervisor*>(executor_.get());
  sources.executor_restarts = [supervisor] { return supervisor->RestartsByReason(); };
  metrics_->SetSources(std::move(sources));

  // Public: a load balancer's probe carries no token, and the answer reveals nothing more than
  // whether the port answers.
  http_server_->Get(
      "/healthz",
      [this](const HttpCaller&, const httplib::Request&, httplib::Response& response) {
        const bool serving = Serving();
        response.status = serving ? 200 : 503;
        response.set_content(serving ? "SERVING\n" : "NOT_SERVING\n",
                             "text/plain; charset=utf-8");
      },
      /*public_route=*/true);
  http_server_->Get("/metrics", [this](const HttpCaller&, const httplib::Request&,
                                       httplib::Response& response) {
    response.set_content(metrics_->Scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  DashboardOptions dashboard_options;
  dashboard_options.heartbeat_interval = absl::Seconds(config.heartbeat_interval_s);
  dashboard_ = std::make_unique<Dashboard>(scheduler_.get(), dashboard_options);
  dashboard_->Register(http_server_.get());
  http_server_->Start();
  spdlog::info("mpsd serving the dashboard, /metrics and /healthz on {}", http_server_->url());
  return absl::OkStatus();
}

void Server::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

}  // namespace mpsd::server
