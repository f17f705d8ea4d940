// Bounds on the HTTP listener's connections: the config's `http_limits:` mapping
// (docs/operations.md, "Metrics and health over HTTP"), enforced by server/http/guarded_server.h.
#ifndef MPSD_SERVER_HTTP_HTTP_LIMITS_H_
#define MPSD_SERVER_HTTP_HTTP_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mpsd::server {

struct HttpLimits {
  // A request's TLS handshake (on a new connection), headers and body must all have arrived
  // within this of the connection's accept (on a kept-alive connection: of the request's first
  // byte), whatever pace they trickle in at; else the connection is closed. Not a bound on the
  // answer: an event stream may stay open as long as it has something to say. In [1 s, 1 h].
  absl::Duration request_timeout = absl::Seconds(10);
  // Connections open at once, all clients together: one more is answered 503 (plain HTTP) or
  // closed (HTTPS: before any handshake) at once. Each open connection holds a thread. In
  // [1, 10000].
  int max_connections = 256;
  // Connections open at once from one client address (the same refusal), in
  // [1, max_connections]; the config's default is 64 or max_connections if that is lower.
  // Behind a reverse proxy every client has the proxy's address.
  int max_connections_per_address = 64;
};

// What the listener's connections have come to (the mpsd_http_* series of /metrics).
struct HttpConnectionCounts {
  // Connections open now (admitted, not yet closed).
  int64_t open = 0;
  // Connections refused over a cap since the listener was created.
  int64_t refused = 0;
  // Connections closed because a request missed request_timeout, since the same.
  int64_t timed_out = 0;
};

// OK, or INVALID_ARGUMENT "WHERE.KEY: must be ..., got VALUE" for the first bound out of range
// (the config's key names: request_timeout_s, max_connections, max_connections_per_address).
absl::Status CheckHttpLimits(const HttpLimits& limits, absl::string_view where = "http_limits");

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_HTTP_LIMITS_H_
