// Tests server/config.cc: the YAML config file over the built-in defaults.
#include "server/config.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

using ::testing::HasSubstr;

class ConfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    std::ofstream(path_) << text;
    return path_;
  }
  void TearDown() override { std::filesystem::remove(path_); }

  const std::string path_ =
      ::testing::TempDir() + "/mpsd-config-test-" + std::to_string(::getpid()) + ".yaml";
};

TEST_F(ConfigTest, FileOverridesDefaults) {
  absl::StatusOr<Config> config =
      LoadConfig(Write("listen: 127.0.0.1:0\nmax_queued: 5\nshutdown_grace_s: 2.5\n"
                       "heartbeat_interval_s: 0.5\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen, std::vector<std::string>{"127.0.0.1:0"});
  EXPECT_EQ(config->max_queued, 5);
  EXPECT_DOUBLE_EQ(config->shutdown_grace_s, 2.5);
  EXPECT_DOUBLE_EQ(config->heartbeat_interval_s, 0.5);
  EXPECT_EQ(config->state_dir, DefaultConfig().state_dir);  // Not in the file: the default.
}

TEST_F(ConfigTest, ExecutorKeys) {
  absl::StatusOr<Config> config =
      LoadConfig(Write("executor:\n  path: /opt/mpsd/mpsd-executor\n  isolation: per_job\n"
                       "  restart_after_jobs: 10\n  restart_above_baseline_bytes: 1073741824\n"
                       "  cancel_grace_s: 2.5\n  memory_limit_bytes: 8589934592\n"
                       "  memory_fraction: 0.8\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->executor.path, "/opt/mpsd/mpsd-executor");
  EXPECT_EQ(config->executor.isolation, "per_job");
  EXPECT_EQ(config->executor.restart_after_jobs, 10);
  EXPECT_EQ(config->executor.restart_above_baseline_bytes, int64_t{1} << 30);
  EXPECT_DOUBLE_EQ(config->executor.cancel_grace_s, 2.5);
  EXPECT_EQ(config->executor.memory_limit_bytes, int64_t{8} << 30);
  EXPECT_DOUBLE_EQ(config->executor.memory_fraction, 0.8);
  // Not in the file: the defaults.
  absl::StatusOr<Config> defaults = LoadConfig(Write("executor: {}\n"));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->executor.path, "");
  EXPECT_EQ(defaults->executor.isolation, "shared");
  EXPECT_EQ(defaults->executor.restart_after_jobs, 0);
  EXPECT_DOUBLE_EQ(defaults->executor.cancel_grace_s, 30.0);
  EXPECT_DOUBLE_EQ(defaults->executor.user_code_timeout_s, 30.0);
  EXPECT_DOUBLE_EQ(defaults->executor.user_code_stall_timeout_s, 600.0);
}

TEST_F(ConfigTest, TensorBoardDir) {
  absl::StatusOr<Config> config = LoadConfig(Write("tensorboard_dir: /srv/tb\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tensorboard_dir, "/srv/tb");
  EXPECT_THAT(FormatConfig(*config), HasSubstr("tensorboard_dir: /srv/tb\n"));
  EXPECT_THAT(FormatConfig(*LoadConfig(Write("{}\n"))), HasSubstr("tensorboard_dir: (none)\n"));
  absl::StatusOr<Config> bad = LoadConfig(Write("tensorboard_dir: [a]\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("tensorboard_dir"));
}

// Issue 26: what one file a job names may cost is stated in the config and checked at start.
TEST_F(ConfigTest, InputLimits) {
  absl::StatusOr<Config> defaults = LoadConfig(Write("{}\n"));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->executor.input_limits.max_file_bytes, int64_t{16} << 30);
  EXPECT_EQ(defaults->executor.input_limits.max_image_pixels, int64_t{1} << 28);
  absl::StatusOr<Config> config =
      LoadConfig(Write("executor:\n  max_file_bytes: 2097152\n  max_unpacked_bytes: 4194304\n"
                       "  max_image_pixels: 1000\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->executor.input_limits.max_file_bytes, 2097152);
  EXPECT_EQ(config->executor.input_limits.max_unpacked_bytes, 4194304);
  EXPECT_EQ(config->executor.input_limits.max_image_pixels, 1000);
  EXPECT_THAT(FormatConfig(*config), HasSubstr("executor.max_unpacked_bytes: 4194304\n"));
  absl::StatusOr<Config> bad = LoadConfig(Write("executor:\n  max_file_bytes: 100\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("executor.max_file_bytes: must be in [1048576, 1099511627776], got 100"));
}

TEST_F(ConfigTest, UserCodeDeadlines) {
  absl::StatusOr<Config> config =
      LoadConfig(Write("executor:\n  user_code_timeout_s: 5\n  user_code_stall_timeout_s: 12.5\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->executor.user_code_timeout_s, 5.0);
  EXPECT_DOUBLE_EQ(config->executor.user_code_stall_timeout_s, 12.5);
  EXPECT_THAT(FormatConfig(*config), HasSubstr("executor.user_code_timeout_s: 5\n"));
  for (const std::string& text : {std::string("executor:\n  user_code_timeout_s: 0\n"),
                                  std::string("executor:\n  user_code_stall_timeout_s: .nan\n"),
                                  std::string("executor:\n  user_code_timeout_s: 1e9\n")}) {
    absl::StatusOr<Config> bad = LoadConfig(Write(text));
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("user_code_")) << text;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("must be >= 1 and <= 86400"))
        << text;
  }
}

// A key given twice was accepted and the last one won, so a typo'd copy-paste silently changed
// the daemon's settings: refused, naming the key and its second line, at every level.
TEST_F(ConfigTest, DuplicateKeysAreRefused) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      {"max_queued: 5\nmax_queued: 6\n", "max_queued: duplicate key (line 2)"},
      {"executor:\n  cancel_grace_s: 1\n  cancel_grace_s: 2\n",
       "executor.cancel_grace_s: duplicate key (line 3)"},
      {"executor: {}\nexecutor: {}\n", "executor: duplicate key (line 2)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Config> config = LoadConfig(Write(c.text));
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.expected)) << c.text;
  }
}

TEST_F(ConfigTest, ListenersTlsTokensAndDataRoots) {
  absl::StatusOr<Config> config = LoadConfig(
      Write("listen:\n  - unix:///tmp/a.sock\n  - 0.0.0.0:7070\n"
            "tls: {cert: /etc/mpsd/cert.pem, key: /etc/mpsd/key.pem, client_ca: /etc/mpsd/ca.pem}\n"
            "tokens_file: /etc/mpsd/tokens.yaml\ndata_roots: [/data, /scratch]\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen, (std::vector<std::string>{"unix:///tmp/a.sock", "0.0.0.0:7070"}));
  EXPECT_EQ(config->tls.cert, "/etc/mpsd/cert.pem");
  EXPECT_EQ(config->tls.key, "/etc/mpsd/key.pem");
  EXPECT_EQ(config->tls.client_ca, "/etc/mpsd/ca.pem");
  EXPECT_EQ(config->tokens_file, "/etc/mpsd/tokens.yaml");
  EXPECT_EQ(config->data_roots, (std::vector<std::string>{"/data", "/scratch"}));
  absl::StatusOr<Config> defaults = LoadConfig(Write("max_queued: 3\n"));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->listen.size(), 1u);
  EXPECT_FALSE(defaults->tls.enabled());
  EXPECT_EQ(defaults->tokens_file, "");
  EXPECT_TRUE(defaults->data_roots.empty());
}

TEST_F(ConfigTest, DeployedDefaultFileIsValid) {
  absl::StatusOr<Config> config = LoadConfig(std::string(MPSD_SOURCE_DIR) + "/deploy/mpsd.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_queued, DefaultConfig().max_queued);
  EXPECT_DOUBLE_EQ(config->heartbeat_interval_s, DefaultConfig().heartbeat_interval_s);
  EXPECT_DOUBLE_EQ(DefaultConfig().heartbeat_interval_s, 15.0);
}

TEST_F(ConfigTest, EmptyFileIsTheDefaults) {
  absl::StatusOr<Config> config = LoadConfig(Write(""));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen, DefaultConfig().listen);
}

TEST_F(ConfigTest, ErrorsNameTheFileAndTheKey) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      {"max_queud: 5\n", "max_queud: unknown key (known: "},
      {"max_queued: lots\n", "max_queued: expected an integer, got \"lots\""},
      {"max_queued: 0\n", "max_queued: must be >= 1"},
      {"log_level: loud\n", "log_level: expected one of trace, debug, info"},
      {"shutdown_grace_s: -1\n", "shutdown_grace_s: must be >= 0"},
      {"cpu_threads: -2\n", "cpu_threads: must be >= 0"},
      {"heartbeat_interval_s: 0\n", "heartbeat_interval_s: must be > 0"},
      {"heartbeat_interval_s: often\n", "heartbeat_interval_s: expected a number of seconds"},
      {"listen: {a: b}\n", "listen: expected a string or a list of strings"},
      {"listen: [[a]]\n", "listen[0]: expected a string"},
      {"tls: cert.pem\n", "tls: expected a mapping"},
      {"tls:\n  certificate: x\n", "tls.certificate: unknown key (known: cert, client_ca, key)"},
      {"data_roots: {a: b}\n", "data_roots: expected a string or a list of strings"},
      {"- just\n- a list\n", "expected a mapping"},
      {"max_queued: [\n", ":"},
      {"executor: per_job\n", "executor: expected a mapping"},
      {"executor:\n  isolaton: per_job\n", "executor.isolaton: unknown key (known: "},
      {"executor:\n  isolation: sometimes\n",
       "executor.isolation: expected shared or per_job, got \"sometimes\""},
      {"executor:\n  restart_after_jobs: -1\n", "executor.restart_after_jobs: must be >= 0"},
      {"executor:\n  memory_limit_bytes: 8G\n",
       "executor.memory_limit_bytes: expected a number of bytes, got \"8G\""},
      {"executor:\n  memory_fraction: 3\n", "executor.memory_fraction: must be in (0, 2]"},
      {"executor:\n  cancel_grace_s: -1\n", "executor.cancel_grace_s: must be >= 0"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Config> config = LoadConfig(Write(c.text));
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(path_)) << c.text;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.expected)) << c.text;
  }
}

// Every numeric key has an upper bound, as the job fields do: cpu_threads: 100000 started
// thousands of threads and mpsd never listened. NaN and infinity are out of range too.
TEST_F(ConfigTest, NumericKeysAreBounded) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      {"cpu_threads: 100000\n", "cpu_threads: must be >= 0 and <= 4096 (0 = one per core)"},
      {"max_queued: 2000000\n", "max_queued: must be >= 1 and <= 1000000, got 2000000"},
      {"shutdown_grace_s: .inf\n", "shutdown_grace_s: must be >= 0 and <= 86400"},
      {"shutdown_grace_s: .nan\n", "shutdown_grace_s: must be >= 0 and <= 86400"},
      {"heartbeat_interval_s: 1e9\n", "heartbeat_interval_s: must be > 0 seconds and <= 86400"},
      {"heartbeat_interval_s: .nan\n", "heartbeat_interval_s: must be > 0"},
      {"log_file_max_bytes: 9223372036854775807\n", "log_file_max_bytes: must be >= 1 and <= "},
      {"executor:\n  cancel_grace_s: 1e12\n", "executor.cancel_grace_s: must be >= 0 and <= 86400"},
      {"executor:\n  cancel_grace_s: .nan\n", "executor.cancel_grace_s: must be >= 0"},
      {"executor:\n  restart_after_jobs: 9000000000\n",
       "executor.restart_after_jobs: must be >= 0 and <= 1000000000 (0 = never)"},
      {"executor:\n  memory_limit_bytes: 9223372036854775807\n",
       "executor.memory_limit_bytes: must be >= 0 and <= 1125899906842624 (0 = none)"},
      {"executor:\n  restart_above_baseline_bytes: 9223372036854775807\n",
       "executor.restart_above_baseline_bytes: must be >= 0 and <= "},
      {"artifacts_retention:\n  keep_last_jobs: -1\n",
       "artifacts_retention.keep_last_jobs: must be >= 0 and <= 1000000000 (0 = no limit)"},
      {"artifacts_retention:\n  max_age_days: .nan\n",
       "artifacts_retention.max_age_days: must be >= 0 and <= 36500"},
      {"artifacts_retention:\n  max_bytes: 50GiB\n",
       "artifacts_retention.max_bytes: expected a number of bytes, got \"50GiB\""},
      {"artifacts_retention:\n  keep_last: 3\n", "artifacts_retention.keep_last: unknown key"},
      {"upload_quota_bytes: 0\n", "upload_quota_bytes: must be >= 1 and <= 1125899906842624"},
      {"upload_max_files: 0\n", "upload_max_files: must be >= 1 and <= 100000000, got 0"},
      {"http_limits:\n  request_timeout_s: .nan\n",
       "http_limits.request_timeout_s: must be >= 1 and <= 3600 (seconds)"},
      {"http_limits:\n  request_timeout_s: 0.5\n", "http_limits.request_timeout_s: must be >= 1"},
      {"http_limits:\n  max_connections: 10001\n",
       "http_limits.max_connections: must be >= 1 and <= 10000, got 10001"},
      {"http_limits:\n  max_connections_per_address: 0\n",
       "http_limits.max_connections_per_address: must be >= 1 and <= max_connections (256)"},
      {"http_limits:\n  max_connections: 8\n  max_connections_per_address: 9\n",
       "http_limits.max_connections_per_address: must be >= 1 and <= max_connections (8), got 9"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Config> config = LoadConfig(Write(c.text));
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(path_)) << c.text;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.expected)) << c.text;
  }
  // The bounds themselves are accepted.
  absl::StatusOr<Config> edges =
      LoadConfig(Write("cpu_threads: 4096\nmax_queued: 1000000\nshutdown_grace_s: 86400\n"
                       "heartbeat_interval_s: 86400\nexecutor:\n  cancel_grace_s: 0\n"));
  ASSERT_TRUE(edges.ok()) << edges.status();
  EXPECT_EQ(edges->cpu_threads, 4096);
}

// The HTTP listener's bounds (server/http/http_limits.h): defaults, overrides, and a total cap
// below the default per-address one pulls that one down with it.
TEST_F(ConfigTest, HttpLimits) {
  absl::StatusOr<Config> defaults = LoadConfig(Write("{}\n"));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->http_limits.request_timeout, absl::Seconds(10));
  EXPECT_EQ(defaults->http_limits.max_connections, 256);
  EXPECT_EQ(defaults->http_limits.max_connections_per_address, 64);
  absl::StatusOr<Config> set =
      LoadConfig(Write("http_limits:\n  request_timeout_s: 2.5\n  max_connections: 100\n"
                       "  max_connections_per_address: 7\n"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->http_limits.request_timeout, absl::Milliseconds(2500));
  EXPECT_EQ(set->http_limits.max_connections, 100);
  EXPECT_EQ(set->http_limits.max_connections_per_address, 7);
  EXPECT_THAT(FormatConfig(*set), HasSubstr("http_limits.request_timeout_s: 2.5\n"));
  EXPECT_THAT(FormatConfig(*set), HasSubstr("http_limits.max_connections_per_address: 7\n"));
  absl::StatusOr<Config> small = LoadConfig(Write("http_limits:\n  max_connections: 20\n"));
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->http_limits.max_connections_per_address, 20);
}

TEST_F(ConfigTest, MissingFileIsNotFound) {
  absl::StatusOr<Config> config = LoadConfig(path_ + ".missing");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(".missing"));
}

}  // namespace
}  // namespace mpsd::server
