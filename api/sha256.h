// SHA-256 of a file, as the daemon lists its artifacts (Artifact.sha256, ArtifactChunk.sha256)
// and as mpsctl checks what it downloaded: one function, so that both sides hash alike.
#ifndef MPSD_API_SHA256_H_
#define MPSD_API_SHA256_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::api {

// The lowercase hex SHA-256 (64 digits) of the bytes of the file at `path`, read whole in 64 KiB
// pieces (OpenSSL's EVP digest). Errors: INTERNAL "cannot read PATH: <reason>" when the file
// cannot be opened (missing, unreadable, a directory) or a read fails part-way; INTERNAL when
// OpenSSL has no SHA-256. Reads only; thread-safe.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

// SHA-256 of bytes given piece by piece (an upload as its chunks arrive). Not thread-safe; one
// owner. Aborts the process if OpenSSL has no SHA-256 (as no build of mpsd's can lack).
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;

  void Update(absl::string_view bytes);
  // The lowercase hex digest of everything given since construction or the last Finish, which
  // starts a new digest.
  std::string Finish();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

}  // namespace mpsd::api

#endif  // MPSD_API_SHA256_H_
