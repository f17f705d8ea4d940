// One diagnostic TLS handshake with OpenSSL over a plain socket.
#include "client/tls_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "client/commands.h"

namespace mpsd::client {
namespace {

constexpr int kTimeoutMs = 2000;

// A TCP connection to host:port within kTimeoutMs, blocking afterwards; -1 on failure.
int ConnectTcp(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  if (getaddrinfo(name.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    timeval timeout{kTimeoutMs / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
struct SslFree {
  void operator()(SSL* ssl) const { SSL_free(ssl); }
};

bool IsIpAddress(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

std::string VerifyProblem(long result, SSL* ssl, const std::string& host, const TlsOptions& tls) {
  const std::string roots = tls.ca_file.empty() ? std::string("the system's CA certificates")
                                                : absl::StrCat("--tls-ca ", tls.ca_file);
  switch (result) {
    case X509_V_ERR_CERT_HAS_EXPIRED: {
      X509* cert = SSL_get0_peer_certificate(ssl);
      std::string when;
      if (cert != nullptr) {
        BIO* bio = BIO_new(BIO_s_mem());
        ASN1_TIME_print(bio, X509_get0_notAfter(cert));
        char* data = nullptr;
        const long size = BIO_get_mem_data(bio, &data);
        when = absl::StrCat(" on ", std::string(data, static_cast<size_t>(size)));
        BIO_free(bio);
      }
      return absl::StrCat("the server's certificate has expired", when,
                          ": mpsd needs a new one (then SIGHUP it)");
    }
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "the server's certificate is not valid yet (check the clocks of both machines)";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return absl::StrCat("the server's certificate is not issued for \"", host,
                          "\": connect with a name it was issued for (--server NAME:PORT)");
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      return absl::StrCat("the server's certificate is not signed by a CA in ", roots,
                          " (give the CA that signed mpsd's certificate with --tls-ca FILE)");
    default:
      return absl::StrCat("the server's certificate failed verification: ",
                          X509_verify_cert_error_string(result));
  }
}

// Set by ClientCertRequested when the server asked for a client certificate and the probe had
// none to give (OpenSSL calls it only then). Per thread: DiagnoseTls may run on several.
thread_local bool client_cert_requested = false;

int ClientCertRequested(SSL*, X509**, EVP_PKEY**) {
  client_cert_requested = true;
  return 0;  // No certificate: the handshake goes on without one.
}

}  // namespace

std::string DiagnoseTls(const std::string& host, int port, const TlsOptions& tls,
                        bool client_used_tls) {
  const int fd = ConnectTcp(host, port);
  if (fd < 0) return "";
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_client_method()));
  if (ctx == nullptr) {
    close(fd);
    return "";
  }
  std::string name = host;
  if (name.size() > 2 && name.front() == '[') name = name.substr(1, name.size() - 2);
  if (client_used_tls) {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    if (tls.ca_file.empty()) {
      SSL_CTX_set_default_verify_paths(ctx.get());
    } else {
      SSL_CTX_load_verify_locations(ctx.get(), tls.ca_file.c_str(), nullptr);
    }
    if (!tls.cert_file.empty() && !tls.key_file.empty()) {
      SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert_file.c_str());
      SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key_file.c_str(), SSL_FILETYPE_PEM);
    }
    X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx.get());
    if (IsIpAddress(name)) {
      X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
    }
  } else {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  }
  client_cert_requested = false;
  SSL_CTX_set_client_cert_cb(ctx.get(), ClientCertRequested);
  std::unique_ptr<SSL, SslFree> ssl(SSL_new(ctx.get()));
  SSL_set_fd(ssl.get(), fd);
  if (!IsIpAddress(name)) SSL_set_tlsext_host_name(ssl.get(), name.c_str());
  const int connected = SSL_connect(ssl.get());
  std::string problem;
  if (!client_used_tls) {
    // Any answer in TLS, even one we could not verify, means the port speaks TLS.
    const bool speaks_tls = connected == 1 || SSL_get_peer_certificate(ssl.get()) != nullptr ||
                            SSL_get_verify_result(ssl.get()) != X509_V_OK;
    if (speaks_tls) {
      problem =
          "this port speaks TLS and mpsctl spoke plaintext: give --tls-ca FILE (the CA "
          "of mpsd's certificate), or --tls to verify it with the system's CA certificates";
    }
  } else if (connected != 1) {
    const long verify = SSL_get_verify_result(ssl.get());
    if (verify != X509_V_OK) {
      problem = VerifyProblem(verify, ssl.get(), name, tls);
    } else {
      const unsigned long error = ERR_peek_last_error();
      const int reason = ERR_GET_REASON(error);
      if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_UNEXPECTED_EOF_WHILE_READING ||
          error == 0) {
        problem =
            "this port does not speak TLS (a plaintext loopback listener? then leave out "
            "the --tls options)";
      }
    }
  } else {
    // The handshake passed on our side; with TLS 1.3 a server that requires a client
    // certificate says so only after it, in an alert or (gRPC) by closing the connection.
    char byte = 0;
    if (SSL_read(ssl.get(), &byte, 1) <= 0) {
      const int reason = ERR_GET_REASON(ERR_peek_last_error());
      const bool refused_by_alert = reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
                                    reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
                                    reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE ||
                                    reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA;
      if (tls.cert_file.empty() && (client_cert_requested || refused_by_alert)) {
        problem =
            "mpsd requires a client certificate (mutual TLS): give --tls-cert FILE "
            "--tls-key FILE";
      } else if (!tls.cert_file.empty() &&
                 (refused_by_alert || reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
        problem = absl::StrCat("mpsd refused the client certificate ", tls.cert_file,
                               " (not signed by its --tls-client-ca, or expired)");
      }
    }
  }
  ERR_clear_error();
  SSL_shutdown(ssl.get());
  close(fd);
  return problem;
}

}  // namespace mpsd::client
