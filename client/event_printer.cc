// Follow mode's output: live progress line on a terminal, plain lines in logs, or JSON lines.
#include "client/event_printer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/job_state.h"
#include "client/bench_table.h"
#include "client/format.h"
#include "client/predictions.h"

namespace mpsd::client {
namespace {

// Carriage return, then erase to the end of the line (ECMA-48 EL).
constexpr char kRedraw[] = "\r\x1b[K";

}  // namespace

int64_t NiceStepInterval(int64_t total_steps, int lines) {
  const int64_t raw = total_steps / std::max(1, lines);
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale >= raw) return m * scale;
    }
    if (scale > (int64_t{1} << 58)) return scale;
  }
}

EventPrinter::EventPrinter(std::string job_id, Options options, std::ostream& out)
    : job_id_(std::move(job_id)), options_(options), out_(out) {}

void EventPrinter::Print(const v1::JobEvent& event) {
  if (event.has_heartbeat()) {
    if (options_.live && !options_.json) PrintHeartbeat(event.heartbeat());
    return;
  }
  if (progress_is_queue_) {  // the job moved on: the queue line goes
    ClearLive();
    progress_.clear();
    progress_is_queue_ = false;
  }
  last_seq_ = event.seq();
  if (options_.json) {
    out_ << ToJsonLine(event) << "\n" << std::flush;
    if (event.has_state() && api::IsTerminal(event.state().state())) {
      final_state_ = event.state().state();
    }
    return;
  }
  switch (event.payload_case()) {
    case v1::JobEvent::kStep:
      PrintStep(event.step());
      break;
    case v1::JobEvent::kEpoch:
      PrintLine(FormatEpoch(event.epoch()));
      break;
    case v1::JobEvent::kLog:
      PrintLine(FormatLog(event.log()));
      break;
    case v1::JobEvent::kSummary:
      summary_ = event.summary();  // shown with the terminal state that follows it
      break;
    case v1::JobEvent::kState:
      PrintState(event.state());
      break;
    case v1::JobEvent::kCheckpoint:
      PrintLine(FormatCheckpoint(event.checkpoint()));
      break;
    case v1::JobEvent::kBenchRow:
      PrintLine(FormatBenchRowLine(event.bench_row()));
      break;
    case v1::JobEvent::kPrediction:
      PrintLine(FormatPredictionLine(event.prediction()));
      break;
    case v1::JobEvent::kHeartbeat:  // handled above
    case v1::JobEvent::PAYLOAD_NOT_SET:
      break;
  }
}

void EventPrinter::PrintHeartbeat(const v1::Heartbeat& heartbeat) {
  if (heartbeat.state() != v1::Job::QUEUED || (!progress_.empty() && !progress_is_queue_)) return;
  progress_ = heartbeat.queue_position() > 0
                  ? absl::StrCat("queued, position ", heartbeat.queue_position())
                  : std::string("queued");
  progress_is_queue_ = true;
  DrawLive();
}

void EventPrinter::PrintStep(const v1::StepMetrics& step) {
  progress_ =
      FormatProgress(step, options_.total_epochs, /*with_eta=*/true, options_.step_accuracy);
  if (options_.live) {
    DrawLive();
    return;
  }
  if (step_every_ == 0) {
    step_every_ = options_.plain_step_every > 0 ? options_.plain_step_every
                  : step.total_steps() > 0      ? NiceStepInterval(step.total_steps(), 10)
                                                : 100;
  }
  if (step.step() % step_every_ == 0 || step.step() == step.total_steps()) {
    out_ << progress_ << "\n" << std::flush;
  }
}

void EventPrinter::PrintState(const v1::StateChange& state) {
  if (!api::IsTerminal(state.state())) {
    std::string line = absl::StrCat("job ", job_id_, " ", v1::Job::State_Name(state.state()));
    if (!state.message().empty()) absl::StrAppend(&line, ": ", state.message());
    PrintLine(line);
    return;
  }
  final_state_ = state.state();
  ClearLive();
  progress_.clear();  // nothing to redraw below the summary
  if (summary_ && summary_->bench_rows_size() > 0) {
    out_ << "\n"
         << FormatBenchRows({summary_->bench_rows().begin(), summary_->bench_rows().end()},
                            BenchFormat::kTable)
         << "\n";
  }
  out_ << FormatFinal(job_id_, state, summary_ ? &*summary_ : nullptr) << std::flush;
}

void EventPrinter::PrintLine(const std::string& line) {
  ClearLive();
  out_ << line << "\n";
  if (options_.live && !progress_.empty()) {
    DrawLive();
  } else {
    out_ << std::flush;
  }
}

void EventPrinter::DrawLive() {
  absl::string_view shown = progress_;
  // A line that wraps cannot be redrawn with '\r': drop whole fields from the end until it fits,
  // with one column spare (some terminals wrap when the last column is written).
  if (options_.width > 1 && shown.size() >= static_cast<size_t>(options_.width)) {
    shown = shown.substr(0, options_.width - 1);
    const size_t field_end = shown.rfind("  ");
    if (field_end != absl::string_view::npos && field_end > 0) shown = shown.substr(0, field_end);
  }
  out_ << kRedraw << shown << std::flush;
  live_shown_ = true;
}

void EventPrinter::ClearLive() {
  if (!live_shown_) return;
  out_ << kRedraw;
  live_shown_ = false;
}

void EventPrinter::Finish() {
  if (live_shown_) out_ << "\n" << std::flush;
  live_shown_ = false;
}

}  // namespace mpsd::client
