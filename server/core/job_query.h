// ListJobs requests: which jobs a page asks for (states, kind, where the page starts, how many),
// and the opaque page tokens that carry a listing from one page to the next.
#ifndef MPSD_SERVER_CORE_JOB_QUERY_H_
#define MPSD_SERVER_CORE_JOB_QUERY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Page sizes of ListJobs: the default for page_size 0, and the most one page holds.
inline constexpr int kDefaultPageSize = 100;
inline constexpr int kMaxPageSize = 1000;

// A selection of jobs, newest (highest id) first. Plain value; thread-compatible.
struct JobQuery {
  // Jobs in one of these states; empty = any state.
  std::vector<mpsd::v1::Job::State> states;
  // KIND_UNSPECIFIED = any kind.
  mpsd::v1::Job::Kind kind = mpsd::v1::Job::KIND_UNSPECIFIED;
  // fnmatch glob on spec.name; empty = any name.
  std::string name_glob;
  // Labels every selected job carries with these values.
  std::map<std::string, std::string> labels;
  // Only jobs created at or after this, unix microseconds; 0 = any.
  int64_t created_after_us = 0;
  // Only jobs whose numeric id is below this; 0 = no bound (start at the newest job).
  int64_t before_id = 0;
  // At most this many jobs (>= 1).
  int limit = kDefaultPageSize;

  // True if `job` passes the state, kind, name, label and time filters (before_id and limit
  // are not checked).
  bool Matches(const mpsd::v1::Job& job) const;
};

// The query for one page of `request`, asking for one job more than the page holds so that
// the caller can tell whether a next page exists. Errors (INVALID_ARGUMENT, naming the field):
// a negative page_size; a page_token that does not decode, or that was issued for other
// states, kind, name, labels or created_after.
absl::StatusOr<JobQuery> QueryForPage(const mpsd::v1::ListJobsRequest& request);

// The response to `request` from the jobs its query selected (newest first, at most the
// query's limit): the first page_size of them, and a next_page_token if there were more.
mpsd::v1::ListJobsResponse PageFrom(const mpsd::v1::ListJobsRequest& request,
                                    std::vector<mpsd::v1::Job> jobs);

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_JOB_QUERY_H_
