// Who may do what over TCP: bearer tokens with roles, stored hashed in a YAML file (the tokens
// file), and the role each RPC needs. Transport-free: the gRPC listener (server/grpc/grpc_auth.h)
// and the HTTP listener both authenticate through a TokenStore and check with Authorize.
//
// The tokens file (`mpsd --tokens FILE`, default <state_dir>/tokens.yaml, mode 0600) is a YAML
// list of {name, role, sha256}: sha256 is the lowercase hex SHA-256 of the token's bytes, so
// the file never holds a token in clear. `mpsd token add|list|revoke` edit it through the
// functions at the end of this header.
#ifndef MPSD_SERVER_ACCESS_AUTH_H_
#define MPSD_SERVER_ACCESS_AUTH_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace mpsd::server {

// Each role may do what the one before it may, and more:
//   viewer:    get, list, stream events, device, models, status, metrics, health, reflection
//   submitter: viewer + submit, cancel the jobs it submitted, upload (its own uploads)
//   admin:     everything, cancel any job
enum class Role : int { kViewer = 1, kSubmitter = 2, kAdmin = 3 };

// "viewer", "submitter", "admin".
absl::string_view RoleName(Role role);

// The inverse of RoleName. INVALID_ARGUMENT naming the three roles otherwise.
absl::StatusOr<Role> ParseRole(absl::string_view name);

// An authenticated caller.
struct Principal {
  // The token's name (recorded as Job.submitted_by), or kLocalPrincipalName.
  std::string name;
  Role role = Role::kViewer;
};

// The unix socket's caller: the socket is mode 0600, so whoever connects is the daemon's user,
// and acts as admin.
inline constexpr absl::string_view kLocalPrincipalName = "local";
Principal LocalPrincipal();

// OK when `principal`'s role is at least `needed`; otherwise PERMISSION_DENIED naming the role
// needed and the token, e.g. "SubmitJob needs role submitter; token \"ci\" has viewer".
// `action` names what was attempted (an RPC's name, "/metrics").
absl::Status Authorize(const Principal& principal, Role needed, absl::string_view action);

// The role an RPC needs, by gRPC's full method name ("/mpsd.v1.JobService/SubmitJob"). Health
// checking and reflection need viewer; a method this table does not know needs admin, so a new
// RPC is closed until someone decides who may call it. CancelJob, DeleteArtifacts and the
// upload RPCs need submitter here; that a submitter may act only on its own jobs and uploads is
// checked by the handler, which knows the job (CanCancel; DeleteArtifacts' and the uploads' own
// checks).
Role RequiredRole(absl::string_view full_method);

// Whether `principal` may cancel a job submitted by `submitted_by`: admin always, a submitter
// only its own jobs. PERMISSION_DENIED otherwise, naming the role needed.
absl::Status CanCancel(const Principal& principal, absl::string_view submitted_by,
                       absl::string_view job_id);

// One entry of the tokens file.
struct TokenRecord {
  std::string name;  // [A-Za-z0-9._-], 1 to 64 characters, unique in the file.
  Role role = Role::kViewer;
  std::array<uint8_t, 32> sha256{};  // SHA-256 of the token.
};

// The tokens file, read at Open and re-read when it changes on disk (so that `mpsd token
// revoke` takes effect on the next call, without a restart).
//
// Thread-safe: Authenticate may be called from any number of threads at once.
class TokenStore {
 public:
  // Reads the tokens file at `path`. Errors name the file: NOT_FOUND when it does not exist;
  // FAILED_PRECONDITION when it is group- or world-accessible (what to run: chmod 600) or not
  // a regular file; INVALID_ARGUMENT for bad YAML, an entry without name/role/sha256, an
  // unknown role, a sha256 that is not 64 hex digits, a bad or duplicate name.
  static absl::StatusOr<std::unique_ptr<TokenStore>> Open(const std::string& path);

  // `bearer` is the value of an authorization header, "Bearer <token>" (the scheme matched
  // case-insensitively, as RFC 6750 section 2.1 and RFC 7235 say); a bare token, or any other
  // scheme, is UNAUTHENTICATED saying the expected form. Compares the token's SHA-256 with
  // every entry's in constant time (CRYPTO_memcmp, no early exit), so timing tells nothing
  // about which entry nor how much of a hash matched. UNAUTHENTICATED when empty, not a bearer
  // token, or matching no entry (unknown or revoked); also when the file has become unreadable or
  // invalid since Open (fail closed; the reason is logged once, never sent to the caller).
  // The messages never contain the token.
  absl::StatusOr<Principal> Authenticate(absl::string_view bearer) const;

  // The entries as last read.
  std::vector<TokenRecord> Records() const;

  const std::string& path() const { return path_; }

 private:
  struct FileId {
    dev_t device = 0;
    ino_t inode = 0;
    int64_t size = -1;
    int64_t mtime_ns = -1;
    int64_t ctime_ns = -1;  // Changes on chmod too.
    bool operator==(const FileId& other) const {
      return device == other.device && inode == other.inode && size == other.size &&
             mtime_ns == other.mtime_ns && ctime_ns == other.ctime_ns;
    }
  };

  static FileId FileIdOf(const struct stat& st);

  explicit TokenStore(std::string path) : path_(std::move(path)) {}

  // Re-reads the file if its identity (device, inode, size, mtime, ctime) changed since the last
  // read: one stat per call.
  void RefreshIfChanged() const ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const std::string path_;

  mutable absl::Mutex mu_;
  mutable FileId file_id_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<TokenRecord> records_ ABSL_GUARDED_BY(mu_);
  // Not OK while the file on disk is unusable: every Authenticate fails.
  mutable absl::Status file_status_ ABSL_GUARDED_BY(mu_);
};

// SHA-256 of `data` (OpenSSL), as bytes.
std::array<uint8_t, 32> Sha256(absl::string_view data);

// A new token: "mpsd_" + 64 hex digits of 32 random bytes from OpenSSL's RAND_bytes.
absl::StatusOr<std::string> GenerateToken();

// Adds a token named `name` with `role` to the tokens file at `path` (created, mode 0600, with
// its directory, if missing) and returns the token in clear: the only time it exists outside
// the caller. The file is rewritten through a temporary file and rename, so a reader never sees
// half of it; two edits at the same moment may lose one of them. ALREADY_EXISTS when the name
// is taken; INVALID_ARGUMENT for a bad name; Open's errors for an existing file.
absl::StatusOr<std::string> AddToken(const std::string& path, absl::string_view name, Role role);

// Removes the token named `name`. NOT_FOUND when there is none; Open's errors.
absl::Status RevokeToken(const std::string& path, absl::string_view name);

// For a daemon's first start with TCP: creates the tokens file at `tokens_path` with one admin
// token named "admin", and writes the token (and a newline) to `admin_token_path`, mode 0600.
// FAILED_PRECONDITION naming the file when either cannot be written; ALREADY_EXISTS when
// `tokens_path` exists.
absl::Status CreateTokensFileWithAdmin(const std::string& tokens_path,
                                       const std::string& admin_token_path);

}  // namespace mpsd::server

#endif  // MPSD_SERVER_ACCESS_AUTH_H_
