// Tests for api/job_state.h.
#include "api/job_state.h"

#include <gtest/gtest.h>

namespace mpsd::api {
namespace {

using mpsd::v1::Job;

TEST(JobStateTest, FinishedStatesAreTerminal) {
  for (Job::State state : {Job::SUCCEEDED, Job::FAILED, Job::CANCELLED, Job::INTERRUPTED}) {
    EXPECT_TRUE(IsTerminal(state)) << Job::State_Name(state);
  }
}

TEST(JobStateTest, LiveStatesAreNot) {
  for (Job::State state : {Job::STATE_UNSPECIFIED, Job::QUEUED, Job::RUNNING}) {
    EXPECT_FALSE(IsTerminal(state)) << Job::State_Name(state);
  }
}

}  // namespace
}  // namespace mpsd::api
