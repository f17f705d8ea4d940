// Attempts of a job: a job that resumed (restart_policy: resume after a daemon restart, or a
// resume_from mid-run) reports the steps after its checkpoint again, so its event log holds two
// attempts of them. The one rule for which values survive, used by every reader that shows one
// value per step and epoch: the dashboard's series (server/http/series_cache.h), StreamEvents with
// latest_attempt_only (`mpsctl logs`), and the TensorBoard/CSV export and live writer
// (api/tensorboard/job_history.h).
//
// The rule: a step event whose step is at or below the newest step so far starts a new attempt
// (a mark: its seq, its step S and its epoch E). Every earlier event of a step >= S, and every
// earlier epoch event of an epoch >= E, is superseded by that attempt, whether or not the new
// attempt reaches it again: a value the latest attempt never reached does not linger (an epoch
// the crashed attempt finished after its last checkpoint is gone until the new attempt finishes
// it). Only steps start attempts. The log itself keeps every event.
#ifndef MPSD_API_ATTEMPTS_H_
#define MPSD_API_ATTEMPTS_H_

#include <cstdint>
#include <vector>

#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::api {

// Whether `event` is one the rule is about: a step or an epoch event.
inline bool IsStepOrEpoch(const mpsd::v1::JobEvent& event) {
  return event.has_step() || event.has_epoch();
}

// Where a new attempt started. Plain value.
struct AttemptStart {
  int64_t seq = 0;    // the step event's seq
  int64_t step = 0;   // its step (1-based, across epochs)
  int32_t epoch = 0;  // its epoch (1-based)
};

// The attempt starts of one job's events, fed in seq order; Superseded answers for any event of
// the job whether a later attempt (fed so far) replaced it. Thread-compatible.
class AttemptMarks {
 public:
  // Feeds the next event (seq order); other than step events are ignored. Returns true when it
  // starts a new attempt.
  bool Add(const mpsd::v1::JobEvent& event);
  // Whether `event` (a step or epoch event at or before what was added) is superseded by a
  // later attempt added so far. False for every other event.
  bool Superseded(const mpsd::v1::JobEvent& event) const;
  // The attempt starts so far, in seq order.
  const std::vector<AttemptStart>& starts() const { return starts_; }
  // The newest step added (0 before any).
  int64_t last_step() const { return last_step_; }

 private:
  std::vector<AttemptStart> starts_;
  // [i]: the lowest step and epoch of starts_[i] and every later start.
  std::vector<int64_t> suffix_min_step_;
  std::vector<int32_t> suffix_min_epoch_;
  int64_t last_step_ = 0;
};

}  // namespace mpsd::api

#endif  // MPSD_API_ATTEMPTS_H_
