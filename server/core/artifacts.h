// A job's artifacts: the files under <state_dir>/artifacts/<job_id>/ (the finished model,
// checkpoints), listed with their SHA-256 and read by name, for ListArtifacts / GetArtifact.
// Names are checked so that no request reaches a file outside the job's directory.
#ifndef MPSD_SERVER_CORE_ARTIFACTS_H_
#define MPSD_SERVER_CORE_ARTIFACTS_H_

#include <cstdint>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Largest ArtifactChunk.data, bytes.
inline constexpr int64_t kArtifactChunkBytes = 1 << 20;

// The regular files under `job_dir`, recursively, sorted by name ('/'-separated relative
// paths), each with its size and SHA-256; files being written (*.tmp) and symbolic links are
// left out. An absent directory has none. Errors: INTERNAL naming the file that cannot be read.
// Reads every file whole (hashing): a few seconds for GiB of checkpoints.
absl::StatusOr<std::vector<mpsd::v1::Artifact>> ListArtifacts(const std::string& job_dir);

// The absolute path of artifact `name` of `job_dir`, after checking the name: INVALID_ARGUMENT
// ("name: ...") for an empty or absolute name, a ".." component, or one that resolves
// (following symbolic links) outside `job_dir`; NOT_FOUND when no such regular file exists.
absl::StatusOr<std::string> ResolveArtifact(const std::string& job_dir, absl::string_view name);

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_ARTIFACTS_H_
