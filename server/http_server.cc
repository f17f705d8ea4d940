// HttpServer: cpp-httplib's Server (or SSLServer), a token check in front of every route that
// is not public, and a thread that runs the accept loop.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

absl::Status CheckReadable(const std::string& path, absl::string_view what) {
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("http_listen: cannot read the TLS ", what, " file ", path));
  }
  return absl::OkStatus();
}

// The plain or TLS server the options ask for.
absl::StatusOr<std::unique_ptr<httplib::Server>> MakeServer(const HttpServer::Options& options) {
  if (options.tls_cert_path.empty() != options.tls_key_path.empty()) {
    return absl::InvalidArgumentError(
        "http_listen: TLS needs both a certificate and a key (--tls-cert and --tls-key)");
  }
  if (options.tls_cert_path.empty()) {
    if (!options.tls_client_ca_path.empty()) {
      return absl::InvalidArgumentError(
          "http_listen: --tls-client-ca needs --tls-cert and --tls-key");
    }
    return std::make_unique<httplib::Server>();
  }
  for (const auto& [path, what] : {std::pair{options.tls_cert_path, "certificate"},
                                   std::pair{options.tls_key_path, "key"},
                                   std::pair{options.tls_client_ca_path, "client CA"}}) {
    if (path.empty()) continue;
    if (absl::Status status = CheckReadable(path, what); !status.ok()) return status;
  }
  auto server = std::make_unique<httplib::SSLServer>(
      options.tls_cert_path.c_str(), options.tls_key_path.c_str(),
      options.tls_client_ca_path.empty() ? nullptr : options.tls_client_ca_path.c_str());
  if (!server->is_valid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "http_listen: cannot load the TLS certificate ", options.tls_cert_path, " with key ",
        options.tls_key_path,
        options.tls_client_ca_path.empty() ? "" : absl::StrCat(" and client CA ",
                                                               options.tls_client_ca_path),
        " (not PEM, or the key does not match the certificate)"));
  }
  return std::unique_ptr<httplib::Server>(std::move(server));
}

// What the hook's refusal becomes on the wire. The message is the hook's, which never holds the
// token.
void Refuse(const absl::Status& status, httplib::Response& response) {
  if (status.code() == absl::StatusCode::kPermissionDenied) {
    response.status = 403;
  } else {
    response.status = 401;
    response.set_header("WWW-Authenticate", "Bearer realm=\"mpsd\"");
  }
  response.set_content(absl::StrCat(status.message(), "\n"), "text/plain; charset=utf-8");
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address, absl::string_view field) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected HOST:PORT (e.g. 127.0.0.1:9464 or [::1]:9464), got \"", address,
        "\""));
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
  if (absl::Status s = CheckHttpListen(options.address, !options.tls_cert_path.empty());
      !s.ok()) {
    return s;
  }
  if (options.authorize == nullptr) {
    return absl::InvalidArgumentError("http_listen: no authorize hook (internal error)");
  }
  std::unique_ptr<HttpServer> http(new HttpServer(options));
  absl::StatusOr<std::unique_ptr<httplib::Server>> server = MakeServer(options);
  if (!server.ok()) return server.status();
  http->server_ = *std::move(server);
  const int threads = std::max(1, options.threads);
  http->server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Secrets never reach logs: no request logger is installed, and errors name only paths.
  http->server_->set_exception_handler(
      [](const httplib::Request& request, httplib::Response& response, std::exception_ptr) {
        spdlog::error("http: a handler of {} threw", request.path);
        response.status = 500;
        response.set_content("internal error\n", "text/plain; charset=utf-8");
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
  if (http->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("http_listen: cannot listen on ", options.address,
                                               " (in use, or not an address of this host)"));
  }
  const std::string host =
      host_port->host.find(':') != std::string::npos ? absl::StrCat("[", host_port->host, "]")
                                                     : host_port->host;
  http->url_ = absl::StrCat(tls ? "https://" : "http://", host, ":", http->port_);
  return http;
}

HttpServer::~HttpServer() { Shutdown(); }

void HttpServer::Get(const std::string& pattern, Handler handler, bool public_route) {
  const std::string action = absl::StrCat("GET ", pattern);
  server_->Get(pattern, [this, action, handler = std::move(handler), public_route](
                            const httplib::Request& request, httplib::Response& response) {
    Serve(action, handler, public_route, request, response);
  });
}

void HttpServer::Post(const std::string& pattern, Handler handler, bool public_route) {
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
    absl::StatusOr<HttpCaller> authorized =
        options_.authorize(request.get_header_value("Authorization"), action);
    if (!authorized.ok()) {
      spdlog::warn("http: {} from {}: {}", action, request.remote_addr,
                   std::string(authorized.status().message()));
      Refuse(authorized.status(), response);
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
