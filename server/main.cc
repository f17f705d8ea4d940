// mpsd: parses flags, builds the configuration, starts the server, waits for SIGTERM/SIGINT
// (stop) and SIGHUP (reload the TLS files). `mpsd token add|list|revoke` edits a tokens file.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "server/auth.h"
#include "server/config.h"
#include "server/server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

// `mpsd token …`: exit codes 0 success, 1 error (printed on stderr).
int RunTokenCommand(const std::string& command, const std::string& path, const std::string& name,
                    const std::string& role_name) {
  if (command == "add") {
    absl::StatusOr<mpsd::server::Role> role = mpsd::server::ParseRole(role_name);
    if (!role.ok()) {
      std::fprintf(stderr, "mpsd token add: --role: %s\n", std::string(role.status().message()).c_str());
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
    std::fprintf(stderr, "mpsd: token \"%s\" revoked in %s (a running mpsd refuses it from its next call)\n",
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mpsd: a training daemon with a gRPC job API"};
  std::string config_file, state_dir, tokens_file;
  std::vector<std::string> listen;
  mpsd::server::TlsFiles tls;
  app.add_option("--config", config_file, "YAML configuration file (see deploy/mpsd.yaml)");
  app.add_option("--listen", listen,
                 "unix:///path/mpsd.sock or HOST:PORT; repeat for several listeners. TCP needs a "
                 "token on every call and, off loopback, TLS (default: " +
                     mpsd::server::DefaultListenAddress() + ")")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--state-dir", state_dir,
                 "directory for the job database (default: " + mpsd::server::DefaultStateDir() +
                     ")");
  app.add_option("--tls-cert", tls.cert, "PEM certificate (and chain) for the TCP listeners");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", tls.client_ca,
                 "PEM CA certificates: TCP clients must present a certificate signed by one "
                 "(mutual TLS)");
  app.add_option("--tokens", tokens_file,
                 "tokens file for TCP, mode 0600 (default: <state dir>/tokens.yaml)");
  bool enable_fault_injection = false;
  app.add_flag("--enable-fault-injection", enable_fault_injection,
               "accept jobs' fault_injection (crash, out-of-memory and hang tests only)");

  CLI::App* token = app.add_subcommand("token", "add, list or revoke bearer tokens for TCP");
  token->require_subcommand(1);
  std::string token_name, token_role;
  CLI::App* token_add = token->add_subcommand(
      "add", "add a token and print it (once; the file keeps only its SHA-256)");
  token_add->add_option("--name", token_name, "the token's name (A-Z a-z 0-9 . _ -)")->required();
  token_add->add_option("--role", token_role, "viewer, submitter or admin")
      ->required()
      ->check(CLI::IsMember({"viewer", "submitter", "admin"}));
  CLI::App* token_list = token->add_subcommand("list", "list the tokens' names and roles");
  CLI::App* token_revoke = token->add_subcommand("revoke", "remove a token");
  token_revoke->add_option("NAME", token_name, "the token's name")->required();
  for (CLI::App* sub : {token_add, token_list, token_revoke}) {
    sub->add_option("--tokens", tokens_file,
                    "tokens file (default: the config's tokens_file, else <state dir>/tokens.yaml)");
  }
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
  if (!listen.empty()) {
    config.listen.clear();
    // A bare socket path, as mpsctl --server accepts.
    for (const std::string& address : listen) {
      config.listen.push_back(!address.empty() && address.front() == '/' ? "unix://" + address
                                                                          : address);
    }
  }
  if (!state_dir.empty()) config.state_dir = state_dir;
  if (!tls.cert.empty()) config.tls.cert = tls.cert;
  if (!tls.key.empty()) config.tls.key = tls.key;
  if (!tls.client_ca.empty()) config.tls.client_ca = tls.client_ca;
  if (!tokens_file.empty()) config.tokens_file = tokens_file;

  if (*token) {
    const std::string path =
        config.tokens_file.empty() ? config.state_dir + "/tokens.yaml" : config.tokens_file;
    const std::string command = *token_add ? "add" : *token_revoke ? "revoke" : "list";
    return RunTokenCommand(command, path, token_name, token_role);
  }

  // Logs go to stderr: stdout stays free for whatever runs mpsd in the foreground.
  spdlog::set_default_logger(spdlog::stderr_color_mt("mpsd"));
  spdlog::set_level(spdlog::level::from_str(config.log_level));

  // Signals are taken synchronously by this thread; every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
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
  for (;;) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) break;
    spdlog::info("received SIGHUP: reloading");
    (*server)->Reload().IgnoreError();  // Reload logs what it did or why not.
  }
  spdlog::info("received {}", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown();
  return 0;
}
