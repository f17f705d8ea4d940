// Tests server/core/job_query.cc: ListJobs requests to queries, pages and their tokens.
#include "server/core/job_query.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

using mpsd::v1::Job;
using mpsd::v1::ListJobsRequest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Jobs "n", "n-1", … "1" (newest first), as Scheduler::List returns them.
std::vector<Job> JobsDown(int n, int count) {
  std::vector<Job> jobs;
  for (int id = n; id > n - count && id > 0; --id) jobs.emplace_back().set_id(absl::StrCat(id));
  return jobs;
}

TEST(JobQueryTest, PageSizeDefaultsAndIsCapped) {
  ListJobsRequest request;
  EXPECT_EQ(QueryForPage(request)->limit, kDefaultPageSize + 1);
  request.set_page_size(7);
  EXPECT_EQ(QueryForPage(request)->limit, 8);
  request.set_page_size(1 << 30);
  EXPECT_EQ(QueryForPage(request)->limit, kMaxPageSize + 1);
  request.set_page_size(-1);
  absl::StatusOr<JobQuery> query = QueryForPage(request);
  EXPECT_EQ(query.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(query.status().message()), HasSubstr("page_size: must be >= 0"));
}

TEST(JobQueryTest, FiltersOnStatesAndKind) {
  ListJobsRequest request;
  request.add_states(Job::QUEUED);
  request.add_states(Job::RUNNING);
  request.set_kind(Job::TRAIN_JOB);
  absl::StatusOr<JobQuery> query = QueryForPage(request);
  ASSERT_TRUE(query.ok()) << query.status();
  Job job;
  job.set_kind(Job::TRAIN_JOB);
  job.set_state(Job::RUNNING);
  EXPECT_TRUE(query->Matches(job));
  job.set_state(Job::SUCCEEDED);
  EXPECT_FALSE(query->Matches(job));
  job.set_state(Job::QUEUED);
  job.set_kind(Job::BENCH_JOB);
  EXPECT_FALSE(query->Matches(job));
  EXPECT_TRUE(JobQuery().Matches(job));  // no filter
}

// proto3 keeps enum numbers it does not know; such a filter answered an empty list, which
// reads as "no such jobs". It is refused, naming the field.
TEST(JobQueryTest, UnknownStatesAndKindsAreInvalidArgument) {
  ListJobsRequest request;
  request.add_states(Job::QUEUED);
  request.add_states(static_cast<Job::State>(99));
  absl::StatusOr<JobQuery> query = QueryForPage(request);
  EXPECT_EQ(query.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(query.status().message()), HasSubstr("states[1]: unknown state 99"));
  request.clear_states();
  request.set_kind(static_cast<Job::Kind>(-3));
  query = QueryForPage(request);
  EXPECT_EQ(query.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(query.status().message()), HasSubstr("kind: unknown kind -3"));
}

TEST(JobQueryTest, TokenContinuesBelowTheLastJobOfThePage) {
  ListJobsRequest request;
  request.set_page_size(2);
  request.add_states(Job::QUEUED);
  mpsd::v1::ListJobsResponse page = PageFrom(request, JobsDown(9, 3));
  ASSERT_EQ(page.jobs_size(), 2);
  EXPECT_EQ(page.jobs(1).id(), "8");
  ASSERT_FALSE(page.next_page_token().empty());

  request.set_page_token(page.next_page_token());
  absl::StatusOr<JobQuery> next = QueryForPage(request);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->before_id, 8);
  EXPECT_THAT(next->states, ElementsAre(Job::QUEUED));

  // The same states in another order and repeated are the same filter.
  request.clear_states();
  request.add_states(Job::QUEUED);
  request.add_states(Job::QUEUED);
  EXPECT_TRUE(QueryForPage(request).ok());
}

TEST(JobQueryTest, LastPageHasNoToken) {
  ListJobsRequest request;
  request.set_page_size(3);
  mpsd::v1::ListJobsResponse page = PageFrom(request, JobsDown(3, 3));
  EXPECT_EQ(page.jobs_size(), 3);
  EXPECT_TRUE(page.next_page_token().empty());
  EXPECT_TRUE(PageFrom(request, {}).next_page_token().empty());
}

TEST(JobQueryTest, TokenOfAnotherFilterOrGarbageIsInvalidArgument) {
  ListJobsRequest request;
  request.set_page_size(1);
  request.add_states(Job::CANCELLED);
  const std::string token = PageFrom(request, JobsDown(5, 2)).next_page_token();
  ASSERT_FALSE(token.empty());

  ListJobsRequest other;
  other.set_page_token(token);
  absl::StatusOr<JobQuery> query = QueryForPage(other);
  EXPECT_EQ(query.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(query.status().message()), HasSubstr("page_token: issued for other"));
  other.add_states(Job::CANCELLED);
  other.set_kind(Job::TRAIN_JOB);
  EXPECT_EQ(QueryForPage(other).status().code(), absl::StatusCode::kInvalidArgument);

  for (const std::string& garbage : {std::string("x"), std::string("!!"), token + "AA"}) {
    other.set_page_token(garbage);
    query = QueryForPage(other);
    EXPECT_EQ(query.status().code(), absl::StatusCode::kInvalidArgument) << garbage;
    EXPECT_THAT(std::string(query.status().message()), HasSubstr("page_token: ")) << garbage;
  }
}

}  // namespace
}  // namespace mpsd::server
