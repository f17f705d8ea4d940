// HttpServer: cpp-httplib's routing over GuardedServer's connections (plain or TLS), a token
// check in front of every route that is not public, and a thread that runs the accept loop.
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <fstream>
#include <regex>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "httplib.h"
#include "server/access/tls.h"
#include "server/http/dashboard_api.h"
#include "server/http/guarded_server.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

// A certificate (with its chain) and its key, parsed once; what a handshake presents.
struct KeyPair {
  X509* cert = nullptr;
  STACK_OF(X509) * chain = nullptr;
  EVP_PKEY* key = nullptr;
  ~KeyPair() {
    X509_free(cert);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
  }
};

// Reads `cert_path` (the certificate, then any intermediates) and `key_path` after CheckTlsFiles
// (server/access/tls.h) has checked them: readable, PEM, the key matches, within their dates.
absl::StatusOr<std::shared_ptr<const KeyPair>> LoadKeyPair(const std::string& cert_path,
                                                           const std::string& key_path) {
  TlsFiles files;
  files.cert = cert_path;
  files.key = key_path;
  if (absl::Status status = CheckTlsFiles(files); !status.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("http_listen: ", status.message()));
  }
  auto pair = std::make_shared<KeyPair>();
  pair->chain = sk_X509_new_null();
  BIO* cert_bio = BIO_new_file(cert_path.c_str(), "r");
  BIO* key_bio = BIO_new_file(key_path.c_str(), "r");
  if (cert_bio != nullptr) {
    pair->cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
    while (X509* extra = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr)) {
      sk_X509_push(pair->chain, extra);
    }
    BIO_free(cert_bio);
  }
  if (key_bio != nullptr) {
    pair->key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
    BIO_free(key_bio);
  }
  ERR_clear_error();
  if (pair->cert == nullptr || pair->key == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "http_listen: cannot read the TLS certificate ", cert_path, " or key ", key_path));
  }
  return std::shared_ptr<const KeyPair>(std::move(pair));
}

}  // namespace

// The pair the listener's handshakes present: swapped by ReloadTls, read by every handshake
// (OpenSSL's certificate callback), so a reload needs no new SSL_CTX and drops no connection.
class HttpTlsKeys {
 public:
  explicit HttpTlsKeys(std::shared_ptr<const KeyPair> pair) : pair_(std::move(pair)) {}

  std::shared_ptr<const KeyPair> Get() const {
    absl::MutexLock lock(&mu_);
    return pair_;
  }
  void Set(std::shared_ptr<const KeyPair> pair) {
    absl::MutexLock lock(&mu_);
    pair_ = std::move(pair);
  }

  // SSL_CTX_set_cert_cb's callback: runs in each handshake, before the certificate is chosen.
  static int OnHandshake(SSL* ssl, void* arg) {
    std::shared_ptr<const KeyPair> pair = static_cast<HttpTlsKeys*>(arg)->Get();
    // Takes its own references to the certificate, chain and key.
    return SSL_use_cert_and_key(ssl, pair->cert, pair->key, pair->chain, /*override=*/1) == 1 ? 1
                                                                                              : 0;
  }

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const KeyPair> pair_ ABSL_GUARDED_BY(mu_);
};

namespace {

absl::Status CheckReadable(const std::string& path, absl::string_view what) {
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("http_listen: cannot read the TLS ", what, " file ", path));
  }
  return absl::OkStatus();
}

// The server-side TLS context: TLS 1.2 at least, no compression, the certificate chosen per
// handshake (HttpTlsKeys) instead of fixed on the context, and with a client CA, client
// certificates signed by it required (mTLS). Null if the CA cannot be loaded.
SSL_CTX* MakeTlsContext(HttpTlsKeys* keys, const std::string& client_ca) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return nullptr;
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_cert_cb(ctx, &HttpTlsKeys::OnHandshake, keys);
  if (!client_ca.empty()) {
    STACK_OF(X509_NAME)* names = nullptr;
    if (SSL_CTX_load_verify_locations(ctx, client_ca.c_str(), nullptr) != 1 ||
        (names = SSL_load_client_CA_file(client_ca.c_str())) == nullptr) {
      SSL_CTX_free(ctx);
      return nullptr;
    }
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return ctx;
}

// The plain or TLS server the options ask for; `keys` is set for TLS.
absl::StatusOr<std::unique_ptr<GuardedServer>> MakeServer(const HttpServer::Options& options,
                                                          std::shared_ptr<HttpTlsKeys>& keys) {
  if (absl::Status status = CheckHttpLimits(options.limits); !status.ok()) return status;
  if (options.tls_cert_path.empty() != options.tls_key_path.empty()) {
    return absl::InvalidArgumentError(
        "http_listen: TLS needs both a certificate and a key (--tls-cert and --tls-key)");
  }
  if (options.tls_cert_path.empty()) {
    if (!options.tls_client_ca_path.empty()) {
      return absl::InvalidArgumentError(
          "http_listen: --tls-client-ca needs --tls-cert and --tls-key");
    }
    return std::make_unique<GuardedServer>(/*tls=*/nullptr, options.limits);
  }
  if (!options.tls_client_ca_path.empty()) {
    if (absl::Status status = CheckReadable(options.tls_client_ca_path, "client CA");
        !status.ok()) {
      return status;
    }
  }
  absl::StatusOr<std::shared_ptr<const KeyPair>> pair =
      LoadKeyPair(options.tls_cert_path, options.tls_key_path);
  if (!pair.ok()) return pair.status();
  keys = std::make_shared<HttpTlsKeys>(*std::move(pair));
  SSL_CTX* ctx = MakeTlsContext(keys.get(), options.tls_client_ca_path);
  if (ctx == nullptr) {
    ERR_clear_error();
    return absl::FailedPreconditionError(absl::StrCat("http_listen: cannot load the TLS client CA ",
                                                      options.tls_client_ca_path,
                                                      " (expected PEM certificates)"));
  }
  return std::make_unique<GuardedServer>(ctx, options.limits);
}

// What the hook's refusal becomes on the wire: 400 (INVALID_ARGUMENT), 403 (PERMISSION_DENIED)
// or 401 (anything else, with WWW-Authenticate); under /api/ the API's JSON error body
// ({"code", "message"}, server/http/dashboard_api.h), else text. The message is the hook's, which
// never holds the token.
void Refuse(const absl::Status& status, const httplib::Request& request,
            httplib::Response& response) {
  const absl::Status refusal = status.code() == absl::StatusCode::kInvalidArgument ||
                                       status.code() == absl::StatusCode::kPermissionDenied
                                   ? status
                                   : absl::UnauthenticatedError(status.message());
  const HttpReply reply = ErrorReply(refusal);
  response.status = reply.status;
  if (response.status == 401) response.set_header("WWW-Authenticate", "Bearer realm=\"mpsd\"");
  if (absl::StartsWith(request.path, "/api/")) {
    response.set_content(reply.body, "application/json");
  } else {
    response.set_content(absl::StrCat(status.message(), "\n"), "text/plain; charset=utf-8");
  }
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address, absl::string_view field) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected HOST:PORT (e.g. 127.0.0.1:9464 or [::1]:9464), got \"", address, "\""));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return bad();
  HostPort result;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &result.port) || result.port < 0 ||
      result.port > 65535) {
    return bad();
  }
  absl::string_view host = address.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad();
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != absl::string_view::npos) {
    return bad();  // An IPv6 address without brackets.
  }
  result.host = std::string(host);
  in_addr ipv4{};
  in6_addr ipv6{};
  if (result.host == "localhost") {
    result.loopback = true;
  } else if (inet_pton(AF_INET, result.host.c_str(), &ipv4) == 1) {
    result.loopback = (ntohl(ipv4.s_addr) >> 24) == 127;
  } else if (inet_pton(AF_INET6, result.host.c_str(), &ipv6) == 1) {
    result.loopback = IN6_IS_ADDR_LOOPBACK(&ipv6);
  }
  return result;
}

HttpServer::HttpServer(const Options& options) : options_(options) {}

absl::Status CheckHttpListen(absl::string_view address, bool tls) {
  absl::StatusOr<HostPort> host_port = ParseHostPort(address, "http_listen");
  if (!host_port.ok()) return host_port.status();
  if (!host_port->loopback && !tls) {
    return absl::InvalidArgumentError(absl::StrCat(
        "http_listen: ", address,
        " is not a loopback address, and HTTP beyond loopback needs TLS: give --tls-cert and "
        "--tls-key (config tls: {cert, key}), or listen on 127.0.0.1:PORT"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const Options& options) {
  const bool tls = !options.tls_cert_path.empty();
  if (absl::Status s = CheckHttpListen(options.address, tls); !s.ok()) return s;
  absl::StatusOr<HostPort> host_port = ParseHostPort(options.address, "http_listen");
  if (!host_port.ok()) return host_port.status();
  if (options.authorize == nullptr) {
    return absl::InvalidArgumentError("http_listen: no authorize hook (internal error)");
  }
  std::unique_ptr<HttpServer> http(new HttpServer(options));
  absl::StatusOr<std::unique_ptr<GuardedServer>> server = MakeServer(options, http->tls_);
  if (!server.ok()) return server.status();
  http->server_ = *std::move(server);
  // Secrets never reach logs: no request logger is installed, and errors name only paths.
  http->server_->set_exception_handler(
      [](const httplib::Request& request, httplib::Response& response, std::exception_ptr) {
        spdlog::error("http: a handler of {} threw", request.path);
        response.status = 500;
        response.set_content("internal error\n", "text/plain; charset=utf-8");
      });
  // A path no route matches (or a route's pattern refuses, as /api/jobs/abc) gets a body
  // saying so: JSON under /api/, as the API's other errors (server/http/dashboard_api.h), else
  // text. Handlers' own error bodies are kept. The path is not echoed. A path that a route of
  // another method matches is 405 with Allow (RFC 9110 15.5.6): GET on a POST-only route such as
  // /api/jobs/ID/cancel.
  http->server_->set_error_handler(
      [http = http.get()](const httplib::Request& request, httplib::Response& response) {
        if (response.status != 404 || !response.body.empty()) return;
        std::string allowed;
        for (const Route& route : http->routes_) {
          if (route.method != request.method && std::regex_match(request.path, route.pattern) &&
              !absl::StrContains(allowed, route.method)) {
            absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", route.method);
          }
        }
        if (!allowed.empty()) {
          response.status = 405;
          response.set_header("Allow", allowed);
          const std::string message =
              absl::StrCat(request.method, " is not allowed here; this path takes ", allowed);
          if (absl::StartsWith(request.path, "/api/")) {
            HttpReply reply = ErrorReply(absl::InvalidArgumentError(message));
            response.set_content(reply.body, "application/json");
          } else {
            response.set_content(absl::StrCat(message, "\n"), "text/plain; charset=utf-8");
          }
          return;
        }
        if (absl::StartsWith(request.path, "/api/")) {
          response.set_content(
              "{\"code\":\"NOT_FOUND\",\"message\":\"no such API path (job ids are decimal "
              "digits: /api/jobs/ID, /api/jobs/ID/series, /api/jobs/ID/events)\"}",
              "application/json");
        } else {
          response.set_content("not found\n", "text/plain; charset=utf-8");
        }
      });
  // A POST (or PUT) with neither Content-Length nor chunked encoding has, in HTTP/1.1, a body
  // that ends only when the client closes the connection (RFC 9112 6.3); cpp-httplib would wait
  // for that. mpsd's POST routes take no body (`curl -X POST` sends no length): such a request
  // is read as having an empty one, and answered at once.
  http->server_->set_pre_routing_handler([](const httplib::Request& request, httplib::Response&) {
    if ((request.method == "POST" || request.method == "PUT" || request.method == "PATCH") &&
        !request.has_header("Content-Length") && !request.has_header("Transfer-Encoding")) {
      const_cast<httplib::Request&>(request).headers.emplace("Content-Length", "0");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which would let a second
  // process bind the same port and take a share of the connections (and their tokens).
  http->server_->set_socket_options([](socket_t socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  if (host_port->port == 0) {
    http->port_ = http->server_->bind_to_any_port(host_port->host);
  } else {
    http->port_ =
        http->server_->bind_to_port(host_port->host, host_port->port) ? host_port->port : -1;
  }
  if (http->port_ > 0 && !http->server_->SetBacklog(SOMAXCONN)) http->port_ = -1;
  if (http->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("http_listen: cannot listen on ", options.address,
                                               " (in use, or not an address of this host)"));
  }
  const std::string host = host_port->host.find(':') != std::string::npos
                               ? absl::StrCat("[", host_port->host, "]")
                               : host_port->host;
  http->url_ = absl::StrCat(tls ? "https://" : "http://", host, ":", http->port_);
  return http;
}

HttpServer::~HttpServer() { Shutdown(); }

HttpConnectionCounts HttpServer::connection_counts() const { return server_->counts(); }

absl::Status HttpServer::ReloadTls() {
  if (tls_ == nullptr) return absl::OkStatus();
  absl::StatusOr<std::shared_ptr<const KeyPair>> pair =
      LoadKeyPair(options_.tls_cert_path, options_.tls_key_path);
  if (!pair.ok()) return pair.status();
  tls_->Set(*std::move(pair));
  return absl::OkStatus();
}

void HttpServer::Get(const std::string& pattern, Handler handler, bool public_route) {
  routes_.push_back(Route{"GET", std::regex(pattern)});
  const std::string action = absl::StrCat("GET ", pattern);
  server_->Get(pattern, [this, action, handler = std::move(handler), public_route](
                            const httplib::Request& request, httplib::Response& response) {
    Serve(action, handler, public_route, request, response);
  });
}

void HttpServer::Post(const std::string& pattern, Handler handler, bool public_route) {
  routes_.push_back(Route{"POST", std::regex(pattern)});
  const std::string action = absl::StrCat("POST ", pattern);
  server_->Post(pattern, [this, action, handler = std::move(handler), public_route](
                             const httplib::Request& request, httplib::Response& response) {
    Serve(action, handler, public_route, request, response);
  });
}

void HttpServer::Serve(const std::string& action, const Handler& handler, bool public_route,
                       const httplib::Request& request, httplib::Response& response) const {
  HttpCaller caller;
  if (!public_route) {
    // Two Authorization headers: which one counts would be up to us (cpp-httplib: the first),
    // and a proxy in front may have checked the other. Refused.
    absl::StatusOr<HttpCaller> authorized =
        request.get_header_value_count("Authorization") > 1
            ? absl::InvalidArgumentError("more than one Authorization header")
            : options_.authorize(request.get_header_value("Authorization"), action);
    if (!authorized.ok()) {
      spdlog::warn("http: {} from {}: {}", action, request.remote_addr,
                   std::string(authorized.status().message()));
      Refuse(authorized.status(), request, response);
      return;
    }
    caller = *std::move(authorized);
  }
  handler(caller, request, response);
}

void HttpServer::Start() {
  if (started_.exchange(true)) return;
  thread_ = std::thread([this] {
    if (!server_->listen_after_bind() && !stopping_) spdlog::error("http: the accept loop failed");
    loop_ended_ = true;
  });
  // stop() is a no-op until the accept loop runs: wait for it, so that Shutdown always ends it.
  while (!server_->is_running() && !loop_ended_) std::this_thread::yield();
}

void HttpServer::Shutdown() {
  stopping_ = true;
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace mpsd::server
