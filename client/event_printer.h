// Follow mode: turns a job's event stream into what `mpsctl submit --follow` and `mpsctl logs`
// print, either for people (a live progress line, epoch and log lines, one line per BenchJob row
// as it arrives and the bench table before the final summary) or as
// one JSON object per event. Heartbeats (seq 0) are not events of the job: they are never
// printed, except that on a terminal the live line of a queued job shows its place in the
// queue ("queued, position 3").
#ifndef MPSD_CLIENT_EVENT_PRINTER_H_
#define MPSD_CLIENT_EVENT_PRINTER_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::client {

// Not thread-safe: one stream, one thread. Writes to and flushes the borrowed `out` after every
// line, so that `| tee` and `| grep` see lines as they happen.
class EventPrinter {
 public:
  struct Options {
    // Every event as one line of protobuf's JSON mapping, nothing else.
    bool json = false;
    // `out` is a terminal: the progress line is redrawn in place ('\r', erase to end of line),
    // and other lines are printed above it.
    bool live = false;
    // Terminal columns; the live line is cut to fit so that '\r' can redraw it. 0: no limit.
    int width = 0;
    // Epochs the job asks for, for "epoch 1/3"; 0 when unknown.
    int total_epochs = 0;
    // Steps carry an accuracy (false for TrainJob.task regression: HasStepAccuracy).
    bool step_accuracy = true;
    // When not live: print a progress line every this many steps (and the job's last step).
    // 0 chooses about ten lines per job (a round number of steps: 1, 2, 5, 10, 20, 50, ...).
    int64_t plain_step_every = 0;
  };

  EventPrinter(std::string job_id, Options options, std::ostream& out);

  void Print(const v1::JobEvent& event);
  // Ends the output: a live progress line left on screen gets its newline. Called last, and
  // before a note on stderr (a reconnect); printing may go on after it.
  void Finish();

  // The terminal state (SUCCEEDED, FAILED, CANCELLED, INTERRUPTED) once its event was printed.
  std::optional<v1::Job::State> final_state() const { return final_state_; }
  // seq of the last event printed (heartbeats have none); 0 before the first.
  int64_t last_seq() const { return last_seq_; }

 private:
  void PrintHeartbeat(const v1::Heartbeat& heartbeat);
  void PrintStep(const v1::StepMetrics& step);
  void PrintState(const v1::StateChange& state);
  // A whole line above the live progress line.
  void PrintLine(const std::string& line);
  void DrawLive();
  void ClearLive();

  // Constant after construction.
  const std::string job_id_;
  const Options options_;
  std::ostream& out_;

  std::optional<v1::Job::State> final_state_;
  int64_t last_seq_ = 0;
  int64_t step_every_ = 0;          // when not live; chosen at the first step
  std::string progress_;            // the newest progress line, empty before the first step
  bool progress_is_queue_ = false;  // progress_ is "queued, position N", not a step
  bool live_shown_ = false;         // progress_ is on screen with the cursor at its end
  std::optional<v1::JobSummary> summary_;
};

// The round step interval that gives about `lines` progress lines over `total_steps`:
// NiceStepInterval(938, 10) == 100, NiceStepInterval(32, 10) == 5. At least 1.
int64_t NiceStepInterval(int64_t total_steps, int lines);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_EVENT_PRINTER_H_
