// TLS files: OpenSSL checks (readable, PEM, key matches, dates) and the watched copies behind
// gRPC's TlsServerCredentials.
#include "server/access/tls.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x509) const { X509_free(x509); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

absl::StatusOr<std::string> ReadWhole(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Asn1TimeText(const ASN1_TIME* time) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), time);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

// The first certificate of a PEM file, checked for its validity dates.
absl::StatusOr<X509Ptr> ReadCertificate(const std::string& what, const std::string& path) {
  absl::StatusOr<std::string> text = ReadWhole(what, path);
  if (!text.ok()) return text.status();
  BioPtr bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())));
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", path,
                     ": no PEM certificate in it (expected -----BEGIN "
                     "CERTIFICATE-----)"));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " ", path, ": expired on ", Asn1TimeText(X509_get0_notAfter(cert.get()))));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " ", path, ": not valid before ", Asn1TimeText(X509_get0_notBefore(cert.get()))));
  }
  return cert;
}

// As ssh with a private key, but letting a group read it (Debian's ssl-cert group convention
// for /etc/ssl/private): refused when any user may read or write it, a warning when its group
// may.
absl::Status CheckKeyMode(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return absl::OkStatus();  // reading it says why
  const unsigned mode = st.st_mode & 07777;
  if ((mode & (S_IROTH | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "TLS key %s has mode %04o: every user of this machine may read (or replace) the "
        "daemon's private key; make it private with: chmod 600 %s",
        path, mode, path));
  }
  if ((mode & (S_IRGRP | S_IWGRP)) != 0) {
    spdlog::warn(
        "TLS key {} has mode {:04o}: its group may read the daemon's private key "
        "(chmod 600 {} if that is not intended)",
        path, mode, path);
  }
  return absl::OkStatus();
}

absl::StatusOr<KeyPtr> ReadKey(const std::string& path) {
  if (absl::Status status = CheckKeyMode(path); !status.ok()) return status;
  absl::StatusOr<std::string> text = ReadWhole("TLS key", path);
  if (!text.ok()) return text.status();
  BioPtr bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())));
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("TLS key ", path,
                     ": no unencrypted PEM private key in it (expected -----BEGIN "
                     "PRIVATE KEY-----)"));
  }
  return key;
}

absl::Status CopyPrivate(const std::string& from, const std::string& to) {
  absl::StatusOr<std::string> text = ReadWhole("TLS file", from);
  if (!text.ok()) return text.status();
  const std::string temporary = to + ".tmp";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(temporary, ": ", std::strerror(errno)));
  }
  const ssize_t written = write(fd, text->data(), text->size());
  close(fd);
  if (written != static_cast<ssize_t>(text->size()) || rename(temporary.c_str(), to.c_str()) != 0) {
    unlink(temporary.c_str());
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", to));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTlsFiles(const TlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both a certificate and its key (--tls-cert and --tls-key; config tls.cert "
        "and tls.key)");
  }
  if (files.cert.empty()) {
    if (!files.client_ca.empty()) {
      return absl::InvalidArgumentError(
          "tls.client_ca (--tls-client-ca) needs tls.cert and tls.key (--tls-cert, --tls-key)");
    }
    return absl::OkStatus();
  }
  absl::StatusOr<X509Ptr> cert = ReadCertificate("TLS certificate", files.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<KeyPtr> key = ReadKey(files.key);
  if (!key.ok()) return key.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::FailedPreconditionError(
        absl::StrCat("TLS key ", files.key, " does not belong to the certificate ", files.cert));
  }
  if (!files.client_ca.empty()) {
    absl::StatusOr<X509Ptr> ca = ReadCertificate("TLS client CA", files.client_ca);
    if (!ca.ok()) return ca.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TlsCredentials>> TlsCredentials::Create(
    const TlsFiles& files, const std::string& copy_dir) {
  if (absl::Status status = CheckTlsFiles(files); !status.ok()) return status;
  std::error_code error;
  std::filesystem::create_directories(copy_dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", copy_dir, ": ", error.message()));
  }
  chmod(copy_dir.c_str(), 0700);
  std::unique_ptr<TlsCredentials> tls(new TlsCredentials(files, copy_dir));
  {
    absl::MutexLock lock(&tls->mu_);
    if (absl::Status status = tls->CopyFiles(); !status.ok()) return status;
  }
  const std::string key = copy_dir + "/key.pem", cert = copy_dir + "/cert.pem";
  const std::string client_ca = files.client_ca.empty() ? "" : copy_dir + "/client_ca.pem";
  // Re-read every second: a reload (SIGHUP) reaches new handshakes within about a second.
  constexpr unsigned kRefreshIntervalS = 1;
  tls->provider_ = client_ca.empty()
                       ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                             key, cert, kRefreshIntervalS)
                       : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                             key, cert, client_ca, kRefreshIntervalS);
  grpc::experimental::TlsServerCredentialsOptions options(tls->provider_);
  options.watch_identity_key_cert_pairs();
  if (!client_ca.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  tls->credentials_ = grpc::experimental::TlsServerCredentials(options);
  if (tls->credentials_ == nullptr) {
    return absl::InternalError("gRPC could not create TLS server credentials");
  }
  return tls;
}

TlsCredentials::~TlsCredentials() = default;

absl::Status TlsCredentials::CopyFiles() {
  // The certificate before the key: gRPC's watcher re-reads a pair whose files changed while
  // it read them.
  if (absl::Status s = CopyPrivate(files_.cert, copy_dir_ + "/cert.pem"); !s.ok()) return s;
  if (absl::Status s = CopyPrivate(files_.key, copy_dir_ + "/key.pem"); !s.ok()) return s;
  if (!files_.client_ca.empty()) {
    return CopyPrivate(files_.client_ca, copy_dir_ + "/client_ca.pem");
  }
  return absl::OkStatus();
}

absl::Status TlsCredentials::Reload() {
  absl::MutexLock lock(&mu_);
  if (absl::Status status = CheckTlsFiles(files_); !status.ok()) return status;
  return CopyFiles();
}

}  // namespace mpsd::server
