// Tests of api/attempts.h: which events of a resumed job a later attempt superseded.
#include "api/attempts.h"

#include <vector>

#include "gtest/gtest.h"

namespace mpsd::api {
namespace {

using mpsd::v1::JobEvent;

// Three steps per epoch: step 1..3 are epoch 1, 4..6 epoch 2, 7..9 epoch 3.
JobEvent Step(int64_t seq, int64_t step) {
  JobEvent event;
  event.set_seq(seq);
  event.mutable_step()->set_step(step);
  event.mutable_step()->set_epoch(static_cast<int32_t>((step - 1) / 3 + 1));
  return event;
}

JobEvent Epoch(int64_t seq, int32_t epoch) {
  JobEvent event;
  event.set_seq(seq);
  event.mutable_epoch()->set_epoch(epoch);
  return event;
}

std::vector<int64_t> Kept(const AttemptMarks& marks, const std::vector<JobEvent>& events,
                          bool steps) {
  std::vector<int64_t> kept;
  for (const JobEvent& e : events) {
    if (marks.Superseded(e) || e.has_step() != steps) continue;
    kept.push_back(steps ? e.step().step() : e.epoch().epoch());
  }
  return kept;
}

// Steps 1..6 and epochs 1..2 (a crash before epoch 2's checkpoint was written), a resume from
// epoch 1's checkpoint: steps 4..6 and epoch 2 again, step 7; then a mid-epoch resume from
// step 5: steps 6..8. The latest attempt of every step and epoch survives, nothing else.
TEST(AttemptMarksTest, TheLatestAttemptOfEachStepAndEpochSurvives) {
  const std::vector<JobEvent> events = {
      Step(1, 1),  Step(2, 2),  Step(3, 3),  Epoch(4, 1),  Step(5, 4),
      Step(6, 5),  Step(7, 6),  Epoch(8, 2),                             // First attempt.
      Step(9, 4),  Step(10, 5), Step(11, 6), Epoch(12, 2), Step(13, 7),  // Second.
      Step(14, 6), Step(15, 7), Step(16, 8)};                            // Third, from step 5.
  AttemptMarks marks;
  std::vector<bool> starts;
  for (const JobEvent& e : events) starts.push_back(marks.Add(e));
  EXPECT_EQ(starts, (std::vector<bool>{false, false, false, false, false, false, false, false, true,
                                       false, false, false, false, true, false, false}));
  ASSERT_EQ(marks.starts().size(), 2u);
  EXPECT_EQ(marks.starts()[1].seq, 14);
  EXPECT_EQ(marks.starts()[1].step, 6);
  EXPECT_EQ(marks.starts()[1].epoch, 2);
  EXPECT_EQ(Kept(marks, events, /*steps=*/true), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  // Epoch 2 of the second attempt ended before the third attempt went back into epoch 2: gone
  // until an attempt finishes epoch 2 again.
  EXPECT_EQ(Kept(marks, events, /*steps=*/false), (std::vector<int64_t>{1}));
  // Step 5 of the second attempt (seq 10) stays; its step 6 (seq 11) is the third's now.
  EXPECT_FALSE(marks.Superseded(events[9]));
  EXPECT_TRUE(marks.Superseded(events[10]));
  EXPECT_EQ(marks.last_step(), 8);
  JobEvent log;
  log.set_seq(17);
  log.mutable_log()->set_text("not a step");
  EXPECT_FALSE(marks.Add(log));
  EXPECT_FALSE(marks.Superseded(log));
}

// The first attempt finished epoch 2 after the checkpoint the second resumed from: that epoch
// is superseded at once, not when (or if) the second attempt reaches it.
TEST(AttemptMarksTest, AnEpochTheNewAttemptHasNotReachedIsGoneAtOnce) {
  const std::vector<JobEvent> events = {Step(1, 1),  Step(2, 2),  Step(3, 3),
                                        Epoch(4, 1), Step(5, 4),  Step(6, 5),
                                        Step(7, 6),  Epoch(8, 2), Step(9, 4)};
  AttemptMarks marks;
  for (const JobEvent& e : events) marks.Add(e);
  EXPECT_EQ(Kept(marks, events, /*steps=*/false), (std::vector<int64_t>{1}));
  EXPECT_EQ(Kept(marks, events, /*steps=*/true), (std::vector<int64_t>{1, 2, 3, 4}));
}

// A job that never went back has no attempt starts, and nothing is superseded.
TEST(AttemptMarksTest, OneAttemptSupersedesNothing) {
  AttemptMarks marks;
  const std::vector<JobEvent> events = {Step(1, 1), Step(2, 2), Epoch(3, 1), Step(4, 3)};
  for (const JobEvent& e : events) EXPECT_FALSE(marks.Add(e));
  EXPECT_TRUE(marks.starts().empty());
  for (const JobEvent& e : events) EXPECT_FALSE(marks.Superseded(e));
}

}  // namespace
}  // namespace mpsd::api
