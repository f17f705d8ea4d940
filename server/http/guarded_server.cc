// GuardedServer: a thread per connection under two caps, and a stream whose reads share one
// deadline per request.
#include "server/http/guarded_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <list>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

// Set on a thread that must refuse the connection it is handed (ConnectionThreads at its cap).
thread_local bool t_refuse_connection = false;

// send() flags: no SIGPIPE from a closed connection where the flag exists (Linux); elsewhere
// (macOS) the socket gets SO_NOSIGPIPE, which covers OpenSSL's writes too.
#ifdef MSG_NOSIGNAL
constexpr int kSendFlags = MSG_NOSIGNAL;
#else
constexpr int kSendFlags = 0;
#endif

// How often a wait looks whether the server is stopping.
constexpr absl::Duration kStopPoll = absl::Milliseconds(200);
// Warnings about refused or timed-out connections: at most one per this.
constexpr int64_t kWarningIntervalMs = 60'000;

// httplib::TaskQueue that runs each accepted connection on a thread of its own, so that a slow
// client holds only its own thread. Past `max_threads` live threads (connections beyond the cap
// are refused at once, but their threads take a moment to end) the connection is refused on the
// accepting thread itself instead of starting another thread.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(size_t max_threads) : max_threads_(max_threads) {}
  ~ConnectionThreads() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    absl::MutexLock lock(&mu_);
    Reap();
    if (workers_.size() < max_threads_) {
      workers_.emplace_back();
      Worker& worker = workers_.back();
      try {
        worker.thread = std::thread([fn, done = &worker.done] {
          fn();
          done->store(true);
        });
        return;
      } catch (const std::system_error&) {
        workers_.pop_back();  // No thread to be had (EAGAIN): refused as beyond the cap.
      }
    }
    t_refuse_connection = true;
    fn();
    t_refuse_connection = false;
  }

  // Joins every connection's thread (they end once the server stops: see GuardedStream).
  void shutdown() override {
    std::list<Worker> workers;
    {
      absl::MutexLock lock(&mu_);
      workers.swap(workers_);
    }
    for (Worker& worker : workers) {
      if (worker.thread.joinable()) worker.thread.join();
    }
  }

 private:
  struct Worker {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done.load()) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const size_t max_threads_;
  absl::Mutex mu_;
  // A list: a Worker's address is its thread's `done` flag, so elements never move.
  std::list<Worker> workers_ ABSL_GUARDED_BY(mu_);
};

std::string PeerAddress(int sock) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(sock, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&address)->sin_addr, text, sizeof(text));
  } else if (address.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr, text, sizeof(text));
  }
  return text;
}

void IpAndPort(int sock, bool remote, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int rc = remote ? getpeername(sock, reinterpret_cast<sockaddr*>(&address), &length)
                        : getsockname(sock, reinterpret_cast<sockaddr*>(&address), &length);
  if (rc != 0) return;
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<sockaddr_in*>(&address);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    port = ntohs(in->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    port = ntohs(in6->sin6_port);
  }
  ip = text;
}

absl::Duration TimevalDuration(time_t sec, time_t usec) {
  return absl::Seconds(sec) + absl::Microseconds(usec);
}

}  // namespace

// httplib::Stream over a non-blocking socket, plain or TLS. Every read of a request, its TLS
// handshake included, waits at most until the request's deadline (and at most the per-read
// timeout); the deadline lifts at the first write of the answer, which may then take its time.
// Waits end within kStopPoll of the server stopping. One thread uses it.
class GuardedStream : public httplib::Stream {
 public:
  GuardedStream(GuardedServer* server, int sock, SSL* ssl, absl::Time deadline)
      : server_(server), sock_(sock), ssl_(ssl), deadline_(deadline) {}

  // The next request's deadline (a kept-alive connection's next request).
  void set_deadline(absl::Time deadline) { deadline_ = deadline; }
  bool timed_out() const { return timed_out_; }
  // A read failed (or timed out): the connection cannot carry another request.
  bool failed() const { return end_ < 0; }
  SSL* ssl() const { return ssl_; }

  // The TLS handshake, within the deadline. False: no TLS session (the caller closes).
  bool Handshake() {
    for (;;) {
      const int rc = SSL_accept(ssl_);
      if (rc == 1) return true;
      if (!WaitFor(SSL_get_error(ssl_, rc), ReadWait())) {
        ERR_clear_error();
        return false;
      }
    }
  }

  // Whether the client sends something within `timeout` (keep-alive's wait for the next request).
  bool WaitForRequest(absl::Duration timeout) {
    if (Buffered()) return true;
    return Wait(POLLIN, absl::Now() + timeout);
  }

  bool is_readable() const override { return Buffered() || Wait(POLLIN, ReadWait()); }
  bool is_writable() const override { return Wait(POLLOUT, WriteWait()); }

  ssize_t read(char* ptr, size_t size) override {
    if (end_ < 0) return -1;  // Failed (or timed out) before: stays failed.
    if (begin_ == end_ && !Fill()) return end_ < 0 ? -1 : 0;
    const size_t n = std::min(size, static_cast<size_t>(end_ - begin_));
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += static_cast<int>(n);
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    // cpp-httplib answers a request it could not read with 400; one that ran out of time gets
    // nothing but the close (it is not a bad request, and it may not be reading either).
    if (timed_out_) return -1;
    deadline_ = absl::InfiniteFuture();  // The request is in: answering is not bounded by it.
    if (size == 0) return 0;
    for (;;) {
      if (ssl_ != nullptr) {
        const int rc = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
        if (rc > 0) return rc;
        if (!WaitFor(SSL_get_error(ssl_, rc), WriteWait())) return -1;
      } else {
        const ssize_t n = send(sock_, ptr, size, kSendFlags);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if ((errno != EAGAIN && errno != EWOULDBLOCK) || !Wait(POLLOUT, WriteWait())) return -1;
      }
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    IpAndPort(sock_, /*remote=*/true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    IpAndPort(sock_, /*remote=*/false, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  bool Buffered() const { return begin_ < end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0); }

  absl::Time ReadWait() const {
    return std::min(deadline_, absl::Now() + TimevalDuration(server_->read_timeout_sec_,
                                                             server_->read_timeout_usec_));
  }
  absl::Time WriteWait() const {
    return absl::Now() + TimevalDuration(server_->write_timeout_sec_, server_->write_timeout_usec_);
  }

  // Reads what has come into the buffer. False: end of stream (end_ 0) or failure (end_ -1).
  bool Fill() {
    begin_ = end_ = 0;
    for (;;) {
      if (ssl_ != nullptr) {
        const int rc = SSL_read(ssl_, buffer_, sizeof(buffer_));
        if (rc > 0) {
          end_ = rc;
          return true;
        }
        const int error = SSL_get_error(ssl_, rc);
        if (error == SSL_ERROR_ZERO_RETURN) return false;
        if (!WaitFor(error, ReadWait())) break;
      } else {
        const ssize_t n = recv(sock_, buffer_, sizeof(buffer_), 0);
        if (n > 0) {
          end_ = static_cast<int>(n);
          return true;
        }
        if (n == 0) return false;
        if (errno == EINTR) continue;
        if ((errno != EAGAIN && errno != EWOULDBLOCK) || !Wait(POLLIN, ReadWait())) break;
      }
    }
    ERR_clear_error();
    end_ = -1;
    return false;
  }

  // After an SSL call answered `error`: waits for what it wants, until `until`.
  bool WaitFor(int error, absl::Time until) const {
    if (error == SSL_ERROR_WANT_READ) return Wait(POLLIN, until);
    if (error == SSL_ERROR_WANT_WRITE) return Wait(POLLOUT, until);
    return false;
  }

  // Polls for `events` until `until`, in slices that notice the server stopping. A read wait
  // that ends at the request's deadline marks the stream timed out.
  bool Wait(short events, absl::Time until) const {
    for (;;) {
      // Stopping ends waits for a request; an answer being written gets its write timeout.
      if (events == POLLIN && !server_->running()) return false;
      const absl::Time now = absl::Now();
      if (now >= until) {
        if (events == POLLIN && until >= deadline_) timed_out_ = true;
        return false;
      }
      pollfd fd{sock_, events, 0};
      const int rc =
          poll(&fd, 1,
               static_cast<int>(absl::ToInt64Milliseconds(std::min(until - now, kStopPoll)) + 1));
      if (rc > 0) return true;
      if (rc < 0 && errno != EINTR) return false;
    }
  }

  GuardedServer* const server_;
  const int sock_;
  SSL* const ssl_;
  absl::Time deadline_;
  // Set by a wait that reached the request's deadline.
  mutable bool timed_out_ = false;
  char buffer_[4096];
  int begin_ = 0;
  int end_ = 0;
};

absl::Status CheckHttpLimits(const HttpLimits& limits, absl::string_view where) {
  if (limits.request_timeout < absl::Seconds(1) || limits.request_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".request_timeout_s: must be >= 1 and <= 3600 (seconds), got ",
                     absl::ToDoubleSeconds(limits.request_timeout)));
  }
  if (limits.max_connections < 1 || limits.max_connections > 10000) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".max_connections: must be >= 1 and <= 10000, got ", limits.max_connections));
  }
  if (limits.max_connections_per_address < 1 ||
      limits.max_connections_per_address > limits.max_connections) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".max_connections_per_address: must be >= 1 and <= max_connections (",
                     limits.max_connections, "), got ", limits.max_connections_per_address));
  }
  return absl::OkStatus();
}

bool ConnectionCounts::Admit(const std::string& address) {
  absl::MutexLock lock(&mu_);
  int& mine = per_address_[address];
  if (total_ >= max_total_ || mine >= max_per_address_) {
    if (mine == 0) per_address_.erase(address);
    return false;
  }
  ++total_;
  ++mine;
  return true;
}

void ConnectionCounts::Release(const std::string& address) {
  absl::MutexLock lock(&mu_);
  --total_;
  auto it = per_address_.find(address);
  if (it != per_address_.end() && --it->second <= 0) per_address_.erase(it);
}

int ConnectionCounts::open() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

GuardedServer::GuardedServer(SSL_CTX* tls, const HttpLimits& limits)
    : tls_(tls),
      limits_(limits),
      counts_(limits.max_connections, limits.max_connections_per_address) {
  // Room for the threads of connections being refused (they end at once) beyond the cap.
  const size_t max_threads = static_cast<size_t>(limits.max_connections) + 64;
  new_task_queue = [max_threads] { return new ConnectionThreads(max_threads); };
}

GuardedServer::~GuardedServer() {
  if (tls_ != nullptr) SSL_CTX_free(tls_);
}

bool GuardedServer::SetBacklog(int backlog) {
  // listen() again on a listening socket changes its backlog (Linux, the BSDs).
  return svr_sock_ != INVALID_SOCKET && ::listen(svr_sock_, backlog) == 0;
}

HttpConnectionCounts GuardedServer::counts() const {
  HttpConnectionCounts counts;
  counts.open = counts_.open();
  counts.refused = refused_total_.load();
  counts.timed_out = timed_out_total_.load();
  return counts;
}

void GuardedServer::MaybeWarn() {
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  int64_t last = last_warning_ms_.load();
  if (now_ms - last < kWarningIntervalMs ||
      !last_warning_ms_.compare_exchange_strong(last, now_ms)) {
    return;
  }
  const int64_t refused = refused_.exchange(0);
  const int64_t timed_out = timed_out_.exchange(0);
  if (refused > 0) {
    spdlog::warn(
        "http: refused {} connection(s) over http_limits (max_connections {}, "
        "max_connections_per_address {}) since the last warning",
        refused, limits_.max_connections, limits_.max_connections_per_address);
  }
  if (timed_out > 0) {
    spdlog::warn(
        "http: closed {} connection(s) whose request had not arrived within "
        "http_limits.request_timeout_s ({}) since the last warning",
        timed_out, absl::ToDoubleSeconds(limits_.request_timeout));
  }
}

void GuardedServer::Refuse(socket_t sock, const std::string& address) {
  refused_.fetch_add(1);
  refused_total_.fetch_add(1);
  MaybeWarn();
  spdlog::debug("http: refused a connection from {} (over http_limits)", address);
  if (tls_ != nullptr) return;
  static constexpr char kAnswer[] =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
      "Content-Length: 46\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
      "too many connections (http_limits); try again\n";
  // Best effort, never waiting: the client may not be reading.
  (void)send(sock, kAnswer, sizeof(kAnswer) - 1, kSendFlags | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
}

bool GuardedServer::ServeRequests(GuardedStream& stream) {
  const absl::Duration keep_alive = absl::Seconds(keep_alive_timeout_sec_);
  // As cpp-httplib's own TLS server: handlers may look at the session.
  const std::function<void(httplib::Request&)> setup = [&stream](httplib::Request& request) {
    request.ssl = stream.ssl();
  };
  bool ok = false;
  for (size_t count = keep_alive_max_count_; count > 0 && running(); --count) {
    if (count != keep_alive_max_count_) {
      if (!stream.WaitForRequest(keep_alive)) break;
      stream.set_deadline(absl::Now() + limits_.request_timeout);
    }
    bool connection_closed = false;
    ok = process_request(stream, /*close_connection=*/count == 1, connection_closed, setup);
    if (!ok || connection_closed || stream.failed()) break;
  }
  return ok;
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  const absl::Time deadline = absl::Now() + limits_.request_timeout;
  const std::string address = PeerAddress(sock);
  if (t_refuse_connection || !counts_.Admit(address)) {
    Refuse(sock, address);
    ::close(sock);
    return false;
  }
  fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
#ifdef SO_NOSIGPIPE
  const int one = 1;
  setsockopt(sock, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#endif
  SSL* ssl = nullptr;
  if (tls_ != nullptr) {
    ssl = SSL_new(tls_);
    if (ssl != nullptr) SSL_set_fd(ssl, sock);
  }
  GuardedStream stream(this, sock, ssl, deadline);
  bool ok = false;
  if (tls_ == nullptr || (ssl != nullptr && stream.Handshake())) ok = ServeRequests(stream);
  if (stream.timed_out()) {
    timed_out_.fetch_add(1);
    timed_out_total_.fetch_add(1);
    MaybeWarn();
  }
  if (ssl != nullptr) {
    if (ok) SSL_shutdown(ssl);
    SSL_free(ssl);
    ERR_clear_error();
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  counts_.Release(address);
  return ok;
}

}  // namespace mpsd::server
