// AttemptMarks: which events a later attempt of the same steps or epochs superseded.
#include "server/core/attempts.h"

#include <algorithm>

namespace mpsd::server {

std::optional<SourceX> SourceXOf(const mpsd::v1::JobEvent& event) {
  if (event.has_step()) return SourceX{SourceX::Source::kStep, event.step().step()};
  if (event.has_epoch()) return SourceX{SourceX::Source::kEpoch, event.epoch().epoch()};
  return std::nullopt;
}

bool AttemptMarks::Add(const mpsd::v1::JobEvent& event) {
  const std::optional<SourceX> at = SourceXOf(event);
  if (!at) return false;
  const int i = Index(at->source);
  const bool back = last_x_[i] > 0 && at->x <= last_x_[i];
  last_x_[i] = at->x;
  if (!back) return false;
  std::vector<Mark>& marks = marks_[i];
  marks.push_back({event.seq(), at->x, at->x});
  for (size_t k = marks.size() - 1; k-- > 0;) {
    marks[k].suffix_min_x = std::min(marks[k].x, marks[k + 1].suffix_min_x);
  }
  return true;
}

bool AttemptMarks::Superseded(const mpsd::v1::JobEvent& event) const {
  const std::optional<SourceX> at = SourceXOf(event);
  if (!at) return false;
  const std::vector<Mark>& marks = marks_[Index(at->source)];
  // The first mark after the event: it and the later ones are the attempts that followed.
  auto later = std::upper_bound(marks.begin(), marks.end(), event.seq(),
                                [](int64_t seq, const Mark& mark) { return seq < mark.seq; });
  return later != marks.end() && later->suffix_min_x <= at->x;
}

}  // namespace mpsd::server
