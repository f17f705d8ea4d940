// Job ids: decimal row ids.
#include "api/job_id.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace mpsd::api {

bool IsJobId(absl::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

std::optional<int64_t> ParseJobId(absl::string_view id) {
  // 19 digits hold every positive int64; SimpleAtoi rejects the larger ones.
  if (id.size() > 19 || !IsJobId(id) || id[0] == '0') return std::nullopt;
  int64_t row_id = 0;
  if (!absl::SimpleAtoi(id, &row_id)) return std::nullopt;
  return row_id;
}

}  // namespace mpsd::api
