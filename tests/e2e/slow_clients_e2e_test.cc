// mpsd's listeners against slow and many clients (issue 26, item 3: 100+ connections each
// sending a header line a second left /metrics and /healthz unanswered for as long as they
// lasted; "the gRPC port checked the same way"). A real mpsd, real sockets on loopback: the
// slow clients come from 127.0.0.2 and 127.0.0.3, the probes from 127.0.0.1. Bounded in count
// (at most 120 connections) and time (each test well under a minute).
#include <sys/resource.h>
#include <unistd.h>

#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/common/files.h"
#include "tests/common/raw_http.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using ::testing::HasSubstr;

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// The value of the series `name` (no labels) in Prometheus' text format, or -1.
double MetricValue(const std::string& text, const std::string& name) {
  std::smatch match;
  double value = -1;
  const std::regex line("(^|\n)" + name + " ([0-9.e+]+)\n");
  if (!std::regex_search(text, match, line) || !absl::SimpleAtod(match[2].str(), &value)) return -1;
  return value;
}

class HttpLimitsE2eTest : public ::testing::Test {
 protected:
  // Starts mpsd on 127.0.0.1:0 for HTTP with these `http_limits:` lines (YAML, indented).
  void StartDaemon(const std::string& limits) {
    const std::string config = dir_.str() + "/mpsd.yaml";
    WriteFile(config, absl::StrCat("http_listen: 127.0.0.1:0\nhttp_limits:\n", limits));
    daemon_ = std::make_unique<Daemon>(state_dir(), dir_.str() + "/mpsd.sock");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start({"--config", config}));
    ASSERT_TRUE(WaitUntil(
        [&] {
          std::smatch match;
          const std::string log = ReadFile(daemon_->log_path());
          static const std::regex kLine("/healthz on http://127\\.0\\.0\\.1:([0-9]+)");
          return std::regex_search(log, match, kLine) && absl::SimpleAtoi(match[1].str(), &port_);
        },
        absl::Seconds(30)))
        << ReadFile(daemon_->log_path());
    // The first start with an HTTP listener makes a tokens file with an admin token.
    token_ = Trimmed(ReadFile(state_dir() + "/admin.token"));
    ASSERT_FALSE(token_.empty());
  }

  void TearDown() override {
    if (daemon_ == nullptr || daemon_->pid() <= 0) return;
    const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  std::string state_dir() const { return dir_.str() + "/state"; }

  // GET `path` from 127.0.0.1 on a fresh connection (5 s to connect, 5 s per read).
  httplib::Result Get(const std::string& path, bool with_token = false) {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(5);
    client.set_read_timeout(5);
    if (!with_token) return client.Get(path.c_str());
    return client.Get(path.c_str(), {{"Authorization", "Bearer " + token_}});
  }

  // /metrics, once a scrape is admitted (a probe's connection just closed may still count
  // against the caps for a moment) and `done` holds for what it says; "" if not within 20 s.
  std::string ScrapeUntil(const std::function<bool(const std::string&)>& done) {
    std::string body;
    const bool ok = WaitUntil(
        [&] {
          httplib::Result metrics = Get("/metrics", /*with_token=*/true);
          body = metrics && metrics->status == 200 ? metrics->body : "";
          return !body.empty() && done(body);
        },
        absl::Seconds(20));
    return ok ? body : "";
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  int port_ = 0;
  std::string token_;
};

// 120 clients send a request line and then one header byte every 500 ms each (never silent
// for the 5 s that cpp-httplib's per-read timeout allows): /healthz and /metrics answer while
// they are all open, and each of them is cut at the 3 s request deadline, not when it stops.
TEST_F(HttpLimitsE2eTest, SlowClientsBlockNeitherHealthNorMetricsAndAreCutAtTheDeadline) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      "  request_timeout_s: 3\n  max_connections: 300\n  max_connections_per_address: 200\n"));
  constexpr int kSlow = 120;
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    const int fd = ConnectFrom("127.0.0.2", port_);
    ASSERT_GE(fd, 0) << "connection " << i;
    slow.push_back(fd);
    ASSERT_TRUE(SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: mpsd\r\nX-Slow: "));
  }
  std::vector<bool> closed(kSlow, false);
  int open_count = kSlow;
  int probes = 0;
  const absl::Time start = absl::Now();
  while (open_count > 0 && absl::Now() - start < absl::Seconds(30)) {
    if (probes < 2 && open_count == kSlow) {
      httplib::Result health = Get("/healthz");
      ASSERT_TRUE(health) << "no answer from /healthz with " << open_count << " slow clients";
      EXPECT_EQ(health->status, 200);
      EXPECT_EQ(health->body, "SERVING\n");
      httplib::Result metrics = Get("/metrics", /*with_token=*/true);
      ASSERT_TRUE(metrics) << "no answer from /metrics with " << open_count << " slow clients";
      EXPECT_EQ(metrics->status, 200);
      EXPECT_THAT(metrics->body, HasSubstr("mpsd_queue_depth"));
      ++probes;
    }
    absl::SleepFor(absl::Milliseconds(500));
    for (int i = 0; i < kSlow; ++i) {
      if (!closed[i] && (ClosedByPeer(slow[i]) || !SendAll(slow[i], "x"))) {
        closed[i] = true;
        --open_count;
      }
    }
  }
  EXPECT_GE(probes, 1) << "the slow clients were cut before the probes";
  EXPECT_EQ(open_count, 0) << "slow requests still open 30 s on (request_timeout_s 3)";
  for (int fd : slow) close(fd);
  httplib::Result after = Get("/healthz");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
  // Every slow one counted, and none left open but the scrape's own.
  EXPECT_NE(ScrapeUntil([&](const std::string& text) {
              return MetricValue(text, "mpsd_http_requests_timed_out_total") == kSlow &&
                     MetricValue(text, "mpsd_http_connections_open") == 1;
            }),
            "");
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ReadFile(daemon_->log_path())
                   .find("whose request had not arrived within http_limits.request_timeout_s") !=
               std::string::npos;
      },
      absl::Seconds(10)))
      << ReadFile(daemon_->log_path());
}

// Idle connections (a TCP connect and nothing more) up to the caps: the one beyond the
// per-address cap is answered 503 at once, other addresses are still served, and past the total
// cap everyone is refused until a connection ends.
TEST_F(HttpLimitsE2eTest, ConnectionsBeyondTheCapsAreRefusedWithA503) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      "  request_timeout_s: 60\n  max_connections: 10\n  max_connections_per_address: 5\n"));
  std::vector<int> idle;
  for (int i = 0; i < 5; ++i) idle.push_back(ConnectFrom("127.0.0.2", port_));
  // The per-address cap: a sixth from 127.0.0.2 is refused once the five are counted. (While
  // they are being counted a probe may take the place of one of them, which is then refused
  // and opened again.)
  std::string answer;
  ASSERT_TRUE(WaitUntil(
      [&] {
        Reopen(idle, "127.0.0.2", port_);
        const int fd = ConnectFrom("127.0.0.2", port_);
        answer.clear();
        const bool refused = WaitForClose(fd, absl::Seconds(2), &answer);
        close(fd);
        return refused && absl::StrContains(answer, "503");
      },
      absl::Seconds(20)));
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 503 Service Unavailable"));
  EXPECT_THAT(answer, HasSubstr("too many connections (http_limits)"));
  httplib::Result other = Get("/healthz");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  // The total cap: five more from 127.0.0.3 fill it, and 127.0.0.1 is refused too.
  std::vector<int> more;
  for (int i = 0; i < 5; ++i) more.push_back(ConnectFrom("127.0.0.3", port_));
  EXPECT_TRUE(WaitUntil(
      [&] {
        Reopen(idle, "127.0.0.2", port_);
        Reopen(more, "127.0.0.3", port_);
        httplib::Result refused = Get("/healthz");
        return refused && refused->status == 503 &&
               absl::StrContains(refused->body, "too many connections");
      },
      absl::Seconds(20)));
  close(more.back());
  more.pop_back();
  EXPECT_TRUE(WaitUntil(
      [&] {
        httplib::Result served = Get("/healthz");
        return served && served->status == 200;
      },
      absl::Seconds(20)));
  // The refusals counted (the per-address one, the total cap's), the 9 idle ones and the scrape
  // open.
  EXPECT_NE(ScrapeUntil([&](const std::string& text) {
              return MetricValue(text, "mpsd_http_connections_refused_total") >= 2 &&
                     MetricValue(text, "mpsd_http_connections_open") == 10;
            }),
            "");
  for (int fd : idle) close(fd);
  for (int fd : more) close(fd);
  EXPECT_THAT(ReadFile(daemon_->log_path()), HasSubstr("over http_limits"));
}

// Each limit is checked at start and by --check-config, naming the key.
TEST_F(HttpLimitsE2eTest, LimitsOutOfRangeStopTheStartNamingTheKey) {
  const std::string config = dir_.str() + "/bad.yaml";
  struct Case {
    std::string yaml, message;
  };
  for (const Case& c :
       {Case{"http_limits:\n  request_timeout_s: 0\n", "http_limits.request_timeout_s: must be"},
        Case{"http_limits:\n  max_connections: 0\n", "http_limits.max_connections: must be"},
        Case{"http_limits:\n  max_connections: 10\n  max_connections_per_address: 11\n",
             "http_limits.max_connections_per_address: must be >= 1 and <= max_connections"},
        Case{"http_limits:\n  max_connection: 10\n", "http_limits.max_connection: unknown key"},
        Case{"http_limits: 10\n", "http_limits: expected a mapping"}}) {
    WriteFile(config, c.yaml);
    const CommandResult check =
        RunCommandWithin({MpsdPath(), "--check-config", config}, absl::Seconds(30));
    EXPECT_NE(check.exit_code, 0) << c.yaml;
    EXPECT_THAT(check.err, HasSubstr(c.message)) << c.yaml;
  }
  WriteFile(config, "http_limits:\n  request_timeout_s: 2.5\n  max_connections: 20\n");
  const CommandResult good =
      RunCommandWithin({MpsdPath(), "--check-config", config}, absl::Seconds(30));
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_THAT(good.out, HasSubstr("http_limits.request_timeout_s: 2.5\n"));
  EXPECT_THAT(good.out, HasSubstr("http_limits.max_connections: 20\n"));
  EXPECT_THAT(good.out, HasSubstr("http_limits.max_connections_per_address: 20\n"));
}

// gRPC's TCP port: 100 connections that never send a byte (not even HTTP/2's preface) hold no
// thread, so a call still answers while they are open, and each is closed at the server's
// handshake deadline (10 s; gRPC's default was 120 s).
TEST(GrpcSlowClientsE2eTest, IdleConnectionsDoNotBlockCallsAndAreClosedAtTheHandshakeDeadline) {
  TempDir dir;
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  ASSERT_NO_FATAL_FAILURE(daemon.Start({"--listen", "127.0.0.1:0"}));
  const std::string address = TcpAddress(daemon);
  ASSERT_FALSE(address.empty());
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) << address;
  constexpr int kIdle = 100;
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = ConnectFrom("127.0.0.2", port);
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
  }
  const absl::Time start = absl::Now();
  const CommandResult status = RunCommandWithin({MpsctlPath(), "--server", address, "--token-file",
                                                 dir.str() + "/state/admin.token", "status"},
                                                absl::Seconds(30));
  EXPECT_EQ(status.exit_code, 0) << status.err;
  int open_count = kIdle;
  std::vector<bool> closed(kIdle, false);
  while (open_count > 0 && absl::Now() - start < absl::Seconds(40)) {
    absl::SleepFor(absl::Milliseconds(250));
    for (int i = 0; i < kIdle; ++i) {
      if (!closed[i] && ClosedByPeer(idle[i])) {
        closed[i] = true;
        --open_count;
      }
    }
  }
  EXPECT_EQ(open_count, 0) << "idle gRPC connections still open 40 s on";
  for (int fd : idle) close(fd);
  EXPECT_EQ(daemon.Stop(SIGTERM, absl::Seconds(60)), 0);
}

// gRPC 1.51 stops accepting on its listeners for good after accept() fails with EMFILE: under
// a soft limit of 1024 open files, 1100 idle TCP connections took the unix socket down with
// the TCP port until a restart. mpsd raises its soft limit to the hard one, so the same
// connections leave both answering.
TEST(GrpcSlowClientsE2eTest, IdleConnectionsDoNotRunTheDaemonOutOfFiles) {
  constexpr int kIdle = 1100;
  rlimit own{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &own), 0);
  if (own.rlim_max < kIdle + 200)
    GTEST_SKIP() << "the test itself needs " << kIdle + 200 << " files";
  if (own.rlim_cur < kIdle + 200) {
    own.rlim_cur = kIdle + 200;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &own), 0);
  }
  TempDir dir;
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  daemon.set_wrapper({"/usr/bin/prlimit", "--nofile=1024:8192", "--"});
  ASSERT_NO_FATAL_FAILURE(daemon.Start({"--listen", "127.0.0.1:0"}));
  const std::string address = TcpAddress(daemon);
  ASSERT_FALSE(address.empty());
  EXPECT_THAT(ReadFile(daemon.log_path()), HasSubstr("open files limit raised from 1024 to 8192"));
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) << address;
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = ConnectFrom(i % 2 == 0 ? "127.0.0.2" : "127.0.0.3", port);
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
  }
  for (const std::string& server : {"unix://" + dir.str() + "/mpsd.sock", address}) {
    const CommandResult status = RunCommandWithin({MpsctlPath(), "--server", server, "--token-file",
                                                   dir.str() + "/state/admin.token", "status"},
                                                  absl::Seconds(30));
    EXPECT_EQ(status.exit_code, 0) << server << ": " << status.err;
  }
  for (int fd : idle) close(fd);
  EXPECT_THAT(ReadFile(daemon.log_path()), ::testing::Not(HasSubstr("Too many open files")));
  EXPECT_EQ(daemon.Stop(SIGTERM, absl::Seconds(60)), 0);
}

}  // namespace
}  // namespace mpsd::testing
