// The daemon's configuration: built-in defaults, overridden by an optional YAML file
// (`mpsd --config FILE`, keys as in deploy/mpsd.yaml), overridden by command-line flags.
#ifndef MPSD_SERVER_CONFIG_H_
#define MPSD_SERVER_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"

namespace mpsd::server {

struct Config {
  // gRPC address: "unix:///path/mpsd.sock" or "127.0.0.1:PORT" (loopback only until TLS
  // exists; port 0 picks a free port). Default: DefaultListenAddress().
  std::string listen;
  // Where the job database lives. Default: DefaultStateDir().
  std::string state_dir;
  // SubmitJob fails with RESOURCE_EXHAUSTED beyond this many queued jobs.
  int max_queued = 1000;
  // Intra-op threads for CPU training; 0 = LibTorch's default (one per core).
  int cpu_threads = 0;
  // On SIGTERM/SIGINT: how long running RPCs and the running job get to end, seconds.
  double shutdown_grace_s = 10.0;
  // An event stream that has sent nothing for this long gets a heartbeat event, seconds (> 0).
  double heartbeat_interval_s = 15.0;
  // spdlog level: trace, debug, info, warn, error.
  std::string log_level = "info";
};

// The built-in configuration: every field at its default, listen and state_dir filled in.
Config DefaultConfig();

// Reads a YAML file over DefaultConfig(). Errors (INVALID_ARGUMENT) name the file and the key:
// unknown keys, values of the wrong type, unreadable YAML (with line and column); NOT_FOUND if
// the file does not exist.
absl::StatusOr<Config> LoadConfig(const std::string& path);

// "$XDG_STATE_HOME/mpsd", else "$HOME/.local/state/mpsd", else "/tmp/mpsd-$UID/state".
std::string DefaultStateDir();

// $MPSD_ADDR, else "unix://$XDG_RUNTIME_DIR/mpsd/mpsd.sock", else
// "unix:///tmp/mpsd-$UID/mpsd.sock": the same default mpsctl uses (client/default_address.h).
std::string DefaultListenAddress();

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CONFIG_H_
