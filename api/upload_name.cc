// upload: references: character checks and splitting at '/'.
#include "api/upload_name.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/error_cause.h"

namespace mpsd::api {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return WithInvalidField(absl::InvalidArgumentError(absl::StrCat(field, ": ", message)), field);
}

}  // namespace

bool IsUploadRef(absl::string_view value) { return absl::StartsWith(value, kUploadPrefix); }

absl::Status CheckUploadName(absl::string_view field, absl::string_view name) {
  if (name.empty() || name.size() > static_cast<size_t>(kMaxUploadNameLength)) {
    return Invalid(field, absl::StrCat("an upload's name has 1 to ", kMaxUploadNameLength,
                                       " characters, got ", name.size()));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return Invalid(field, absl::StrCat("\"", absl::CHexEscape(name),
                                         "\" is not an upload name (letters, digits, '.', '_' "
                                         "and '-' only)"));
    }
  }
  if (name.front() == '.') {
    return Invalid(field, absl::StrCat("\"", name,
                                       "\" is not an upload name (it may not start "
                                       "with '.')"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UploadRef> ParseUploadRef(absl::string_view field, absl::string_view value) {
  absl::string_view rest = value.substr(std::min(value.size(), kUploadPrefix.size()));
  UploadRef ref;
  if (absl::ConsumePrefix(&rest, "@")) {
    const size_t slash = rest.find('/');
    ref.owner = std::string(rest.substr(0, slash));
    rest = slash == absl::string_view::npos ? absl::string_view() : rest.substr(slash + 1);
    if (absl::Status s = CheckUploadName(field, ref.owner); !s.ok()) {
      return Invalid(field, absl::StrCat("\"", absl::CHexEscape(value),
                                         "\": upload:@OWNER/NAME "
                                         "needs a submitter's name as OWNER"));
    }
  }
  const size_t slash = rest.find('/');
  ref.name = std::string(rest.substr(0, slash));
  if (absl::Status s = CheckUploadName(field, ref.name); !s.ok()) {
    return Invalid(field, absl::StrCat("\"", absl::CHexEscape(value),
                                       "\": expected upload:NAME "
                                       "or upload:NAME/PATH, where NAME is what mpsctl upload "
                                       "named it (",
                                       s.message(), ")"));
  }
  if (slash != absl::string_view::npos) {
    std::vector<absl::string_view> parts;
    for (absl::string_view part : absl::StrSplit(rest.substr(slash + 1), '/')) {
      if (part.empty() || part == ".") continue;
      if (part == "..") {
        return Invalid(field, absl::StrCat("\"", absl::CHexEscape(value),
                                           "\": a path inside "
                                           "an upload may not contain \"..\""));
      }
      parts.push_back(part);
    }
    ref.path = absl::StrJoin(parts, "/");
  }
  return ref;
}

}  // namespace mpsd::api
