// mpsctl: submit, watch and cancel jobs of the mpsd training daemon. Parses flags, runs one
// command (client/commands.h), returns its exit code.
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "api/default_address.h"
#include "api/job_id.h"
#include "client/commands.h"
#include "client/completion.h"
#include "version/version.h"

namespace {

bool IsTerminal(int fd) {
  const char* term = std::getenv("TERM");
  return isatty(fd) && !(term != nullptr && std::strcmp(term, "dumb") == 0);
}

int TerminalWidth() {
  struct winsize size = {};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 0;
}

// A job id as the daemon names jobs (api/job_id.h): "abc" is a usage error (exit 64) saying so,
// not a round trip that answers "job abc not found".
CLI::Validator JobId() {
  return CLI::Validator(
      [](std::string& id) -> std::string {
        if (mpsd::api::ParseJobId(id).has_value()) return "";
        return "\"" + id +
               "\" is not a job id (job ids are numbers, as mpsctl submit and mpsctl list "
               "print them)";
      },
      "ID");
}

// A non-negative number of seconds up to a year, named so in the error: CLI11's
// NonNegativeNumber would print its range as 0 to DBL_MAX in 309 digits.
CLI::Validator Seconds() {
  return CLI::Validator(
      [](const std::string& input) -> std::string {
        double seconds = 0;
        if (absl::SimpleAtod(input, &seconds) && seconds >= 0 && seconds <= 86400 * 365) {
          return "";
        }
        return "expected seconds from 0 to 31536000 (a year), got " + input;
      },
      "SECONDS", "0 to 31536000");
}

// --server (or $MPSD_ADDR) as gRPC can dial it: an empty address, or "unix:" without a path,
// would otherwise reach gRPC, which logs raw resolver errors and fails the call.
std::string ServerAddressProblem(const std::string& server) {
  const std::string trimmed(absl::StripAsciiWhitespace(server));
  if (trimmed.empty()) {
    return "empty address; expected unix:///path/to.sock, HOST:PORT or a socket path";
  }
  if (trimmed == "unix:" || trimmed == "unix://" || trimmed == "unix:///") {
    return "\"" + server + "\" names no socket; expected unix:///path/to.sock";
  }
  if (trimmed != server) return "\"" + server + "\" has spaces around it";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  using mpsd::client::Commands;
  using mpsd::client::CommandOptions;

  CLI::App app{"mpsctl: submit, watch and cancel jobs of the mpsd training daemon.", "mpsctl"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may also come after the command: `mpsctl list --json`
  app.footer(
      "Exit status: 0 success; 1 error from mpsd, bad job file, or a followed (or waited-for) "
      "job that did not succeed; 2 mpsd cannot be reached (no connection, TLS handshake "
      "failed); 3 mpsd runs but answered UNAVAILABLE (e.g. shutting down); 4 mpsctl wait timed "
      "out; 64 bad command line.\n"
      "Remote: mpsctl --server HOST:PORT --tls-ca ca.pem --token-file ~/.config/mpsd/token ...");

  app.set_version_flag("--version", mpsd::VersionText("mpsctl"),
                       "print the version, git commit and LibTorch version, and exit");

  std::string server = mpsd::api::DefaultServerAddress();
  bool json = false;
  app.add_option("--server", server,
                 "mpsd's address: unix:///path/to.sock, host:port, or a socket path "
                 "(default: $MPSD_ADDR, else the per-user socket)")
      ->capture_default_str()
      ->check(CLI::Validator(ServerAddressProblem, "ADDR"));
  mpsd::client::TlsOptions tls;
  std::string token_file;
  app.add_option("--tls-ca", tls.ca_file,
                 "PEM CA certificate(s) that mpsd's TLS certificate chains to (default: the "
                 "system's CA certificates); TCP servers off loopback always use TLS")
      ->type_name("FILE");
  app.add_option("--tls-cert", tls.cert_file, "client certificate for mutual TLS (PEM)")
      ->type_name("FILE");
  app.add_option("--tls-key", tls.key_file, "key of --tls-cert (PEM)")->type_name("FILE");
  app.add_flag("--tls", tls.enabled,
               "use TLS on a loopback address too, verified with the system's CA certificates");
  app.add_option("--token-file", token_file,
                 "file holding the bearer token sent to a TCP server (default: $MPSD_TOKEN)")
      ->type_name("FILE");
  app.add_flag("--json", json,
               "print protobuf's JSON mapping (proto field names); one object per line for "
               "event streams");

  std::string job_file, job_id;
  bool follow = false;
  int64_t after_seq = 0;
  mpsd::client::SubmitOverrides overrides;
  CLI::App* submit = app.add_subcommand("submit", "submit a job file and print the job's id");
  submit->add_option("FILE", job_file, "YAML job file (see examples/)")->required();
  submit->add_flag("-f,--follow", follow, "follow the job until it ends; exit 0 if it succeeded");
  submit->add_option("--priority", overrides.priority,
                     "queued jobs run highest priority first (default: the file's priority:, "
                     "else 0)")
      ->type_name("N");
  submit->add_option("--request-id", overrides.request_id,
                     "submit at most once: the same id returns the job it created "
                     "(default: the file's request_id:)")
      ->type_name("ID");
  submit->add_option("--after", overrides.after,
                     "run only after job ID succeeded (cancelled if it ends otherwise); "
                     "repeatable, added to the file's after:")
      ->type_name("ID")
      ->check(JobId());
  CLI::App* get = app.add_subcommand("get", "show a job");
  get->add_option("ID", job_id, "job id")->required()->check(JobId());
  mpsd::client::ListOptions list_options;
  CLI::App* list = app.add_subcommand("list", "list jobs, newest first");
  list->add_option("--state", list_options.states,
                   "only jobs in this state (queued, running, succeeded, failed, cancelled, "
                   "interrupted); repeat or separate with commas for several")
      ->type_name("STATE");
  list->add_option("--kind", list_options.kind, "only jobs of this kind (TrainJob, BenchJob, Sweep)")
      ->type_name("KIND");
  // CLI::NonNegativeNumber would name its range as 0 to DBL_MAX in 309 digits: say the real one.
  list->add_option("--limit", list_options.limit, "show at most N jobs; 0 for all")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  list->add_option("--name", list_options.name, "only jobs whose name matches GLOB (* ? [..])")
      ->type_name("GLOB");
  list->add_option("--label", list_options.labels,
                   "only jobs with this label; repeat for several (all must match)")
      ->type_name("KEY=VALUE");
  list->add_option("--since", list_options.since,
                   "only jobs submitted within DURATION (e.g. 12h, 30m, 2d)")
      ->type_name("DURATION");
  std::vector<std::string> job_ids;
  CLI::App* cancel = app.add_subcommand(
      "cancel", "cancel queued or running jobs (or sweeps); exit 0 only if every cancel worked");
  cancel->add_option("ID", job_ids, "job ids")->required()->check(JobId());
  bool cancel_wait = false;
  cancel->add_flag("--wait", cancel_wait,
                   "wait until each job has stopped and print its final state; exit 0 only if "
                   "each ended CANCELLED");
  bool dry_run = false;
  CLI::App* rm = app.add_subcommand(
      "rm", "delete finished jobs' artifacts (model, checkpoints) to free disk; their records "
            "and logs stay");
  rm->add_option("ID", job_ids, "job ids")->required()->check(JobId());
  rm->add_flag("--dry-run", dry_run, "say what would be deleted, delete nothing");
  CLI::App* gc = app.add_subcommand(
      "gc", "apply the daemon's artifacts_retention policy now (it also runs after every job)");
  gc->add_flag("--dry-run", dry_run, "say what would be deleted, delete nothing");
  CLI::App* logs = app.add_subcommand("logs", "print a job's events (progress, epochs, logs)");
  logs->add_option("ID", job_id, "job id")->required()->check(JobId());
  logs->add_flag("-f,--follow", follow, "keep following until the job ends; exit 0 if it succeeded");
  logs->add_option("--after", after_seq, "only events with seq > SEQ")
      ->type_name("SEQ")
      ->check([](const std::string& seq) {
        return seq.empty() || seq[0] == '-' ? std::string("SEQ must be 0 or more") : std::string();
      });
  CLI::App* device = app.add_subcommand("device", "show the daemon's device and its memory");
  std::vector<int64_t> input_shape;
  std::optional<int32_t> num_classes;
  CLI::App* models =
      app.add_subcommand("models", "list the models jobs may name, with their parameter counts");
  models
      ->add_option("--input-shape", input_shape,
                   "count at this input shape: C,H,W for images (e.g. 3,32,32), T,F for "
                   "sequences (default: each model's natural input)")
      ->delimiter(',')
      ->type_name("DIMS");
  models
      ->add_option("--num-classes", num_classes,
                   "count at this many classes (default: each model's natural count)")
      ->type_name("N");
  CLI::App* status = app.add_subcommand(
      "status", "show the daemon's health: streams, queue, memory, events stored");
  bool open_browser = false;
  CLI::App* dashboard = app.add_subcommand(
      "dashboard", "print the dashboard's URL (the daemon's --http-listen); --open starts a browser");
  dashboard->add_flag("--open", open_browser, "also open it in the desktop's browser");
  std::string bench_format = "table";
  CLI::App* bench = app.add_subcommand(
      "bench", "show a BenchJob's table: models and batch sizes by devices, speedup last");
  bench->add_option("ID", job_id, "job id")->required()->check(JobId());
  bench
      ->add_option("--format", bench_format,
                   "table, markdown (the seeds' layout), csv or json (every field of every row; "
                   "--json means json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));

  CLI::App* pause = app.add_subcommand(
      "pause", "hold the queue: the running job finishes, queued jobs wait (kept across restarts)");
  CLI::App* resume = app.add_subcommand("resume", "let queued jobs run again after mpsctl pause");
  int32_t move_priority = 0;
  CLI::App* move = app.add_subcommand("move", "give a queued job (or a sweep's queued trials) "
                                              "another priority");
  move->add_option("ID", job_id, "job id")->required()->check(JobId());
  move->add_option("--priority", move_priority, "the new priority (higher runs first)")
      ->required()
      ->type_name("N");
  double wait_timeout_s = 0;
  CLI::App* wait = app.add_subcommand(
      "wait", "block until the jobs end; exit 0 only if all succeeded (1 if one did not, 4 on "
              "--timeout)");
  wait->add_option("ID", job_ids, "job ids")->required()->check(JobId());
  wait->add_option("--timeout", wait_timeout_s, "give up after S seconds (exit 4); 0 = never")
      ->type_name("S")
      ->check(Seconds());
  std::string sweep_metric = "auto";
  std::string table_format = "table";
  CLI::App* sweep = app.add_subcommand(
      "sweep", "a sweep's trials with their parameters and metrics, best first");
  sweep->add_option("ID", job_id, "the sweep's job id")->required()->check(JobId());
  sweep->add_option("--metric", sweep_metric,
                    "rank by auto (val_accuracy when the trials have a validation split, "
                    "else test_accuracy), val_accuracy, val_loss, test_accuracy, test_loss, "
                    "train_loss, samples_per_second, epoch_time_s, peak_memory or time_s")
      ->capture_default_str();
  sweep->add_option("--format", table_format, "table, markdown, csv or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));
  CLI::App* compare = app.add_subcommand(
      "compare", "jobs side by side: the spec keys that differ, then final metrics");
  compare->add_option("ID", job_ids, "two or more job ids")->required()->expected(2, -1)->check(
      JobId());
  compare->add_option("--format", table_format, "table, markdown, csv or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));

  std::string export_format;
  std::string export_dir;
  CLI::App* export_jobs = app.add_subcommand(
      "export", "write jobs' metrics as TensorBoard event files, CSV or JSON Lines "
                "(docs/metrics-export.md)");
  export_jobs->add_option("ID", job_ids, "job ids")->required()->check(JobId());
  export_jobs->add_option("--format", export_format, "tensorboard, csv or jsonl")
      ->required()
      ->check(CLI::IsMember({"tensorboard", "csv", "jsonl"}));
  export_jobs->add_option("-o,--output", export_dir,
                          "directory; each job is written to DIR/<job name or id>/")
      ->required();

  CLI::App* artifacts = app.add_subcommand(
      "artifacts", "list a job's artifacts (model, checkpoints) with sizes and SHA-256");
  artifacts->add_option("ID", job_id, "job id")->required()->check(JobId());
  std::string artifact_name, output;
  CLI::App* download = app.add_subcommand(
      "download", "download a job's artifact (default: its model), checking its SHA-256");
  download->add_option("ID", job_id, "job id")->required()->check(JobId());
  download->add_option("NAME", artifact_name, "artifact name, as `mpsctl artifacts` lists it");
  download->add_option("-o,--output", output,
                       "file or directory to write (default: the artifact's file name here); "
                       "a PATH ending in / is a directory, which must exist")
      ->type_name("PATH");
  bool force = false;
  download->add_flag("--force", force, "overwrite a file that is already there");
  std::string upload_path, upload_name, upload_submitter;
  bool upload_replace = false, uploads_all = false;
  CLI::App* upload = app.add_subcommand(
      "upload", "send a file or folder to the daemon for jobs to name as upload:NAME "
                "(resumable; SHA-256 checked; a folder goes as a tar archive)");
  upload->add_option("PATH", upload_path, "file or folder")->required();
  upload->add_option("--name", upload_name, "the name jobs use (default: PATH's last part)");
  upload->add_flag("--replace", upload_replace, "replace an upload of that name");
  CLI::App* uploads = app.add_subcommand("uploads", "list your uploads (and the quota)");
  uploads->add_flag("--all", uploads_all, "every submitter's (admin)");
  uploads->add_option("--submitter", upload_submitter, "another submitter's (admin)");
  CLI::App* uploads_rm = uploads->add_subcommand("rm", "delete an upload");
  uploads_rm->add_option("NAME", upload_name, "the upload's name")->required();
  uploads_rm->add_option("--submitter", upload_submitter, "another submitter's (admin)");
  double reconnect_s = 120;
  app.add_option("--reconnect-timeout", reconnect_s,
                 "seconds to keep reconnecting a followed stream, a download or an upload that "
                 "broke "
                 "(resuming where it stopped); 0 = do not reconnect")
      ->capture_default_str()
      ->check(Seconds());
  std::string completion_shell;
  CLI::App* completion = app.add_subcommand(
      "completion", "print a shell completion script: source <(mpsctl completion bash)");
  completion->add_option("SHELL", completion_shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : mpsd::client::kExitUsage;
  }

  if (app.count("--server") == 0) {
    if (std::string problem = ServerAddressProblem(server); !problem.empty()) {
      std::cerr << "mpsctl: $" << mpsd::api::kServerAddressEnv << ": " << problem << "\n";
      return mpsd::client::kExitUsage;
    }
  }

  if (*completion) {
    std::cout << (completion_shell == "bash" ? mpsd::client::BashCompletion(app)
                                             : mpsd::client::ZshCompletion(app));
    return 0;
  }

  CommandOptions options;
  options.server = mpsd::client::NormalizeServerAddress(server);
  options.tls = tls;
  for (const auto& [flag, path] : {std::pair<const char*, std::string>{"--token-file", token_file},
                                   {"--tls-key", tls.key_file}}) {
    if (path.empty()) continue;
    if (std::string warning = mpsd::client::LooseModeWarning(flag, path); !warning.empty()) {
      std::cerr << warning << "\n";
    }
  }
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = mpsd::client::ReadTokenFile(token_file);
    if (!token.ok()) {
      std::cerr << "mpsctl: " << token.status().message() << "\n";
      return mpsd::client::kExitUsage;
    }
    options.token = *token;
  } else if (const char* token = std::getenv("MPSD_TOKEN"); token != nullptr) {
    options.token = std::string(absl::StripAsciiWhitespace(token));
  }
  options.json = json;
  options.live = IsTerminal(STDOUT_FILENO);
  options.progress = IsTerminal(STDERR_FILENO);
  options.terminal_width = options.live ? TerminalWidth() : 0;
  options.explain_interrupt = true;
  options.reconnect_timeout = absl::Seconds(reconnect_s);
  absl::StatusOr<std::unique_ptr<Commands>> connected =
      Commands::Connect(options, std::cout, std::cerr);
  if (!connected.ok()) {
    std::cerr << "mpsctl: " << connected.status().message() << "\n";
    return mpsd::client::kExitUsage;
  }
  std::unique_ptr<Commands>& commands = *connected;

  if (*submit) return commands->Submit(job_file, follow, overrides);
  if (*get) return commands->Get(job_id);
  if (*list) return commands->List(list_options);
  if (*cancel) return commands->Cancel(job_ids, cancel_wait);
  if (*rm) return commands->DeleteArtifacts(job_ids, dry_run);
  if (*gc) return commands->DeleteArtifacts({}, dry_run);
  if (*logs) return commands->Logs(job_id, follow, after_seq);
  if (*device) return commands->Device();
  if (*models) return commands->Models(input_shape, num_classes);
  if (*status) return commands->Status();
  if (*dashboard) return commands->Dashboard(open_browser);
  if (*bench) return commands->Bench(job_id, bench_format);
  if (*artifacts) return commands->Artifacts(job_id);
  if (*download) return commands->Download(job_id, artifact_name, output, force);
  if (*pause) return commands->Pause();
  if (*resume) return commands->Resume();
  if (*move) return commands->Move(job_id, move_priority);
  if (*wait) return commands->Wait(job_ids, absl::Seconds(wait_timeout_s));
  if (*sweep) return commands->Sweep(job_id, sweep_metric, table_format);
  if (*compare) return commands->Compare(job_ids, table_format);
  if (*export_jobs) return commands->Export(job_ids, export_format, export_dir);
  if (*upload) return commands->Upload(upload_path, upload_name, upload_replace);
  if (*uploads_rm) return commands->DeleteUpload(upload_name, upload_submitter);
  if (*uploads) return commands->ListUploads(uploads_all, upload_submitter);
  return mpsd::client::kExitUsage;
}
