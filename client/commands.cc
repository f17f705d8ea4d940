// Commands' shared part: the channel to mpsd (TLS, token, keepalive), deadlines, failed calls.
#include "client/commands.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <arpa/inet.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "api/default_address.h"
#include "api/status.h"
#include "client/tls_probe.h"

namespace mpsd::client {
namespace {

// gRPC reports a missing socket or a refused connection as UNAVAILABLE with this text, e.g.
// "failed to connect to all addresses; last error: UNKNOWN: unix:/tmp/x.sock: No such file or
// directory". A server may also answer UNAVAILABLE itself (shutting down), with its own text.
// Whether an UNAVAILABLE call failed because no connection could be made: the channel's own
// state says so (TRANSIENT_FAILURE right after a failed connect), not gRPC's message text.
bool ConnectFailed(grpc::Channel* channel) {
  return channel != nullptr &&
         channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_TRANSIENT_FAILURE;
}

// The OS's reason at the end of gRPC's message ("No such file or directory"), or "": shown to
// the user as it is, never branched on.
std::string ConnectReason(const grpc::Status& status) {
  const std::string& message = status.error_message();
  const size_t colon = message.rfind(": ");
  if (colon == std::string::npos) return "";
  std::string reason = message.substr(colon + 2);
  return absl::StrContains(reason, " ") ? reason : "";  // a lone word is not an OS reason
}

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, " ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": not a PEM file"));
  }
  return text.str();
}

// `pem` as ReadPem read it, checked to hold certificates that OpenSSL parses: gRPC's own
// answer to a key given as a CA is a few raw error lines and "empty address list".
absl::StatusOr<std::string> CheckCertificates(const char* flag, const std::string& path,
                                              absl::StatusOr<std::string> pem) {
  if (!pem.ok()) return pem;
  BIO* bio = BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size()));
  int certificates = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_free(cert);
    ++certificates;
  }
  BIO_free(bio);
  ERR_clear_error();
  if (certificates > 0) return pem;
  const bool key = absl::StrContains(*pem, "PRIVATE KEY-----");
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " ", path, ": no certificate in it (expected PEM \"BEGIN CERTIFICATE\" blocks",
      key ? "; it holds a private key" : "", ")"));
}

bool IsLoopbackHost(std::string host) {
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return host == "localhost" || host == "::1";
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const CommandOptions& options) {
  if (absl::StartsWith(options.server, "unix:")) return grpc::InsecureChannelCredentials();
  std::shared_ptr<grpc::ChannelCredentials> channel;
  if (UsesTls(options.server, options.tls)) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls.ca_file.empty()) {
      absl::StatusOr<std::string> ca = CheckCertificates("--tls-ca", options.tls.ca_file,
                                                         ReadPem("--tls-ca", options.tls.ca_file));
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    if (options.tls.cert_file.empty() != options.tls.key_file.empty()) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key go together (mutual TLS)");
    }
    if (!options.tls.cert_file.empty()) {
      absl::StatusOr<std::string> cert = CheckCertificates(
          "--tls-cert", options.tls.cert_file, ReadPem("--tls-cert", options.tls.cert_file));
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem("--tls-key", options.tls.key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    channel = grpc::SslCredentials(ssl);
  } else {
    // Plaintext on loopback, as mpsd's local credentials expect; call credentials (the token)
    // are allowed on it, unlike on InsecureChannelCredentials.
    channel = grpc::experimental::LocalCredentials(LOCAL_TCP);
  }
  if (options.token.empty()) return channel;
  return grpc::CompositeChannelCredentials(channel, grpc::AccessTokenCredentials(options.token));
}

}  // namespace

std::string StartDaemonHint(const std::string& server) {
  if (server == api::DefaultListenAddress()) return "mpsd";
  return absl::StrCat("mpsd --listen ", server);
}

std::string NormalizeServerAddress(const std::string& server) {
  if (absl::StartsWith(server, "/")) return absl::StrCat("unix://", server);
  if (absl::StartsWith(server, ".")) return absl::StrCat("unix:", server);
  return server;
}

grpc::ChannelArguments KeepaliveChannelArguments() {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // gRPC stops pinging after 2 pings without data, and spaces such pings 5 min apart, by
  // default; a quiet stream needs them all, at the keepalive interval.
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  arguments.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, 30000);
  return arguments;
}

std::pair<std::string, int> HostAndPort(const std::string& server) {
  if (absl::StartsWith(server, "unix:")) return {"", -1};
  std::string target = server;
  if (absl::StartsWith(target, "dns:///")) target = target.substr(7);
  const size_t colon = target.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(target.substr(colon + 1), &port)) {
    return {target, -1};
  }
  return {target.substr(0, colon), port};
}

bool UsesTls(const std::string& server, const TlsOptions& tls) {
  if (absl::StartsWith(server, "unix:")) return false;
  if (tls.enabled || !tls.ca_file.empty() || !tls.cert_file.empty()) return true;
  return !IsLoopbackHost(HostAndPort(server).first);
}

std::string LooseModeWarning(absl::string_view flag, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || (st.st_mode & 077) == 0) return "";
  return absl::StrFormat(
      "mpsctl: warning: %s %s is accessible by other users (mode %04o): anyone who can read it "
      "acts with its rights; make it private with: chmod 600 %s",
      flag, path, st.st_mode & 07777, path);
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("--token-file ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file ", path, ": empty"));
  }
  return token;
}

absl::StatusOr<std::unique_ptr<Commands>> Commands::Connect(CommandOptions options,
                                                            std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFor(options);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.server, *credentials, KeepaliveChannelArguments());
  auto stub = v1::JobService::NewStub(channel);
  return std::make_unique<Commands>(std::move(options), std::move(stub), out, err,
                                    std::move(channel));
}

Commands::Commands(CommandOptions options, std::unique_ptr<v1::JobService::StubInterface> stub,
                   std::ostream& out, std::ostream& err, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      stub_(std::move(stub)),
      channel_(std::move(channel)),
      out_(out),
      err_(err) {}

std::unique_ptr<grpc::ClientContext> Commands::UnaryContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  return context;
}

int Commands::RpcFailed(const grpc::Status& status) {
  const std::string& message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      // mpsd's own errors carry its ErrorInfo (mpsd.proto, JobService); gRPC's do not.
      if (api::MpsdErrorInfo(status).has_value()) {
        err_ << "mpsctl: mpsd at " << options_.server
             << " is running but answered UNAVAILABLE: " << message << " (try again later)\n";
        return kExitDaemonUnavailable;
      }
      if (ConnectFailed(channel_.get())) {
        const auto [host, port] = HostAndPort(options_.server);
        const std::string tls_problem =
            port > 0 ? DiagnoseTls(host, port, options_.tls, UsesTls(options_.server, options_.tls))
                     : "";
        if (!tls_problem.empty()) {
          err_ << "mpsctl: cannot reach mpsd at " << options_.server << ": TLS: " << tls_problem
               << "\n";
          return kExitUnreachable;
        }
        const std::string reason = ConnectReason(status);
        err_ << "mpsctl: cannot reach mpsd at " << options_.server
             << (reason.empty() ? "" : absl::StrCat(" (", reason, ")"))
             << ": is the daemon running? (start it with: " << StartDaemonHint(options_.server)
             << ")\n";
      } else {
        err_ << "mpsctl: mpsd at " << options_.server << " is unavailable: " << message << "\n";
      }
      return kExitUnreachable;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      err_ << "mpsctl: mpsd at " << options_.server << " did not answer within "
           << absl::FormatDuration(options_.rpc_timeout) << "\n";
      return kExitUnreachable;
    case grpc::StatusCode::UNAUTHENTICATED:
      err_ << "mpsctl: mpsd at " << options_.server << " refused the call: " << message
           << (options_.token.empty() && !absl::StrContains(message, "MPSD_TOKEN")
                   ? " (no token given: --token-file FILE or MPSD_TOKEN)"
                   : "")
           << "\n";
      return kExitFailed;
    default:
      err_ << "mpsctl: "
           << (message.empty() ? absl::StrCat("error code ", status.error_code()) : message)
           << "\n";
      return kExitFailed;
  }
}

}  // namespace mpsd::client
