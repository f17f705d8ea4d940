// mpsd's HTTP(S) listener (`--http-listen ADDR`, config `http_listen`): cpp-httplib serving
// Prometheus' /metrics, /healthz, and whatever other components register (the dashboard).
// Closed by default: a non-loopback address needs TLS, and every route but the ones registered
// as public needs a bearer token. Bounded: each request must arrive within a deadline, and
// connections are capped in total and per client address (HttpLimits, server/http/http_limits.h;
// the connection handling is server/http/guarded_server.h's).
#ifndef MPSD_SERVER_HTTP_HTTP_SERVER_H_
#define MPSD_SERVER_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/access/auth.h"
#include "server/http/http_limits.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace mpsd::server {

// Who sent a request, as the authorize hook decided.
struct HttpCaller {
  // The token's name ("" for a public route, which authenticates no one).
  std::string name;
  // The token's role (server/access/auth.h); meaningless on a public route.
  Role role = Role::kViewer;
};

class HttpTlsKeys;
class GuardedServer;

// Thread-safety: Get() and Post() only before Start(); Start() once; Shutdown() from any thread,
// any number of times. Handlers run on the connections' threads (one per connection, several at
// once) and must be thread-safe. A handler that takes long (a stream) must watch stopping() and
// return soon after it turns true, or Shutdown() waits for it.
class HttpServer {
 public:
  // Decides whether a request may reach a protected route: returns the caller, or
  // UNAUTHENTICATED (answered 401 with a WWW-Authenticate: Bearer challenge) or
  // PERMISSION_DENIED (403). `authorization` is the request's Authorization header ("" when
  // absent); `action` names the route, e.g. "GET /metrics". The status message is sent to the
  // client, so it must never contain the token.
  using Authorize = std::function<absl::StatusOr<HttpCaller>(absl::string_view authorization,
                                                             absl::string_view action)>;
  using Handler =
      std::function<void(const HttpCaller&, const httplib::Request&, httplib::Response&)>;

  struct Options {
    // "HOST:PORT": 127.0.0.1:9464, [::1]:9464, localhost:9464, 0.0.0.0:9464, PORT 0 = any free
    // port (see port()). A host that is not loopback is refused without TLS.
    std::string address;
    // PEM files. cert and key together turn on HTTPS; client_ca additionally requires client
    // certificates signed by it (mTLS). Empty = plain HTTP (loopback only). The certificate and
    // key are read into memory at Create and again at ReloadTls; the client CA only at Create.
    std::string tls_cert_path;
    std::string tls_key_path;
    std::string tls_client_ca_path;
    // Required: every request to a non-public route goes through it.
    Authorize authorize;
    // Request deadline and connection caps (checked by Create: CheckHttpLimits).
    HttpLimits limits;
  };

  // Validates the options and binds the port (nothing is served until Start). Errors:
  // INVALID_ARGUMENT naming http_listen for a malformed address, a non-loopback host without
  // TLS (saying what to configure), or cert without key, or naming http_limits.KEY for a limit
  // out of range; FAILED_PRECONDITION naming the file
  // when the certificate, key or CA cannot be loaded; UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(const Options& options);

  // Shuts down.
  ~HttpServer();

  // Registers `handler` for GET requests whose path matches `pattern` (a std::regex, matched
  // whole, as cpp-httplib does; its groups are in Request::matches). `public_route`: answered
  // without a token (only for routes that reveal nothing, like /healthz). Before Start() only.
  void Get(const std::string& pattern, Handler handler, bool public_route = false);
  // The same for POST requests (the request body is in Request::body).
  void Post(const std::string& pattern, Handler handler, bool public_route = false);

  // HTTPS only: re-reads the certificate and key files (checked as at Create: readable, PEM,
  // matching, within their dates). OK: handshakes from now on use the new pair, connections
  // already open keep theirs. An error names the file and changes nothing. OK and no-op for
  // plain HTTP. Thread-safe.
  absl::Status ReloadTls();

  // Open, refused and timed-out connections (HttpConnectionCounts). Thread-safe.
  HttpConnectionCounts connection_counts() const;

  // Whether the listener speaks HTTPS.
  bool tls() const { return tls_ != nullptr; }

  // Serves on a thread of its own until Shutdown.
  void Start();

  // Stops accepting, waits for the requests in progress, joins the thread. Idempotent.
  void Shutdown();

  // True from the start of Shutdown(): long-running handlers end when they see it.
  bool stopping() const { return stopping_.load(); }

  // The bound port (the one chosen when 0 was asked for).
  int port() const { return port_; }
  // "http://127.0.0.1:PORT" or "https://...".
  const std::string& url() const { return url_; }

 private:
  explicit HttpServer(const Options& options);

  // Answers a request to a protected route: the hook's decision, then `handler`.
  void Serve(const std::string& action, const Handler& handler, bool public_route,
             const httplib::Request& request, httplib::Response& response) const;

  // Constant after Create.
  const Options options_;
  // HTTPS: the certificate and key the handshakes use (server/http/http_server.cc); null for HTTP.
  std::shared_ptr<HttpTlsKeys> tls_;
  std::unique_ptr<GuardedServer> server_;
  // Every route's method and pattern, for 405 answers; written by Get/Post before Start only.
  struct Route {
    std::string method;
    std::regex pattern;
  };
  std::vector<Route> routes_;
  int port_ = 0;
  std::string url_;

  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};
  std::atomic<bool> loop_ended_{false};
  std::thread thread_;
};

// Splits "HOST:PORT" ("[::1]:PORT" for IPv6) and tells whether HOST is loopback (127.0.0.0/8,
// ::1, localhost). INVALID_ARGUMENT naming `field` otherwise.
struct HostPort {
  std::string host;  // Without brackets.
  int port = 0;
  bool loopback = false;
};
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address, absl::string_view field);

// The rule for http_listen's address: HOST:PORT, loopback unless `tls` (a certificate is
// configured). INVALID_ARGUMENT "http_listen: ..." otherwise. HttpServer::Create and
// `mpsd --check-config` (through CheckListenAddresses in server/server.h) both apply it.
absl::Status CheckHttpListen(absl::string_view address, bool tls);

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_HTTP_SERVER_H_
