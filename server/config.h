// The daemon's configuration: built-in defaults, overridden by an optional YAML file
// (`mpsd --config FILE`, keys as in deploy/mpsd.yaml), overridden by command-line flags.
#ifndef MPSD_SERVER_CONFIG_H_
#define MPSD_SERVER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/input_limits.h"
#include "server/access/tls.h"
#include "server/core/retention.h"
#include "server/http/http_limits.h"

namespace mpsd::server {

// How mpsd runs its executor process, mpsd-executor (the `executor:` mapping of the config).
// See server/executor/executor_supervisor.h.
struct ExecutorConfig {
  // The mpsd-executor program; empty = DefaultExecutorPath() (next to mpsd, else the build
  // tree's trainer/).
  std::string path;
  // "shared" (one warm executor for every job) or "per_job" (a new executor for each job).
  std::string isolation = "shared";
  // Replace the executor after this many jobs; 0 = never.
  int64_t restart_after_jobs = 0;
  // Replace the executor after a job whose device memory after cleanup exceeds the baseline by
  // more than this, bytes; 0 = never. On CPU: the executor's resident memory against its
  // resident memory at start (Linux).
  int64_t restart_above_baseline_bytes = 0;
  // A cancelled job that has not stopped this long after the cancel gets its executor killed
  // and replaced, seconds (>= 0).
  double cancel_grace_s = 30.0;
  // The executor's address-space limit (RLIMIT_AS), bytes; 0 = none. On CPU an allocation
  // beyond it fails the job as OUT_OF_MEMORY.
  int64_t memory_limit_bytes = 0;
  // MPS: PyTorch's high watermark ratio (PYTORCH_MPS_HIGH_WATERMARK_RATIO) in the executor's
  // environment, in (0, 2]; 0 = PyTorch's default.
  double memory_fraction = 0.0;
  // MPS only: PYTORCH_ENABLE_MPS_FALLBACK in the executor's environment, 1 or 0: with it an
  // operator the MPS backend lacks runs on the CPU (slower, and reported in the job's log)
  // instead of failing the job.
  bool mps_fallback = false;
  // The submit-time check of a job with user code (a TorchScript model: its forward runs on
  // one example) runs in an mpsd-executor of its own, killed if it has not answered within
  // this, its start included; the submit then fails naming the field. Seconds, in [1, 86400].
  double user_code_timeout_s = 30.0;
  // A running job with user code that reports nothing (no step, epoch or log event) for this
  // long has its executor killed and replaced and FAILS with USER_CODE_TIMEOUT. Seconds, in
  // [1, 86400]; steps are reported in groups (steps_per_readback), so a group must fit in it.
  double user_code_stall_timeout_s = 600.0;
  // What reading one file a job names may cost, whatever the file claims (`max_file_bytes`,
  // `max_unpacked_bytes`, `max_image_pixels`; api/input_limits.h).
  api::InputLimits input_limits;
};

struct Config {
  // gRPC addresses, one listener each (`listen:` a string or a list; --listen repeated):
  // "unix:///path/mpsd.sock" (mode 0600; callers act as admin) or HOST:PORT on TCP (port 0 picks
  // a free port). TCP always needs a token (tokens_file); a TCP address other than loopback
  // also needs TLS. Default: {DefaultListenAddress()}.
  std::vector<std::string> listen;
  // Certificate and key for the TCP listeners, and the client CA for mutual TLS (`tls:`
  // {cert, key, client_ca}). Unset: TCP is plaintext and loopback only.
  TlsFiles tls;
  // Bearer tokens for TCP (server/access/auth.h). Default: <state_dir>/tokens.yaml; created with an
  // admin token on the first start with a TCP listener.
  std::string tokens_file;
  // Paths that jobs submitted over TCP may name (dataset roots, torchscript, resume_from) must
  // lie under one of these directories, symlinks resolved. Default: the daemon user's home,
  // /usr/share/datasets and <state_dir>/artifacts. The rest of the state dir is refused
  // whatever this says (server/access/data_roots.h).
  std::vector<std::string> data_roots;
  // HTTP(S) listener for the dashboard, /metrics and /healthz, "HOST:PORT" (port 0 picks a
  // free port); empty = none (the default). A non-loopback host needs TLS (the `tls:` files);
  // every request but /healthz needs a bearer token from tokens_file. See
  // server/http/http_server.h.
  std::string http_listen;
  // The HTTP listener's request deadline and connection caps (`http_limits:`
  // {request_timeout_s, max_connections, max_connections_per_address}; server/http/http_limits.h).
  HttpLimits http_limits;
  // Where the job database lives. Default: DefaultStateDir().
  std::string state_dir;
  // Live TensorBoard event files of every TrainJob under <tensorboard_dir>/<name>-<id>/ (a job
  // without a name: <id>/), written while it trains (server/core/tensorboard_writer.h); empty =
  // only jobs with `tensorboard: true`, into their artifacts. Made absolute at start.
  std::string tensorboard_dir;
  // SubmitJob fails with RESOURCE_EXHAUSTED beyond this many queued jobs.
  int max_queued = 1000;
  // Intra-op threads for CPU training, 0 to 4096; 0 = one per CPU the executor may run on (its
  // CPU affinity: all logical CPUs unless taskset or a cpuset narrows it; the executor logs it).
  int cpu_threads = 0;
  // On SIGTERM/SIGINT: how long running RPCs and the running job get to end, seconds.
  double shutdown_grace_s = 10.0;
  // An event stream that has sent nothing for this long gets a heartbeat event, seconds (> 0).
  double heartbeat_interval_s = 15.0;
  // spdlog level: trace, debug, info, warn, error.
  std::string log_level = "info";
  // mpsd's log: "" = stderr (journald under systemd, StandardErrorPath under launchd); else this
  // file, rotated by size (spdlog's rotating sink): at log_file_max_bytes (>= 1) it becomes
  // FILE.1 (FILE.1 becomes FILE.2, ...) and at most log_file_max_files (1 to 1000) old files stay.
  // The executor's own messages stay on stderr.
  std::string log_file;
  int64_t log_file_max_bytes = 10 * 1024 * 1024;
  int log_file_max_files = 5;
  ExecutorConfig executor;
  // Uploads (UploadFile; jobs name them `upload:NAME`) under <state_dir>/uploads/<submitter>/:
  // each submitter's may hold this many bytes, unfinished ones included (1 to 2^50; default
  // 20 GiB), and an uploaded archive (a folder) at most upload_max_files entries (1 to
  // 100,000,000). See server/core/uploads.h.
  int64_t upload_quota_bytes = int64_t{20} << 30;
  int64_t upload_max_files = 100000;
  // Bounded disk use (`artifacts_retention:` {keep_last_jobs, max_age_days, max_bytes}; see
  // server/core/retention.h). Default: none, nothing is deleted unless asked for.
  RetentionPolicy artifacts_retention;
};

// The built-in configuration: every field at its default, listen and state_dir filled in.
Config DefaultConfig();

// Reads a YAML file over DefaultConfig(). Errors (INVALID_ARGUMENT) name the file and the key:
// unknown keys, values of the wrong type, unreadable YAML (with line and column); NOT_FOUND if
// the file does not exist.
absl::StatusOr<Config> LoadConfig(const std::string& path);

// The configuration as `mpsd --check-config` prints it: one "key: value" line per key of
// deploy/mpsd.yaml, nested keys dotted ("executor.cancel_grace_s: 30"), lists joined with ", ",
// unset strings as "(none)"; listen, state_dir and executor.path first. Units are the keys'
// own (_s seconds, _bytes bytes). Config holds no secret: the TLS key and the tokens file are
// shown as their paths, never their contents. Pure; thread-safe.
std::string FormatConfig(const Config& config);

// "$XDG_STATE_HOME/mpsd", else "$HOME/.local/state/mpsd" ("$HOME/Library/Application
// Support/mpsd" on macOS), else "/tmp/mpsd-$UID/state".
std::string DefaultStateDir();

// "unix://$XDG_RUNTIME_DIR/mpsd/mpsd.sock", else "unix:///tmp/mpsd-$UID/mpsd.sock": where
// mpsctl connects by default (api/default_address.h). $MPSD_ADDR, the clients' variable, is not
// read: `export MPSD_ADDR=gpu-box:7070` for mpsctl must not move the daemon.
std::string DefaultListenAddress();

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CONFIG_H_
