// Sha256OfFile: open(2)/read(2) and OpenSSL's EVP digest.
#include "api/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mpsd::api {
namespace {

std::string Hex(const unsigned char* digest, unsigned int length) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0xf];
  }
  return hex;
}

absl::Status CannotRead(const std::string& path, int error) {
  return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(error)));
}

}  // namespace

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CannotRead(path, errno);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  &EVP_MD_CTX_free);
  if (context == nullptr || EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("SHA-256 is not available (OpenSSL)");
  }
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const ssize_t got = read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return CannotRead(path, errno);  // EISDIR for a directory
    if (got == 0) break;
    EVP_DigestUpdate(context.get(), buffer.data(), static_cast<size_t>(got));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context.get(), digest, &length);
  return Hex(digest, length);
}

struct Sha256Hasher::Context {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  void Init() {
    if (md == nullptr || EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr) != 1) std::abort();
  }
};

Sha256Hasher::Sha256Hasher() : context_(std::make_unique<Context>()) { context_->Init(); }

Sha256Hasher::~Sha256Hasher() = default;

void Sha256Hasher::Update(absl::string_view bytes) {
  EVP_DigestUpdate(context_->md.get(), bytes.data(), bytes.size());
}

std::string Sha256Hasher::Finish() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context_->md.get(), digest, &length);
  context_->Init();
  return Hex(digest, length);
}

}  // namespace mpsd::api
