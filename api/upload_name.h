// Uploads as jobs name them: `upload:NAME[/PATH]` (the caller's own upload NAME, or a path inside
// an uploaded folder) and `upload:@OWNER/NAME[/PATH]` (another submitter's; only an admin's jobs
// may read those). Shared by mpsctl (which leaves these values as they are instead of resolving
// them against the job file's directory) and the daemon (which turns them into paths under
// <state_dir>/uploads/<owner>/ before any check). Pure functions; thread-safe.
#ifndef MPSD_API_UPLOAD_NAME_H_
#define MPSD_API_UPLOAD_NAME_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::api {

inline constexpr absl::string_view kUploadPrefix = "upload:";
inline constexpr int kMaxUploadNameLength = 128;

// Whether `value` (a path field of a job spec) names an upload: it starts with "upload:".
bool IsUploadRef(absl::string_view value);

// OK for a name of 1 to kMaxUploadNameLength characters of [A-Za-z0-9._-] that does not start
// with '.' (so never ".", ".." nor a hidden file). INVALID_ARGUMENT otherwise, with an
// INVALID_FIELD cause naming `field` (api/error_cause.h).
absl::Status CheckUploadName(absl::string_view field, absl::string_view name);

// A parsed `upload:` value.
struct UploadRef {
  std::string owner;  // "" = the submitter of the job.
  std::string name;   // The upload's name.
  std::string path;   // Inside the upload, '/'-separated, without "." or ".."; "" = the upload.
};

// Parses `value` (which IsUploadRef). INVALID_ARGUMENT naming `field` (INVALID_FIELD) for a bad
// name or owner, an empty one, or a path with a ".." component.
absl::StatusOr<UploadRef> ParseUploadRef(absl::string_view field, absl::string_view value);

}  // namespace mpsd::api

#endif  // MPSD_API_UPLOAD_NAME_H_
