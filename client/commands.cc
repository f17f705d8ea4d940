// mpsctl's commands on the sync stub: a deadline on every unary call, none on the event stream.
#include "client/commands.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/default_address.h"
#include "api/job_state.h"
#include "api/metadata.h"
#include "api/sha256.h"
#include "api/status.h"
#include "client/bench_table.h"
#include "client/event_printer.h"
#include "client/format.h"
#include "client/job_file.h"
#include "client/tables.h"
#include "client/tls_probe.h"
#include "google/protobuf/util/time_util.h"

namespace mpsd::client {
namespace {

// What the SIGINT handler writes while a stream is followed. A fixed buffer because a signal
// handler may only call async-signal-safe functions (write, _exit).
char g_interrupt_note[512];
size_t g_interrupt_note_size = 0;

extern "C" void WriteNoteAndExit(int) {
  if (write(STDERR_FILENO, g_interrupt_note, g_interrupt_note_size) < 0) {
    // Nothing left to do about it; exiting anyway.
  }
  _exit(128 + SIGINT);
}

// While alive, Ctrl-C says how to pick the job up again instead of dying silently.
class InterruptNote {
 public:
  InterruptNote(bool enabled, const std::string& job_id) : enabled_(enabled) {
    if (!enabled_) return;
    const std::string note =
        absl::StrCat("\nmpsctl: stopped following; job ", job_id, " keeps running (mpsctl logs ",
                     job_id, " --follow; mpsctl cancel ", job_id, ")\n");
    g_interrupt_note_size = std::min(note.size(), sizeof(g_interrupt_note));
    std::memcpy(g_interrupt_note, note.data(), g_interrupt_note_size);
    struct sigaction action = {};
    action.sa_handler = WriteNoteAndExit;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_);
  }
  ~InterruptNote() {
    if (enabled_) sigaction(SIGINT, &previous_, nullptr);
  }
  InterruptNote(const InterruptNote&) = delete;
  InterruptNote& operator=(const InterruptNote&) = delete;

 private:
  const bool enabled_;
  struct sigaction previous_ = {};
};

// gRPC reports a missing socket or a refused connection as UNAVAILABLE with this text, e.g.
// "failed to connect to all addresses; last error: UNKNOWN: unix:/tmp/x.sock: No such file or
// directory". A server may also answer UNAVAILABLE itself (shutting down), with its own text.
// Whether an UNAVAILABLE call failed because no connection could be made: the channel's own
// state says so (TRANSIENT_FAILURE right after a failed connect), not gRPC's message text.
bool ConnectFailed(grpc::Channel* channel) {
  return channel != nullptr &&
         channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_TRANSIENT_FAILURE;
}

// The OS's reason at the end of gRPC's message ("No such file or directory"), or "": shown to
// the user as it is, never branched on.
std::string ConnectReason(const grpc::Status& status) {
  const std::string& message = status.error_message();
  const size_t colon = message.rfind(": ");
  if (colon == std::string::npos) return "";
  std::string reason = message.substr(colon + 2);
  return absl::StrContains(reason, " ") ? reason : "";  // a lone word is not an OS reason
}

// Most jobs ListJobs returns per page (the daemon's maximum).
constexpr int kMaxPageSize = 1000;

// "queued", "Running", "QUEUED,RUNNING" → states; an unknown name is an error naming it.
absl::StatusOr<std::vector<v1::Job::State>> ParseStates(const std::vector<std::string>& args) {
  std::vector<v1::Job::State> states;
  for (const std::string& arg : args) {
    for (absl::string_view name : absl::StrSplit(arg, ',', absl::SkipWhitespace())) {
      v1::Job::State state;
      const std::string upper = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name));
      if (upper == "STATE_UNSPECIFIED" || !v1::Job::State_Parse(upper, &state)) {
        std::vector<std::string> known;
        for (int i = 1; i <= v1::Job::State_MAX; ++i) {
          if (v1::Job::State_IsValid(i)) known.push_back(v1::Job::State_Name(i));
        }
        return absl::InvalidArgumentError(absl::StrCat("--state: unknown \"", name, "\" (expected ",
                                                       absl::StrJoin(known, ", "), ")"));
      }
      states.push_back(state);
    }
  }
  return states;
}

// "TrainJob", "train_job", "TRAIN_JOB" → TRAIN_JOB; "" → KIND_UNSPECIFIED.
absl::StatusOr<v1::Job::Kind> ParseKind(const std::string& arg) {
  if (arg.empty()) return v1::Job::KIND_UNSPECIFIED;
  auto squash = [](absl::string_view s) {
    return absl::AsciiStrToLower(absl::StrReplaceAll(s, {{"_", ""}}));
  };
  for (int i = 1; i <= v1::Job::Kind_MAX; ++i) {
    if (v1::Job::Kind_IsValid(i) && squash(v1::Job::Kind_Name(i)) == squash(arg)) {
      return static_cast<v1::Job::Kind>(i);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--kind: unknown \"", arg, "\" (expected TrainJob, BenchJob, EvalJob, PredictJob or Sweep)"));
}

}  // namespace

std::string StartDaemonHint(const std::string& server) {
  if (server == api::DefaultListenAddress()) return "mpsd";
  return absl::StrCat("mpsd --listen ", server);
}

std::string NormalizeServerAddress(const std::string& server) {
  if (absl::StartsWith(server, "/")) return absl::StrCat("unix://", server);
  if (absl::StartsWith(server, ".")) return absl::StrCat("unix:", server);
  return server;
}

grpc::ChannelArguments KeepaliveChannelArguments() {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // gRPC stops pinging after 2 pings without data, and spaces such pings 5 min apart, by
  // default; a quiet stream needs them all, at the keepalive interval.
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  arguments.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, 30000);
  return arguments;
}

namespace {

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, " ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": not a PEM file"));
  }
  return text.str();
}

// `pem` as ReadPem read it, checked to hold certificates that OpenSSL parses: gRPC's own
// answer to a key given as a CA is a few raw error lines and "empty address list".
absl::StatusOr<std::string> CheckCertificates(const char* flag, const std::string& path,
                                              absl::StatusOr<std::string> pem) {
  if (!pem.ok()) return pem;
  BIO* bio = BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size()));
  int certificates = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_free(cert);
    ++certificates;
  }
  BIO_free(bio);
  ERR_clear_error();
  if (certificates > 0) return pem;
  const bool key = absl::StrContains(*pem, "PRIVATE KEY-----");
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " ", path, ": no certificate in it (expected PEM \"BEGIN CERTIFICATE\" blocks",
      key ? "; it holds a private key" : "", ")"));
}

// Host and port of a TCP target ("host:port", "[v6]:port", "dns:///host:port"); port -1 for a
// unix socket or what does not parse.
std::pair<std::string, int> HostAndPort(const std::string& server) {
  if (absl::StartsWith(server, "unix:")) return {"", -1};
  std::string target = server;
  if (absl::StartsWith(target, "dns:///")) target = target.substr(7);
  const size_t colon = target.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(target.substr(colon + 1), &port)) {
    return {target, -1};
  }
  return {target.substr(0, colon), port};
}

bool IsLoopbackHost(std::string host) {
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return host == "localhost" || host == "::1";
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const CommandOptions& options) {
  if (absl::StartsWith(options.server, "unix:")) return grpc::InsecureChannelCredentials();
  std::shared_ptr<grpc::ChannelCredentials> channel;
  if (UsesTls(options.server, options.tls)) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls.ca_file.empty()) {
      absl::StatusOr<std::string> ca = CheckCertificates("--tls-ca", options.tls.ca_file,
                                                         ReadPem("--tls-ca", options.tls.ca_file));
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    if (options.tls.cert_file.empty() != options.tls.key_file.empty()) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key go together (mutual TLS)");
    }
    if (!options.tls.cert_file.empty()) {
      absl::StatusOr<std::string> cert = CheckCertificates(
          "--tls-cert", options.tls.cert_file, ReadPem("--tls-cert", options.tls.cert_file));
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem("--tls-key", options.tls.key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    channel = grpc::SslCredentials(ssl);
  } else {
    // Plaintext on loopback, as mpsd's local credentials expect; call credentials (the token)
    // are allowed on it, unlike on InsecureChannelCredentials.
    channel = grpc::experimental::LocalCredentials(LOCAL_TCP);
  }
  if (options.token.empty()) return channel;
  return grpc::CompositeChannelCredentials(channel, grpc::AccessTokenCredentials(options.token));
}

}  // namespace

bool UsesTls(const std::string& server, const TlsOptions& tls) {
  if (absl::StartsWith(server, "unix:")) return false;
  if (tls.enabled || !tls.ca_file.empty() || !tls.cert_file.empty()) return true;
  return !IsLoopbackHost(HostAndPort(server).first);
}

std::string LooseModeWarning(absl::string_view flag, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || (st.st_mode & 077) == 0) return "";
  return absl::StrFormat(
      "mpsctl: warning: %s %s is accessible by other users (mode %04o): anyone who can read it "
      "acts with its rights; make it private with: chmod 600 %s",
      flag, path, st.st_mode & 07777, path);
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("--token-file ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file ", path, ": empty"));
  }
  return token;
}

absl::StatusOr<std::unique_ptr<Commands>> Commands::Connect(CommandOptions options,
                                                            std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFor(options);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.server, *credentials, KeepaliveChannelArguments());
  auto stub = v1::JobService::NewStub(channel);
  return std::make_unique<Commands>(std::move(options), std::move(stub), out, err,
                                    std::move(channel));
}

Commands::Commands(CommandOptions options, std::unique_ptr<v1::JobService::StubInterface> stub,
                   std::ostream& out, std::ostream& err, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      stub_(std::move(stub)),
      channel_(std::move(channel)),
      out_(out),
      err_(err) {}

std::unique_ptr<grpc::ClientContext> Commands::UnaryContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  return context;
}

int Commands::RpcFailed(const grpc::Status& status) {
  const std::string& message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      // mpsd's own errors carry its ErrorInfo (mpsd.proto, JobService); gRPC's do not.
      if (api::MpsdErrorInfo(status).has_value()) {
        err_ << "mpsctl: mpsd at " << options_.server
             << " is running but answered UNAVAILABLE: " << message << " (try again later)\n";
        return kExitDaemonUnavailable;
      }
      if (ConnectFailed(channel_.get())) {
        const auto [host, port] = HostAndPort(options_.server);
        const std::string tls_problem =
            port > 0 ? DiagnoseTls(host, port, options_.tls, UsesTls(options_.server, options_.tls))
                     : "";
        if (!tls_problem.empty()) {
          err_ << "mpsctl: cannot reach mpsd at " << options_.server << ": TLS: " << tls_problem
               << "\n";
          return kExitUnreachable;
        }
        const std::string reason = ConnectReason(status);
        err_ << "mpsctl: cannot reach mpsd at " << options_.server
             << (reason.empty() ? "" : absl::StrCat(" (", reason, ")"))
             << ": is the daemon running? (start it with: " << StartDaemonHint(options_.server)
             << ")\n";
      } else {
        err_ << "mpsctl: mpsd at " << options_.server << " is unavailable: " << message << "\n";
      }
      return kExitUnreachable;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      err_ << "mpsctl: mpsd at " << options_.server << " did not answer within "
           << absl::FormatDuration(options_.rpc_timeout) << "\n";
      return kExitUnreachable;
    case grpc::StatusCode::UNAUTHENTICATED:
      err_ << "mpsctl: mpsd at " << options_.server << " refused the call: " << message
           << (options_.token.empty() && !absl::StrContains(message, "MPSD_TOKEN")
                   ? " (no token given: --token-file FILE or MPSD_TOKEN)"
                   : "")
           << "\n";
      return kExitFailed;
    default:
      err_ << "mpsctl: "
           << (message.empty() ? absl::StrCat("error code ", status.error_code()) : message)
           << "\n";
      return kExitFailed;
  }
}

// Attempts of one SubmitJob that times out, under one request_id.
constexpr int kSubmitAttempts = 2;
// What a SubmitJob may take beyond rpc_timeout: the daemon checks a job's user code (a
// TorchScript model's forward, a fine-tuning setup) before it answers, for up to its
// executor.user_code_timeout_s (default 30 s), and answers with an error naming the field when
// the check does not end; a shorter deadline would hide that answer.
constexpr absl::Duration kSubmitCheckAllowance = absl::Seconds(60);

int Commands::Submit(const std::string& job_file, bool follow, const SubmitOverrides& overrides) {
  absl::StatusOr<v1::SubmitJobRequest> request = ReadJobFile(job_file);
  if (!request.ok()) {
    // Parse errors already start with "FILE:LINE:COL:"; I/O errors get the program's name.
    if (request.status().code() != absl::StatusCode::kInvalidArgument) err_ << "mpsctl: ";
    err_ << request.status().message() << "\n";
    return kExitFailed;
  }
  if (overrides.priority.has_value()) request->set_priority(*overrides.priority);
  if (overrides.request_id.has_value()) request->set_request_id(*overrides.request_id);
  for (const std::string& id : overrides.after) request->add_after(id);
  if (request->request_id().empty()) request->set_request_id(NewRequestId());
  // A submit that timed out may still have created the job (validation can be slow): asked
  // again with the same request_id, mpsd returns that job rather than making a second.
  v1::Job job;
  grpc::Status status;
  for (int attempt = 1;; ++attempt) {
    const std::unique_ptr<grpc::ClientContext> context = UnaryContext();
    context->set_deadline(
        absl::ToChronoTime(absl::Now() + options_.rpc_timeout + kSubmitCheckAllowance));
    status = stub_->SubmitJob(context.get(), *request, &job);
    if (status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED || attempt == kSubmitAttempts) {
      break;
    }
    err_ << "mpsctl: mpsd did not answer within "
         << absl::FormatDuration(options_.rpc_timeout + kSubmitCheckAllowance)
         << "; asking again with request_id " << request->request_id()
         << " (a job the first attempt created is returned, not made twice)\n";
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    const int code = RpcFailed(status);
    err_ << "mpsctl: the job may still be created; mpsctl submit " << job_file << " --request-id "
         << request->request_id() << " returns it without making another\n";
    return code;
  }
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      err_ << "mpsctl: " << job_file << ": mpsd rejected the job: " << status.error_message()
           << "\n";
      return kExitFailed;
    }
    return RpcFailed(status);
  }
  if (follow) return Stream(job.id(), *request, /*after_seq=*/0, /*stop_seq=*/0);
  out_ << (options_.json ? ToJsonLine(job) : job.id()) << "\n";
  return kExitOk;
}

int Commands::Get(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  const grpc::Status status = stub_->GetJob(UnaryContext().get(), request, &job);
  if (!status.ok()) return RpcFailed(status);
  out_ << (options_.json ? ToJsonLine(job) + "\n" : FormatJobDetails(job, absl::Now()));
  return kExitOk;
}

int Commands::List(const ListOptions& list) {
  absl::StatusOr<std::vector<v1::Job::State>> states = ParseStates(list.states);
  absl::StatusOr<v1::Job::Kind> kind = ParseKind(list.kind);
  for (const absl::Status& status : {states.status(), kind.status()}) {
    if (status.ok()) continue;
    err_ << "mpsctl: " << status.message() << "\n";
    return kExitUsage;
  }
  v1::ListJobsRequest request;
  for (v1::Job::State state : *states) request.add_states(state);
  request.set_kind(*kind);
  request.set_name(list.name);
  for (const std::string& label : list.labels) {
    const size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0) {
      err_ << "mpsctl: --label: expected KEY=VALUE, got \"" << label << "\"\n";
      return kExitUsage;
    }
    (*request.mutable_labels())[label.substr(0, eq)] = label.substr(eq + 1);
  }
  if (!list.since.empty()) {
    absl::Duration since;
    // absl's durations, plus days ("2d"), which people reach for first.
    std::string text = list.since;
    int64_t days = 0;
    const bool day_form =
        absl::EndsWith(text, "d") && absl::SimpleAtoi(text.substr(0, text.size() - 1), &days);
    if (day_form) {
      since = absl::Hours(24 * days);
    } else if (!absl::ParseDuration(text, &since)) {
      err_ << "mpsctl: --since: expected a duration such as 12h, 30m, 90s or 2d, got \"" << text
           << "\"\n";
      return kExitUsage;
    }
    if (since < absl::ZeroDuration()) {
      err_ << "mpsctl: --since: must not be negative\n";
      return kExitUsage;
    }
    *request.mutable_created_after() = google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
        absl::ToUnixMicros(absl::Now() - since));
  }
  v1::ListJobsResponse shown;
  std::string damaged;  // api/metadata.h
  bool more = false;
  do {
    const int left = list.limit > 0 ? list.limit - shown.jobs_size() : kMaxPageSize;
    request.set_page_size(std::min(left, kMaxPageSize));
    v1::ListJobsResponse page;
    std::unique_ptr<grpc::ClientContext> context = UnaryContext();
    const grpc::Status status = stub_->ListJobs(context.get(), request, &page);
    if (!status.ok()) return RpcFailed(status);
    for (const auto& [key, value] : context->GetServerTrailingMetadata()) {
      if (key == api::kDamagedJobIdsMetadata) damaged = std::string(value.data(), value.size());
    }
    for (v1::Job& job : *page.mutable_jobs()) *shown.add_jobs() = std::move(job);
    request.set_page_token(page.next_page_token());
    more = !page.next_page_token().empty();
  } while (more && (list.limit == 0 || shown.jobs_size() < list.limit));
  if (options_.json) {
    out_ << ToJsonLine(shown) << "\n";
  } else if (shown.jobs().empty() && !damaged.empty()) {
    out_ << "no readable jobs\n";
  } else {
    out_ << FormatJobTable({shown.jobs().begin(), shown.jobs().end()}, absl::Now());
    // A note, not a row: on stderr, so that `mpsctl list | awk …` sees the table only.
    if (more) {
      err_ << "(the newest " << shown.jobs_size() << " shown; --limit N for more, 0 for all)\n";
    }
  }
  if (damaged.empty()) return kExitOk;
  // A damaged database's readable part is not all there is: say so, and fail.
  err_ << "mpsctl: job(s) " << absl::StrReplaceAll(damaged, {{",", ", "}})
       << " cannot be read from the daemon's database (damaged) and are not listed (mpsctl get "
          "ID says why)\n";
  return kExitFailed;
}

int Commands::Pause() {
  v1::ServerStatus status;
  const grpc::Status rpc =
      stub_->PauseQueue(UnaryContext().get(), v1::PauseQueueRequest(), &status);
  if (!rpc.ok()) return RpcFailed(rpc);
  if (options_.json) {
    out_ << ToJsonLine(status) << "\n";
  } else {
    out_ << "queue paused: " << status.queued_jobs() << " queued job(s) wait"
         << (status.running_job_id().empty()
                 ? ""
                 : absl::StrCat("; job ", status.running_job_id(), " runs to its end"))
         << " (mpsctl resume)\n";
  }
  return kExitOk;
}

int Commands::Resume() {
  v1::ServerStatus status;
  const grpc::Status rpc =
      stub_->ResumeQueue(UnaryContext().get(), v1::ResumeQueueRequest(), &status);
  if (!rpc.ok()) return RpcFailed(rpc);
  if (options_.json) {
    out_ << ToJsonLine(status) << "\n";
  } else {
    out_ << "queue running: " << status.queued_jobs() << " queued job(s)\n";
  }
  return kExitOk;
}

int Commands::Move(const std::string& job_id, int32_t priority) {
  v1::MoveJobRequest request;
  request.set_job_id(job_id);
  request.set_priority(priority);
  v1::Job job;
  const grpc::Status status = stub_->MoveJob(UnaryContext().get(), request, &job);
  if (!status.ok()) return RpcFailed(status);
  if (options_.json) {
    out_ << ToJsonLine(job) << "\n";
  } else {
    out_ << "job " << job.id() << " priority " << priority << "\n";
  }
  return kExitOk;
}

int Commands::GetJobs(const std::vector<std::string>& ids, std::vector<v1::Job>& jobs) {
  for (const std::string& id : ids) {
    v1::GetJobRequest request;
    request.set_job_id(id);
    v1::Job job;
    const grpc::Status status = stub_->GetJob(UnaryContext().get(), request, &job);
    if (!status.ok()) return RpcFailed(status);
    jobs.push_back(std::move(job));
  }
  return kExitOk;
}

int Commands::Wait(const std::vector<std::string>& job_ids, absl::Duration timeout,
                   v1::Job::State expected) {
  const absl::Time deadline =
      timeout > absl::ZeroDuration() ? absl::Now() + timeout : absl::InfiniteFuture();
  std::vector<std::string> waiting = job_ids;
  bool all_succeeded = true;
  absl::Time unreachable_since = absl::InfiniteFuture();
  while (!waiting.empty()) {
    std::vector<std::string> still;
    for (const std::string& id : waiting) {
      v1::GetJobRequest request;
      request.set_job_id(id);
      v1::Job job;
      const grpc::Status status = stub_->GetJob(UnaryContext().get(), request, &job);
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
          status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        // A daemon restarting under a waiting script: keep asking, for reconnect_timeout.
        if (unreachable_since == absl::InfiniteFuture()) unreachable_since = absl::Now();
        if (absl::Now() - unreachable_since > options_.reconnect_timeout) return RpcFailed(status);
        still.push_back(id);
        continue;
      }
      if (!status.ok()) return RpcFailed(status);
      unreachable_since = absl::InfiniteFuture();
      if (!api::IsTerminal(job.state())) {
        still.push_back(id);
        continue;
      }
      if (job.state() != expected) all_succeeded = false;
      if (options_.json) {
        out_ << ToJsonLine(job) << "\n";
      } else {
        out_ << "job " << job.id() << " " << v1::Job::State_Name(job.state())
             << (job.message().empty() ? "" : absl::StrCat(": ", job.message())) << "\n";
      }
      out_.flush();
    }
    waiting = std::move(still);
    if (waiting.empty()) break;
    if (absl::Now() >= deadline) {
      err_ << "mpsctl: timed out waiting for job(s) " << absl::StrJoin(waiting, ", ") << "\n";
      return kExitWaitTimeout;
    }
    absl::SleepFor(std::min(absl::Milliseconds(500), deadline - absl::Now()));
  }
  return all_succeeded ? kExitOk : kExitFailed;
}

int Commands::Sweep(const std::string& job_id, const std::string& metric,
                    const std::string& format) {
  std::vector<v1::Job> sweep;
  if (int code = GetJobs({job_id}, sweep); code != kExitOk) return code;
  if (sweep[0].kind() != v1::Job::SWEEP) {
    err_ << "mpsctl: job " << job_id << " is not a sweep ("
         << (sweep[0].has_trial() ? absl::StrCat("it is trial ", sweep[0].trial().index(),
                                                 " of sweep ", sweep[0].trial().sweep_id())
                                  : v1::Job::Kind_Name(sweep[0].kind()))
         << ")\n";
    return kExitFailed;
  }
  std::vector<v1::Job> trials;
  if (int code =
          GetJobs({sweep[0].trial_job_ids().begin(), sweep[0].trial_job_ids().end()}, trials);
      code != kExitOk) {
    return code;
  }
  const std::string shown = options_.json ? "json" : format;
  absl::StatusOr<TextTable> table = SweepTable(trials, metric, shown == "json" || shown == "csv");
  if (!table.ok()) {
    err_ << "mpsctl: " << table.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> text = RenderTable(*table, shown);
  if (!text.ok()) {
    err_ << "mpsctl: " << text.status().message() << "\n";
    return kExitUsage;
  }
  out_ << *text;
  if (!api::IsTerminal(sweep[0].state()) && format == "table" && !options_.json) {
    err_ << "sweep " << job_id << " is " << v1::Job::State_Name(sweep[0].state())
         << ": unfinished trials show their newest epoch\n";
  }
  return kExitOk;
}

int Commands::Compare(const std::vector<std::string>& job_ids, const std::string& format) {
  std::vector<v1::Job> jobs;
  if (int code = GetJobs(job_ids, jobs); code != kExitOk) return code;
  absl::StatusOr<std::string> text =
      RenderTable(CompareTable(jobs), options_.json ? "json" : format);
  if (!text.ok()) {
    err_ << "mpsctl: " << text.status().message() << "\n";
    return kExitUsage;
  }
  out_ << *text;
  return kExitOk;
}

int Commands::Cancel(const std::vector<std::string>& job_ids, bool wait) {
  int code = kExitOk;
  std::vector<std::string> cancelled;
  for (const std::string& job_id : job_ids) {
    const int one = CancelOne(job_id, /*quiet=*/wait);
    if (one == kExitOk) cancelled.push_back(job_id);
    if (code == kExitOk) code = one;
    if (one == kExitUnreachable || one == kExitDaemonUnavailable) return code;
  }
  if (!wait || cancelled.empty()) return code;
  const int waited = Wait(cancelled, absl::ZeroDuration(), v1::Job::CANCELLED);
  return code == kExitOk ? waited : code;
}

int Commands::CancelOne(const std::string& job_id, bool quiet) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  const grpc::Status status = stub_->CancelJob(UnaryContext().get(), request, &job);
  if (!status.ok()) return RpcFailed(status);
  if (quiet) return kExitOk;  // Wait prints the job when it has ended
  if (options_.json) {
    out_ << ToJsonLine(job) << "\n";
  } else if (job.state() == v1::Job::RUNNING) {
    out_ << "job " << job.id() << " stops at its next step (watch it: mpsctl logs " << job.id()
         << " --follow)\n";
  } else {
    out_ << "job " << job.id() << " " << v1::Job::State_Name(job.state()) << "\n";
  }
  out_.flush();  // each outcome as it comes, beside the errors of the others
  return kExitOk;
}

int Commands::Logs(const std::string& job_id, bool follow, int64_t after_seq) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  const grpc::Status status = stub_->GetJob(UnaryContext().get(), request, &job);
  if (!status.ok()) return RpcFailed(status);
  if (follow) return Stream(job_id, job.spec(), after_seq, /*stop_seq=*/0);
  // A seq the job has not reached: an error, as with --follow (the daemon's OUT_OF_RANGE),
  // rather than an empty answer that looks like "nothing new".
  if (after_seq > job.last_seq()) {
    err_ << "mpsctl: --after " << after_seq << " is beyond job " << job_id << "'s last event (seq "
         << job.last_seq() << ")\n";
    return kExitFailed;
  }
  // StreamEvents always follows to the job's end; stop where the stored events ended instead.
  if (job.last_seq() == after_seq) return kExitOk;
  return Stream(job_id, job.spec(), after_seq, job.last_seq());
}

int Commands::Device() {
  v1::DeviceInfo device;
  const grpc::Status status =
      stub_->GetDevice(UnaryContext().get(), v1::GetDeviceRequest(), &device);
  if (!status.ok()) return RpcFailed(status);
  out_ << (options_.json ? ToJsonLine(device) + "\n" : FormatDevice(device));
  return kExitOk;
}

int Commands::Models(const std::vector<int64_t>& input_shape, std::optional<int32_t> num_classes) {
  v1::ListModelsRequest request;
  for (const int64_t dim : input_shape) request.add_input_shape(dim);
  if (num_classes.has_value()) request.set_num_classes(*num_classes);
  v1::ListModelsResponse response;
  const grpc::Status status = stub_->ListModels(UnaryContext().get(), request, &response);
  if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    // mpsd names the request field ("input_shape: ..."); say the flag the user typed.
    std::string message = status.error_message();
    if (absl::StartsWith(message, "input_shape:")) message.replace(0, 12, "--input-shape:");
    if (absl::StartsWith(message, "num_classes:")) message.replace(0, 12, "--num-classes:");
    err_ << "mpsctl: models: " << message << "\n";
    return kExitFailed;
  }
  if (!status.ok()) return RpcFailed(status);
  out_ << (options_.json ? ToJsonLine(response) + "\n" : FormatModelTable(response));
  return kExitOk;
}

int Commands::DeleteArtifacts(const std::vector<std::string>& job_ids, bool dry_run) {
  v1::DeleteArtifactsRequest request;
  for (const std::string& id : job_ids) request.add_job_ids(id);
  request.set_retention_policy(job_ids.empty());
  request.set_dry_run(dry_run);
  v1::DeleteArtifactsResponse response;
  const grpc::Status status = stub_->DeleteArtifacts(UnaryContext().get(), request, &response);
  if (!status.ok()) return RpcFailed(status);
  out_ << (options_.json ? ToJsonLine(response) + "\n" : FormatDeletedArtifacts(response, dry_run));
  return kExitOk;
}

int Commands::Status() {
  v1::ServerStatus status;
  const grpc::Status rpc =
      stub_->GetServerStatus(UnaryContext().get(), v1::GetServerStatusRequest(), &status);
  if (!rpc.ok()) return RpcFailed(rpc);
  out_ << (options_.json ? ToJsonLine(status) + "\n" : FormatServerStatus(status));
  return kExitOk;
}

namespace {

// http_url as a browser elsewhere reaches it (see Commands::Dashboard), with a trailing '/'.
std::string DashboardUrl(const std::string& http_url, const std::string& server) {
  // "scheme://host:port" as the daemon bound it.
  const size_t scheme_end = http_url.find("://");
  const size_t port_colon = http_url.rfind(':');
  if (scheme_end == std::string::npos || port_colon == std::string::npos ||
      port_colon < scheme_end + 3) {
    return http_url + "/";
  }
  std::string host = http_url.substr(scheme_end + 3, port_colon - scheme_end - 3);
  if (host == "0.0.0.0" || host == "[::]") {
    const auto [dialed, port] = HostAndPort(server);
    host = port > 0 && !dialed.empty() ? dialed : "localhost";
  }
  return absl::StrCat(http_url.substr(0, scheme_end + 3), host, http_url.substr(port_colon), "/");
}

}  // namespace

int Commands::Dashboard(bool open_browser) {
  v1::ServerStatus status;
  const grpc::Status rpc =
      stub_->GetServerStatus(UnaryContext().get(), v1::GetServerStatusRequest(), &status);
  if (!rpc.ok()) return RpcFailed(rpc);
  if (status.http_url().empty()) {
    err_ << "mpsctl: mpsd at " << options_.server
         << " serves no dashboard: start it with --http-listen 127.0.0.1:9464 (config "
            "http_listen: 127.0.0.1:9464; another host needs TLS: --tls-cert, --tls-key)\n";
    return kExitFailed;
  }
  const std::string url = DashboardUrl(status.http_url(), options_.server);
  out_ << url << "\n";
  err_ << "mpsctl: the page asks once for a token (kept in the tab's sessionStorage, sent as a "
          "header): on the daemon's machine, mpsd token add --name NAME --role viewer prints one "
          "(or the admin token in <state_dir>/admin.token, if the first start made one)\n";
  if (!open_browser) return kExitOk;
#if defined(__APPLE__)
  const char* opener = "open";
#else
  const char* opener = "xdg-open";
#endif
  std::vector<char*> argv = {const_cast<char*>(opener), const_cast<char*>(url.c_str()), nullptr};
  pid_t pid = 0;
  if (const int error = posix_spawnp(&pid, opener, nullptr, nullptr, argv.data(), environ);
      error != 0) {
    err_ << "mpsctl: cannot start " << opener << " to open the browser: " << std::strerror(error)
         << "; open " << url << " yourself\n";
    return kExitFailed;
  }
  int wait_status = 0;
  waitpid(pid, &wait_status, 0);
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    err_ << "mpsctl: " << opener << " " << url << " failed; open it yourself\n";
    return kExitFailed;
  }
  return kExitOk;
}

int Commands::Bench(const std::string& job_id, const std::string& format_name) {
  const absl::StatusOr<BenchFormat> format = ParseBenchFormat(options_.json ? "json" : format_name);
  if (!format.ok()) {
    err_ << "mpsctl: bench: " << format.status().message() << "\n";
    return kExitUsage;
  }
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  const grpc::Status status = stub_->GetJob(UnaryContext().get(), request, &job);
  if (!status.ok()) return RpcFailed(status);
  if (!job.spec().has_bench_job()) {
    err_ << "mpsctl: bench: job " << job_id << " is a " << KindName(job.spec())
         << ", not a BenchJob\n";
    return kExitFailed;
  }
  std::vector<v1::BenchRow> rows(job.summary().bench_rows().begin(),
                                 job.summary().bench_rows().end());
  // No summary yet (running) or none at all (interrupted): the stored rows are the table.
  if (rows.empty() && job.last_seq() > 0) {
    if (const grpc::Status read = StoredBenchRows(job_id, job.last_seq(), rows); !read.ok()) {
      return RpcFailed(read);
    }
  }
  out_ << FormatBenchRows(rows, *format) << std::flush;
  if (!api::IsTerminal(job.state())) {
    err_ << "mpsctl: job " << job_id << " is " << v1::Job::State_Name(job.state()) << ": "
         << rows.size() << " row(s) so far\n";
  }
  return kExitOk;
}

grpc::Status Commands::StoredBenchRows(const std::string& job_id, int64_t last_seq,
                                       std::vector<v1::BenchRow>& rows) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  v1::StreamEventsRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
      stub_->StreamEvents(&context, request);
  v1::JobEvent event;
  bool reached = false;
  while (!reached && reader->Read(&event)) {
    if (event.has_bench_row()) rows.push_back(event.bench_row());
    reached = event.seq() >= last_seq || event.has_summary();
  }
  if (reached) context.TryCancel();  // the stream would follow the job live
  const grpc::Status status = reader->Finish();
  return reached ? grpc::Status::OK : status;
}

int Commands::Artifacts(const std::string& job_id) {
  v1::ListArtifactsRequest request;
  request.set_job_id(job_id);
  v1::ListArtifactsResponse response;
  const grpc::Status status = stub_->ListArtifacts(UnaryContext().get(), request, &response);
  if (!status.ok()) return RpcFailed(status);
  if (options_.json) {
    out_ << ToJsonLine(response) << "\n";
    return kExitOk;
  }
  out_ << FormatArtifacts(response);
  return kExitOk;
}

namespace {

// The artifact `name` names, or the job's model (model.pt; else the first of kind "model", else
// its only artifact) when `name` is empty.
absl::StatusOr<v1::Artifact> ChooseArtifact(const v1::ListArtifactsResponse& list,
                                            const std::string& job_id, const std::string& name) {
  if (name.empty()) {
    for (const v1::Artifact& artifact : list.artifacts()) {
      if (artifact.name() == "model.pt") return artifact;
    }
  }
  std::vector<std::string> names;
  for (const v1::Artifact& artifact : list.artifacts()) {
    if (artifact.name() == name || (name.empty() && artifact.kind() == "model")) return artifact;
    names.push_back(artifact.name());
  }
  if (name.empty() && list.artifacts_size() == 1) return list.artifacts(0);
  if (names.empty()) return absl::NotFoundError(absl::StrCat("job ", job_id, " has no artifacts"));
  return absl::NotFoundError(
      absl::StrCat(name.empty() ? absl::StrCat("job ", job_id, " has no model; name one")
                                : absl::StrCat("job ", job_id, " has no artifact \"", name, "\""),
                   " (artifacts: ", absl::StrJoin(names, ", "), ")"));
}

// Where a download of `name` goes: `output`, or inside it when it is a directory (or ends in
// '/'), or the artifact's file name in the current directory. Errors name the path: a directory
// that does not exist, a file already there (unless `force`).
absl::StatusOr<std::string> DownloadPath(const std::string& name, const std::string& output,
                                         bool force) {
  namespace fs = std::filesystem;
  const std::string file = fs::path(name).filename().string();
  std::error_code error;
  std::string path = file;
  if (!output.empty() && (fs::is_directory(output, error) || absl::EndsWith(output, "/"))) {
    if (!fs::is_directory(output, error)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "-o ", output, ": ", fs::exists(output, error) ? "not a directory" : "no such directory",
          " (create it first: mkdir -p ", output, ")"));
    }
    path = (fs::path(output) / file).string();
  } else if (!output.empty()) {
    path = output;
    const fs::path parent = fs::path(output).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, error)) {
      return absl::FailedPreconditionError(
          absl::StrCat("-o ", output, ": ",
                       fs::exists(parent, error) ? "not a directory: " : "no such directory: ",
                       parent.string()));
    }
  }
  if (!force && fs::exists(fs::symlink_status(path, error))) {
    return absl::AlreadyExistsError(
        absl::StrCat(path, " already exists; --force overwrites it, or -o names another file"));
  }
  return path;
}

}  // namespace

int Commands::Download(const std::string& job_id, const std::string& name,
                       const std::string& output, bool force) {
  v1::ListArtifactsRequest list_request;
  list_request.set_job_id(job_id);
  v1::ListArtifactsResponse list;
  grpc::Status status = stub_->ListArtifacts(UnaryContext().get(), list_request, &list);
  if (!status.ok()) return RpcFailed(status);
  absl::StatusOr<v1::Artifact> artifact = ChooseArtifact(list, job_id, name);
  if (!artifact.ok()) {
    err_ << "mpsctl: " << artifact.status().message() << "\n";
    return kExitFailed;
  }
  // `-o -`: into a private temporary folder, checked, then written to stdout (`| jq`).
  const bool to_stdout = output == "-";
  std::string temporary;
  if (to_stdout) {
    const char* tmpdir = std::getenv("TMPDIR");
    temporary = absl::StrCat(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp",
                             "/mpsctl-download-XXXXXX");
    if (mkdtemp(temporary.data()) == nullptr) {
      err_ << "mpsctl: download: cannot create a temporary folder: " << std::strerror(errno)
           << "\n";
      return kExitFailed;
    }
  }
  struct RemoveTemporary {
    const std::string& folder;
    ~RemoveTemporary() {
      std::error_code ignored;
      if (!folder.empty()) std::filesystem::remove_all(folder, ignored);
    }
  } remove_temporary{temporary};
  const absl::StatusOr<std::string> destination =
      to_stdout ? absl::StatusOr<std::string>(temporary + "/artifact")
                : DownloadPath(artifact->name(), output, force);
  if (!destination.ok()) {
    err_ << "mpsctl: download: " << destination.status().message() << "\n";
    return kExitFailed;
  }
  const std::string& path = *destination;
  const std::string part = path + ".part";
  absl::Time last_progress = absl::Now();
  for (int attempt = 0;; ++attempt) {
    std::error_code error;
    int64_t offset = std::filesystem::exists(part, error)
                         ? static_cast<int64_t>(std::filesystem::file_size(part, error))
                         : 0;
    if (offset > artifact->size_bytes()) {  // Not a prefix of this artifact: start again.
      std::filesystem::remove(part, error);
      offset = 0;
    }
    int64_t received = 0;
    status = ReceiveArtifact(job_id, artifact->name(), offset, part, received);
    if (received > 0) last_progress = absl::Now();
    if (status.ok()) break;
    const bool retryable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           status.error_code() == grpc::StatusCode::INTERNAL;
    if (!retryable || (attempt == 0 && received == 0 && offset == 0) ||
        absl::Now() - last_progress > options_.reconnect_timeout) {
      if (status.error_code() == grpc::StatusCode::DATA_LOSS) {
        err_ << "mpsctl: " << status.error_message() << "\n";
        return kExitFailed;
      }
      return RpcFailed(status);
    }
    err_ << "mpsctl: the download of " << artifact->name() << " broke (" << status.error_message()
         << "); resuming at byte " << offset + received << "\n";
    absl::SleepFor(std::min(absl::Seconds(1) * (attempt + 1), absl::Seconds(5)));
  }
  absl::StatusOr<std::string> sha256 = api::Sha256OfFile(part);
  if (!sha256.ok() || *sha256 != artifact->sha256()) {
    std::error_code error;
    std::filesystem::remove(part, error);
    err_ << "mpsctl: " << artifact->name() << ": the downloaded bytes' SHA-256 "
         << (sha256.ok() ? *sha256 : "(unreadable)") << " is not the daemon's "
         << artifact->sha256() << "; removed " << part << ", download again\n";
    return kExitFailed;
  }
  std::error_code error;
  std::filesystem::rename(part, path, error);
  if (error) {
    err_ << "mpsctl: cannot rename " << part << " to " << path << ": " << error.message() << "\n";
    return kExitFailed;
  }
  if (to_stdout) {
    std::ifstream in(path, std::ios::binary);
    if (artifact->size_bytes() > 0) out_ << in.rdbuf();  // nothing inserted sets failbit
    out_.flush();
    if (!in || !out_) {
      err_ << "mpsctl: download: " << artifact->name() << ": cannot write it to stdout\n";
      return kExitFailed;
    }
    return kExitOk;
  }
  out_ << "downloaded " << artifact->name() << " (" << artifact->size_bytes() << " bytes, sha256 "
       << artifact->sha256() << ") to " << path << "\n";
  return kExitOk;
}

grpc::Status Commands::ReceiveArtifact(const std::string& job_id, const std::string& name,
                                       int64_t offset, const std::string& part, int64_t& received) {
  std::ofstream file(part, std::ios::binary | std::ios::app);
  if (!file) {
    return grpc::Status(grpc::StatusCode::DATA_LOSS,
                        absl::StrCat("cannot write ", part, ": ", std::strerror(errno)));
  }
  grpc::ClientContext context;
  context.set_wait_for_ready(offset > 0);
  v1::GetArtifactRequest request;
  request.set_job_id(job_id);
  request.set_name(name);
  request.set_offset(offset);
  std::unique_ptr<grpc::ClientReaderInterface<v1::ArtifactChunk>> reader =
      stub_->GetArtifact(&context, request);
  v1::ArtifactChunk chunk;
  while (reader->Read(&chunk)) {
    if (chunk.offset() != offset + received) {
      context.TryCancel();
      reader->Finish();
      return grpc::Status(
          grpc::StatusCode::DATA_LOSS,
          absl::StrCat(name, ": chunk at byte ", chunk.offset(), ", expected ", offset + received));
    }
    file.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    received += static_cast<int64_t>(chunk.data().size());
  }
  file.flush();
  if (!file) return grpc::Status(grpc::StatusCode::DATA_LOSS, absl::StrCat("cannot write ", part));
  return reader->Finish();
}

absl::Duration Commands::HeartbeatInterval() {
  v1::ServerStatus status;
  if (stub_->GetServerStatus(UnaryContext().get(), v1::GetServerStatusRequest(), &status).ok() &&
      status.heartbeat_interval_s() > 0) {
    return absl::Seconds(status.heartbeat_interval_s());
  }
  return absl::Seconds(15);
}

grpc::Status Commands::StreamOnce(const std::string& job_id, int64_t after_seq, int64_t stop_seq,
                                  absl::Duration silence, bool wait_for_ready,
                                  EventPrinter& printer, bool& stopped, bool& received,
                                  bool& went_silent) {
  grpc::ClientContext context;  // no deadline: a job may run for hours
  context.set_wait_for_ready(wait_for_ready);
  v1::StreamEventsRequest request;
  request.set_job_id(job_id);
  request.set_after_seq(after_seq);
  // Not following (`logs` without --follow): what is stored, without waiting for events the
  // job reported but the daemon has not stored yet (a full disk).
  request.set_stored_only(stop_seq > 0);
  // A resumed job's steps once each, the latest attempt's (api/attempts.h).
  request.set_latest_attempt_only(true);
  // The watchdog cancels the call when nothing (not even a heartbeat) arrived for `silence`:
  // a connection that died without a reset would otherwise block Read forever.
  absl::Mutex mu;
  absl::Time last_message = absl::Now();
  bool done = false;
  std::thread watchdog([&] {
    absl::MutexLock lock(&mu);
    while (!done) {
      const absl::Time due = last_message + silence;
      if (absl::Now() >= due) {
        went_silent = true;
        context.TryCancel();
        return;
      }
      mu.AwaitWithDeadline(absl::Condition(&done), due);
    }
  });
  std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
      stub_->StreamEvents(&context, request);
  v1::JobEvent event;
  while (reader->Read(&event)) {
    {
      absl::MutexLock lock(&mu);
      last_message = absl::Now();
    }
    received = true;
    // Heartbeats are outside the numbered sequence; an event already printed (a replay that
    // overlaps) is not printed twice.
    if (event.seq() != 0 && event.seq() <= printer.last_seq()) continue;
    printer.Print(event);
    stopped = printer.final_state().has_value() || (stop_seq > 0 && event.seq() >= stop_seq);
    if (stopped) break;
  }
  {
    absl::MutexLock lock(&mu);
    done = true;
  }
  watchdog.join();
  if (stopped) context.TryCancel();  // Finish() then reports CANCELLED, which is ours
  return reader->Finish();
}

int Commands::Stream(const std::string& job_id, const v1::SubmitJobRequest& spec, int64_t after_seq,
                     int64_t stop_seq) {
  EventPrinter::Options print_options;
  print_options.json = options_.json;
  print_options.live = options_.live && !options_.json;
  print_options.width = options_.terminal_width;
  print_options.total_epochs = TotalEpochs(spec);
  print_options.step_accuracy = HasStepAccuracy(spec);
  EventPrinter printer(job_id, print_options, out_);
  InterruptNote note(options_.explain_interrupt && stop_seq == 0, job_id);

  const absl::Duration silence = 2 * HeartbeatInterval() + absl::Seconds(5);
  bool stopped = false, connected = false, gave_up = false;
  grpc::Status status;
  absl::Time last_progress = absl::Now();
  for (int attempt = 0;; ++attempt) {
    bool received = false, went_silent = false;
    const int64_t from = std::max(after_seq, printer.last_seq());
    status = StreamOnce(job_id, from, stop_seq, silence, /*wait_for_ready=*/attempt > 0, printer,
                        stopped, received, went_silent);
    if (received) {
      connected = true;
      last_progress = absl::Now();
    }
    // stored_only (not following): the daemon sent what it has stored. Events it has not
    // stored yet come within milliseconds, unless its disk is full: a short wait, then what
    // is there is the answer.
    if (!stopped && stop_seq > 0 && status.ok() && !went_silent) {
      if (absl::Now() - last_progress < absl::Seconds(2)) {
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      stopped = true;
      err_ << "mpsctl: job " << job_id << "'s events after seq "
           << std::max(after_seq, printer.last_seq()) << " are not stored yet\n";
    }
    if (stopped || (status.ok() && !went_silent)) break;
    // Reconnect only to a daemon that answered once: a first call that cannot connect is
    // reported as unreachable at once, as every other command does.
    const bool retryable = went_silent || status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           status.error_code() == grpc::StatusCode::INTERNAL ||
                           status.error_code() == grpc::StatusCode::UNKNOWN;
    if (!connected || !retryable || options_.reconnect_timeout <= absl::ZeroDuration()) break;
    if (absl::Now() - last_progress > options_.reconnect_timeout) {
      gave_up = true;
      break;
    }
    printer.Finish();  // ends a live progress line before the note
    err_ << "mpsctl: the event stream of job " << job_id << " "
         << (went_silent ? absl::StrCat("was silent for ", absl::FormatDuration(silence))
                         : absl::StrCat("broke (", status.error_message(), ")"))
         << "; reconnecting, resuming after seq " << std::max(after_seq, printer.last_seq())
         << "\n";
    absl::SleepFor(std::min(absl::Seconds(1) * (attempt + 1), absl::Seconds(5)));
  }
  printer.Finish();

  // Reconnecting ran out of time. A daemon that answers (UNAVAILABLE of its own: shutting down)
  // is reported as such; otherwise it went away, which is "cannot reach mpsd" (exit 2), as for
  // every other command, not the CANCELLED of mpsctl's own watchdog.
  const bool daemon_answered = status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                               api::MpsdErrorInfo(status).has_value();
  if (!stopped && gave_up && !daemon_answered) {
    err_ << "mpsctl: mpsd at " << options_.server << " went away while following job " << job_id
         << " and did not come back within " << absl::FormatDuration(options_.reconnect_timeout)
         << " (--reconnect-timeout)\n";
    if (printer.last_seq() > 0) {
      err_ << "mpsctl: job " << job_id << " may still be running; resume with: mpsctl logs "
           << job_id << " --follow --after " << printer.last_seq() << "\n";
    }
    return kExitUnreachable;
  }
  if (!stopped && !status.ok()) {
    const int code = RpcFailed(status);
    if ((code == kExitUnreachable || code == kExitDaemonUnavailable) && printer.last_seq() > 0) {
      err_ << "mpsctl: job " << job_id << " may still be running; resume with: mpsctl logs "
           << job_id << " --follow --after " << printer.last_seq() << "\n";
    }
    return code;
  }
  if (!stopped) {
    // A stream asked for after the job's last event (`logs --after N` at the end) ends at
    // once: the job's own record says how it ended.
    v1::GetJobRequest get;
    get.set_job_id(job_id);
    v1::Job job;
    if (stub_->GetJob(UnaryContext().get(), get, &job).ok() && api::IsTerminal(job.state())) {
      if (!options_.json) {
        v1::StateChange change;
        change.set_state(job.state());
        change.set_failure_reason(job.failure_reason());
        change.set_message(job.message());
        out_ << FormatFinal(job_id, change, job.has_summary() ? &job.summary() : nullptr);
      }
      return job.state() == v1::Job::SUCCEEDED ? kExitOk : kExitFailed;
    }
    err_ << "mpsctl: the event stream of job " << job_id << " ended before the job did\n";
    return kExitFailed;
  }
  if (stop_seq > 0) return kExitOk;  // printing the stored events is all that was asked
  return printer.final_state() == v1::Job::SUCCEEDED ? kExitOk : kExitFailed;
}

}  // namespace mpsd::client
