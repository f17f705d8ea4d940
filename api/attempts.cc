// AttemptMarks: which events a later attempt of the same steps superseded.
#include "api/attempts.h"

#include <algorithm>

namespace mpsd::api {

bool AttemptMarks::Add(const mpsd::v1::JobEvent& event) {
  if (!event.has_step()) return false;
  const int64_t step = event.step().step();
  const bool back = last_step_ > 0 && step <= last_step_;
  last_step_ = step;
  if (!back) return false;
  starts_.push_back({event.seq(), step, event.step().epoch()});
  suffix_min_step_.push_back(step);
  suffix_min_epoch_.push_back(event.step().epoch());
  for (size_t k = starts_.size() - 1; k-- > 0;) {
    suffix_min_step_[k] = std::min(starts_[k].step, suffix_min_step_[k + 1]);
    suffix_min_epoch_[k] = std::min(starts_[k].epoch, suffix_min_epoch_[k + 1]);
  }
  return true;
}

bool AttemptMarks::Superseded(const mpsd::v1::JobEvent& event) const {
  if (!event.has_step() && !event.has_epoch()) return false;
  // The first start after the event: it and the later ones are the attempts that followed.
  const auto later =
      std::upper_bound(starts_.begin(), starts_.end(), event.seq(),
                       [](int64_t seq, const AttemptStart& start) { return seq < start.seq; });
  if (later == starts_.end()) return false;
  const size_t i = static_cast<size_t>(later - starts_.begin());
  return event.has_step() ? suffix_min_step_[i] <= event.step().step()
                          : suffix_min_epoch_[i] <= event.epoch().epoch();
}

}  // namespace mpsd::api
