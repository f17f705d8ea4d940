// mpsd: parses flags, builds the configuration, starts the server, waits for SIGTERM/SIGINT.
#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <ctime>
#include <string>

#include "CLI/CLI.hpp"
#include "server/config.h"
#include "server/executor_supervisor.h"
#include "server/server.h"
#include "server/service_notify.h"
#include "spdlog/sinks/rotating_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "version/version.h"

int main(int argc, char** argv) {
  CLI::App app{"mpsd: a training daemon with a gRPC job API"};
  std::string config_file, listen, state_dir;
  app.add_option("--config", config_file, "YAML configuration file (see deploy/mpsd.yaml)");
  app.add_option("--listen", listen,
                 "unix:///path/mpsd.sock or 127.0.0.1:PORT (default: " +
                     mpsd::server::DefaultListenAddress() + ")");
  std::string http_listen;
  app.add_option("--http-listen", http_listen,
                 "HOST:PORT for HTTP(S): /metrics (Prometheus), /healthz; loopback unless TLS "
                 "(default: none)");
  app.add_option("--state-dir", state_dir,
                 "directory for the job database (default: " + mpsd::server::DefaultStateDir() +
                     ")");
  bool enable_fault_injection = false;
  app.add_flag("--enable-fault-injection", enable_fault_injection,
               "accept jobs' fault_injection (crash, out-of-memory and hang tests only)");
  std::string check_config;
  app.add_option("--check-config", check_config,
                 "check a configuration file (every key, and that executor.path is a program), "
                 "print what it sets, and exit: 0 if it is valid, 2 if not")
      ->type_name("FILE");
  app.set_version_flag("--version", mpsd::VersionText("mpsd"),
                       "print the version, git commit and LibTorch version, and exit");
  CLI11_PARSE(app, argc, argv);

  if (!check_config.empty()) {
    absl::StatusOr<mpsd::server::Config> loaded = mpsd::server::LoadConfig(check_config);
    if (!loaded.ok()) {
      std::fprintf(stderr, "mpsd: %s\n", std::string(loaded.status().message()).c_str());
      return 2;
    }
    // The addresses as BuildAndStart checks them: what --check-config calls valid starts.
    if (absl::Status status = mpsd::server::Server::CheckListenAddresses(*loaded); !status.ok()) {
      std::fprintf(stderr, "mpsd: %s: %s\n", check_config.c_str(),
                   std::string(status.message()).c_str());
      return 2;
    }
    const std::string executor =
        loaded->executor.path.empty() ? mpsd::server::DefaultExecutorPath() : loaded->executor.path;
    if (access(executor.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "mpsd: %s: executor.path: %s is not an executable program\n",
                   check_config.c_str(), executor.c_str());
      return 2;
    }
    std::printf("%s: valid\nlisten: %s\nstate_dir: %s\nexecutor.path: %s\n",
                check_config.c_str(), loaded->listen.c_str(), loaded->state_dir.c_str(),
                executor.c_str());
    return 0;
  }

  mpsd::server::Config config = mpsd::server::DefaultConfig();
  if (!config_file.empty()) {
    absl::StatusOr<mpsd::server::Config> loaded = mpsd::server::LoadConfig(config_file);
    if (!loaded.ok()) {
      std::fprintf(stderr, "mpsd: %s\n", std::string(loaded.status().message()).c_str());
      return 2;
    }
    config = *loaded;
  }
  // A bare socket path, as mpsctl --server accepts.
  if (!listen.empty()) config.listen = listen.front() == '/' ? "unix://" + listen : listen;
  if (!state_dir.empty()) config.state_dir = state_dir;
  // Absolute from here on: the executor's socket becomes a unix:// URI in it, where a relative
  // path would be read as an authority ("unix://state/executor.sock"), and the executor may run
  // elsewhere.
  {
    std::error_code ignored;
    const std::filesystem::path absolute = std::filesystem::absolute(config.state_dir, ignored);
    if (!absolute.empty()) config.state_dir = absolute.lexically_normal().string();
  }
  if (!http_listen.empty()) config.http_listen = http_listen;
  // Logs go to stderr (stdout stays free for whatever runs mpsd in the foreground), or to
  // log_file, rotated by size.
  if (config.log_file.empty()) {
    spdlog::set_default_logger(spdlog::stderr_color_mt("mpsd"));
  } else {
    try {
      spdlog::set_default_logger(spdlog::rotating_logger_mt(
          "mpsd", config.log_file, static_cast<size_t>(config.log_file_max_bytes),
          static_cast<size_t>(config.log_file_max_files)));
    } catch (const spdlog::spdlog_ex& e) {
      std::fprintf(stderr, "mpsd: log_file: %s\n", e.what());
      return 2;
    }
    spdlog::flush_on(spdlog::level::info);
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));

  // Signals are taken synchronously by this thread; every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  mpsd::server::Server::Options options;
  options.config = config;
  options.allow_fault_injection = enable_fault_injection;
  absl::StatusOr<std::unique_ptr<mpsd::server::Server>> server =
      mpsd::server::Server::BuildAndStart(options);
  if (!server.ok()) {
    std::fprintf(stderr, "mpsd: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  mpsd::server::NotifyReady("listening on " + (*server)->address());
  // Waits for SIGTERM/SIGINT; feeds the service manager's watchdog meanwhile, if it asked for
  // one (WatchdogSec in deploy/mpsd.service).
  const absl::Duration watchdog = mpsd::server::WatchdogInterval();
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
