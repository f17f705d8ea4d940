// Tokens and roles: the tokens file (read, checked, re-read on change, rewritten atomically),
// constant-time token matching, and the role table of the RPCs.
#include "server/access/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "yaml-cpp/yaml.h"

namespace mpsd::server {
namespace {

constexpr absl::string_view kTokenPrefix = "mpsd_";

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  // The unix socket's caller's name: a token of that name would act as it (its jobs, cancels).
  if (name == kLocalPrincipalName) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::Status BadName(absl::string_view name) {
  return absl::InvalidArgumentError(absl::StrCat(
      "token name \"", name, "\": expected 1 to 64 of A-Z a-z 0-9 . _ -, other than \"",
      kLocalPrincipalName, "\" (the unix socket's caller)"));
}

// A file that anyone but its owner may open is refused: it lists who may run jobs.
absl::Status CheckPrivateFile(const std::string& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: mode %04o lets other users read or change the tokens; it must be 0600 "
                        "(chmod 600 %s)",
                        path, st.st_mode & 07777, path));
  }
  return absl::OkStatus();
}

std::string HexDigest(const std::array<uint8_t, 32>& digest) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

absl::StatusOr<std::array<uint8_t, 32>> ParseDigest(const std::string& hex,
                                                    const std::string& where) {
  bool hex_only = hex.size() == 64;
  for (char c : hex) hex_only = hex_only && absl::ascii_isxdigit(static_cast<unsigned char>(c));
  if (!hex_only) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".sha256: expected 64 hex digits"));
  }
  const std::string bytes = absl::HexStringToBytes(hex);
  std::array<uint8_t, 32> digest{};
  std::memcpy(digest.data(), bytes.data(), digest.size());
  return digest;
}

absl::StatusOr<std::string> ScalarField(const YAML::Node& entry, const char* key,
                                        const std::string& where) {
  const YAML::Node value = entry[key];
  if (!value || !value.IsScalar()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", key, ": missing (expected a string)"));
  }
  return value.Scalar();
}

absl::StatusOr<TokenRecord> ParseEntry(const YAML::Node& entry, const std::string& where) {
  if (!entry.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected a mapping {name, role, sha256}"));
  }
  for (const auto& field : entry) {
    const std::string key = field.first.Scalar();
    if (key != "name" && key != "role" && key != "sha256") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".", key, ": unknown key (known: name, role, sha256)"));
    }
  }
  TokenRecord record;
  absl::StatusOr<std::string> name = ScalarField(entry, "name", where);
  if (!name.ok()) return name.status();
  if (!ValidName(*name)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".name: ", BadName(*name).message()));
  }
  record.name = *name;
  absl::StatusOr<std::string> role_name = ScalarField(entry, "role", where);
  if (!role_name.ok()) return role_name.status();
  absl::StatusOr<Role> role = ParseRole(*role_name);
  if (!role.ok())
    return absl::InvalidArgumentError(absl::StrCat(where, ".role: ", role.status().message()));
  record.role = *role;
  absl::StatusOr<std::string> hex = ScalarField(entry, "sha256", where);
  if (!hex.ok()) return hex.status();
  absl::StatusOr<std::array<uint8_t, 32>> digest = ParseDigest(*hex, where);
  if (!digest.ok()) return digest.status();
  record.sha256 = *digest;
  return record;
}

// Parses the text of a tokens file; `path` is for messages.
absl::StatusOr<std::vector<TokenRecord>> ParseTokens(const std::string& text,
                                                     const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  std::vector<TokenRecord> records;
  if (root.IsNull()) return records;  // An empty file: no tokens.
  if (!root.IsSequence()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a list of {name, role, sha256}"));
  }
  for (size_t i = 0; i < root.size(); ++i) {
    const std::string where = absl::StrCat(path, ": [", i, "]");
    absl::StatusOr<TokenRecord> record = ParseEntry(root[i], where);
    if (!record.ok()) return record.status();
    for (const TokenRecord& earlier : records) {
      if (earlier.name == record->name) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".name: \"", record->name, "\" appears twice"));
      }
    }
    records.push_back(*std::move(record));
  }
  return records;
}

struct ReadResult {
  std::vector<TokenRecord> records;
  struct stat st {};
};

// Opens, checks and parses the tokens file; the stat is of the file that was read.
absl::StatusOr<ReadResult> ReadTokensFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such tokens file"));
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(error)));
  }
  ReadResult result;
  if (fstat(fd, &result.st) != 0) {
    const int error = errno;
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(error)));
  }
  if (absl::Status status = CheckPrivateFile(path, result.st); !status.ok()) {
    close(fd);
    return status;
  }
  constexpr off_t kMaxBytes = 1 << 20;
  if (result.st.st_size > kMaxBytes) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 1 MiB"));
  }
  std::string text(static_cast<size_t>(result.st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(done);
  absl::StatusOr<std::vector<TokenRecord>> records = ParseTokens(text, path);
  if (!records.ok()) return records.status();
  result.records = *std::move(records);
  return result;
}

std::string Serialize(const std::vector<TokenRecord>& records) {
  YAML::Emitter out;
  out << YAML::BeginSeq;
  for (const TokenRecord& record : records) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << record.name << YAML::Key
        << "role" << YAML::Value << std::string(RoleName(record.role)) << YAML::Key << "sha256"
        << YAML::Value << HexDigest(record.sha256) << YAML::EndMap;
  }
  out << YAML::EndSeq;
  return absl::StrCat(
      "# mpsd tokens: who may call mpsd over TCP. Each entry is a token's name, its role\n"
      "# (viewer, submitter, admin) and the SHA-256 of the token; the tokens themselves are\n"
      "# not stored. Edit with `mpsd token add|list|revoke`. Must stay mode 0600.\n",
      records.empty() ? "[]" : out.c_str(), "\n");
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Writes `text` to `path` with mode 0600: a temporary file in the same directory, fsync, then
// rename over `path`. With `exclusive`, fails with ALREADY_EXISTS instead of replacing a file.
absl::Status WritePrivateFile(const std::string& path, absl::string_view text, bool exclusive) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) {
    std::error_code error;
    if (std::filesystem::create_directories(target.parent_path(), error)) {
      chmod(target.parent_path().c_str(), 0700);
    }
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create the directory of ", path, ": ", error.message()));
    }
  }
  const std::string temporary = absl::StrCat(path, ".tmp-", getpid());
  const int fd =
      open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(temporary, ": ", std::strerror(errno)));
  }
  fchmod(fd, 0600);  // Whatever the umask.
  absl::Status status = WriteAll(fd, text, temporary);
  if (status.ok() && fsync(fd) != 0) {
    status = absl::FailedPreconditionError(absl::StrCat(temporary, ": ", std::strerror(errno)));
  }
  close(fd);
  if (status.ok()) {
    // link() refuses an existing target, which rename() would replace.
    const int result =
        exclusive ? link(temporary.c_str(), path.c_str()) : rename(temporary.c_str(), path.c_str());
    if (result != 0) {
      status = errno == EEXIST
                   ? absl::AlreadyExistsError(absl::StrCat(path, ": already exists"))
                   : absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(errno)));
    }
  }
  unlink(temporary.c_str());  // After link(), or on failure; after rename() it is gone already.
  return status;
}

// The existing file's records; none when it does not exist.
absl::StatusOr<std::vector<TokenRecord>> RecordsOrNone(const std::string& path) {
  absl::StatusOr<ReadResult> read = ReadTokensFile(path);
  if (absl::IsNotFound(read.status())) return std::vector<TokenRecord>();
  if (!read.ok()) return read.status();
  return std::move(read->records);
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (Role role : {Role::kViewer, Role::kSubmitter, Role::kAdmin}) {
    if (name == RoleName(role)) return role;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role \"", name, "\" (expected viewer, submitter or admin)"));
}

Principal LocalPrincipal() { return Principal{std::string(kLocalPrincipalName), Role::kAdmin}; }

absl::Status Authorize(const Principal& principal, Role needed, absl::string_view action) {
  if (static_cast<int>(principal.role) >= static_cast<int>(needed)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(action, " needs role ", RoleName(needed),
                                                  "; token \"", principal.name, "\" has ",
                                                  RoleName(principal.role)));
}

Role RequiredRole(absl::string_view full_method) {
  static constexpr absl::string_view kJobService = "/mpsd.v1.JobService/";
  if (absl::StartsWith(full_method, kJobService)) {
    const absl::string_view method = full_method.substr(kJobService.size());
    for (absl::string_view viewer :
         {"GetJob", "ListJobs", "StreamEvents", "GetDevice", "ListModels", "GetServerStatus",
          "ListArtifacts", "GetArtifact"}) {
      if (method == viewer) return Role::kViewer;
    }
    // Their handlers check that a submitter acts on its own jobs only.
    if (method == "SubmitJob" || method == "CancelJob" || method == "DeleteArtifacts") {
      return Role::kSubmitter;
    }
    // A submitter's own uploads; another's (ListUploads, DeleteUpload) needs admin, which the
    // handler checks.
    for (absl::string_view upload :
         {"UploadFile", "GetUploadStatus", "ListUploads", "DeleteUpload"}) {
      if (method == upload) return Role::kSubmitter;
    }
    return Role::kAdmin;
  }
  if (absl::StartsWith(full_method, "/grpc.health.v1.Health/") ||
      absl::StartsWith(full_method, "/grpc.reflection.v1alpha.ServerReflection/") ||
      absl::StartsWith(full_method, "/grpc.reflection.v1.ServerReflection/")) {
    return Role::kViewer;
  }
  return Role::kAdmin;
}

absl::Status CanCancel(const Principal& principal, absl::string_view submitted_by,
                       absl::string_view job_id) {
  if (principal.role == Role::kAdmin) return absl::OkStatus();
  if (principal.role == Role::kSubmitter && principal.name == submitted_by) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("cancelling job ", job_id, ", submitted by \"", submitted_by,
                   "\", needs role admin ", "(a submitter may cancel only its own jobs); token \"",
                   principal.name, "\" has ", RoleName(principal.role)));
}

std::array<uint8_t, 32> Sha256(absl::string_view data) {
  std::array<uint8_t, 32> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data());
  return digest;
}

absl::StatusOr<std::string> GenerateToken() {
  std::array<uint8_t, 32> random{};
  if (RAND_bytes(random.data(), static_cast<int>(random.size())) != 1) {
    return absl::InternalError("OpenSSL's RAND_bytes failed: no random token");
  }
  return absl::StrCat(kTokenPrefix, HexDigest(random));
}

TokenStore::FileId TokenStore::FileIdOf(const struct stat& st) {
  auto ns = [](const timespec& t) { return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; };
  return FileId{st.st_dev, st.st_ino, st.st_size, ns(st.st_mtim), ns(st.st_ctim)};
}

absl::StatusOr<std::unique_ptr<TokenStore>> TokenStore::Open(const std::string& path) {
  absl::StatusOr<ReadResult> read = ReadTokensFile(path);
  if (!read.ok()) return read.status();
  std::unique_ptr<TokenStore> store(new TokenStore(path));
  absl::MutexLock lock(&store->mu_);
  store->records_ = std::move(read->records);
  store->file_id_ = FileIdOf(read->st);
  return store;
}

void TokenStore::RefreshIfChanged() const {
  struct stat st {};
  FileId now;
  if (stat(path_.c_str(), &st) == 0) {
    now = FileIdOf(st);
  }
  {
    absl::ReaderMutexLock lock(&mu_);
    if (now == file_id_) return;
  }
  absl::StatusOr<ReadResult> read = ReadTokensFile(path_);
  absl::MutexLock lock(&mu_);
  file_id_ = now;
  if (!read.ok()) {
    // Fail closed: a tokens file that cannot be read any more authorises nobody.
    if (file_status_.ok())
      spdlog::error("tokens file unusable, refusing every token: {}",
                    std::string(read.status().message()));
    file_status_ = read.status();
    records_.clear();
    return;
  }
  if (!file_status_.ok()) spdlog::info("tokens file {} usable again", path_);
  file_status_ = absl::OkStatus();
  records_ = std::move(read->records);
  spdlog::info("tokens file {} re-read: {} tokens", path_, records_.size());
}

absl::StatusOr<Principal> TokenStore::Authenticate(absl::string_view bearer) const {
  bearer = absl::StripAsciiWhitespace(bearer);
  if (bearer.size() > 7 && absl::EqualsIgnoreCase(bearer.substr(0, 7), "bearer ")) {
    bearer = absl::StripLeadingAsciiWhitespace(bearer.substr(7));
  } else if (absl::StrContains(bearer, ' ')) {
    return absl::UnauthenticatedError(
        "expected \"authorization: Bearer <token>\" (another scheme was given)");
  } else if (!bearer.empty() && !absl::EqualsIgnoreCase(bearer, "bearer")) {
    // One scheme only: a credential without one is refused rather than guessed at.
    return absl::UnauthenticatedError(
        "expected \"authorization: Bearer <token>\" (the scheme \"Bearer \" is missing)");
  } else {
    bearer = "";
  }
  if (bearer.empty()) {
    return absl::UnauthenticatedError(
        "missing token: send \"authorization: Bearer <token>\" (mpsctl --token-file FILE or "
        "MPSD_TOKEN)");
  }
  RefreshIfChanged();
  const std::array<uint8_t, 32> digest = Sha256(bearer);
  absl::ReaderMutexLock lock(&mu_);
  if (!file_status_.ok()) {
    return absl::UnauthenticatedError("the daemon's tokens file is unusable (see its log)");
  }
  // Every entry is compared, whatever matched before: the time taken depends only on the
  // number of entries.
  const TokenRecord* match = nullptr;
  for (const TokenRecord& record : records_) {
    const bool equal = CRYPTO_memcmp(record.sha256.data(), digest.data(), digest.size()) == 0;
    if (equal) match = &record;
  }
  if (match == nullptr) return absl::UnauthenticatedError("unknown or revoked token");
  return Principal{match->name, match->role};
}

std::vector<TokenRecord> TokenStore::Records() const {
  absl::ReaderMutexLock lock(&mu_);
  return records_;
}

absl::StatusOr<std::string> AddToken(const std::string& path, absl::string_view name, Role role) {
  if (!ValidName(name)) return BadName(name);
  absl::StatusOr<std::vector<TokenRecord>> records = RecordsOrNone(path);
  if (!records.ok()) return records.status();
  for (const TokenRecord& record : *records) {
    if (record.name == name) {
      return absl::AlreadyExistsError(
          absl::StrCat(path, ": a token named \"", name, "\" exists (revoke it first)"));
    }
  }
  absl::StatusOr<std::string> token = GenerateToken();
  if (!token.ok()) return token.status();
  records->push_back(TokenRecord{std::string(name), role, Sha256(*token)});
  if (absl::Status status = WritePrivateFile(path, Serialize(*records), /*exclusive=*/false);
      !status.ok()) {
    return status;
  }
  return token;
}

absl::Status RevokeToken(const std::string& path, absl::string_view name) {
  absl::StatusOr<ReadResult> read = ReadTokensFile(path);
  if (!read.ok()) return read.status();
  std::vector<TokenRecord>& records = read->records;
  const size_t before = records.size();
  records.erase(std::remove_if(records.begin(), records.end(),
                               [&](const TokenRecord& r) { return r.name == name; }),
                records.end());
  if (records.size() == before) {
    return absl::NotFoundError(absl::StrCat(path, ": no token named \"", name, "\""));
  }
  return WritePrivateFile(path, Serialize(records), /*exclusive=*/false);
}

absl::Status CreateTokensFileWithAdmin(const std::string& tokens_path,
                                       const std::string& admin_token_path) {
  struct stat st {};
  if (lstat(tokens_path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(absl::StrCat(tokens_path, ": already exists"));
  }
  absl::StatusOr<std::string> token = GenerateToken();
  if (!token.ok()) return token.status();
  const std::vector<TokenRecord> records = {TokenRecord{"admin", Role::kAdmin, Sha256(*token)}};
  // The token first: a tokens file whose admin token was lost would lock TCP clients out.
  if (absl::Status status =
          WritePrivateFile(admin_token_path, absl::StrCat(*token, "\n"), /*exclusive=*/false);
      !status.ok()) {
    return status;
  }
  return WritePrivateFile(tokens_path, Serialize(records), /*exclusive=*/true);
}

}  // namespace mpsd::server
