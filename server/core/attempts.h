// Attempts of a job: a job that resumed (restart_policy: resume after a daemon restart, from
// its newest checkpoint) reports the steps and epochs after that checkpoint again, so its event
// log holds two attempts of them. Readers show one value per step and per epoch, the latest
// attempt's: an event of a source (steps, or epochs) is superseded when a later event of the
// same source has an x (its step, or its epoch) at or below its own. The log itself keeps both.
// Used by the dashboard's series (server/http/series_cache.h); StreamEvents and `mpsctl logs`
// can use the same rule.
#ifndef MPSD_SERVER_CORE_ATTEMPTS_H_
#define MPSD_SERVER_CORE_ATTEMPTS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Where an event sits on its source's axis. Plain value.
struct SourceX {
  enum class Source { kStep, kEpoch };
  Source source;
  // The step (step events, 1-based across epochs) or the epoch (epoch events).
  int64_t x;
};

// The x a step event (its step) or an epoch event (its epoch) has; nullopt for other events.
std::optional<SourceX> SourceXOf(const mpsd::v1::JobEvent& event);

// The points where a job's events went back (an x at or below the previous x of its source),
// collected in seq order; Superseded answers for any event of the job whether a later attempt
// replaced it. Thread-compatible.
class AttemptMarks {
 public:
  // Feeds the next event (seq order). Returns true when it starts a new attempt.
  bool Add(const mpsd::v1::JobEvent& event);
  // Whether `event` (fed before, or to be fed, in seq order up to what was added) is
  // superseded by a later attempt added so far.
  bool Superseded(const mpsd::v1::JobEvent& event) const;
  // The last x added per source (0 before any).
  int64_t last_x(SourceX::Source source) const { return last_x_[Index(source)]; }
  bool empty() const { return marks_[0].empty() && marks_[1].empty(); }

 private:
  static int Index(SourceX::Source source) { return source == SourceX::Source::kStep ? 0 : 1; }
  struct Mark {
    int64_t seq;
    int64_t x;
    // The lowest x of this mark and every later one.
    int64_t suffix_min_x;
  };
  std::vector<Mark> marks_[2];
  int64_t last_x_[2] = {0, 0};
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_ATTEMPTS_H_
