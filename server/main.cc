// mpsd: parses flags, builds the configuration, starts the server, waits for SIGTERM/SIGINT.
#include <signal.h>

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "server/config.h"
#include "server/server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

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
  CLI11_PARSE(app, argc, argv);

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
  if (!http_listen.empty()) config.http_listen = http_listen;
  // Logs go to stderr: stdout stays free for whatever runs mpsd in the foreground.
  spdlog::set_default_logger(spdlog::stderr_color_mt("mpsd"));
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
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("received {}", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown();
  return 0;
}
