// SHA-256 of a file, as the daemon lists its artifacts (Artifact.sha256, ArtifactChunk.sha256)
// and as mpsctl checks what it downloaded: one function, so that both sides hash alike.
#ifndef MPSD_API_SHA256_H_
#define MPSD_API_SHA256_H_

#include <string>

#include "absl/status/statusor.h"

namespace mpsd::api {

// The lowercase hex SHA-256 (64 digits) of the bytes of the file at `path`, read whole in 64 KiB
// pieces (OpenSSL's EVP digest). Errors: INTERNAL "cannot read PATH: <reason>" when the file
// cannot be opened (missing, unreadable, a directory) or a read fails part-way; INTERNAL when
// OpenSSL has no SHA-256. Reads only; thread-safe.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

}  // namespace mpsd::api

#endif  // MPSD_API_SHA256_H_
