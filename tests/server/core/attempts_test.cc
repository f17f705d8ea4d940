// Tests of server/core/attempts.h: which events of a resumed job a later attempt superseded.
#include "server/core/attempts.h"

#include <vector>

#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

using mpsd::v1::JobEvent;

JobEvent Step(int64_t seq, int64_t step) {
  JobEvent event;
  event.set_seq(seq);
  event.mutable_step()->set_step(step);
  return event;
}

JobEvent Epoch(int64_t seq, int32_t epoch) {
  JobEvent event;
  event.set_seq(seq);
  event.mutable_epoch()->set_epoch(epoch);
  return event;
}

// Steps 1..6 and epochs 1..2, a resume from step 3 (epoch 1's checkpoint): steps 4..7 and
// epoch 2 again; then a second resume from step 5. The latest attempt of every step and epoch
// survives, nothing else.
TEST(AttemptMarksTest, TheLatestAttemptOfEachStepAndEpochSurvives) {
  const std::vector<JobEvent> events = {
      Step(1, 1), Step(2, 2), Step(3, 3), Epoch(4, 1), Step(5, 4), Step(6, 5), Step(7, 6),
      Epoch(8, 2),                                             // First attempt.
      Step(9, 4), Step(10, 5), Step(11, 6), Epoch(12, 2), Step(13, 7),  // Second.
      Step(14, 6), Step(15, 7), Step(16, 8)};                  // Third, from step 5.
  AttemptMarks marks;
  std::vector<bool> starts;
  for (const JobEvent& e : events) starts.push_back(marks.Add(e));
  EXPECT_EQ(starts, (std::vector<bool>{false, false, false, false, false, false, false, false,
                                       true, false, false, true, false, true, false, false}));
  std::vector<int64_t> kept_steps, kept_epochs;
  for (const JobEvent& e : events) {
    if (marks.Superseded(e)) continue;
    (e.has_step() ? kept_steps : kept_epochs).push_back(e.has_step() ? e.step().step()
                                                                    : e.epoch().epoch());
  }
  EXPECT_EQ(kept_steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(kept_epochs, (std::vector<int64_t>{1, 2}));
  // Step 5 of the second attempt (seq 10) stays; its step 6 (seq 11) is the third's now.
  EXPECT_FALSE(marks.Superseded(events[9]));
  EXPECT_TRUE(marks.Superseded(events[10]));
  EXPECT_EQ(marks.last_x(SourceX::Source::kStep), 8);
  JobEvent log;
  log.set_seq(17);
  log.mutable_log()->set_text("not a step");
  EXPECT_FALSE(marks.Add(log));
  EXPECT_FALSE(marks.Superseded(log));
}

}  // namespace
}  // namespace mpsd::server
