// ListJobs paging. A page token is web-safe base64 of "v1:<before_id>:<filter>", where <filter>
// spells the request's states and kind, so a token cannot silently continue another listing.
#include "server/core/job_query.h"

#include <fnmatch.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mpsd::server {
namespace {

using mpsd::v1::Job;
using mpsd::v1::ListJobsRequest;

constexpr char kTokenVersion[] = "v1";

int PageSize(const ListJobsRequest& request) {
  if (request.page_size() == 0) return kDefaultPageSize;
  return std::min(request.page_size(), kMaxPageSize);
}

// The request's filter in a canonical form: sorted distinct state numbers, the kind, and the
// name, labels (sorted) and created_after when set, each escaped so that no two filters spell
// the same.
std::string FilterKey(const ListJobsRequest& request) {
  std::vector<int> states(request.states().begin(), request.states().end());
  std::sort(states.begin(), states.end());
  states.erase(std::unique(states.begin(), states.end()), states.end());
  std::string key = absl::StrCat(absl::StrJoin(states, ","), "/", request.kind());
  if (!request.name().empty()) absl::StrAppend(&key, "/n=", absl::CEscape(request.name()));
  const std::map<std::string, std::string> labels(request.labels().begin(), request.labels().end());
  for (const auto& [k, v] : labels) {
    absl::StrAppend(&key, "/l=", absl::CEscape(k), "=", absl::CEscape(v));
  }
  if (request.has_created_after()) {
    absl::StrAppend(&key, "/t=", request.created_after().seconds(), ".",
                    request.created_after().nanos());
  }
  return key;
}

std::string MakeToken(const ListJobsRequest& request, int64_t before_id) {
  return absl::WebSafeBase64Escape(
      absl::StrCat(kTokenVersion, ":", before_id, ":", FilterKey(request)));
}

// The before_id a page token carries.
absl::StatusOr<int64_t> ParseToken(const ListJobsRequest& request) {
  const absl::Status bad = absl::InvalidArgumentError(
      "page_token: not a next_page_token from ListJobs (pass it back unchanged)");
  std::string text;
  if (!absl::WebSafeBase64Unescape(request.page_token(), &text)) return bad;
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits(':', 2));
  int64_t before_id = 0;
  if (parts.size() != 3 || parts[0] != kTokenVersion || !absl::SimpleAtoi(parts[1], &before_id) ||
      before_id < 1) {
    return bad;
  }
  if (parts[2] != FilterKey(request)) {
    return absl::InvalidArgumentError(
        "page_token: issued for other states, another kind, name, labels or created_after; "
        "send the same filter with "
        "every page, or start again without a token");
  }
  return before_id;
}

}  // namespace

bool JobQuery::Matches(const Job& job) const {
  if (kind != Job::KIND_UNSPECIFIED && job.kind() != kind) return false;
  if (!states.empty() && std::find(states.begin(), states.end(), job.state()) == states.end()) {
    return false;
  }
  if (!name_glob.empty() && fnmatch(name_glob.c_str(), job.spec().name().c_str(), 0) != 0) {
    return false;
  }
  for (const auto& [key, value] : labels) {
    auto it = job.spec().labels().find(key);
    if (it == job.spec().labels().end() || it->second != value) return false;
  }
  if (created_after_us > 0) {
    const int64_t created = job.created_at().seconds() * 1000000 + job.created_at().nanos() / 1000;
    if (created < created_after_us) return false;
  }
  return true;
}

absl::StatusOr<JobQuery> QueryForPage(const ListJobsRequest& request) {
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size: must be >= 0 (0 means ", kDefaultPageSize, "), got ", request.page_size()));
  }
  // proto3 keeps enum values it does not know: such a filter matched nothing and answered an
  // empty list, which reads as "no such jobs".
  for (int i = 0; i < request.states_size(); ++i) {
    if (!Job::State_IsValid(request.states(i))) {
      return absl::InvalidArgumentError(
          absl::StrCat("states[", i, "]: unknown state ", request.states(i)));
    }
  }
  if (!Job::Kind_IsValid(request.kind())) {
    return absl::InvalidArgumentError(absl::StrCat("kind: unknown kind ", request.kind()));
  }
  JobQuery query;
  for (int state : request.states()) query.states.push_back(static_cast<Job::State>(state));
  query.kind = request.kind();
  query.name_glob = request.name();
  query.labels.insert(request.labels().begin(), request.labels().end());
  if (request.has_created_after()) {
    query.created_after_us =
        request.created_after().seconds() * 1000000 + request.created_after().nanos() / 1000;
    if (query.created_after_us <= 0) query.created_after_us = 1;
  }
  query.limit = PageSize(request) + 1;
  if (!request.page_token().empty()) {
    absl::StatusOr<int64_t> before_id = ParseToken(request);
    if (!before_id.ok()) return before_id.status();
    query.before_id = *before_id;
  }
  return query;
}

mpsd::v1::ListJobsResponse PageFrom(const ListJobsRequest& request, std::vector<Job> jobs) {
  const size_t page_size = static_cast<size_t>(PageSize(request));
  mpsd::v1::ListJobsResponse response;
  const bool more = jobs.size() > page_size;
  if (more) jobs.resize(page_size);
  for (Job& job : jobs) *response.add_jobs() = std::move(job);
  int64_t last_id = 0;
  if (more && absl::SimpleAtoi(response.jobs(response.jobs_size() - 1).id(), &last_id)) {
    response.set_next_page_token(MakeToken(request, last_id));
  }
  return response;
}

}  // namespace mpsd::server
