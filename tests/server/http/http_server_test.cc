// HttpServer: a real listener on 127.0.0.1 port 0 and cpp-httplib's client against it.
#include "server/http/http_server.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/common/raw_http.h"

namespace mpsd::server {
namespace {

using ::testing::HasSubstr;

// Accepts "Bearer good" (caller "alice") and refuses everything else, saying why.
absl::StatusOr<HttpCaller> TestAuthorize(absl::string_view authorization, absl::string_view) {
  if (authorization == "Bearer good") return HttpCaller{"alice"};
  if (authorization == "Bearer viewer") return absl::PermissionDeniedError("needs role admin");
  return absl::UnauthenticatedError("missing or unknown token");
}

std::unique_ptr<HttpServer> Serve(const HttpLimits& limits = HttpLimits()) {
  HttpServer::Options options;
  options.address = "127.0.0.1:0";
  options.authorize = TestAuthorize;
  options.limits = limits;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  (*server)->Get(
      "/open",
      [](const HttpCaller& caller, const httplib::Request&, httplib::Response& response) {
        response.set_content("open to '" + caller.name + "'", "text/plain");
      },
      /*public_route=*/true);
  (*server)->Get("/closed", [](const HttpCaller& caller, const httplib::Request&,
                               httplib::Response& response) {
    response.set_content("hello " + caller.name, "text/plain");
  });
  (*server)->Get(R"(/jobs/(\d+))", [](const HttpCaller&, const httplib::Request& request,
                                      httplib::Response& response) {
    response.set_content("job " + request.matches[1].str(), "text/plain");
  });
  (*server)->Get(R"(/api/jobs/(\d+))",
                 [](const HttpCaller&, const httplib::Request&, httplib::Response& response) {
                   response.set_content("{}", "application/json");
                 });
  (*server)->Post(R"(/api/jobs/(\d+)/cancel)",
                  [](const HttpCaller&, const httplib::Request&, httplib::Response& response) {
                    response.set_content("{}", "application/json");
                  });
  (*server)->Start();
  return *std::move(server);
}

TEST(HttpServerTest, PublicRoutesNeedNoTokenOthersGoThroughTheHook) {
  std::unique_ptr<HttpServer> server = Serve();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->port(), 0);
  EXPECT_EQ(server->url(), "http://127.0.0.1:" + std::to_string(server->port()));
  httplib::Client client("127.0.0.1", server->port());

  httplib::Result open = client.Get("/open");
  ASSERT_TRUE(open);
  EXPECT_EQ(open->status, 200);
  EXPECT_EQ(open->body, "open to ''");

  httplib::Result anonymous = client.Get("/closed");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(anonymous->get_header_value("WWW-Authenticate"), "Bearer realm=\"mpsd\"");
  EXPECT_EQ(anonymous->body, "missing or unknown token\n");

  httplib::Result denied = client.Get("/closed", {{"Authorization", "Bearer viewer"}});
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 403);
  EXPECT_EQ(denied->body, "needs role admin\n");

  httplib::Result good = client.Get("/closed", {{"Authorization", "Bearer good"}});
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200);
  EXPECT_EQ(good->body, "hello alice");

  httplib::Result job = client.Get("/jobs/42", {{"Authorization", "Bearer good"}});
  ASSERT_TRUE(job);
  EXPECT_EQ(job->body, "job 42");
  httplib::Result job_anonymous = client.Get("/jobs/42");
  ASSERT_TRUE(job_anonymous);
  EXPECT_EQ(job_anonymous->status, 401);
}

// Two Authorization headers were accepted and the first won; a proxy in front may have checked
// the other. Refused with 400 whatever the two say.
TEST(HttpServerTest, TwoAuthorizationHeadersAreRefused) {
  std::unique_ptr<HttpServer> server = Serve();
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  httplib::Headers headers = {{"Authorization", "Bearer good"}, {"Authorization", "Bearer good"}};
  httplib::Result twice = client.Get("/closed", headers);
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->status, 400);
  EXPECT_EQ(twice->body, "more than one Authorization header\n");
  httplib::Result once = client.Get("/closed", {{"Authorization", "Bearer good"}});
  ASSERT_TRUE(once);
  EXPECT_EQ(once->status, 200);
}

// Under /api/ a refusal is the API's JSON error, as its other errors are (it was plain text).
TEST(HttpServerTest, ApiRefusalsAreJson) {
  std::unique_ptr<HttpServer> server = Serve();
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  httplib::Result anonymous = client.Get("/api/jobs/7");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(anonymous->get_header_value("WWW-Authenticate"), "Bearer realm=\"mpsd\"");
  EXPECT_EQ(anonymous->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(anonymous->body,
            "{\"code\":\"UNAUTHENTICATED\",\"message\":\"missing or unknown token\"}");
  httplib::Result denied = client.Get("/api/jobs/7", {{"Authorization", "Bearer viewer"}});
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 403);
  EXPECT_EQ(denied->body, "{\"code\":\"PERMISSION_DENIED\",\"message\":\"needs role admin\"}");
}

// A GET on a POST-only route answered 404 "no such API path"; it is 405 with Allow.
TEST(HttpServerTest, AnotherMethodOnARouteIs405WithAllow) {
  std::unique_ptr<HttpServer> server = Serve();
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  httplib::Result get = client.Get("/api/jobs/7/cancel", {{"Authorization", "Bearer good"}});
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  EXPECT_THAT(get->body, HasSubstr("GET is not allowed here; this path takes POST"));
  httplib::Result post =
      client.Post("/api/jobs/7", {{"Authorization", "Bearer good"}}, "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET");
  httplib::Result nowhere = client.Get("/api/nothing", {{"Authorization", "Bearer good"}});
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);
  EXPECT_THAT(nowhere->body, HasSubstr("no such API path"));
}

TEST(HttpServerTest, ShutdownEndsServingAndIsIdempotent) {
  std::unique_ptr<HttpServer> server = Serve();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  EXPECT_FALSE(server->stopping());
  server->Shutdown();
  EXPECT_TRUE(server->stopping());
  server->Shutdown();
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2);
  EXPECT_FALSE(client.Get("/open"));
}

TEST(HttpServerTest, ShutdownWithoutStartReturns) {
  HttpServer::Options options;
  options.address = "127.0.0.1:0";
  options.authorize = TestAuthorize;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Create(options);
  ASSERT_TRUE(server.ok());
  (*server)->Shutdown();
}

TEST(HttpServerTest, NonLoopbackWithoutTlsIsRefused) {
  HttpServer::Options options;
  options.authorize = TestAuthorize;
  for (const std::string address : {"0.0.0.0:0", "[::]:0", "192.0.2.1:9464"}) {
    options.address = address;
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Create(options);
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(server.status().message(), HasSubstr("needs TLS")) << address;
    EXPECT_THAT(server.status().message(), HasSubstr("--tls-cert")) << address;
  }
}

TEST(HttpServerTest, TlsFilesAreCheckedAndNamed) {
  HttpServer::Options options;
  options.address = "127.0.0.1:0";
  options.authorize = TestAuthorize;
  options.tls_cert_path = "/nonexistent/cert.pem";
  absl::StatusOr<std::unique_ptr<HttpServer>> no_key = HttpServer::Create(options);
  EXPECT_EQ(no_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_key.status().message(), HasSubstr("both a certificate and a key"));
  options.tls_key_path = "/nonexistent/key.pem";
  absl::StatusOr<std::unique_ptr<HttpServer>> missing = HttpServer::Create(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/cert.pem"));
}

TEST(HttpServerTest, AnAddressInUseIsUnavailable) {
  std::unique_ptr<HttpServer> first = Serve();
  ASSERT_NE(first, nullptr);
  HttpServer::Options options;
  options.address = "127.0.0.1:" + std::to_string(first->port());
  options.authorize = TestAuthorize;
  absl::StatusOr<std::unique_ptr<HttpServer>> second = HttpServer::Create(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(options.address));
}

// ---- Limits (issue 26, item 3: 64 clients each sending a header line a second held every worker
// and /healthz went unanswered) ---------------------------------------------------------------

using mpsd::testing::ClosedByPeer;
using mpsd::testing::ConnectFrom;
using mpsd::testing::SendAll;
using mpsd::testing::WaitForClose;

// GET /open from 127.0.0.1 on a fresh connection: the status, or -1 when there is no answer.
int OpenStatus(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  httplib::Result result = client.Get("/open");
  return result ? result->status : -1;
}

// 100 clients (from 127.0.0.2) each send a request's first line, then a header byte every
// 200 ms: well inside the per-read timeout, so only a deadline for the whole request ends them.
TEST(HttpServerLimitsTest, TricklingRequestsAreClosedAtTheirDeadlineAndBlockNoOne) {
  HttpLimits limits;
  limits.request_timeout = absl::Seconds(2);
  limits.max_connections = 200;
  limits.max_connections_per_address = 150;
  std::unique_ptr<HttpServer> server = Serve(limits);
  ASSERT_NE(server, nullptr);
  constexpr int kSlow = 100;
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    const int fd = ConnectFrom("127.0.0.2", server->port());
    ASSERT_GE(fd, 0) << "connection " << i;
    slow.push_back(fd);
    ASSERT_TRUE(SendAll(fd, "GET /open HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  }
  std::vector<bool> closed(kSlow, false);
  int open_count = kSlow;
  int probes = 0;
  const absl::Time start = absl::Now();
  // Bounded: the deadline is 2 s; 20 s is the most this waits for every one of them to be cut.
  while (open_count > 0 && absl::Now() - start < absl::Seconds(20)) {
    for (int i = 0; i < kSlow; ++i) {
      if (closed[i]) continue;
      if (ClosedByPeer(slow[i]) || !SendAll(slow[i], "a")) {
        closed[i] = true;
        --open_count;
      }
    }
    // While (nearly) all of them are still open, others are served.
    if (probes < 3 && open_count >= kSlow * 9 / 10) {
      EXPECT_EQ(OpenStatus(server->port()), 200) << "probe " << probes;
      ++probes;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_GE(probes, 1) << "the slow clients were cut before anyone else asked";
  EXPECT_EQ(open_count, 0) << "slow requests still open after 20 s (deadline 2 s)";
  for (int fd : slow) close(fd);
  EXPECT_EQ(OpenStatus(server->port()), 200);
}

// Of `fds` (connections just opened), how many the server has refused: waits until at least
// one is, then a moment more for the rest of their admissions.
int Refused(const std::vector<int>& fds) {
  std::vector<bool> closed(fds.size(), false);
  auto count = [&] {
    int n = 0;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!closed[i] && ClosedByPeer(fds[i])) closed[i] = true;
      n += closed[i] ? 1 : 0;
    }
    return n;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (count() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  absl::SleepFor(absl::Milliseconds(300));
  return count();
}

TEST(HttpServerLimitsTest, ConnectionsBeyondTheCapsAreRefusedAtOnce) {
  HttpLimits limits;
  limits.request_timeout = absl::Seconds(60);  // Idle connections stay for the whole test.
  limits.max_connections = 6;
  limits.max_connections_per_address = 3;
  std::unique_ptr<HttpServer> server = Serve(limits);
  ASSERT_NE(server, nullptr);
  // One address: its fourth connection is refused, with a 503 saying why.
  std::vector<int> first;
  for (int i = 0; i < 4; ++i) first.push_back(ConnectFrom("127.0.0.2", server->port()));
  EXPECT_EQ(Refused(first), 1);
  const int extra = ConnectFrom("127.0.0.2", server->port());
  std::string answer;
  EXPECT_TRUE(WaitForClose(extra, absl::Seconds(10), &answer));
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 503"));
  EXPECT_THAT(answer, HasSubstr("too many connections"));
  close(extra);
  // Another address is still served.
  EXPECT_EQ(OpenStatus(server->port()), 200);
  // All of them together: 3 + 3 is the total cap, a third address is refused too.
  std::vector<int> second;
  for (int i = 0; i < 3; ++i) second.push_back(ConnectFrom("127.0.0.3", server->port()));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int status = 0;
  // (While they are being counted a probe may take the place of one of them, which is then
  // refused and opened again.)
  while (absl::Now() < deadline) {
    mpsd::testing::Reopen(second, "127.0.0.3", server->port());
    if ((status = OpenStatus(server->port())) == 503) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(status, 503);
  // A connection that ends frees its place.
  close(second.back());
  second.pop_back();
  const absl::Time again = absl::Now() + absl::Seconds(10);
  while ((status = OpenStatus(server->port())) != 200 && absl::Now() < again) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(status, 200);
  for (int fd : first) close(fd);
  for (int fd : second) close(fd);
}

// Sends `data` a byte every 200 ms until the server closes the connection (true) or 20 s pass.
bool TrickleUntilClosed(int fd, const std::string& data, std::string& received) {
  const absl::Time start = absl::Now();
  size_t next = 0;
  char buffer[4096];
  while (absl::Now() - start < absl::Seconds(20)) {
    for (;;) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
      if (n < 0) break;
      received.append(buffer, static_cast<size_t>(n));
    }
    if (next < data.size() && !SendAll(fd, data.substr(next++, 1))) return true;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return false;
}

// The deadline covers a request's body, and each request of a kept-alive connection; a request
// that misses it is closed without an answer.
TEST(HttpServerLimitsTest, ABodyAndAKeptAliveRequestHaveTheDeadlineToo) {
  HttpLimits limits;
  limits.request_timeout = absl::Seconds(2);
  std::unique_ptr<HttpServer> server = Serve(limits);
  ASSERT_NE(server, nullptr);
  const int body = ConnectFrom("127.0.0.2", server->port());
  ASSERT_TRUE(SendAll(body,
                      "POST /api/jobs/7/cancel HTTP/1.1\r\nHost: x\r\n"
                      "Authorization: Bearer good\r\nContent-Length: 100\r\n\r\n"));
  std::string received;
  EXPECT_TRUE(TrickleUntilClosed(body, std::string(100, 'b'), received))
      << "a body trickled for 20 s was not cut (deadline 2 s)";
  EXPECT_EQ(received, "");
  close(body);

  const int kept = ConnectFrom("127.0.0.2", server->port());
  ASSERT_TRUE(SendAll(kept, "GET /open HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string first;
  const std::string second = "GET /open HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(100, 'x');
  EXPECT_TRUE(TrickleUntilClosed(kept, second, first))
      << "a second request trickled for 20 s was not cut (deadline 2 s)";
  EXPECT_THAT(first, HasSubstr("HTTP/1.1 200 OK"));
  EXPECT_EQ(first.find("HTTP/1.1", first.find("HTTP/1.1") + 1), std::string::npos) << first;
  close(kept);
}

// HTTPS: the deadline covers the TLS handshake. Clients that trickle a ClientHello a byte every
// 200 ms are cut; a real client is served meanwhile.
TEST(HttpServerLimitsTest, TricklingTlsHandshakesAreClosedAtTheDeadline) {
  char dir_template[] = "/tmp/mpsd-http-tls-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string command =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
      "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 -keyout " +
      dir + "/server.key -out " + dir + "/server.pem 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  HttpServer::Options options;
  options.address = "127.0.0.1:0";
  options.authorize = TestAuthorize;
  options.tls_cert_path = dir + "/server.pem";
  options.tls_key_path = dir + "/server.key";
  options.limits.request_timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<HttpServer>> created = HttpServer::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<HttpServer> server = *std::move(created);
  server->Get(
      "/open",
      [](const HttpCaller&, const httplib::Request&, httplib::Response& response) {
        response.set_content("tls", "text/plain");
      },
      /*public_route=*/true);
  server->Start();
  constexpr int kSlow = 20;
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(ConnectFrom("127.0.0.2", server->port()));
    ASSERT_GE(slow.back(), 0);
    ASSERT_TRUE(SendAll(slow.back(), std::string("\x16\x03\x01\x02\x00", 5)));
  }
  httplib::SSLClient client("127.0.0.1", server->port());
  client.enable_server_certificate_verification(false);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  httplib::Result served = client.Get("/open");
  ASSERT_TRUE(served) << httplib::to_string(served.error());
  EXPECT_EQ(served->body, "tls");
  int open_count = kSlow;
  std::vector<bool> closed(kSlow, false);
  const absl::Time start = absl::Now();
  while (open_count > 0 && absl::Now() - start < absl::Seconds(20)) {
    absl::SleepFor(absl::Milliseconds(200));
    for (int i = 0; i < kSlow; ++i) {
      if (!closed[i] && (ClosedByPeer(slow[i]) || !SendAll(slow[i], std::string(1, '\x01')))) {
        closed[i] = true;
        --open_count;
      }
    }
  }
  EXPECT_EQ(open_count, 0) << "trickling TLS handshakes still open after 20 s (deadline 2 s)";
  for (int fd : slow) close(fd);
  std::filesystem::remove_all(dir);
}

TEST(HttpServerLimitsTest, LimitsOutOfRangeAreRefusedByName) {
  HttpServer::Options options;
  options.address = "127.0.0.1:0";
  options.authorize = TestAuthorize;
  options.limits.max_connections = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> no_connections = HttpServer::Create(options);
  EXPECT_EQ(no_connections.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_connections.status().message(), HasSubstr("http_limits.max_connections:"));
  options.limits = HttpLimits();
  options.limits.max_connections_per_address = options.limits.max_connections + 1;
  absl::StatusOr<std::unique_ptr<HttpServer>> per_address = HttpServer::Create(options);
  EXPECT_THAT(per_address.status().message(),
              HasSubstr("http_limits.max_connections_per_address:"));
  options.limits = HttpLimits();
  options.limits.request_timeout = absl::Milliseconds(10);
  absl::StatusOr<std::unique_ptr<HttpServer>> too_short = HttpServer::Create(options);
  EXPECT_THAT(too_short.status().message(), HasSubstr("http_limits.request_timeout_s:"));
}

TEST(ParseHostPortTest, SplitsAndClassifies) {
  struct Case {
    std::string address, host;
    int port;
    bool loopback;
  };
  for (const Case& c :
       {Case{"127.0.0.1:9464", "127.0.0.1", 9464, true}, Case{"127.1.2.3:0", "127.1.2.3", 0, true},
        Case{"localhost:80", "localhost", 80, true}, Case{"[::1]:9464", "::1", 9464, true},
        Case{"0.0.0.0:9464", "0.0.0.0", 9464, false}, Case{"[::]:1", "::", 1, false},
        Case{"10.0.0.2:9464", "10.0.0.2", 9464, false}}) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(c.address, "http_listen");
    ASSERT_TRUE(parsed.ok()) << c.address << ": " << parsed.status();
    EXPECT_EQ(parsed->host, c.host) << c.address;
    EXPECT_EQ(parsed->port, c.port) << c.address;
    EXPECT_EQ(parsed->loopback, c.loopback) << c.address;
  }
  for (const std::string bad : {"", "9464", ":9464", "host:", "host:99999", "::1:9464", "[::1:9464",
                                "127.0.0.1:-1", "127.0.0.1:http"}) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(bad, "http_listen");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("http_listen: expected HOST:PORT")) << bad;
  }
}

}  // namespace
}  // namespace mpsd::server
