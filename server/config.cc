// Config: defaults, then YAML, each key checked by name and type.
#include "server/config.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/decimal.h"
#include "api/default_address.h"
#include "yaml-cpp/yaml.h"

namespace mpsd::server {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

template <typename T>
absl::Status ReadScalar(const YAML::Node& node, const std::string& where, const char* expected,
                        T& out) {
  if (!node.IsScalar())
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected ", expected));
  try {
    out = node.as<T>();
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected ", expected, ", got \"", node.Scalar(), "\""));
  }
  return absl::OkStatus();
}

using FieldReader = std::function<absl::Status(const YAML::Node&, const std::string&)>;

// Upper bounds of the numeric keys, as the job fields are bounded: a value beyond them is a
// typo, not a wish (cpu_threads: 100000 started thousands of threads, and mpsd never listened).
constexpr int kMaxCpuThreads = 4096;  // as BenchJob.cpu_threads
constexpr int kMaxQueued = 1'000'000;
constexpr int64_t kMaxRestartAfterJobs = 1'000'000'000;
constexpr int64_t kMaxBytes = int64_t{1} << 50;  // 1 PiB
constexpr double kMaxSeconds = 86'400;           // a day

// "KEY: must be >= MIN and <= MAX (NOTE), got VALUE" unless min <= value <= max (false for NaN).
template <typename T>
absl::Status CheckRange(absl::string_view where, absl::string_view key, T value, T min, T max,
                        absl::string_view note = "") {
  if (value >= min && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, key, ": must be >= ", min, " and <= ", max,
                                                 note.empty() ? "" : " (", note,
                                                 note.empty() ? "" : ")", ", got ", value));
}

// Reads `node` (a mapping) with `fields`; errors name `where` and the key.
absl::Status ReadMapping(const YAML::Node& node, const std::string& where,
                         const std::map<std::string, FieldReader>& fields) {
  if (!node.IsMap()) return absl::InvalidArgumentError(absl::StrCat(where, ": expected a mapping"));
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const std::string field_where = absl::StrCat(where, ".", key);
    // yaml-cpp keeps both entries of a repeated key; silently taking one would hide a mistake.
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(field_where, ": duplicate key (line ",
                                                     entry.first.Mark().line + 1,
                                                     "); each key may appear once"));
    }
    auto field = fields.find(key);
    if (field == fields.end()) {
      std::vector<std::string> known;
      for (const auto& [name, read] : fields) known.push_back(name);
      return absl::InvalidArgumentError(
          absl::StrCat(field_where, ": unknown key (known: ", absl::StrJoin(known, ", "), ")"));
    }
    if (absl::Status status = field->second(entry.second, field_where); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

// A string or a list of strings.
absl::Status ReadStrings(const YAML::Node& node, const std::string& where,
                         std::vector<std::string>& out) {
  out.clear();
  if (node.IsScalar()) {
    out.push_back(node.Scalar());
    return absl::OkStatus();
  }
  if (!node.IsSequence()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected a string or a list of strings"));
  }
  for (size_t i = 0; i < node.size(); ++i) {
    if (!node[i].IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "[", i, "]: expected a string"));
    }
    out.push_back(node[i].Scalar());
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": empty list"));
  return absl::OkStatus();
}

absl::Status ReadTlsConfig(const YAML::Node& node, const std::string& where, TlsFiles& tls) {
  const std::map<std::string, FieldReader> fields = {
      {"cert", [&](auto& n, auto& w) { return ReadScalar(n, w, "a PEM file's path", tls.cert); }},
      {"key", [&](auto& n, auto& w) { return ReadScalar(n, w, "a PEM file's path", tls.key); }},
      {"client_ca",
       [&](auto& n, auto& w) { return ReadScalar(n, w, "a PEM file's path", tls.client_ca); }},
  };
  return ReadMapping(node, where, fields);
}

absl::Status ReadRetention(const YAML::Node& node, const std::string& where,
                           RetentionPolicy& policy) {
  const std::map<std::string, FieldReader> fields = {
      {"keep_last_jobs",
       [&](auto& n, auto& w) { return ReadScalar(n, w, "an integer", policy.keep_last_jobs); }},
      {"max_age_days",
       [&](auto& n, auto& w) { return ReadScalar(n, w, "a number of days", policy.max_age_days); }},
      {"max_bytes",
       [&](auto& n, auto& w) { return ReadScalar(n, w, "a number of bytes", policy.max_bytes); }},
  };
  if (absl::Status s = ReadMapping(node, where, fields); !s.ok()) return s;
  const std::string prefix = absl::StrCat(where, ".");
  for (absl::Status s :
       {CheckRange(prefix, "keep_last_jobs", policy.keep_last_jobs, 0, 1000000000, "0 = no limit"),
        CheckRange(prefix, "max_age_days", policy.max_age_days, 0.0, 36500.0, "0 = no limit"),
        CheckRange<int64_t>(prefix, "max_bytes", policy.max_bytes, 0, kMaxBytes, "0 = no limit")}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ReadHttpLimits(const YAML::Node& node, const std::string& where, HttpLimits& limits) {
  double request_timeout_s = absl::ToDoubleSeconds(limits.request_timeout);
  bool per_address_given = false;
  const std::map<std::string, FieldReader> fields = {
      {"request_timeout_s",
       [&](auto& n, auto& w) {
         return ReadScalar(n, w, "a number of seconds", request_timeout_s);
       }},
      {"max_connections",
       [&](auto& n, auto& w) { return ReadScalar(n, w, "an integer", limits.max_connections); }},
      {"max_connections_per_address",
       [&](auto& n, auto& w) {
         per_address_given = true;
         return ReadScalar(n, w, "an integer", limits.max_connections_per_address);
       }},
  };
  if (absl::Status s = ReadMapping(node, where, fields); !s.ok()) return s;
  // Unsaid, the per-address cap follows a total cap set below it.
  if (!per_address_given) {
    limits.max_connections_per_address =
        std::min(limits.max_connections_per_address, std::max(1, limits.max_connections));
  }
  if (absl::Status s = CheckRange(absl::StrCat(where, "."), "request_timeout_s", request_timeout_s,
                                  1.0, 3600.0, "seconds");
      !s.ok()) {
    return s;
  }
  limits.request_timeout = absl::Seconds(request_timeout_s);
  return CheckHttpLimits(limits, where);
}

absl::Status ReadExecutorConfig(const YAML::Node& node, const std::string& where,
                                ExecutorConfig& config) {
  const std::map<std::string, FieldReader> fields = {
      {"path", [&](auto& n, auto& w) { return ReadScalar(n, w, "a string", config.path); }},
      {"isolation",
       [&](auto& n, auto& w) { return ReadScalar(n, w, "shared or per_job", config.isolation); }},
      {"restart_after_jobs",
       [&](auto& n, auto& w) { return ReadScalar(n, w, "an integer", config.restart_after_jobs); }},
      {"restart_above_baseline_bytes",
       [&](auto& n, auto& w) {
         return ReadScalar(n, w, "a number of bytes", config.restart_above_baseline_bytes);
       }},
      {"cancel_grace_s",
       [&](auto& n, auto& w) {
         return ReadScalar(n, w, "a number of seconds", config.cancel_grace_s);
       }},
      {"memory_limit_bytes",
       [&](auto& n, auto& w) {
         return ReadScalar(n, w, "a number of bytes", config.memory_limit_bytes);
       }},
      {"memory_fraction",
       [&](auto& n, auto& w) { return ReadScalar(n, w, "a number", config.memory_fraction); }},
      {"mps_fallback",
       [&](auto& n, auto& w) { return ReadScalar(n, w, "true or false", config.mps_fallback); }},
      {"user_code_timeout_s",
       [&](auto& n, auto& w) {
         return ReadScalar(n, w, "a number of seconds", config.user_code_timeout_s);
       }},
      {"user_code_stall_timeout_s",
       [&](auto& n, auto& w) {
         return ReadScalar(n, w, "a number of seconds", config.user_code_stall_timeout_s);
       }},
      {"max_file_bytes",
       [&](auto& n, auto& w) {
         return ReadScalar(n, w, "a number of bytes", config.input_limits.max_file_bytes);
       }},
      {"max_unpacked_bytes",
       [&](auto& n, auto& w) {
         return ReadScalar(n, w, "a number of bytes", config.input_limits.max_unpacked_bytes);
       }},
      {"max_image_pixels",
       [&](auto& n, auto& w) {
         return ReadScalar(n, w, "a number of pixels", config.input_limits.max_image_pixels);
       }},
  };
  if (absl::Status s = ReadMapping(node, where, fields); !s.ok()) return s;
  auto bad = [&where](absl::string_view key, absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": ", problem));
  };
  if (config.isolation != "shared" && config.isolation != "per_job") {
    return bad("isolation",
               absl::StrCat("expected shared or per_job, got \"", config.isolation, "\""));
  }
  const std::string prefix = absl::StrCat(where, ".");
  for (absl::Status s :
       {CheckRange<int64_t>(prefix, "restart_after_jobs", config.restart_after_jobs, 0,
                            kMaxRestartAfterJobs, "0 = never"),
        CheckRange<int64_t>(prefix, "restart_above_baseline_bytes",
                            config.restart_above_baseline_bytes, 0, kMaxBytes, "0 = never"),
        CheckRange<double>(prefix, "cancel_grace_s", config.cancel_grace_s, 0, kMaxSeconds,
                           "seconds"),
        CheckRange<int64_t>(prefix, "memory_limit_bytes", config.memory_limit_bytes, 0, kMaxBytes,
                            "0 = none"),
        CheckRange<double>(prefix, "user_code_timeout_s", config.user_code_timeout_s, 1,
                           kMaxSeconds, "seconds"),
        CheckRange<double>(prefix, "user_code_stall_timeout_s", config.user_code_stall_timeout_s, 1,
                           kMaxSeconds, "seconds")}) {
    if (!s.ok()) return s;
  }
  if (!(config.memory_fraction >= 0 && config.memory_fraction <= 2)) {
    return bad("memory_fraction", absl::StrCat("must be in (0, 2] (0 = PyTorch's default), got ",
                                               config.memory_fraction));
  }
  return api::CheckInputLimits(config.input_limits, where);
}

}  // namespace

std::string DefaultStateDir() {
  if (const std::string state_home = EnvOr("XDG_STATE_HOME", ""); !state_home.empty()) {
    return absl::StrCat(state_home, "/mpsd");
  }
  if (const std::string home = EnvOr("HOME", ""); !home.empty()) {
#if defined(__APPLE__)
    return absl::StrCat(home, "/Library/Application Support/mpsd");
#else
    return absl::StrCat(home, "/.local/state/mpsd");
#endif
  }
  return absl::StrCat("/tmp/mpsd-", getuid(), "/state");
}

std::string DefaultListenAddress() { return api::DefaultListenAddress(); }

Config DefaultConfig() {
  Config config;
  config.listen = {DefaultListenAddress()};
  config.state_dir = DefaultStateDir();
  return config;
}

absl::StatusOr<Config> LoadConfig(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": config file not found"));
  }
  if (!std::filesystem::is_regular_file(path)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  Config config = DefaultConfig();
  if (root.IsNull()) return config;
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(path, ": expected a mapping"));
  const std::map<std::string, std::function<absl::Status(const YAML::Node&, const std::string&)>>
      fields = {
          {"listen", [&](auto& n, auto& w) { return ReadStrings(n, w, config.listen); }},
          {"tls", [&](auto& n, auto& w) { return ReadTlsConfig(n, w, config.tls); }},
          {"tokens_file",
           [&](auto& n, auto& w) { return ReadScalar(n, w, "a path", config.tokens_file); }},
          {"data_roots", [&](auto& n, auto& w) { return ReadStrings(n, w, config.data_roots); }},
          {"http_listen",
           [&](auto& n, auto& w) { return ReadScalar(n, w, "HOST:PORT", config.http_listen); }},
          {"http_limits",
           [&](auto& n, auto& w) { return ReadHttpLimits(n, w, config.http_limits); }},
          {"state_dir",
           [&](auto& n, auto& w) {
             if (absl::Status s = ReadScalar(n, w, "a directory", config.state_dir); !s.ok()) {
               return s;
             }
             if (!config.state_dir.empty()) return absl::OkStatus();
             return absl::InvalidArgumentError(
                 absl::StrCat(w,
                              ": empty; name a directory, or leave the key out for the "
                              "default"));
           }},
          {"tensorboard_dir",
           [&](auto& n, auto& w) {
             return ReadScalar(n, w, "a directory", config.tensorboard_dir);
           }},
          {"max_queued",
           [&](auto& n, auto& w) { return ReadScalar(n, w, "an integer", config.max_queued); }},
          {"cpu_threads",
           [&](auto& n, auto& w) { return ReadScalar(n, w, "an integer", config.cpu_threads); }},
          {"shutdown_grace_s",
           [&](auto& n, auto& w) {
             return ReadScalar(n, w, "a number of seconds", config.shutdown_grace_s);
           }},
          {"heartbeat_interval_s",
           [&](auto& n, auto& w) {
             return ReadScalar(n, w, "a number of seconds", config.heartbeat_interval_s);
           }},
          {"log_level",
           [&](auto& n, auto& w) { return ReadScalar(n, w, "a string", config.log_level); }},
          {"log_file",
           [&](auto& n, auto& w) { return ReadScalar(n, w, "a string", config.log_file); }},
          {"log_file_max_bytes",
           [&](auto& n, auto& w) {
             return ReadScalar(n, w, "an integer", config.log_file_max_bytes);
           }},
          {"log_file_max_files",
           [&](auto& n, auto& w) {
             return ReadScalar(n, w, "an integer", config.log_file_max_files);
           }},
          {"executor", [&](auto& n, auto& w) { return ReadExecutorConfig(n, w, config.executor); }},
          {"artifacts_retention",
           [&](auto& n, auto& w) { return ReadRetention(n, w, config.artifacts_retention); }},
          {"upload_quota_bytes",
           [&](auto& n, auto& w) {
             return ReadScalar(n, w, "an integer", config.upload_quota_bytes);
           }},
          {"upload_max_files",
           [&](auto& n, auto& w) {
             return ReadScalar(n, w, "an integer", config.upload_max_files);
           }},
      };
  std::set<std::string> seen;
  for (const auto& entry : root) {
    const std::string key = entry.first.Scalar();
    const std::string where = absl::StrCat(path, ": ", key);
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": duplicate key (line ",
                                                     entry.first.Mark().line + 1,
                                                     "); each key may appear once"));
    }
    auto field = fields.find(key);
    if (field == fields.end()) {
      std::vector<std::string> known;
      for (const auto& [name, read] : fields) known.push_back(name);
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown key (known: ", absl::StrJoin(known, ", "), ")"));
    }
    if (absl::Status status = field->second(entry.second, where); !status.ok()) return status;
  }
  const std::string prefix = absl::StrCat(path, ": ");
  for (absl::Status s :
       {CheckRange(prefix, "cpu_threads", config.cpu_threads, 0, kMaxCpuThreads,
                   "0 = one per core"),
        CheckRange(prefix, "max_queued", config.max_queued, 1, kMaxQueued),
        CheckRange<int64_t>(prefix, "log_file_max_bytes", config.log_file_max_bytes, 1, kMaxBytes),
        CheckRange<int64_t>(prefix, "upload_quota_bytes", config.upload_quota_bytes, 1, kMaxBytes),
        CheckRange<int64_t>(prefix, "upload_max_files", config.upload_max_files, 1, 100'000'000),
        CheckRange(prefix, "shutdown_grace_s", config.shutdown_grace_s, 0.0, kMaxSeconds,
                   "seconds")}) {
    if (!s.ok()) return s;
  }
  static const std::vector<std::string> kLevels = {"trace", "debug",    "info", "warn",
                                                   "error", "critical", "off"};
  if (std::find(kLevels.begin(), kLevels.end(), config.log_level) == kLevels.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": log_level: expected one of ",
                                                   absl::StrJoin(kLevels, ", "), ", got \"",
                                                   config.log_level, "\""));
  }
  if (config.log_file_max_files < 1 || config.log_file_max_files > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": log_file_max_files: must be 1 to 1000, got ", config.log_file_max_files));
  }
  if (!(config.heartbeat_interval_s > 0 && config.heartbeat_interval_s <= kMaxSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": heartbeat_interval_s: must be > 0 seconds and <= ", kMaxSeconds,
                     ", got ", config.heartbeat_interval_s));
  }
  return config;
}

std::string FormatConfig(const Config& config) {
  auto text = [](const std::string& value) { return value.empty() ? "(none)" : value; };
  auto list = [](const std::vector<std::string>& values) {
    return values.empty() ? std::string("(none)") : absl::StrJoin(values, ", ");
  };
  const ExecutorConfig& executor = config.executor;
  const std::vector<std::pair<std::string, std::string>> lines = {
      {"listen", list(config.listen)},
      {"state_dir", text(config.state_dir)},
      {"executor.path", text(executor.path)},
      {"tls.cert", text(config.tls.cert)},
      {"tls.key", text(config.tls.key)},
      {"tls.client_ca", text(config.tls.client_ca)},
      {"tokens_file", text(config.tokens_file)},
      {"data_roots", list(config.data_roots)},
      {"http_listen", text(config.http_listen)},
      {"http_limits.request_timeout_s",
       api::ShortestDecimal(absl::ToDoubleSeconds(config.http_limits.request_timeout))},
      {"http_limits.max_connections", absl::StrCat(config.http_limits.max_connections)},
      {"http_limits.max_connections_per_address",
       absl::StrCat(config.http_limits.max_connections_per_address)},
      {"tensorboard_dir", text(config.tensorboard_dir)},
      {"max_queued", absl::StrCat(config.max_queued)},
      {"cpu_threads", absl::StrCat(config.cpu_threads)},
      {"shutdown_grace_s", api::ShortestDecimal(config.shutdown_grace_s)},
      {"heartbeat_interval_s", api::ShortestDecimal(config.heartbeat_interval_s)},
      {"log_level", config.log_level},
      {"log_file", text(config.log_file)},
      {"log_file_max_bytes", absl::StrCat(config.log_file_max_bytes)},
      {"log_file_max_files", absl::StrCat(config.log_file_max_files)},
      {"executor.isolation", executor.isolation},
      {"executor.restart_after_jobs", absl::StrCat(executor.restart_after_jobs)},
      {"executor.restart_above_baseline_bytes",
       absl::StrCat(executor.restart_above_baseline_bytes)},
      {"executor.cancel_grace_s", api::ShortestDecimal(executor.cancel_grace_s)},
      {"executor.memory_limit_bytes", absl::StrCat(executor.memory_limit_bytes)},
      {"executor.memory_fraction", api::ShortestDecimal(executor.memory_fraction)},
      {"executor.mps_fallback", executor.mps_fallback ? "true" : "false"},
      {"executor.user_code_timeout_s", api::ShortestDecimal(executor.user_code_timeout_s)},
      {"executor.user_code_stall_timeout_s",
       api::ShortestDecimal(executor.user_code_stall_timeout_s)},
      {"executor.max_file_bytes", absl::StrCat(executor.input_limits.max_file_bytes)},
      {"executor.max_unpacked_bytes", absl::StrCat(executor.input_limits.max_unpacked_bytes)},
      {"executor.max_image_pixels", absl::StrCat(executor.input_limits.max_image_pixels)},
      {"artifacts_retention.keep_last_jobs",
       absl::StrCat(config.artifacts_retention.keep_last_jobs)},
      {"artifacts_retention.max_age_days",
       api::ShortestDecimal(config.artifacts_retention.max_age_days)},
      {"artifacts_retention.max_bytes", absl::StrCat(config.artifacts_retention.max_bytes)},
      {"upload_quota_bytes", absl::StrCat(config.upload_quota_bytes)},
      {"upload_max_files", absl::StrCat(config.upload_max_files)},
  };
  std::string out;
  for (const auto& [key, value] : lines) absl::StrAppend(&out, key, ": ", value, "\n");
  return out;
}

}  // namespace mpsd::server
