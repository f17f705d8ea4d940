// mpsctl's commands: one method per subcommand, each one or two RPCs on the sync stub and its
// output, returning the process exit code. main.cc only parses flags and calls one of them.
// Defined one file per command group: client/commands.cc (the channel, failed calls),
// commands_jobs.cc, commands_follow.cc, commands_results.cc, commands_artifacts.cc,
// commands_server.cc, commands_export.cc, commands_predict.cc, commands_upload.cc.
#ifndef MPSD_CLIENT_COMMANDS_H_
#define MPSD_CLIENT_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mpsd/v1/mpsd.grpc.pb.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::client {

class EventPrinter;

// Exit codes of mpsctl.
inline constexpr int kExitOk = 0;
// The daemon answered with an error, the job file is bad, or a followed job did not succeed.
inline constexpr int kExitFailed = 1;
// The daemon cannot be reached (no socket, connection refused, no answer within the deadline,
// connection lost while following).
inline constexpr int kExitUnreachable = 2;
// mpsd answered, with UNAVAILABLE: it runs but cannot take the call now (shutting down, its
// executor restarting); retrying later may work.
inline constexpr int kExitDaemonUnavailable = 3;
// `mpsctl wait`: the timeout passed before every job ended.
inline constexpr int kExitWaitTimeout = 4;
// Bad command line (main.cc).
inline constexpr int kExitUsage = 64;

// How mpsctl reaches a TCP server (--tls-ca, --tls-cert, --tls-key, --tls).
struct TlsOptions {
  // Verify the server with TLS even on loopback (implied by any of the files below).
  bool enabled = false;
  // PEM CA certificates the server's certificate must chain to; empty = the system's roots.
  std::string ca_file;
  // Client certificate and key for servers that require one (mutual TLS).
  std::string cert_file;
  std::string key_file;
};

struct CommandOptions {
  // gRPC target, e.g. "unix:///run/user/1000/mpsd/mpsd.sock" or "localhost:7070".
  std::string server;
  // For TCP targets: TLS (always off loopback; on loopback when asked for) and the bearer
  // token sent on every call (--token-file or $MPSD_TOKEN). Unused on unix sockets.
  TlsOptions tls;
  std::string token;
  // Print protobuf's JSON mapping instead of text: one object per response, one per line for
  // event streams.
  bool json = false;
  // stdout is a terminal: follow mode redraws one progress line in place.
  bool live = false;
  // stderr is a terminal: long transfers (upload) redraw one progress line there, at most
  // twice a second.
  bool progress = false;
  // Terminal columns when live; 0 when unknown.
  int terminal_width = 0;
  // Deadline of every unary call. Event streams have none.
  absl::Duration rpc_timeout = absl::Seconds(10);
  // While following, Ctrl-C prints how to resume before exiting (installs a SIGINT handler for
  // the duration of the stream). Off in tests.
  bool explain_interrupt = false;
  // A followed stream that broke (the daemon restarted, the network dropped) or stayed silent
  // for two heartbeat intervals is reopened with after_seq = the last seq printed, for up to
  // this long without an event; zero = never reconnect.
  absl::Duration reconnect_timeout = absl::Minutes(2);
};

// The channel arguments mpsctl (and the Python client) connect with: HTTP/2 keepalive pings
// every 30 s (the daemon accepts every 10 s or slower: ServerStatus.min_keepalive_interval_s),
// also while no call is active, with a 10 s timeout, so that a dead connection is noticed.
grpc::ChannelArguments KeepaliveChannelArguments();

// `mpsctl submit` flags that override the job file's top-level keys.
struct SubmitOverrides {
  std::optional<int32_t> priority;
  std::optional<std::string> request_id;
  // --after ID (repeatable): appended to the file's after:.
  std::vector<std::string> after;
};

// `mpsctl list` flags.
struct ListOptions {
  // State names, any case, each possibly a comma-separated list ("queued,running"); empty = all.
  std::vector<std::string> states;
  // "TrainJob" or "BenchJob" (also "train_job", "TRAIN_JOB"); empty = every kind.
  std::string kind;
  // Show at most this many jobs, newest first; 0 = all (fetched page by page).
  int limit = 100;
  // --name GLOB: only jobs whose name matches (fnmatch).
  std::string name;
  // --label KEY=VALUE, repeatable: only jobs with every one of these labels.
  std::vector<std::string> labels;
  // --since DURATION ("12h", "30m", "2d", "90s"): only jobs created that recently.
  std::string since;
};

// Not thread-safe. Borrows `out` (results) and `err` (errors), which must outlive it.
class Commands {
 public:
  // A channel to options.server: plaintext on a unix socket; on TCP, TLS (UsesTls) or gRPC's
  // local credentials on loopback, with the token as "authorization: Bearer" on every call.
  // gRPC connects on the first call, and each command reports an unreachable daemon; errors
  // here are for files that cannot be read (naming the flag and the file).
  static absl::StatusOr<std::unique_ptr<Commands>> Connect(CommandOptions options,
                                                           std::ostream& out, std::ostream& err);
  // `channel` (may be null) tells, after a failed call, whether a connection was made: an
  // UNAVAILABLE without one is "cannot reach mpsd", with one it is the daemon's own answer.
  Commands(CommandOptions options, std::unique_ptr<v1::JobService::StubInterface> stub,
           std::ostream& out, std::ostream& err, std::shared_ptr<grpc::Channel> channel = nullptr);

  // Reads and submits a job file, with `overrides` applied; prints the job's id (or the Job as
  // JSON). A request_id that names an earlier job prints that job's id. With `follow`, prints
  // no id but follows the job like Logs(id, true, 0) and returns that exit code (in JSON mode
  // only JobEvents are printed, so every line has the same type; each carries job_id).
  int Submit(const std::string& job_file, bool follow, const SubmitOverrides& overrides = {});
  // The job's details, or the Job as JSON.
  int Get(const std::string& job_id);
  // A table of the jobs `options` select, newest first, or one ListJobsResponse as JSON with
  // every job shown (no next_page_token). When more jobs match than the limit, a last line says
  // so. kExitUsage for an unknown state or kind name.
  int List(const ListOptions& options);
  // CancelJob for each id in order, printing each outcome (errors on err). kExitOk when every
  // cancel was accepted; else the first failure's code (kExitFailed: unknown or finished job).
  // An unreachable daemon stops at the first id. With `wait`, then waits as Wait does until
  // every cancelled job has ended, and kExitOk only if each ended CANCELLED.
  int Cancel(const std::vector<std::string>& job_ids, bool wait = false);
  // Prints the job's events with seq > after_seq. Without `follow`, stops at the newest event
  // stored when the command started and returns kExitOk. With `follow`, continues live until
  // the job ends and returns kExitOk only if it SUCCEEDED.
  int Logs(const std::string& job_id, bool follow, int64_t after_seq);
  // The device the daemon's executor owns.
  int Device();
  // The models jobs may name with their parameter counts, at `input_shape` ([C, H, W] or [T, F];
  // empty = each model's natural input) and `num_classes` (unset = each model's natural count):
  // a table, or the ListModelsResponse as JSON. A bad shape or count is kExitFailed with a
  // message naming the flag.
  int Models(const std::vector<int64_t>& input_shape, std::optional<int32_t> num_classes);
  // The daemon's own health (GetServerStatus): streams, queue, memory, event storage.
  int Status();
  // The dashboard's URL, from GetServerStatus's http_url, on stdout (a wildcard host such as
  // 0.0.0.0 replaced by the host mpsctl dialed, or localhost for a unix socket), and on stderr
  // where a token comes from; the URL never carries a token. `open_browser`: also starts the
  // desktop's browser on it (xdg-open; open on macOS). kExitFailed when the daemon has no HTTP
  // listener (saying how to enable one) or the browser cannot be started.
  int Dashboard(bool open_browser);
  // A table of the job's artifacts (name, size, kind, sha256), or the ListArtifactsResponse
  // as JSON.
  int Artifacts(const std::string& job_id);
  // DeleteArtifacts of `job_ids` (`mpsctl rm`) or, when empty, by the daemon's retention policy
  // (`mpsctl gc`); prints each job's deletion and the bytes freed and left. kExitFailed when the
  // daemon refuses (an unfinished or still needed job, no policy).
  int DeleteArtifacts(const std::vector<std::string>& job_ids, bool dry_run);
  // Downloads artifact `name` of the job (empty: its model, else its only artifact) to
  // `output` (empty: the artifact's file name in the current directory; a directory: into it),
  // through a temporary file "<output>.part" that a broken download resumes from; checks the
  // SHA-256 before renaming it into place. kExitFailed on a mismatch (the file is removed), for
  // an `output` directory (or parent directory) that does not exist, and for a file already at
  // the destination unless `force` (gh's --clobber: never overwritten silently, as curl -o would).
  int Download(const std::string& job_id, const std::string& name, const std::string& output,
               bool force = false);
  // A BenchJob's rows in `format` ("table", "markdown", "csv", "json"; --json means json), see
  // client/bench_table.h: from the job's summary once it finished, else the rows stored so far
  // (a job still running, or one INTERRUPTED without a summary; a note on stderr says when the
  // job still runs). kExitUsage for an unknown format;
  // kExitFailed for a job that is not a BenchJob.
  int Bench(const std::string& job_id, const std::string& format);
  // `mpsctl predict MODEL INPUT...` (client/commands_predict.cc): submits a PredictJob of `model`
  // (a job id or a model.pt path) on `inputs` (image files, folders, .pt tensors files; relative
  // paths made absolute against the current directory), waits for it on its event stream and
  // prints its predictions in `format` ("table", "csv", "json"; --json means json;
  // client/predictions.h). `top_k` 0 = the daemon's default. kExitOk when it succeeded;
  // kExitFailed when mpsd refused it (the message names the field) or the job failed (the
  // message names the file, e.g. an image that does not decode); kExitUsage for an unknown
  // format.
  int Predict(const std::string& model, const std::vector<std::string>& inputs, int32_t top_k,
              const std::string& format);
  // PauseQueue / ResumeQueue: prints the queue's state.
  int Pause();
  int Resume();
  // MoveJob: a queued job (or a sweep's queued trials) to `priority`.
  int Move(const std::string& job_id, int32_t priority);
  // Polls the jobs until each ended (or `timeout` passed; zero = no limit), printing each as
  // it ends. kExitOk when all ended in `expected` (SUCCEEDED unless told), kExitFailed when one
  // ended otherwise,
  // kExitWaitTimeout when the timeout passed first; kExitUnreachable / kExitFailed for a
  // daemon that cannot be reached (for longer than reconnect_timeout) or an unknown job.
  int Wait(const std::vector<std::string>& job_ids, absl::Duration timeout,
           mpsd::v1::Job::State expected = mpsd::v1::Job::SUCCEEDED);
  // A sweep's trials ranked by `metric`, `mode` "auto", "min" or "max" (client/tables.h), in
  // `format`.
  int Sweep(const std::string& job_id, const std::string& metric, const std::string& mode,
            const std::string& format);
  // The jobs' differing spec keys and final metrics side by side, in `format`.
  int Compare(const std::vector<std::string>& job_ids, const std::string& format);
  // `mpsctl export`: each job's stored events (finished or still running: what is stored now)
  // written under `dir`/<job name or id>/ in `format_name` (client/export.h), printing one line
  // per job with its files. kExitUsage for an unknown format; kExitFailed for an unknown job or
  // a file that cannot be written (naming it).
  int Export(const std::vector<std::string>& job_ids, const std::string& format_name,
             const std::string& dir);
  // `mpsctl upload PATH`: UploadFile of a file, or of a folder as a tar archive (made in a
  // temporary file), under `name` (empty: PATH's last component). Asks GetUploadStatus first
  // and resumes from the bytes the daemon holds (saying so on stderr); a stream that breaks is
  // resumed within reconnect_timeout. Prints the upload and how jobs name it. kExitUsage for a
  // name that is not an upload name; kExitFailed for a PATH that cannot be read or the daemon's
  // refusal (printed).
  int Upload(const std::string& path, const std::string& name, bool replace);
  // `mpsctl uploads`: the caller's uploads (admin: `all`, or one submitter's), as a table or
  // JSON, with the bytes used and the quota.
  int ListUploads(bool all, const std::string& submitter);
  // `mpsctl uploads rm NAME`: DeleteUpload.
  int DeleteUpload(const std::string& name, const std::string& submitter);

 private:
  // Streams events of `job_id` after `after_seq`, printing them; stops at the terminal event, or
  // after the event with seq `stop_seq` when that is > 0. Reconnects as reconnect_timeout says.
  // `spec`: the job's, for its epochs and what its steps measure.
  int Stream(const std::string& job_id, const v1::SubmitJobRequest& spec, int64_t after_seq,
             int64_t stop_seq);
  // How Stream's calls ended: the last call's status; `stopped` when the stream reached what was
  // asked for; `gave_up` when reconnecting ran past reconnect_timeout.
  struct StreamEnd {
    grpc::Status status;
    bool stopped = false;
    bool gave_up = false;
  };
  // Stream's calls: StreamOnce, again from the last seq printed after a break or a silence, as
  // reconnect_timeout allows (client/reconnect.h).
  StreamEnd StreamResuming(const std::string& job_id, int64_t after_seq, int64_t stop_seq,
                           EventPrinter& printer);
  // Stream's exit code for `end`, with what the user needs to know on err (how to resume).
  int StreamExitCode(const std::string& job_id, int64_t stop_seq, const EventPrinter& printer,
                     const StreamEnd& end);
  // A stream that ended without a terminal event: the job's record says how it ended.
  int StreamEndedEarly(const std::string& job_id);
  // One StreamEvents call from the printer's last seq (or `after_seq`), cancelled when nothing
  // arrives for `silence`. Sets `stopped` when the stream reached what was asked for,
  // `received` when any message (heartbeats too) arrived.
  grpc::Status StreamOnce(const std::string& job_id, int64_t after_seq, int64_t stop_seq,
                          absl::Duration silence, bool wait_for_ready, EventPrinter& printer,
                          bool& stopped, bool& received, bool& went_silent);
  // Download's transfer: GetArtifact calls into the file `part`, each resuming where the file
  // ends, until the whole artifact is there (kExitOk) or reconnect_timeout passed without a
  // byte (the error printed, its exit code).
  int ReceiveResuming(const std::string& job_id, const v1::Artifact& artifact,
                      const std::string& part);
  // Download's end: `part` checked against the artifact's SHA-256 and renamed to `path`, then
  // copied to stdout (`to_stdout`) or reported; the exit code.
  int FinishDownload(const v1::Artifact& artifact, const std::string& part, const std::string& path,
                     bool to_stdout);
  // One GetArtifact call from `offset`, appending to the file `part`; `received` counts the
  // bytes written. DATA_LOSS when the file cannot be written or a chunk is out of place.
  grpc::Status ReceiveArtifact(const std::string& job_id, const std::string& name, int64_t offset,
                               const std::string& part, int64_t& received);
  // The daemon's heartbeat interval (GetServerStatus), 15 s when it does not say.
  absl::Duration HeartbeatInterval();
  // The bench_row events stored for `job_id` up to seq `last_seq`.
  grpc::Status StoredBenchRows(const std::string& job_id, int64_t last_seq,
                               std::vector<v1::BenchRow>& rows);
  // One CancelJob and its outcome (printed unless `quiet`); the exit code for it.
  int CancelOne(const std::string& job_id, bool quiet);
  // Prints the error for a failed RPC and returns the exit code for it.
  int RpcFailed(const grpc::Status& status);
  // GetJob for each id, in order; prints the error and returns its exit code on failure.
  int GetJobs(const std::vector<std::string>& ids, std::vector<v1::Job>& jobs);
  std::unique_ptr<grpc::ClientContext> UnaryContext() const;
  // Why `job_id` has no artifacts where mpsctl can say more than "none": a sweep's are its
  // trials' ("job 5 is a sweep: its trials keep the artifacts (6, 7, …; mpsctl sweep 5)");
  // else "" (also when GetJob fails: the caller's own message stands).
  std::string NoArtifactsReason(const std::string& job_id);

  // Constant after construction.
  const CommandOptions options_;
  const std::unique_ptr<v1::JobService::StubInterface> stub_;
  const std::shared_ptr<grpc::Channel> channel_;
  std::ostream& out_;
  std::ostream& err_;
};

// "mpsd" when `server` is where mpsd listens by default (the per-user socket; mpsd never reads
// MPSD_ADDR), else "mpsd --listen SERVER": how to start a daemon that this client would reach.
std::string StartDaemonHint(const std::string& server);

// `--server` as given to a gRPC target: a path (starting with '/' or '.') becomes "unix:PATH";
// anything else is kept.
std::string NormalizeServerAddress(const std::string& server);

// Host and port of a TCP target ("host:port", "[v6]:port", "dns:///host:port"); port -1 for a
// unix socket or what does not parse.
std::pair<std::string, int> HostAndPort(const std::string& server);

// Whether mpsctl speaks TLS to `server`: never on a unix socket; on TCP when the host is not
// loopback (127.0.0.0/8, ::1, localhost) or when `tls` asks for it.
bool UsesTls(const std::string& server, const TlsOptions& tls);

// A warning for a secret file (the token file, a TLS private key) that other users may read or
// write, naming `flag`, the file, its mode and the chmod that fixes it; "" when it is private
// (or cannot be stat'ed: reading it reports that). mpsctl warns rather than refuses, so a
// script that worked goes on working; ssh refuses such a key.
std::string LooseModeWarning(absl::string_view flag, const std::string& path);

// The token in `path` (surrounding whitespace removed). Errors name the file: unreadable,
// empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_COMMANDS_H_
