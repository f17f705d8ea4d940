// HttpServer: a real listener on 127.0.0.1 port 0 and cpp-httplib's client against it.
#include "server/http/http_server.h"

#include <atomic>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace mpsd::server {
namespace {

using ::testing::HasSubstr;

// Accepts "Bearer good" (caller "alice") and refuses everything else, saying why.
absl::StatusOr<HttpCaller> TestAuthorize(absl::string_view authorization, absl::string_view) {
  if (authorization == "Bearer good") return HttpCaller{"alice"};
  if (authorization == "Bearer viewer") return absl::PermissionDeniedError("needs role admin");
  return absl::UnauthenticatedError("missing or unknown token");
}

std::unique_ptr<HttpServer> Serve() {
  HttpServer::Options options;
  options.address = "127.0.0.1:0";
  options.authorize = TestAuthorize;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  (*server)->Get("/open", [](const HttpCaller& caller, const httplib::Request&,
                             httplib::Response& response) {
    response.set_content("open to '" + caller.name + "'", "text/plain");
  }, /*public_route=*/true);
  (*server)->Get("/closed", [](const HttpCaller& caller, const httplib::Request&,
                               httplib::Response& response) {
    response.set_content("hello " + caller.name, "text/plain");
  });
  (*server)->Get(R"(/jobs/(\d+))", [](const HttpCaller&, const httplib::Request& request,
                                      httplib::Response& response) {
    response.set_content("job " + request.matches[1].str(), "text/plain");
  });
  (*server)->Get(R"(/api/jobs/(\d+))", [](const HttpCaller&, const httplib::Request& request,
                                          httplib::Response& response) {
    response.set_content("{}", "application/json");
  });
  (*server)->Post(R"(/api/jobs/(\d+)/cancel)", [](const HttpCaller&, const httplib::Request&,
                                                 httplib::Response& response) {
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
  httplib::Result post = client.Post("/api/jobs/7", {{"Authorization", "Bearer good"}}, "",
                                     "text/plain");
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

TEST(ParseHostPortTest, SplitsAndClassifies) {
  struct Case {
    std::string address, host;
    int port;
    bool loopback;
  };
  for (const Case& c : {Case{"127.0.0.1:9464", "127.0.0.1", 9464, true},
                        Case{"127.1.2.3:0", "127.1.2.3", 0, true},
                        Case{"localhost:80", "localhost", 80, true},
                        Case{"[::1]:9464", "::1", 9464, true},
                        Case{"0.0.0.0:9464", "0.0.0.0", 9464, false},
                        Case{"[::]:1", "::", 1, false},
                        Case{"10.0.0.2:9464", "10.0.0.2", 9464, false}}) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(c.address, "http_listen");
    ASSERT_TRUE(parsed.ok()) << c.address << ": " << parsed.status();
    EXPECT_EQ(parsed->host, c.host) << c.address;
    EXPECT_EQ(parsed->port, c.port) << c.address;
    EXPECT_EQ(parsed->loopback, c.loopback) << c.address;
  }
  for (const std::string bad : {"", "9464", ":9464", "host:", "host:99999", "::1:9464",
                                "[::1:9464", "127.0.0.1:-1", "127.0.0.1:http"}) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(bad, "http_listen");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("http_listen: expected HOST:PORT")) << bad;
  }
}

}  // namespace
}  // namespace mpsd::server
