// TLS for mpsd's TCP listeners: the certificate, key and client CA files checked with OpenSSL
// (at start and on every reload), and gRPC server credentials whose certificate and key can be
// replaced while the daemon runs (SIGHUP) without dropping a connection or a stream.
#ifndef MPSD_SERVER_ACCESS_TLS_H_
#define MPSD_SERVER_ACCESS_TLS_H_

#include <memory>
#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace grpc::experimental {
class FileWatcherCertificateProvider;
}  // namespace grpc::experimental

namespace mpsd::server {

// The `tls:` mapping of the config (mpsd --tls-cert, --tls-key, --tls-client-ca). PEM files.
struct TlsFiles {
  // The server's certificate, optionally followed by its intermediate CA certificates.
  std::string cert;
  // The private key of `cert` (unencrypted PEM).
  std::string key;
  // CA certificates that client certificates must chain to; set = clients must present one
  // (mutual TLS). Empty = no client certificates asked for.
  std::string client_ca;

  bool enabled() const { return !cert.empty() || !key.empty(); }
};

// Checks the files with OpenSSL. Errors name the file and the problem: FAILED_PRECONDITION when
// a file cannot be read, holds no PEM certificate (or key), when the key is readable or
// writable by others than its owner and group (a group-readable key is logged as a warning),
// when the key does not belong to the certificate, or when the certificate has expired or is
// not valid yet (with its dates, UTC);
// INVALID_ARGUMENT when only one of cert and key is given, or a client CA without them.
absl::Status CheckTlsFiles(const TlsFiles& files);

// gRPC server credentials for TLS (grpc::experimental::TlsServerCredentials), fed by a
// FileWatcherCertificateProvider that watches copies of the configured files in a private
// directory: Reload() checks the configured files again and only then replaces the copies, so a
// bad edit never reaches a listener. gRPC re-reads the copies every second; new handshakes use
// the new certificate from then on, while open connections (and their streams) keep the one
// they were made with.
//
// Thread-safe. The credentials stay valid for as long as the returned shared_ptr is held.
class TlsCredentials {
 public:
  // Checks `files` (CheckTlsFiles), copies them into `copy_dir` (created 0700; files 0600) and
  // builds the credentials. With a client CA, a client without a certificate signed by it fails
  // the handshake.
  static absl::StatusOr<std::unique_ptr<TlsCredentials>> Create(const TlsFiles& files,
                                                                const std::string& copy_dir);
  ~TlsCredentials();

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }

  // Re-reads the configured files. OK: the copies are replaced, and gRPC serves the new
  // certificate within about a second. Error (CheckTlsFiles's): nothing changes.
  absl::Status Reload() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  TlsCredentials(TlsFiles files, std::string copy_dir)
      : files_(std::move(files)), copy_dir_(std::move(copy_dir)) {}

  // Copies the configured files over the watched copies.
  absl::Status CopyFiles() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after Create.
  const TlsFiles files_;
  const std::string copy_dir_;
  std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> provider_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;

  // Serialises reloads.
  absl::Mutex mu_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_ACCESS_TLS_H_
