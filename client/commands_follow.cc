// Following a job's events (submit --follow, logs): the stream, its watchdog, reconnecting.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/job_state.h"
#include "api/status.h"
#include "client/commands.h"
#include "client/event_printer.h"
#include "client/format.h"
#include "client/reconnect.h"

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

}  // namespace

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
  const StreamEnd end = StreamResuming(job_id, after_seq, stop_seq, printer);
  printer.Finish();
  return StreamExitCode(job_id, stop_seq, printer, end);
}

Commands::StreamEnd Commands::StreamResuming(const std::string& job_id, int64_t after_seq,
                                             int64_t stop_seq, EventPrinter& printer) {
  const absl::Duration silence = 2 * HeartbeatInterval() + absl::Seconds(5);
  StreamEnd end;
  bool connected = false;
  ReconnectPolicy reconnect(options_.reconnect_timeout);
  for (int attempt = 0;; ++attempt) {
    bool received = false, went_silent = false;
    const int64_t from = std::max(after_seq, printer.last_seq());
    end.status = StreamOnce(job_id, from, stop_seq, silence, /*wait_for_ready=*/attempt > 0,
                            printer, end.stopped, received, went_silent);
    const grpc::Status& status = end.status;
    if (received) {
      connected = true;
      reconnect.Progressed();
    }
    // stored_only (not following): the daemon sent what it has stored. Events it has not
    // stored yet come within milliseconds, unless its disk is full: a short wait, then what
    // is there is the answer.
    if (!end.stopped && stop_seq > 0 && status.ok() && !went_silent) {
      if (absl::Now() - reconnect.last_progress() < absl::Seconds(2)) {
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      end.stopped = true;
      err_ << "mpsctl: job " << job_id << "'s events after seq "
           << std::max(after_seq, printer.last_seq()) << " are not stored yet\n";
    }
    if (end.stopped || (status.ok() && !went_silent)) return end;
    // Reconnect only to a daemon that answered once: a first call that cannot connect is
    // reported as unreachable at once, as every other command does.
    // UNKNOWN too: how a stream cut in the middle of a message can end.
    const bool retryable = went_silent || ReconnectPolicy::Broke(status) ||
                           status.error_code() == grpc::StatusCode::UNKNOWN;
    if (!connected || !retryable || options_.reconnect_timeout <= absl::ZeroDuration()) return end;
    if (reconnect.OutOfTime()) {
      end.gave_up = true;
      return end;
    }
    printer.Finish();  // ends a live progress line before the note
    err_ << "mpsctl: the event stream of job " << job_id << " "
         << (went_silent ? absl::StrCat("was silent for ", absl::FormatDuration(silence))
                         : absl::StrCat("broke (", status.error_message(), ")"))
         << "; reconnecting, resuming after seq " << std::max(after_seq, printer.last_seq())
         << "\n";
    ReconnectPolicy::Wait(attempt);
  }
}

int Commands::StreamExitCode(const std::string& job_id, int64_t stop_seq,
                             const EventPrinter& printer, const StreamEnd& end) {
  const auto resume_hint = [&] {
    if (printer.last_seq() <= 0) return;
    err_ << "mpsctl: job " << job_id << " may still be running; resume with: mpsctl logs " << job_id
         << " --follow --after " << printer.last_seq() << "\n";
  };
  // Reconnecting ran out of time. A daemon that answers (UNAVAILABLE of its own: shutting down)
  // is reported as such; otherwise it went away, which is "cannot reach mpsd" (exit 2), as for
  // every other command, not the CANCELLED of mpsctl's own watchdog.
  const bool daemon_answered = end.status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                               api::MpsdErrorInfo(end.status).has_value();
  if (!end.stopped && end.gave_up && !daemon_answered) {
    err_ << "mpsctl: mpsd at " << options_.server << " went away while following job " << job_id
         << " and did not come back within " << absl::FormatDuration(options_.reconnect_timeout)
         << " (--reconnect-timeout)\n";
    resume_hint();
    return kExitUnreachable;
  }
  if (!end.stopped && !end.status.ok()) {
    const int code = RpcFailed(end.status);
    if (code == kExitUnreachable || code == kExitDaemonUnavailable) resume_hint();
    return code;
  }
  if (!end.stopped) return StreamEndedEarly(job_id);
  if (stop_seq > 0) return kExitOk;  // printing the stored events is all that was asked
  return printer.final_state() == v1::Job::SUCCEEDED ? kExitOk : kExitFailed;
}

int Commands::StreamEndedEarly(const std::string& job_id) {
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

}  // namespace mpsd::client
