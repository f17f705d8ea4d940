// Server: state dir, store, executor, scheduler and the gRPC listener, started and stopped in
// that order and its reverse.
#include "server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <system_error>
#include <thread>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/job_state.h"
#include "httplib.h"
#include "server/access/auth.h"
#include "server/access/data_roots.h"
#include "server/access/tls.h"
#include "server/core/job_query.h"
#include "server/core/job_store.h"
#include "server/core/retention.h"
#include "server/core/scheduler.h"
#include "server/core/state_dir.h"
#include "server/core/tensorboard_writer.h"
#include "server/core/uploads.h"
#include "server/executor/executor_supervisor.h"
#include "server/grpc/grpc_auth.h"
#include "server/grpc/job_service.h"
#include "server/grpc/reflection_service.h"
#include "server/http/dashboard.h"
#include "server/http/http_server.h"
#include "server/http/metrics.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

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

// For "unix:///abs/path" or "unix:rel/path": prepares the socket's directory and removes a
// stale socket file. Returns the socket's path.
absl::StatusOr<std::string> PrepareUnixSocket(const std::string& address) {
  std::string path = address.substr(std::strlen("unix:"));
  if (absl::StartsWith(path, "//")) path = path.substr(2);
  if (path.empty()) return absl::InvalidArgumentError("listen: empty unix socket path");
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen: unix socket path too long (", path.size(), " bytes): ", path));
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (absl::Status status = MakePrivateDir(dir); !status.ok()) return status;
  if (absl::Status status = CheckSocketDir(dir, geteuid()); !status.ok()) return status;
  if (absl::Status status = RemoveStaleSocket(path); !status.ok()) return status;
  return path;
}

// A TCP listen address split up: "HOST:PORT", "[V6]:PORT".
struct TcpAddress {
  std::string host;
  int port = 0;
  bool loopback = false;
};

absl::StatusOr<TcpAddress> ParseTcpAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  TcpAddress tcp;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &tcp.port) || tcp.port < 0 || tcp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen: expected unix:///path/mpsd.sock or HOST:PORT (e.g. 127.0.0.1:7070, "
                     "0.0.0.0:7070, [::]:7070), got \"",
                     address, "\""));
  }
  tcp.host = address.substr(0, colon);
  in_addr ipv4{};
  tcp.loopback =
      tcp.host == "localhost" || tcp.host == "[::1]" ||
      (inet_pton(AF_INET, tcp.host.c_str(), &ipv4) == 1 && (ntohl(ipv4.s_addr) >> 24) == 127);
  return tcp;
}

// A TCP listener off loopback carries tokens and jobs over the network: only with TLS.
absl::Status CheckTcpListener(const std::string& address, const TcpAddress& tcp, bool tls_enabled) {
  if (tcp.loopback || tls_enabled) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "listen: ", address,
      " is not a loopback address, and TCP on other interfaces needs TLS: "
      "give mpsd --tls-cert FILE --tls-key FILE (config: tls: {cert: FILE, key: FILE}; add "
      "--tls-client-ca FILE to require client certificates), or listen on 127.0.0.1:PORT or a "
      "unix socket"));
}

// The tokens file for the TCP listeners; on the first start (no file yet) one is created with
// an admin token in <state_dir>/admin.token, and the log says where it is.
absl::StatusOr<std::unique_ptr<TokenStore>> OpenTokens(const Config& config) {
  const std::string path =
      config.tokens_file.empty() ? config.state_dir + "/tokens.yaml" : config.tokens_file;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
    const std::string admin_token = config.state_dir + "/admin.token";
    if (absl::Status status = CreateTokensFileWithAdmin(path, admin_token); !status.ok()) {
      return status;
    }
    spdlog::warn(
        "created the tokens file {} with one admin token, which is in {} (mode 0600); "
        "add tokens for others with `mpsd token add --tokens {} --name NAME --role "
        "viewer|submitter|admin`",
        path, admin_token, path);
  }
  absl::StatusOr<std::unique_ptr<TokenStore>> tokens = TokenStore::Open(path);
  if (tokens.ok()) spdlog::info("tokens file {}: {} tokens", path, (*tokens)->Records().size());
  return tokens;
}

// The keepalive policy (documented on StreamEvents in mpsd.proto and in docs/clients.md): clients
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
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kServerKeepaliveTimeout)));
}

// What a slow or idle client may hold on the gRPC listeners (issue 26, item 3, "the gRPC port
// checked the same way"). gRPC serves connections on its event engine, so a slow client blocks
// no thread and no other call; what it holds is a socket and its buffers, and gRPC 1.51 has no
// cap on connections. A TCP connection that never completes its handshake was held for gRPC's
// default 120 s; one that completes it and makes no call was held for ever (keepalive pings only
// find clients that are gone). Now: the TLS handshake and the client's HTTP/2 SETTINGS within
// kServerHandshakeTimeout of the accept, a connection with no call for kMaxConnectionIdle closed
// (GOAWAY: a client's channel reconnects on its next call), and a bound on the calls one
// connection may hold at once (each open StreamEvents is one).
constexpr absl::Duration kServerHandshakeTimeout = absl::Seconds(10);
constexpr absl::Duration kMaxConnectionIdle = absl::Minutes(10);
constexpr int kMaxConcurrentStreams = 1000;

void AddConnectionBounds(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kServerHandshakeTimeout)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kMaxConnectionIdle)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams);
}

// A damaged database stops the start: say which file, and how SQLite's own tool salvages what
// it can (SalvageCommand).
absl::Status WithRecoveryHint(absl::Status status, const std::string& state_dir) {
  if (status.code() != absl::StatusCode::kDataLoss) return status;
  const std::string db = state_dir + "/mpsd.db";
  return absl::DataLossError(absl::StrCat(
      "the job database ", db, " is damaged: ", status.message(),
      ". To salvage what can be read, with mpsd stopped: ",
      SalvageCommand(db, state_dir + "/mpsd-recovered.db"), "; then move ", db, " and its ", db,
      "-wal and ", db, "-shm (if there) out of ", state_dir,
      ", rename mpsd-recovered.db to mpsd.db and start mpsd again (sqlite3 is in the Debian "
      "package sqlite3)"));
}

// Binds a TCP socket to `tcp` (SO_REUSEADDR, as gRPC sets it; no SO_REUSEPORT) and closes it:
// UNAVAILABLE naming `address` when the port is taken. Port 0 (any free port) always passes.
absl::Status TryBindTcp(const std::string& address, const TcpAddress& tcp) {
  if (tcp.port == 0) return absl::OkStatus();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  std::string host = tcp.host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = absl::StrCat(tcp.port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
    return absl::OkStatus();  // gRPC reports an address it cannot resolve itself.
  }
  absl::Status status = absl::OkStatus();
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 && errno == EADDRINUSE) {
      status = absl::UnavailableError(
          absl::StrCat("cannot listen on ", address, ": the port is in use"));
    }
    close(fd);
  }
  freeaddrinfo(found);
  return status;
}

// Whether any gRPC listener is on TCP (and so needs tokens, and TLS off loopback).
bool AnyTcp(const Config& config) {
  return absl::c_any_of(config.listen,
                        [](const std::string& a) { return !absl::StartsWith(a, "unix:"); });
}

// The executor's options from the config (server/executor/executor_supervisor.h).
ExecutorSupervisor::Options ExecutorOptionsOf(const Config& config, bool allow_fault_injection) {
  ExecutorSupervisor::Options executor_options;
  executor_options.executor_path =
      config.executor.path.empty() ? DefaultExecutorPath() : config.executor.path;
  executor_options.socket_path = config.state_dir + "/executor.sock";
  executor_options.executor.cpu_threads = config.cpu_threads;
  executor_options.executor.artifacts_dir = config.state_dir + "/artifacts";
  executor_options.executor.cache_dir = config.state_dir + "/cache";
  executor_options.executor.allow_fault_injection = allow_fault_injection;
  executor_options.per_job = config.executor.isolation == "per_job";
  executor_options.restart_after_jobs = config.executor.restart_after_jobs;
  executor_options.restart_above_baseline_bytes = config.executor.restart_above_baseline_bytes;
  executor_options.cancel_grace_s = config.executor.cancel_grace_s;
  executor_options.memory_limit_bytes = config.executor.memory_limit_bytes;
  executor_options.executor.input_limits = config.executor.input_limits;
  executor_options.memory_fraction = config.executor.memory_fraction;
  executor_options.mps_fallback = config.executor.mps_fallback;
  executor_options.user_code_timeout = absl::Seconds(config.executor.user_code_timeout_s);
  executor_options.user_code_stall_timeout =
      absl::Seconds(config.executor.user_code_stall_timeout_s);
  executor_options.log_level = config.log_level;
  return executor_options;
}

}  // namespace

Server::Server() = default;

absl::StatusOr<std::unique_ptr<Server>> Server::BuildAndStart(const Options& options) {
  std::unique_ptr<Server> server(new Server());
  server->options_ = options;
  // In this order: nothing is written to the state dir before every listener could be bound,
  // and each part starts only once what it uses exists.
  using Step = absl::Status (Server::*)();
  for (Step step :
       {&Server::ClaimListenersAndStateDir, &Server::OpenStore, &Server::StartExecutor,
        &Server::StartScheduler, &Server::StartServices, &Server::StartGrpc, &Server::StartHttp}) {
    if (absl::Status status = (server.get()->*step)(); !status.ok()) return status;
  }
  {
    absl::MutexLock lock(&server->mu_);
    server->started_ = true;
  }
  return server;
}

absl::Status Server::ClaimListenersAndStateDir() {
  const Config& config = options_.config;
  if (absl::Status status = CheckListenAddresses(config); !status.ok()) return status;
  const bool any_tcp = AnyTcp(config);
  // Every TCP port first, before anything is written to the state dir: a start that cannot
  // listen leaves no tokens file, database or directory behind. The HTTP port is bound here
  // and held (served from StartHttp); gRPC binds its own ports once its services exist, so
  // they are tried here (bound without SO_REUSEPORT, as gRPC binds them, and released).
  for (const std::string& address : config.listen) {
    if (absl::StartsWith(address, "unix:")) continue;
    absl::StatusOr<TcpAddress> tcp = ParseTcpAddress(address);
    if (!tcp.ok()) return tcp.status();
    if (absl::Status status = TryBindTcp(address, *tcp); !status.ok()) return status;
  }
  if (absl::Status status = BindHttp(); !status.ok()) return status;
  if (absl::Status status = MakePrivateDir(config.state_dir); !status.ok()) return status;
  if (absl::Status status = CheckStateDirMode(config.state_dir); !status.ok()) return status;
  absl::StatusOr<int> lock_fd = LockStateDir(config.state_dir);
  if (!lock_fd.ok()) return lock_fd.status();
  lock_fd_ = *lock_fd;
  // Under the lock: no other mpsd is creating the database right now.
  if (absl::Status status = CheckDatabaseNotLost(config.state_dir); !status.ok()) return status;
  for (const std::string& address : config.listen) {
    if (!absl::StartsWith(address, "unix:")) continue;
    absl::StatusOr<std::string> path = PrepareUnixSocket(address);
    if (!path.ok()) return path.status();
    socket_paths_.push_back(*path);
  }
  // One tokens file for every listener that is not the unix socket: the gRPC TCP listeners
  // and the HTTP listener check the same TokenStore.
  if (any_tcp || !config.http_listen.empty()) {
    absl::StatusOr<std::unique_ptr<TokenStore>> tokens = OpenTokens(config);
    if (!tokens.ok()) return tokens.status();
    tokens_ = *std::move(tokens);
  }
  data_roots_ = std::make_unique<DataRoots>(
      config.data_roots.empty() ? DefaultDataRoots(config.state_dir) : config.data_roots,
      config.state_dir);
  if (any_tcp) {
    auth_processor_ = std::make_shared<TokenAuthProcessor>(tokens_.get());
    if (config.tls.enabled()) {
      absl::StatusOr<std::unique_ptr<TlsCredentials>> tls =
          TlsCredentials::Create(config.tls, config.state_dir + "/tls");
      if (!tls.ok()) return tls.status();
      tls_ = *std::move(tls);
    }
  }
  return absl::OkStatus();
}

absl::Status Server::OpenStore() {
  const Config& config = options_.config;
  JobStore::Options store_options;
  store_options.path = config.state_dir + "/mpsd.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(store_options);
  if (!store.ok()) return WithRecoveryHint(store.status(), config.state_dir);
  store_ = *std::move(store);
  const std::string artifacts_dir = config.state_dir + "/artifacts";
  if (absl::Status status = store_->ReserveIdsThrough(HighestArtifactJobId(artifacts_dir));
      !status.ok()) {
    return WithRecoveryHint(status, config.state_dir);
  }
  for (const std::string& path : RemoveArtifactTemporaries(artifacts_dir)) {
    spdlog::warn("removed {}: the temporary of an artifact write that never finished", path);
  }
  return absl::OkStatus();
}

absl::Status Server::StartExecutor() {
  const Config& config = options_.config;
  // The executor is a child process (mpsd-executor) that owns the device.
  ExecutorSupervisor::Options executor_options =
      ExecutorOptionsOf(config, options_.allow_fault_injection);
  executor_options.on_ready_changed = [this](bool ready) { SetExecutorReady(ready); };
  absl::StatusOr<std::unique_ptr<ExecutorSupervisor>> executor =
      ExecutorSupervisor::Start(executor_options);
  if (!executor.ok()) return executor.status();
  executor_ = *std::move(executor);
  return absl::OkStatus();
}

absl::Status Server::StartScheduler() {
  const Config& config = options_.config;
  const std::string artifacts_dir = config.state_dir + "/artifacts";
  StateDirWatch::Options watch_options;
  watch_options.state_dir = config.state_dir;
  watch_options.database = config.state_dir + "/mpsd.db";
  watch_options.on_lost = [this](const absl::Status& lost) { StateDirLost(lost); };
  absl::StatusOr<std::unique_ptr<StateDirWatch>> watch =
      StateDirWatch::Start(std::move(watch_options));
  if (!watch.ok()) return watch.status();
  state_dir_watch_ = *std::move(watch);
  Scheduler::Options scheduler_options;
  scheduler_options.max_queued = config.max_queued;
  // Checked by the scheduler itself before it acknowledges a submit or starts a job: the
  // watch's own thread notices a change only within its interval.
  scheduler_options.check_storage = [watch = state_dir_watch_.get()]() { return watch->Check(); };
  scheduler_options.on_storage_error = [this](const absl::Status& error) {
    SetStorageError(error);
  };
  // A job submitted with a token (over TCP) reads only what data_roots allow, checked at the
  // submit and again when it starts: a path may have become a link elsewhere while it was queued.
  // The token's role now (an admin may read every upload; a revoked token is a submitter's).
  scheduler_options.check_paths = [this](const std::string& submitted_by,
                                         const mpsd::v1::SubmitJobRequest& spec) {
    if (tokens_ == nullptr || submitted_by == kLocalPrincipalName) return absl::OkStatus();
    Principal principal{submitted_by, Role::kSubmitter};
    for (const TokenRecord& record : tokens_->Records()) {
      if (record.name == submitted_by) principal.role = record.role;
    }
    return data_roots_->Check(spec, &principal);
  };
  metrics_ = std::make_unique<Metrics>(MPSD_VERSION);
  TensorBoardWriter::Options tensorboard_options;
  tensorboard_options.artifacts_dir = artifacts_dir;
  tensorboard_options.tensorboard_dir = config.tensorboard_dir;
  // Committed events only: those published since (a state change or two) are not needed to
  // rebuild a job's metrics.
  tensorboard_options.read_stored = [store = store_.get()](const std::string& job_id,
                                                           int64_t before_seq) {
    return store->ReadEvents(job_id, 0, static_cast<int>(std::max<int64_t>(1, before_seq - 1)));
  };
  tensorboard_ = std::make_unique<TensorBoardWriter>(std::move(tensorboard_options));
  retention_ = std::make_unique<ArtifactRetention>(artifacts_dir, config.artifacts_retention);
  scheduler_options.on_event = [metrics = metrics_.get(), tensorboard = tensorboard_.get(),
                                retention = retention_.get()](const mpsd::v1::Job& job,
                                                              const mpsd::v1::JobEvent& e) {
    metrics->ObserveEvent(job, e);
    tensorboard->Observe(job, e);
    if (e.has_state() && api::IsTerminal(e.state().state())) retention->JobEnded();
  };
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(scheduler_options, store_.get(), executor_.get());
  if (!scheduler.ok()) return WithRecoveryHint(scheduler.status(), config.state_dir);
  scheduler_ = *std::move(scheduler);
  retention_->Start([scheduler = scheduler_.get()]() {
    JobQuery all;
    all.limit = std::numeric_limits<int>::max();
    return scheduler->List(all);
  });
  return absl::OkStatus();
}

absl::Status Server::StartServices() {
  const Config& config = options_.config;
  JobService::Options service_options;
  service_options.heartbeat_interval = absl::Seconds(config.heartbeat_interval_s);
  service_options.min_keepalive_interval = kMinKeepaliveInterval;
  service_options.artifacts_dir = config.state_dir + "/artifacts";
  service_options.tokens = tokens_.get();
  service_options.data_roots = data_roots_.get();
  service_options.retention = retention_.get();
  UploadStore::Options upload_options;
  upload_options.dir = config.state_dir + "/uploads";
  upload_options.quota_bytes = config.upload_quota_bytes;
  upload_options.max_files = config.upload_max_files;
  // A job that has not ended keeps the uploads it names (UploadStore::Delete).
  upload_options.unfinished_jobs = [scheduler = scheduler_.get()]() {
    JobQuery unfinished;
    unfinished.states = {mpsd::v1::Job::QUEUED, mpsd::v1::Job::RUNNING};
    unfinished.limit = std::numeric_limits<int>::max();
    return scheduler->List(unfinished);
  };
  uploads_ = std::make_unique<UploadStore>(upload_options);
  for (const std::string& path : uploads_->RemoveLeftovers()) {
    spdlog::warn("removed {}: left by an upload that never finished unpacking or deleting", path);
  }
  service_options.uploads = uploads_.get();
  service_ = std::make_unique<JobService>(scheduler_.get(), service_options);

  absl::StatusOr<std::unique_ptr<ReflectionService>> reflection = ReflectionService::Create();
  if (!reflection.ok()) return reflection.status();
  reflection_ = *std::move(reflection);
  return absl::OkStatus();
}

absl::Status Server::StartGrpc() {
  const Config& config = options_.config;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // TCP: TLS, or on loopback gRPC's local credentials (plaintext, refused from other hosts);
  // either way every call passes the token check first.
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials;
  if (AnyTcp(config)) {
    tcp_credentials = tls_ != nullptr ? tls_->credentials()
                                      : grpc::experimental::LocalServerCredentials(LOCAL_TCP);
    tcp_credentials->SetAuthMetadataProcessor(auth_processor_);
  }
  std::vector<int> ports(config.listen.size(), 0);
  for (size_t i = 0; i < config.listen.size(); ++i) {
    const bool unix_socket = absl::StartsWith(config.listen[i], "unix:");
    builder.AddListeningPort(config.listen[i],
                             unix_socket ? grpc::InsecureServerCredentials() : tcp_credentials,
                             &ports[i]);
  }
  builder.RegisterService(service_.get());
  // The socket is created with the process's umask: 0077 makes it 0600 from its first moment.
  const mode_t old_umask = umask(0077);
  builder.RegisterService(reflection_.get());
  builder.RegisterService(reflection_->v1());
  AddKeepalivePolicy(builder);
  AddConnectionBounds(builder);
  // gRPC sets SO_REUSEPORT on its TCP listeners by default: a second mpsd on the same port would
  // start too and the kernel would split connections between the two daemons.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc_server_ = builder.BuildAndStart();
  umask(old_umask);
  if (grpc_server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", absl::StrJoin(config.listen, ", ")));
  }
  for (size_t i = 0; i < config.listen.size(); ++i) {
    const std::string& address = config.listen[i];
    if (absl::StartsWith(address, "unix:")) {
      addresses_.push_back(address);
      continue;
    }
    if (ports[i] == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
    addresses_.push_back(absl::StrCat(address.substr(0, address.rfind(':')), ":", ports[i]));
  }
  for (const std::string& path : socket_paths_) chmod(path.c_str(), 0600);
  {
    absl::MutexLock lock(&health_mu_);
    health_ = grpc_server_->GetHealthCheckService();
    UpdateHealth();
  }
  for (const std::string& address : addresses_) {
    const bool unix_socket = absl::StartsWith(address, "unix:");
    spdlog::info("mpsd listening on {} ({})", address,
                 unix_socket       ? "unix socket, mode 0600"
                 : tls_ != nullptr ? (config.tls.client_ca.empty() ? "TLS, bearer tokens"
                                                                   : "mutual TLS, bearer tokens")
                                   : "plaintext loopback, bearer tokens");
  }
  spdlog::info("state dir {}", config.state_dir);
  return absl::OkStatus();
}

Server::~Server() { Shutdown(); }

bool Server::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return !abandoned_;
  if (started_) spdlog::info("shutting down");
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
    spdlog::error(
        "gRPC still holds cancelled calls {} after cancelling them (a client that "
        "stopped reading its stream); exiting without them: every event is committed",
        absl::FormatDuration(kCancelledCallsWait));
    for (const std::string& path : socket_paths_) std::filesystem::remove(path);
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
  retention_.reset();  // its thread reads the scheduler
  scheduler_.reset();
  tensorboard_.reset();      // after the scheduler, which feeds it; before the store it reads
  state_dir_watch_.reset();  // The scheduler checks it.
  executor_.reset();
  store_.reset();
  for (const std::string& path : socket_paths_) std::filesystem::remove(path);
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
  shut_down_ = true;
  if (started_) spdlog::info("mpsd stopped");
  return true;
}

absl::Status Server::CheckListenAddresses(const Config& config) {
  if (config.listen.empty()) return absl::InvalidArgumentError("listen: no address");
  for (const std::string& address : config.listen) {
    if (absl::StartsWith(address, "unix:")) continue;
    absl::StatusOr<TcpAddress> tcp = ParseTcpAddress(address);
    if (!tcp.ok()) return tcp.status();
    if (absl::Status s = CheckTcpListener(address, *tcp, config.tls.enabled()); !s.ok()) return s;
  }
  if (!config.http_listen.empty()) {
    if (absl::Status s = CheckHttpListen(config.http_listen, !config.tls.cert.empty()); !s.ok()) {
      return s;
    }
  }
  return CheckTlsFiles(config.tls);
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

std::string Server::http_url() const { return http_server_ == nullptr ? "" : http_server_->url(); }

void Server::SetExecutorReady(bool ready) {
  absl::MutexLock lock(&health_mu_);
  executor_ready_ = ready;
  UpdateHealth();
}

void Server::StateDirLost(const absl::Status& lost) {
  // The scheduler refuses submits and holds its queue on its own, through its check_storage
  // (it may not exist yet: the watch starts first).
  spdlog::error("{}", std::string(lost.message()));
  absl::MutexLock lock(&health_mu_);
  state_dir_lost_ = true;
  UpdateHealth();
}

void Server::SetStorageError(const absl::Status& error) {
  // EventLog logs each failed attempt itself.
  absl::MutexLock lock(&health_mu_);
  storage_failing_ = !error.ok();
  UpdateHealth();
}

void Server::UpdateHealth() {
  if (health_ == nullptr) return;
  const bool serving = executor_ready_ && !stopping_ && !state_dir_lost_ && !storage_failing_;
  // Both the overall status ("") and the service's own, for probes that name the service; each
  // by name (the overload without one sets every service, so watchers would hear it twice).
  health_->SetServingStatus("", serving);
  health_->SetServingStatus(mpsd::v1::JobService::service_full_name(), serving);
}

bool Server::Serving() {
  absl::MutexLock lock(&health_mu_);
  return executor_ready_ && !stopping_ && !state_dir_lost_ && !storage_failing_;
}

absl::Status Server::BindHttp() {
  const Config& config = options_.config;
  if (config.http_listen.empty()) return absl::OkStatus();
  HttpServer::Options http_options;
  http_options.address = config.http_listen;
  // TLS with the gRPC listeners' files (config tls: {cert, key, client_ca}).
  http_options.tls_cert_path = config.tls.cert;
  http_options.tls_key_path = config.tls.key;
  http_options.tls_client_ca_path = config.tls.client_ca;
  // Bearer tokens from the one tokens file (server/access/auth.h) the gRPC TCP listeners use too:
  // any role may view; what needs more (POST /cancel) checks the caller's role itself.
  http_options.authorize = [this](absl::string_view authorization,
                                  absl::string_view action) -> absl::StatusOr<HttpCaller> {
    // tokens_ is set before StartHttp serves anything (BuildAndStart).
    absl::StatusOr<Principal> principal = tokens_->Authenticate(authorization);
    if (!principal.ok()) {
      // No path in the answer: where the daemon keeps its tokens is nobody's business who has
      // no token (its log and `mpsd token list` say it to the owner).
      return absl::UnauthenticatedError(absl::StrCat(
          principal.status().message(),
          ". A token is made on the daemon's machine with the "
          "daemon's own --state-dir (or --config, --tokens): mpsd token add --state-dir DIR "
          "--name NAME --role viewer"));
    }
    if (absl::Status allowed = Authorize(*principal, Role::kViewer, action); !allowed.ok()) {
      return allowed;
    }
    return HttpCaller{principal->name, principal->role};
  };
  // Each connection holds a thread of its own (an open dashboard's event stream one, and a
  // browser keeps a few more alive); a request must arrive within its deadline.
  http_options.limits = config.http_limits;
  absl::StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Create(http_options);
  if (!http.ok()) return http.status();
  http_server_ = *std::move(http);
  return absl::OkStatus();
}

absl::Status Server::StartHttp() {
  const Config& config = options_.config;
  if (http_server_ == nullptr) return absl::OkStatus();
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
  // http_server_ lives until after the HTTP listener stops, so every scrape finds it.
  sources.http_connections = [this] { return http_server_->connection_counts(); };
  metrics_->SetSources(std::move(sources));

  // Public: a load balancer's probe carries no token, and the answer reveals nothing more than
  // whether the port answers.
  http_server_->Get(
      "/healthz",
      [this](const HttpCaller&, const httplib::Request&, httplib::Response& response) {
        const bool serving = Serving();
        response.status = serving ? 200 : 503;
        // A paused queue (mpsctl pause) is healthy, and says so on a second line.
        const bool paused = scheduler_->GetQueueStats().paused;
        response.set_content(
            absl::StrCat(serving ? "SERVING\n" : "NOT_SERVING\n", paused ? "queue paused\n" : ""),
            "text/plain; charset=utf-8");
      },
      /*public_route=*/true);
  http_server_->Get(
      "/metrics", [this](const HttpCaller&, const httplib::Request&, httplib::Response& response) {
        response.set_content(metrics_->Scrape(), "text/plain; version=0.0.4; charset=utf-8");
      });
  DashboardOptions dashboard_options;
  dashboard_options.heartbeat_interval = absl::Seconds(config.heartbeat_interval_s);
  dashboard_options.artifacts_dir = config.state_dir + "/artifacts";
  dashboard_options.executor_pid = [supervisor] { return supervisor->CurrentPid(); };
  dashboard_ = std::make_unique<Dashboard>(scheduler_.get(), dashboard_options);
  dashboard_->Register(http_server_.get());
  http_server_->Start();
  service_->SetHttpUrl(http_server_->url());
  spdlog::info("mpsd serving the dashboard, /metrics and /healthz on {}", http_server_->url());
  return absl::OkStatus();
}

absl::Status Server::Reload() {
  const TlsFiles& files = options_.config.tls;
  if (!files.enabled()) {
    spdlog::info("reload: no TLS configured; nothing to reload (tokens are re-read on change)");
    return absl::OkStatus();
  }
  // Both listeners or neither: the files are checked once here, then each listener re-reads.
  absl::Status status = CheckTlsFiles(files);
  if (status.ok() && tls_ != nullptr) status = tls_->Reload();
  if (status.ok() && http_server_ != nullptr) status = http_server_->ReloadTls();
  if (status.ok()) {
    spdlog::info("reload: TLS certificate {} and key {} re-read; new connections use them",
                 files.cert, files.key);
  } else {
    spdlog::error("reload refused, keeping the current TLS files: {}",
                  std::string(status.message()));
  }
  return status;
}

void Server::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

}  // namespace mpsd::server
