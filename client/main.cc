// mpsctl: submit, watch and cancel jobs of the mpsd training daemon. Parses flags, runs one
// command (client/commands.h), returns its exit code.
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/default_address.h"
#include "api/field_text.h"
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

using mpsd::client::CommandOptions;
using mpsd::client::Commands;

// Where CLI11 writes the flags while parsing; the chosen command reads them after. One value per
// flag name: commands that share a flag (ID, --format, --dry-run) share its storage.
struct Flags {
  // Global.
  std::string server = mpsd::api::DefaultServerAddress();
  mpsd::client::TlsOptions tls;
  std::string token_file;
  bool json = false;
  double reconnect_s = 120;
  // Commands'.
  std::string job_file, job_id;
  std::vector<std::string> job_ids;
  bool follow = false, cancel_wait = false, dry_run = false, open_browser = false, force = false;
  int64_t after_seq = 0;
  mpsd::client::SubmitOverrides overrides;
  mpsd::client::ListOptions list_options;
  std::vector<int64_t> input_shape;
  std::optional<int32_t> num_classes;
  std::string bench_format = "table", table_format = "table", sweep_metric = "auto",
              sweep_mode = "auto";
  int32_t move_priority = 0;
  double wait_timeout_s = 0;
  std::string export_format, export_dir;
  std::string artifact_name, output;
  std::string upload_path, upload_name, upload_submitter;
  bool upload_replace = false, uploads_all = false;
  std::string completion_shell;
  std::string predict_model, predict_format = "table";
  std::vector<std::string> predict_inputs;
  int32_t top_k = 0;
};

// Each command (a CLI11 subcommand) and what it runs once mpsctl is connected.
class CommandTable {
 public:
  using Run = std::function<int(Commands&)>;

  CLI::App* Add(CLI::App& parent, const std::string& name, const std::string& help, Run run) {
    CLI::App* command = parent.add_subcommand(name, help);
    runs_[command] = std::move(run);
    return command;
  }

  // The run of the command the command line chose, the deepest one (`uploads rm`); nullptr when
  // that command has none (completion, which runs unconnected).
  const Run* Chosen(const CLI::App& app) const {
    const CLI::App* chosen = &app;
    while (!chosen->get_subcommands().empty()) chosen = chosen->get_subcommands().front();
    const auto it = runs_.find(chosen);
    return it == runs_.end() ? nullptr : &it->second;
  }

 private:
  std::map<const CLI::App*, Run> runs_;
};

void AddGlobalOptions(CLI::App& app, Flags& f) {
  app.set_version_flag("--version", mpsd::VersionText("mpsctl"),
                       "print the version, git commit and LibTorch version, and exit");
  app.add_option("--server", f.server,
                 "mpsd's address: unix:///path/to.sock, host:port, or a socket path "
                 "(default: $MPSD_ADDR, else the per-user socket)")
      ->capture_default_str()
      ->check(CLI::Validator(ServerAddressProblem, "ADDR"));
  app.add_option("--tls-ca", f.tls.ca_file,
                 "PEM CA certificate(s) that mpsd's TLS certificate chains to (default: the "
                 "system's CA certificates); TCP servers off loopback always use TLS")
      ->type_name("FILE");
  app.add_option("--tls-cert", f.tls.cert_file, "client certificate for mutual TLS (PEM)")
      ->type_name("FILE");
  app.add_option("--tls-key", f.tls.key_file, "key of --tls-cert (PEM)")->type_name("FILE");
  app.add_flag("--tls", f.tls.enabled,
               "use TLS on a loopback address too, verified with the system's CA certificates");
  app.add_option("--token-file", f.token_file,
                 "file holding the bearer token sent to a TCP server (default: $MPSD_TOKEN)")
      ->type_name("FILE");
  app.add_flag("--json", f.json,
               "print protobuf's JSON mapping (proto field names); one object per line for "
               "event streams");
}

// submit, get, list, cancel, rm, gc, logs: one job's life.
void AddJobCommands(CLI::App& app, CommandTable& table, Flags& f) {
  CLI::App* submit =
      table.Add(app, "submit", "submit a job file and print the job's id",
                [&f](Commands& c) { return c.Submit(f.job_file, f.follow, f.overrides); });
  submit->add_option("FILE", f.job_file, "YAML job file (see examples/)")->required();
  submit->add_flag("-f,--follow", f.follow, "follow the job until it ends; exit 0 if it succeeded");
  submit
      ->add_option("--priority", f.overrides.priority,
                   "queued jobs run highest priority first (default: the file's priority:, "
                   "else 0)")
      ->type_name("N");
  submit
      ->add_option("--request-id", f.overrides.request_id,
                   "submit at most once: the same id returns the job it created "
                   "(default: the file's request_id:)")
      ->type_name("ID");
  submit
      ->add_option("--after", f.overrides.after,
                   "run only after job ID succeeded (cancelled if it ends otherwise); "
                   "repeatable, added to the file's after:")
      ->type_name("ID")
      ->check(JobId());

  CLI::App* get =
      table.Add(app, "get", "show a job", [&f](Commands& c) { return c.Get(f.job_id); });
  get->add_option("ID", f.job_id, "job id")->required()->check(JobId());

  mpsd::client::ListOptions& list_options = f.list_options;
  CLI::App* list = table.Add(app, "list", "list jobs, newest first",
                             [&f](Commands& c) { return c.List(f.list_options); });
  list->add_option("--state", list_options.states,
                   "only jobs in this state (queued, running, succeeded, failed, cancelled, "
                   "interrupted); repeat or separate with commas for several")
      ->type_name("STATE");
  list->add_option("--kind", list_options.kind,
                   "only jobs of this kind (TrainJob, BenchJob, EvalJob, PredictJob, Sweep)")
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

  CLI::App* cancel =
      table.Add(app, "cancel",
                "cancel queued or running jobs (or sweeps); exit 0 only if every cancel worked",
                [&f](Commands& c) { return c.Cancel(f.job_ids, f.cancel_wait); });
  cancel->add_option("ID", f.job_ids, "job ids")->required()->check(JobId());
  cancel->add_flag("--wait", f.cancel_wait,
                   "wait until each job has stopped and print its final state; exit 0 only if "
                   "each ended CANCELLED");

  CLI::App* rm = table.Add(
      app, "rm",
      "delete finished jobs' artifacts (model, checkpoints) to free disk; their records and logs "
      "stay",
      [&f](Commands& c) { return c.DeleteArtifacts(f.job_ids, f.dry_run); });
  rm->add_option("ID", f.job_ids, "job ids")->required()->check(JobId());
  rm->add_flag("--dry-run", f.dry_run, "say what would be deleted, delete nothing");
  CLI::App* gc = table.Add(
      app, "gc", "apply the daemon's artifacts_retention policy now (it also runs after every job)",
      [&f](Commands& c) { return c.DeleteArtifacts({}, f.dry_run); });
  gc->add_flag("--dry-run", f.dry_run, "say what would be deleted, delete nothing");

  CLI::App* logs = table.Add(app, "logs", "print a job's events (progress, epochs, logs)",
                             [&f](Commands& c) { return c.Logs(f.job_id, f.follow, f.after_seq); });
  logs->add_option("ID", f.job_id, "job id")->required()->check(JobId());
  logs->add_flag("-f,--follow", f.follow,
                 "keep following until the job ends; exit 0 if it succeeded");
  logs->add_option("--after", f.after_seq, "only events with seq > SEQ")
      ->type_name("SEQ")
      ->check([](const std::string& seq) {
        return seq.empty() || seq[0] == '-' ? std::string("SEQ must be 0 or more") : std::string();
      });
}

// device, models, status, dashboard: the daemon and its device.
void AddDaemonCommands(CLI::App& app, CommandTable& table, Flags& f) {
  table.Add(app, "device", "show the daemon's device and its memory",
            [](Commands& c) { return c.Device(); });
  CLI::App* models =
      table.Add(app, "models", "list the models jobs may name, with their parameter counts",
                [&f](Commands& c) { return c.Models(f.input_shape, f.num_classes); });
  models
      ->add_option("--input-shape", f.input_shape,
                   "count at this input shape: C,H,W for images (e.g. 3,32,32), T,F for "
                   "sequences (default: each model's natural input)")
      ->delimiter(',')
      ->type_name("DIMS");
  models
      ->add_option("--num-classes", f.num_classes,
                   "count at this many classes (default: each model's natural count)")
      ->type_name("N");
  table.Add(app, "status", "show the daemon's health: streams, queue, memory, events stored",
            [](Commands& c) { return c.Status(); });
  CLI::App* dashboard =
      table.Add(app, "dashboard",
                "print the dashboard's URL (the daemon's --http-listen); --open starts a browser",
                [&f](Commands& c) { return c.Dashboard(f.open_browser); });
  dashboard->add_flag("--open", f.open_browser, "also open it in the desktop's browser");
}

// pause, resume, move, wait: the queue.
void AddQueueCommands(CLI::App& app, CommandTable& table, Flags& f) {
  table.Add(app, "pause",
            "hold the queue: the running job finishes, queued jobs wait (kept across restarts)",
            [](Commands& c) { return c.Pause(); });
  table.Add(app, "resume", "let queued jobs run again after mpsctl pause",
            [](Commands& c) { return c.Resume(); });
  CLI::App* move =
      table.Add(app, "move", "give a queued job (or a sweep's queued trials) another priority",
                [&f](Commands& c) { return c.Move(f.job_id, f.move_priority); });
  move->add_option("ID", f.job_id, "job id")->required()->check(JobId());
  move->add_option("--priority", f.move_priority, "the new priority (higher runs first)")
      ->required()
      ->type_name("N");
  CLI::App* wait = table.Add(
      app, "wait",
      "block until the jobs end; exit 0 only if all succeeded (1 if one did not, 4 on --timeout)",
      [&f](Commands& c) { return c.Wait(f.job_ids, absl::Seconds(f.wait_timeout_s)); });
  wait->add_option("ID", f.job_ids, "job ids")->required()->check(JobId());
  wait->add_option("--timeout", f.wait_timeout_s, "give up after S seconds (exit 4); 0 = never")
      ->type_name("S")
      ->check(Seconds());
}

// bench, predict, sweep, compare, export, artifacts, download: what jobs produced (or run).
void AddResultCommands(CLI::App& app, CommandTable& table, Flags& f) {
  CLI::App* bench = table.Add(
      app, "bench", "show a BenchJob's table: models and batch sizes by devices, speedup last",
      [&f](Commands& c) { return c.Bench(f.job_id, f.bench_format); });
  bench->add_option("ID", f.job_id, "job id")->required()->check(JobId());
  bench
      ->add_option("--format", f.bench_format,
                   "table, markdown (the seeds' layout), csv or json (every field of every row; "
                   "--json means json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));

  CLI::App* predict = table.Add(
      app, "predict",
      "run a trained model on images, folders of images or a .pt tensors file (a PredictJob) "
      "and print its top classes, label probabilities or values",
      [&f](Commands& c) {
        return c.Predict(f.predict_model, f.predict_inputs, f.top_k, f.predict_format);
      });
  predict
      ->add_option("MODEL", f.predict_model,
                   "a finished TrainJob's id, or a model.pt written by mpsd (model.json beside it)")
      ->required();
  predict->add_option("INPUT", f.predict_inputs, "PNG/JPEG files, folders of them, .pt files")
      ->required();
  predict->add_option("--top-k", f.top_k, "classes per input, most probable first (default 5)")
      ->type_name("K")
      ->check(CLI::Range(1, 1000));
  predict
      ->add_option("--format", f.predict_format,
                   "table, csv or json (one Prediction per line; --json means json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "csv", "json"}));

  CLI::App* sweep =
      table.Add(app, "sweep", "a sweep's trials with their parameters and metrics, best first",
                [&f](Commands& c) {
                  return c.Sweep(f.job_id, f.sweep_metric, f.sweep_mode, f.table_format);
                });
  sweep->add_option("ID", f.job_id, "the sweep's job id")->required()->check(JobId());
  sweep
      ->add_option("--metric", f.sweep_metric,
                   "rank by auto (val_accuracy when the trials have a validation split, "
                   "else test_accuracy; regression: val_r2 / test_r2; multilabel: "
                   "val_macro_f1 / test_macro_f1), val_accuracy, val_loss, test_accuracy, "
                   "test_loss, train_loss, samples_per_second, epoch_time_s, peak_memory, "
                   "time_s, best_value (each trial's best epoch of its early_stopping "
                   "monitor), a column's header (VAL_ACC, val_acc) or a task metric the "
                   "trials measured (val_mse, test_r2, ...); equal accuracies go by their loss")
      ->capture_default_str();
  sweep
      ->add_option("--mode", f.sweep_mode,
                   "which way is better: max (highest first), min (lowest first), or auto (the "
                   "metric's own: accuracy, F1, R² and samples/s up; losses, MSE, MAE and times "
                   "down; a job's own metric needs max or min)")
      ->check(CLI::IsMember({"auto", "min", "max"}))
      ->capture_default_str();
  sweep->add_option("--format", f.table_format, "table, markdown, csv or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));
  CLI::App* compare =
      table.Add(app, "compare", "jobs side by side: the spec keys that differ, then final metrics",
                [&f](Commands& c) { return c.Compare(f.job_ids, f.table_format); });
  compare->add_option("ID", f.job_ids, "two or more job ids")
      ->required()
      ->expected(2, -1)
      ->check(JobId());
  compare->add_option("--format", f.table_format, "table, markdown, csv or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));

  CLI::App* export_jobs =
      table.Add(app, "export",
                "write jobs' metrics as TensorBoard event files, CSV or JSON Lines "
                "(docs/metrics-export.md)",
                [&f](Commands& c) { return c.Export(f.job_ids, f.export_format, f.export_dir); });
  export_jobs->add_option("ID", f.job_ids, "job ids")->required()->check(JobId());
  export_jobs->add_option("--format", f.export_format, "tensorboard, csv or jsonl")
      ->required()
      ->check(CLI::IsMember({"tensorboard", "csv", "jsonl"}));
  export_jobs
      ->add_option("-o,--output", f.export_dir,
                   "directory; each job is written to DIR/<name>-<id>/ (DIR/<id>/ without a name)")
      ->required();

  CLI::App* artifacts = table.Add(
      app, "artifacts", "list a job's artifacts (model, checkpoints) with sizes and SHA-256",
      [&f](Commands& c) { return c.Artifacts(f.job_id); });
  artifacts->add_option("ID", f.job_id, "job id")->required()->check(JobId());
  CLI::App* download = table.Add(
      app, "download", "download a job's artifact (default: its model), checking its SHA-256",
      [&f](Commands& c) { return c.Download(f.job_id, f.artifact_name, f.output, f.force); });
  download->add_option("ID", f.job_id, "job id")->required()->check(JobId());
  download->add_option("NAME", f.artifact_name, "artifact name, as `mpsctl artifacts` lists it");
  download
      ->add_option("-o,--output", f.output,
                   "file or directory to write (default: the artifact's file name here); "
                   "a PATH ending in / is a directory, which must exist; - writes the "
                   "bytes to stdout (after their SHA-256 is checked)")
      ->type_name("PATH");
  download->add_flag("--force", f.force, "overwrite a file that is already there");
}

// upload, uploads, uploads rm: files sent to the daemon for jobs to read.
void AddUploadCommands(CLI::App& app, CommandTable& table, Flags& f) {
  CLI::App* upload = table.Add(
      app, "upload",
      "send a file or folder to the daemon for jobs to name as upload:NAME (resumable; SHA-256 "
      "checked; a folder goes as a tar archive)",
      [&f](Commands& c) { return c.Upload(f.upload_path, f.upload_name, f.upload_replace); });
  upload->add_option("PATH", f.upload_path, "file or folder")->required();
  upload->add_option("--name", f.upload_name, "the name jobs use (default: PATH's last part)")
      ->check(CLI::Validator(
          [](const std::string& name) {
            return name.empty() ? std::string(
                                      "empty; give a name, or leave --name out for "
                                      "PATH's last part")
                                : std::string();
          },
          "NAME"));
  upload->add_flag("--replace", f.upload_replace, "replace an upload of that name");
  CLI::App* uploads =
      table.Add(app, "uploads", "list your uploads (and the quota)",
                [&f](Commands& c) { return c.ListUploads(f.uploads_all, f.upload_submitter); });
  uploads->add_flag("--all", f.uploads_all, "every submitter's (admin)");
  uploads->add_option("--submitter", f.upload_submitter, "another submitter's (admin)");
  CLI::App* uploads_rm = table.Add(*uploads, "rm", "delete an upload", [&f](Commands& c) {
    return c.DeleteUpload(f.upload_name, f.upload_submitter);
  });
  uploads_rm->add_option("NAME", f.upload_name, "the upload's name")->required();
  uploads_rm->add_option("--submitter", f.upload_submitter, "another submitter's (admin)");
}

// The connection's options from the global flags; the exit code instead when they are unusable
// (an unreadable token file, a bad $MPSD_ADDR).
std::variant<CommandOptions, int> ConnectionOptions(const CLI::App& app, const Flags& f) {
  if (app.count("--server") == 0) {
    if (std::string problem = ServerAddressProblem(f.server); !problem.empty()) {
      std::cerr << "mpsctl: $" << mpsd::api::kServerAddressEnv << ": " << problem << "\n";
      return mpsd::client::kExitUsage;
    }
  }
  CommandOptions options;
  options.server = mpsd::client::NormalizeServerAddress(f.server);
  options.tls = f.tls;
  for (const auto& [flag, path] :
       {std::pair<const char*, std::string>{"--token-file", f.token_file},
        {"--tls-key", f.tls.key_file}}) {
    if (path.empty()) continue;
    if (std::string warning = mpsd::client::LooseModeWarning(flag, path); !warning.empty()) {
      std::cerr << warning << "\n";
    }
  }
  if (!f.token_file.empty()) {
    absl::StatusOr<std::string> token = mpsd::client::ReadTokenFile(f.token_file);
    if (!token.ok()) {
      std::cerr << "mpsctl: " << token.status().message() << "\n";
      return mpsd::client::kExitUsage;
    }
    options.token = *token;
  } else if (const char* token = std::getenv("MPSD_TOKEN"); token != nullptr) {
    options.token = std::string(absl::StripAsciiWhitespace(token));
  }
  options.json = f.json;
  options.live = IsTerminal(STDOUT_FILENO);
  options.progress = IsTerminal(STDERR_FILENO);
  options.terminal_width = options.live ? TerminalWidth() : 0;
  options.explain_interrupt = true;
  options.reconnect_timeout = absl::Seconds(f.reconnect_s);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mpsctl: submit, watch and cancel jobs of the mpsd training daemon.", "mpsctl"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may also come after the command: `mpsctl list --json`
  app.footer(
      "Exit status: 0 success; 1 error from mpsd, bad job file, or a followed (or waited-for) "
      "job that did not succeed; 2 mpsd cannot be reached (no connection, TLS handshake "
      "failed); 3 mpsd runs but answered UNAVAILABLE (e.g. shutting down); 4 mpsctl wait timed "
      "out; 64 bad command line.\n"
      "Remote: mpsctl --server HOST:PORT --tls-ca ca.pem --token-file ~/.config/mpsd/token ...");
  Flags flags;
  CommandTable table;
  AddGlobalOptions(app, flags);
  AddJobCommands(app, table, flags);
  AddDaemonCommands(app, table, flags);
  AddQueueCommands(app, table, flags);
  AddResultCommands(app, table, flags);
  AddUploadCommands(app, table, flags);
  app.add_option("--reconnect-timeout", flags.reconnect_s,
                 "seconds to keep reconnecting a followed stream, a download or an upload that "
                 "broke (resuming where it stopped); 0 = do not reconnect")
      ->capture_default_str()
      ->check(Seconds());
  CLI::App* completion = app.add_subcommand(
      "completion", "print a shell completion script: source <(mpsctl completion bash)");
  completion->add_option("SHELL", flags.completion_shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A mistyped command: CLI11 would only say that a command is required.
    const std::vector<std::string> rest = app.remaining();
    if (app.get_subcommands().empty() && !rest.empty() && !absl::StartsWith(rest.front(), "-")) {
      std::vector<std::string> commands;
      for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
        commands.push_back(command->get_name());
      }
      const std::optional<std::string> near = mpsd::api::ClosestName(rest.front(), commands);
      std::cerr << "mpsctl: unknown command \"" << rest.front() << "\""
                << (near.has_value() ? absl::StrCat(" (did you mean \"", *near, "\"?)") : "")
                << "; mpsctl --help lists the commands\n";
      return mpsd::client::kExitUsage;
    }
    const int code = app.exit(e);
    return code == 0 ? 0 : mpsd::client::kExitUsage;
  }
  if (*completion) {
    std::cout << (flags.completion_shell == "bash" ? mpsd::client::BashCompletion(app)
                                                   : mpsd::client::ZshCompletion(app));
    return 0;
  }
  std::variant<CommandOptions, int> options = ConnectionOptions(app, flags);
  if (const int* exit_code = std::get_if<int>(&options)) return *exit_code;
  absl::StatusOr<std::unique_ptr<Commands>> connected =
      Commands::Connect(std::get<CommandOptions>(options), std::cout, std::cerr);
  if (!connected.ok()) {
    std::cerr << "mpsctl: " << connected.status().message() << "\n";
    return mpsd::client::kExitUsage;
  }
  const CommandTable::Run* run = table.Chosen(app);
  return run != nullptr ? (*run)(**connected) : mpsd::client::kExitUsage;
}
