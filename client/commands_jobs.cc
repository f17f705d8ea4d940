// Job commands: submit, get, list, cancel, wait and logs (following a job: commands_follow.cc).
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "api/job_state.h"
#include "api/metadata.h"
#include "client/commands.h"
#include "client/format.h"
#include "client/job_file.h"
#include "google/protobuf/util/time_util.h"

namespace mpsd::client {
namespace {

// Most jobs ListJobs returns per page (the daemon's maximum).
constexpr int kMaxPageSize = 1000;

// "queued", "Running", "QUEUED,RUNNING" → states; an unknown name is an error naming it.
absl::StatusOr<std::vector<v1::Job::State>> ParseStates(const std::vector<std::string>& args) {
  std::vector<v1::Job::State> states;
  for (const std::string& arg : args) {
    for (absl::string_view name : absl::StrSplit(arg, ',', absl::SkipWhitespace())) {
      v1::Job::State state;
      const std::string upper = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name));
      if (upper == "EARLY_STOPPED") {
        // The STATE column shows it for a CANCELLED trial the sweep's scheduler stopped.
        return absl::InvalidArgumentError(
            absl::StrCat("--state: \"", name,
                         "\" is not a state but why a sweep's scheduler cancelled a trial; --state "
                         "cancelled lists those trials (STATE shows EARLY_STOPPED)"));
      }
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

// --since's "12h", "30m", "90s" (absl's durations) or "2d" (days, which people reach for
// first); an error naming the flag otherwise.
absl::StatusOr<absl::Duration> ParseSince(const std::string& text) {
  absl::Duration since;
  int64_t days = 0;
  const bool day_form =
      absl::EndsWith(text, "d") && absl::SimpleAtoi(text.substr(0, text.size() - 1), &days);
  if (day_form) {
    since = absl::Hours(24 * days);
  } else if (!absl::ParseDuration(text, &since)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--since: expected a duration such as 12h, 30m, 90s or 2d, got \"", text, "\""));
  }
  if (since < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--since: must not be negative");
  }
  return since;
}

// The first page's request for `mpsctl list`'s flags; an error naming the flag.
absl::StatusOr<v1::ListJobsRequest> ListRequest(const ListOptions& list) {
  absl::StatusOr<std::vector<v1::Job::State>> states = ParseStates(list.states);
  if (!states.ok()) return states.status();
  absl::StatusOr<v1::Job::Kind> kind = ParseKind(list.kind);
  if (!kind.ok()) return kind.status();
  v1::ListJobsRequest request;
  for (v1::Job::State state : *states) request.add_states(state);
  request.set_kind(*kind);
  request.set_name(list.name);
  for (const std::string& label : list.labels) {
    const size_t eq = label.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--label: expected KEY=VALUE, got \"", label, "\""));
    }
    (*request.mutable_labels())[label.substr(0, eq)] = label.substr(eq + 1);
  }
  if (!list.since.empty()) {
    absl::StatusOr<absl::Duration> since = ParseSince(list.since);
    if (!since.ok()) return since.status();
    *request.mutable_created_after() = google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
        absl::ToUnixMicros(absl::Now() - *since));
  }
  return request;
}

}  // namespace

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
  absl::StatusOr<v1::ListJobsRequest> selected = ListRequest(list);
  if (!selected.ok()) {
    err_ << "mpsctl: " << selected.status().message() << "\n";
    return kExitUsage;
  }
  v1::ListJobsRequest& request = *selected;
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
  } else if (job.state() == v1::Job::RUNNING && job.kind() == v1::Job::SWEEP) {
    // A sweep has no step of its own: its queued trials are cancelled, its running ones stop.
    out_ << "sweep " << job.id() << ": its queued trials are cancelled, its running ones stop at "
         << "their next step (watch it: mpsctl sweep " << job.id() << ")\n";
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

}  // namespace mpsd::client
