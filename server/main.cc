// mpsd: parses flags, builds the configuration, starts the server, waits for SIGTERM/SIGINT
// (stop) and SIGHUP (reload the TLS files); SIGUSR1/SIGUSR2 are logged and ignored.
// `mpsd token add|list|revoke` edits a tokens file.
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "server/access/auth.h"
#include "server/access/data_roots.h"
#include "server/config.h"
#include "server/core/escaping_sink.h"
#include "server/core/state_dir.h"
#include "server/executor/executor_supervisor.h"
#include "server/server.h"
#include "server/service_notify.h"
#include "spdlog/sinks/rotating_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "version/version.h"

namespace {

// `mpsd token …`: exit codes 0 success, 1 error (printed on stderr).
int RunTokenCommand(const std::string& command, const std::string& path, const std::string& name,
                    const std::string& role_name) {
  if (command == "add") {
    absl::StatusOr<mpsd::server::Role> role = mpsd::server::ParseRole(role_name);
    if (!role.ok()) {
      std::fprintf(stderr, "mpsd token add: --role: %s\n",
                   std::string(role.status().message()).c_str());
      return 1;
    }
    absl::StatusOr<std::string> token = mpsd::server::AddToken(path, name, *role);
    if (!token.ok()) {
      std::fprintf(stderr, "mpsd token add: %s\n", std::string(token.status().message()).c_str());
      return 1;
    }
    std::cout << *token << std::endl;
    std::fprintf(stderr,
                 "mpsd: token \"%s\" (%s) added to %s. It is printed this once and stored only "
                 "as its SHA-256: keep it in a file of mode 0600 (mpsctl --token-file FILE) or in "
                 "MPSD_TOKEN.\n",
                 name.c_str(), role_name.c_str(), path.c_str());
    return 0;
  }
  if (command == "revoke") {
    if (absl::Status status = mpsd::server::RevokeToken(path, name); !status.ok()) {
      std::fprintf(stderr, "mpsd token revoke: %s\n", std::string(status.message()).c_str());
      return 1;
    }
    std::fprintf(
        stderr, "mpsd: token \"%s\" revoked in %s (a running mpsd refuses it from its next call)\n",
        name.c_str(), path.c_str());
    return 0;
  }
  absl::StatusOr<std::unique_ptr<mpsd::server::TokenStore>> store =
      mpsd::server::TokenStore::Open(path);
  if (!store.ok()) {
    std::fprintf(stderr, "mpsd token list: %s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  std::printf("%-32s %s\n", "NAME", "ROLE");
  for (const mpsd::server::TokenRecord& record : (*store)->Records()) {
    std::printf("%-32s %s\n", record.name.c_str(),
                std::string(mpsd::server::RoleName(record.role)).c_str());
  }
  return 0;
}

// gRPC 1.51 stops accepting on its listeners for good once accept() fails with EMFILE: a
// thousand idle TCP connections under the usual soft limit of 1024 open files took the unix
// socket down with the TCP port until a restart (issue 26). The soft limit goes up to the hard
// one (systemd's default hard limit is 524288; at most 2^20, the kernel's usual nr_open), so
// that gRPC's handshake deadline frees such connections long before they run out. mpsd,
// cpp-httplib and gRPC wait with poll or epoll, never select, so descriptors beyond FD_SETSIZE
// are safe.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
#if defined(__APPLE__)
  const rlim_t most = OPEN_MAX;  // macOS refuses a soft limit above it.
#else
  const rlim_t most = rlim_t{1} << 20;
#endif
  const rlim_t wanted = std::min<rlim_t>(limit.rlim_max, most);
  if (limit.rlim_cur >= wanted) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = wanted;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("cannot raise the open files limit from {} to {}: {}", before, wanted,
                 std::strerror(errno));
    return;
  }
  spdlog::info("open files limit raised from {} to {}", before, wanted);
}

// The command line: the daemon's flags, `mpsd token ...` and --check-config.
struct Flags {
  std::string config_file, state_dir, tokens_file, http_listen, tensorboard_dir, check_config;
  std::vector<std::string> listen;
  mpsd::server::TlsFiles tls;
  bool state_dir_given = false;
  bool enable_fault_injection = false;
  // `mpsd token add|list|revoke`: the command, else empty.
  std::string token_command, token_name, token_role;
};

// Parses the command line into `flags`; returns an exit code when mpsd should exit now (--help,
// --version: 0; a flag CLI11 refuses: 2, the usage code, as a bad config's, rather than CLI11's
// own codes, e.g. 105 for `--role superuser`, which tell a script nothing).
std::optional<int> ParseFlags(int argc, char** argv, Flags& flags) {
  CLI::App app{"mpsd: a training daemon with a gRPC job API"};
  app.add_option("--config", flags.config_file, "YAML configuration file (see deploy/mpsd.yaml)");
  app.add_option("--listen", flags.listen,
                 "unix:///path/mpsd.sock or HOST:PORT; repeat for several listeners. TCP needs a "
                 "token on every call and, off loopback, TLS (default: " +
                     mpsd::server::DefaultListenAddress() + ")")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--http-listen", flags.http_listen,
                 "HOST:PORT for HTTP(S): the dashboard, /metrics (Prometheus), /healthz; a bearer "
                 "token on every request but /healthz; TLS (the --tls-cert/--tls-key files) off "
                 "loopback (default: none)");
  app.add_option("--tensorboard-dir", flags.tensorboard_dir,
                 "write every TrainJob's TensorBoard event file under DIR/<name>-<id>/ while it "
                 "trains (default: none; docs/metrics-export.md)");
  CLI::Option* state_dir_option = app.add_option(
      "--state-dir", flags.state_dir,
      "directory for the job database (default: " + mpsd::server::DefaultStateDir() + ")");
  app.add_option("--tls-cert", flags.tls.cert, "PEM certificate (and chain) for the TCP listeners");
  app.add_option("--tls-key", flags.tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", flags.tls.client_ca,
                 "PEM CA certificates: TCP clients must present a certificate signed by one "
                 "(mutual TLS)");
  app.add_option("--tokens", flags.tokens_file,
                 "tokens file for TCP, mode 0600 (default: <state dir>/tokens.yaml)");
  app.add_flag("--enable-fault-injection", flags.enable_fault_injection,
               "accept jobs' fault_injection (crash, out-of-memory and hang tests only)");
  app.add_option("--check-config", flags.check_config,
                 "check a configuration file (every key, and that executor.path is a program), "
                 "print what it sets, and exit: 0 if it is valid, 2 if not")
      ->type_name("FILE");
  app.set_version_flag("--version", mpsd::VersionText("mpsd"),
                       "print the version, git commit and LibTorch version, and exit");

  CLI::App* token = app.add_subcommand("token", "add, list or revoke bearer tokens for TCP");
  token->require_subcommand(1);
  CLI::App* token_add = token->add_subcommand(
      "add", "add a token and print it (once; the file keeps only its SHA-256)");
  token_add->add_option("--name", flags.token_name, "the token's name (A-Z a-z 0-9 . _ -)")
      ->required();
  token_add->add_option("--role", flags.token_role, "viewer, submitter or admin")
      ->required()
      ->check(CLI::IsMember({"viewer", "submitter", "admin"}));
  CLI::App* token_list = token->add_subcommand("list", "list the tokens' names and roles");
  CLI::App* token_revoke = token->add_subcommand("revoke", "remove a token");
  token_revoke->add_option("NAME", flags.token_name, "the token's name")->required();
  for (CLI::App* sub : {token_add, token_list, token_revoke}) {
    sub->add_option(
        "--tokens", flags.tokens_file,
        "tokens file (default: the config's tokens_file, else <state dir>/tokens.yaml)");
    // `mpsd token add --state-dir DIR ...` as well as `mpsd --state-dir DIR token add ...`: the
    // daemon's own options (--state-dir, --config) may follow the subcommand.
    sub->fallthrough();
  }
  token->fallthrough();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  flags.state_dir_given = state_dir_option->count() > 0;
  if (*token) flags.token_command = *token_add ? "add" : *token_revoke ? "revoke" : "list";
  return std::nullopt;
}

// `mpsd --check-config FILE`: 0 and every key as the start would use it (the defaults that
// depend on others resolved), or 2 and why not.
int CheckConfigFile(const std::string& path) {
  absl::StatusOr<mpsd::server::Config> loaded = mpsd::server::LoadConfig(path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "mpsd: %s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  // The addresses as BuildAndStart checks them: what --check-config calls valid starts.
  if (absl::Status status = mpsd::server::Server::CheckListenAddresses(*loaded); !status.ok()) {
    std::fprintf(stderr, "mpsd: %s: %s\n", path.c_str(), std::string(status.message()).c_str());
    return 2;
  }
  const std::string executor =
      loaded->executor.path.empty() ? mpsd::server::DefaultExecutorPath() : loaded->executor.path;
  if (access(executor.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "mpsd: %s: executor.path: %s is not an executable program\n", path.c_str(),
                 executor.c_str());
    return 2;
  }
  mpsd::server::Config effective = *loaded;
  effective.executor.path = executor;
  if (effective.tokens_file.empty()) effective.tokens_file = effective.state_dir + "/tokens.yaml";
  if (effective.data_roots.empty()) {
    effective.data_roots = mpsd::server::DefaultDataRoots(effective.state_dir);
  }
  std::printf("%s: valid\n%s", path.c_str(), mpsd::server::FormatConfig(effective).c_str());
  return 0;
}

// An absolute, normalised `path` (unchanged if the working directory cannot be read).
std::string Absolute(const std::string& path) {
  std::error_code ignored;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ignored);
  return absolute.empty() ? path : absolute.lexically_normal().string();
}

// The configuration: the defaults, then the config file, then the flags, which win.
absl::StatusOr<mpsd::server::Config> ConfigOf(const Flags& flags) {
  mpsd::server::Config config = mpsd::server::DefaultConfig();
  if (!flags.config_file.empty()) {
    absl::StatusOr<mpsd::server::Config> loaded = mpsd::server::LoadConfig(flags.config_file);
    if (!loaded.ok()) return loaded.status();
    config = *loaded;
  }
  if (!flags.listen.empty()) {
    config.listen.clear();
    // A bare socket path, as mpsctl --server accepts.
    for (const std::string& address : flags.listen) {
      config.listen.push_back(!address.empty() && address.front() == '/' ? "unix://" + address
                                                                         : address);
    }
  }
  if (!flags.state_dir.empty()) config.state_dir = flags.state_dir;
  // Absolute from here on: the executor's socket becomes a unix:// URI in it, where a relative
  // path would be read as an authority ("unix://state/executor.sock"), and the executor may run
  // elsewhere.
  config.state_dir = Absolute(config.state_dir);
  if (!flags.tensorboard_dir.empty()) config.tensorboard_dir = flags.tensorboard_dir;
  if (!config.tensorboard_dir.empty()) config.tensorboard_dir = Absolute(config.tensorboard_dir);
  if (!flags.http_listen.empty()) config.http_listen = flags.http_listen;
  if (!flags.tls.cert.empty()) config.tls.cert = flags.tls.cert;
  if (!flags.tls.key.empty()) config.tls.key = flags.tls.key;
  if (!flags.tls.client_ca.empty()) config.tls.client_ca = flags.tls.client_ca;
  if (!flags.tokens_file.empty()) config.tokens_file = flags.tokens_file;
  return config;
}

// Logs go to stderr (stdout stays free for whatever runs mpsd in the foreground), or to
// log_file, rotated by size. False (and why, on stderr) when log_file cannot be opened.
bool SetUpLogging(const mpsd::server::Config& config) {
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (config.log_file.empty()) {
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  } else {
    try {
      sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
          config.log_file, static_cast<size_t>(config.log_file_max_bytes),
          static_cast<size_t>(config.log_file_max_files));
    } catch (const spdlog::spdlog_ex& e) {
      std::fprintf(stderr, "mpsd: log_file: %s\n", e.what());
      return false;
    }
  }
  // Control characters in a message (a path or name a client sent) escaped: no forged lines.
  auto logger = std::make_shared<spdlog::logger>(
      "mpsd", std::make_shared<mpsd::server::EscapingSink>(std::move(sink)));
  spdlog::set_default_logger(logger);
  if (!config.log_file.empty()) spdlog::flush_on(spdlog::level::info);
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  return true;
}

// Blocks the signals mpsd takes synchronously (every thread started later inherits the mask)
// and ignores those whose default would end it; returns the set to wait on.
sigset_t TakeSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  // Their default action ends the process: a stray `kill -USR1` (a log-rotation script meant
  // for another daemon) must not take the jobs down with it.
  sigaddset(&signals, SIGUSR1);
  sigaddset(&signals, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Past RLIMIT_FSIZE a write fails with EFBIG, which the store reports as an error; the
  // default action would kill the daemon instead.
  signal(SIGXFSZ, SIG_IGN);
  return signals;
}

// Waits for SIGTERM/SIGINT, reloading the TLS files on each SIGHUP and feeding the service
// manager's watchdog meanwhile, if it asked for one (WatchdogSec in deploy/mpsd.service).
// Returns the signal that stops mpsd.
int WaitForStop(const sigset_t& signals, mpsd::server::Server& server) {
  const absl::Duration watchdog = mpsd::server::WatchdogInterval();
  for (;;) {
    int signal_number = 0;
#if !defined(__APPLE__)  // macOS has no sigtimedwait, and no systemd watchdog to feed
    if (watchdog > absl::ZeroDuration()) {
      const timespec interval = absl::ToTimespec(watchdog);
      mpsd::server::NotifyWatchdog();
      while ((signal_number = sigtimedwait(&signals, nullptr, &interval)) < 0) {
        if (errno == EAGAIN) mpsd::server::NotifyWatchdog();
      }
    }
#endif
    if (signal_number == 0) sigwait(&signals, &signal_number);
    if (signal_number == SIGUSR1 || signal_number == SIGUSR2) {
      spdlog::warn(
          "received {} and ignored it (SIGHUP reloads the TLS files, "
          "SIGTERM stops mpsd)",
          signal_number == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
      continue;
    }
    if (signal_number != SIGHUP) return signal_number;
    spdlog::info("received SIGHUP: reloading");
    server.Reload().IgnoreError();  // Reload logs what it did or why not.
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything is created: the state dir, the database, the socket, and what
  // mpsd-executor writes (it inherits the mask) are private to the daemon's user.
  umask(mpsd::server::kPrivateUmask);
  Flags flags;
  if (std::optional<int> exit_code = ParseFlags(argc, argv, flags)) return *exit_code;
  // `--state-dir ''` (an unset shell variable) silently meant the default state dir: another
  // daemon's jobs, or a fresh database where the user expected theirs.
  if (flags.state_dir_given && flags.state_dir.empty()) {
    std::fprintf(stderr,
                 "mpsd: --state-dir: empty; name a directory, or leave the flag out for "
                 "the default (%s)\n",
                 mpsd::server::DefaultStateDir().c_str());
    return 2;
  }
  if (!flags.check_config.empty()) return CheckConfigFile(flags.check_config);
  absl::StatusOr<mpsd::server::Config> config = ConfigOf(flags);
  if (!config.ok()) {
    std::fprintf(stderr, "mpsd: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (!flags.token_command.empty()) {
    const std::string path =
        config->tokens_file.empty() ? config->state_dir + "/tokens.yaml" : config->tokens_file;
    return RunTokenCommand(flags.token_command, path, flags.token_name, flags.token_role);
  }
  if (!SetUpLogging(*config)) return 2;
  const sigset_t signals = TakeSignals();
  RaiseOpenFileLimit();

  mpsd::server::Server::Options options;
  options.config = *config;
  options.allow_fault_injection = flags.enable_fault_injection;
  absl::StatusOr<std::unique_ptr<mpsd::server::Server>> server =
      mpsd::server::Server::BuildAndStart(options);
  if (!server.ok()) {
    std::fprintf(stderr, "mpsd: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  mpsd::server::NotifyReady("listening on " + (*server)->address());
  const int signal_number = WaitForStop(signals, **server);
  const char* name = signal_number == SIGTERM ? "SIGTERM" : "SIGINT";
  spdlog::info("received {}", name);
  mpsd::server::NotifyStopping(std::string("stopping (") + name + ")");
  if (!(*server)->Shutdown()) {
    // gRPC still holds a call of a client that stopped reading: every event is committed, and
    // the Server must not be destroyed (its gRPC server would wait for that call).
    spdlog::default_logger()->flush();
    std::_Exit(0);
  }
  return 0;
}
