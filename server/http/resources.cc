// ResourceSampler: the executor's CPU and memory from /proc, GPU utilisation from NVML.
#include "server/http/resources.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/http/nvml.h"

namespace mpsd::server {
namespace {

// utime + stime of /proc/PID/stat (fields 14 and 15, after the parenthesised command name,
// which may hold spaces), seconds; nullopt without /proc or the process.
std::optional<double> CpuSeconds(int pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(file, line)) return std::nullopt;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
  // fields[0] is field 3 (state): utime is field 14, stime field 15.
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return std::nullopt;
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  return static_cast<double>(utime + stime) / static_cast<double>(ticks > 0 ? ticks : 100);
}

// VmRSS of /proc/PID/status, bytes.
std::optional<int64_t> ResidentBytes(int pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

ResourceSampler::ResourceSampler(Options options)
    : options_(std::move(options)), nvml_(Nvml::Load()), thread_([this] { Run(); }) {}

ResourceSampler::~ResourceSampler() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void ResourceSampler::Run() {
  while (!stop_.WaitForNotificationWithTimeout(options_.interval)) SampleOnce();
}

void ResourceSampler::SampleOnce() {
  const std::string job = options_.running_job ? options_.running_job() : "";
  const int pid = options_.executor_pid ? options_.executor_pid() : 0;
  if (job.empty() || pid <= 0) {
    last_job_.clear();
    return;
  }
  ResourceSample sample;
  const absl::Time now = absl::Now();
  sample.time_us = absl::ToUnixMicros(now);
  const std::optional<double> cpu = CpuSeconds(pid);
  if (cpu && job == last_job_ && pid == last_pid_ && last_cpu_s_ >= 0 && now > last_time_) {
    sample.cpu_percent =
        100.0 * std::max(0.0, *cpu - last_cpu_s_) / absl::ToDoubleSeconds(now - last_time_);
  }
  last_job_ = job;
  last_pid_ = pid;
  last_cpu_s_ = cpu.value_or(-1);
  last_time_ = now;
  sample.rss_bytes = ResidentBytes(pid);
  if (nvml_ != nullptr) sample.gpu_utilization = nvml_->Utilization(0);

  absl::MutexLock lock(&mu_);
  auto [it, inserted] = samples_.try_emplace(job);
  if (inserted) {
    order_.push_back(job);
    while (order_.size() > options_.max_jobs) {
      samples_.erase(order_.front());
      order_.pop_front();
    }
    it = samples_.find(job);
  }
  it->second.push_back(sample);
  if (it->second.size() > options_.max_samples) it->second.pop_front();
}

std::vector<ResourceSample> ResourceSampler::SamplesOf(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = samples_.find(job_id);
  if (it == samples_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

}  // namespace mpsd::server
