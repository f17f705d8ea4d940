// The connection handling under mpsd's HTTP listener: cpp-httplib's Server with its per-socket
// step replaced, so that a connection has a deadline for its request (TLS handshake, headers
// and body together, not per read), a thread of its own, and a place under two caps (total, per
// client address). Internal to server/http; HttpServer (http_server.h) is the public face.
//
// Why not cpp-httplib's own: Debian 12's 0.11 has only per-read timeouts and a fixed worker pool,
// so 64 clients sending a header byte every few seconds held every worker and /healthz went
// unanswered for as long as they kept at it (issue 26, item 3). Its extension points are used
// as they are meant to be (Server::process_request, httplib::Stream, httplib::TaskQueue); the
// HTTP parsing, routing and response writing stay cpp-httplib's.
#ifndef MPSD_SERVER_HTTP_GUARDED_SERVER_H_
#define MPSD_SERVER_HTTP_GUARDED_SERVER_H_

#include <openssl/ssl.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "httplib.h"
#include "server/http/http_limits.h"

namespace mpsd::server {

// Connections open at once, in total and per client address. Thread-safe.
class ConnectionCounts {
 public:
  ConnectionCounts(int max_total, int max_per_address)
      : max_total_(max_total), max_per_address_(max_per_address) {}
  // Counts a connection from `address` unless that would pass either cap (false: not counted).
  bool Admit(const std::string& address);
  // Forgets one admitted connection from `address`.
  void Release(const std::string& address);
  // Connections admitted and not yet released.
  int open() const;

 private:
  const int max_total_;
  const int max_per_address_;
  mutable absl::Mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> per_address_ ABSL_GUARDED_BY(mu_);
};

class GuardedStream;

// cpp-httplib's Server, each accepted connection served as this file's header says. `tls`: an
// SSL_CTX set up for the server side (taken over: freed with the server), or null for plain HTTP.
// Threads: as httplib::Server; connections are served on threads of their own (at most
// max_connections and a few being refused), all joined when listen_after_bind returns after stop().
class GuardedServer : public httplib::Server {
 public:
  GuardedServer(SSL_CTX* tls, const HttpLimits& limits);
  ~GuardedServer() override;

  bool is_valid() const override { return true; }

  // After bind_to_port: deepens the listening socket's accept queue to `backlog` (cpp-httplib
  // listens with 5, so a burst of a few more connections than that waited a second for their
  // SYN's retransmission). False if it could not.
  bool SetBacklog(int backlog);

  // Open, refused and timed-out connections. Thread-safe.
  HttpConnectionCounts counts() const;

 private:
  // Runs on the connection's own thread: admission, TLS handshake, the requests, close.
  bool process_and_close_socket(socket_t sock) override;
  // Serves requests on `stream` until the client or keep-alive ends it; false on a read/write
  // failure.
  bool ServeRequests(GuardedStream& stream);
  // Writes a short 503 (plain HTTP only; TLS has no handshake yet) and logs, rate-limited.
  void Refuse(socket_t sock, const std::string& address);
  bool running() const { return svr_sock_ != INVALID_SOCKET; }

  SSL_CTX* const tls_;
  const HttpLimits limits_;
  ConnectionCounts counts_;
  // For the rate-limited warnings: refusals and request timeouts since the last warning.
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> timed_out_{0};
  std::atomic<int64_t> last_warning_ms_{0};
  // The same, since the server was made.
  std::atomic<int64_t> refused_total_{0};
  std::atomic<int64_t> timed_out_total_{0};
  void MaybeWarn();
  friend class GuardedStream;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_GUARDED_SERVER_H_
