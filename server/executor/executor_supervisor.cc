// ExecutorSupervisor: starts, watches, replaces and talks to mpsd-executor.
#include "server/executor/executor_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <mach-o/dyld.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "api/error_cause.h"
#include "api/failure_reason.h"
#include "api/memory.h"
#include "api/status.h"
#include "mpsd/v1/executor.grpc.pb.h"
#include "server/executor/cancel_watchdog.h"
#include "server/executor/child_process.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace mpsd::server {

namespace executor_v1 = mpsd::v1::executor;

// One executor process. The monitor thread owns its life; calls hold a shared_ptr so that the
// stub outlives a replacement.
struct ExecutorSupervisor::Child {
  int generation = 0;
  // Reaped and signalled by the monitor thread only.
  std::unique_ptr<ChildProcess> process;
  pid_t pid = -1;
  absl::Time started;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<executor_v1::Executor::Stub> stub;
  // GetDevice's answer at start: the baseline.
  mpsd::v1::DeviceInfo device;
  // Resident set size when it became ready, bytes (0 where unknown): CPU's baseline.
  int64_t baseline_resident_bytes = 0;

  // Guarded by the supervisor's mu_.
  int64_t jobs_run = 0;
  // Non-empty: replace this executor (kill: at once, with SIGKILL).
  std::string retire_reason;
  // RestartsByReason's key for retire_reason (RetireReason::label).
  std::string retire_label;
  bool kill = false;
  // The monitor sent SIGKILL for `kill`: what is left is to reap it once it exited.
  bool kill_sent = false;
  // Set by the process's watcher thread as soon as it exits: wakes the monitor to reap it.
  bool process_exited = false;
  // Set by the monitor once the process is reaped.
  bool exited = false;
  std::string exit_description;
  // Job runs in flight on it (Run), and whether one was when it exited: then a submit check
  // that died with it is not to blame (the job crashed it), and is sent to its successor.
  int runs_in_flight = 0;
  bool job_running_at_exit = false;
};

namespace {

// RestartsByReason's keys (ExecutorSupervisor::RetireReason::label).
constexpr absl::string_view kRestartCrash = "crash";
constexpr absl::string_view kRestartPerJob = "per_job";
constexpr absl::string_view kRestartAfterJobs = "restart_after_jobs";
constexpr absl::string_view kRestartCancelTimeout = "cancel_timeout";
constexpr absl::string_view kRestartMemory = "memory";
constexpr absl::string_view kRestartUserCodeTimeout = "user_code_timeout";

// The RestartsByReason key for a Child that ended: its retirement's, or a crash when it died by
// itself.
std::string RestartLabel(const std::string& retire_label) {
  return retire_label.empty() ? std::string(kRestartCrash) : retire_label;
}
constexpr absl::Duration kStopGrace = absl::Seconds(10);
constexpr absl::Duration kUnaryDeadline = absl::Seconds(60);

std::chrono::system_clock::time_point DeadlineIn(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", bytes / double(1 << 30));
  return absl::StrFormat("%.1f MiB", bytes / double(1 << 20));
}

std::string SelfExecutable() {
#if defined(__APPLE__)
  char buffer[4096];
  uint32_t size = sizeof(buffer);
  if (_NSGetExecutablePath(buffer, &size) == 0) return buffer;
  return "";
#else
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? "" : self.string();
#endif
}

// Calls `on_stall` (once, on a thread of its own) when Touch() has not been called for `limit`
// since construction or the last Touch(); an infinite limit watches nothing. Thread-safe.
class StallWatch {
 public:
  StallWatch(absl::Duration limit, std::function<void()> on_stall)
      : limit_(limit), on_stall_(std::move(on_stall)) {
    if (limit_ != absl::InfiniteDuration()) thread_ = std::thread([this] { Watch(); });
  }
  ~StallWatch() { Stop(); }
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  void Touch() {
    absl::MutexLock lock(&mu_);
    last_ = absl::Now();
  }
  // Ends the watch (waiting for a running on_stall); true if on_stall ran.
  bool Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
    absl::MutexLock lock(&mu_);
    return fired_;
  }

 private:
  void Watch() {
    absl::MutexLock lock(&mu_);
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    while (!stopping_) {
      const absl::Time due = last_ + limit_;
      if (absl::Now() < due) {
        mu_.AwaitWithDeadline(absl::Condition(&stop), due);
        continue;
      }
      fired_ = true;
      mu_.Unlock();
      on_stall_();
      mu_.Lock();
      return;
    }
  }

  const absl::Duration limit_;
  const std::function<void()> on_stall_;
  absl::Mutex mu_;
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::Now();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Writes `message` to `path` (created 0600), binary.
absl::Status WriteMessage(const std::string& path, const google::protobuf::Message& message) {
  const std::string bytes = message.SerializeAsString();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot create"));
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      return absl::ErrnoToStatus(saved, absl::StrCat(path, ": cannot write"));
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

// The user code in words for messages: "train_job.model.torchscript (/data/m.pt)".
std::string Describe(const api::UserCode& code) {
  if (code.path.empty()) return absl::StrCat(code.field, " (a trial's model.torchscript)");
  return absl::StrCat(code.field, " (", code.path, ")");
}

// What the submit-time check does with it, for messages.
absl::string_view CheckedBy(const api::UserCode& code) {
  return absl::EndsWith(code.field, ".weights") ? "reading the weights file"
                                                : "forward on one example";
}

// argv and envp for the executor.
struct Command {
  std::vector<std::string> args;
  std::vector<std::string> env;
};

Command BuildCommand(const ExecutorSupervisor::Options& o) {
  Command c;
  c.args = {o.executor_path,
            "--socket",
            o.socket_path,
            "--parent-pid",
            absl::StrCat(getpid()),
            "--cpu-threads",
            absl::StrCat(o.executor.cpu_threads),
            "--steps-per-readback",
            absl::StrCat(o.executor.steps_per_readback),
            "--memory-limit-bytes",
            absl::StrCat(o.memory_limit_bytes),
            "--max-file-bytes",
            absl::StrCat(o.executor.input_limits.max_file_bytes),
            "--max-unpacked-bytes",
            absl::StrCat(o.executor.input_limits.max_unpacked_bytes),
            "--max-image-pixels",
            absl::StrCat(o.executor.input_limits.max_image_pixels),
            "--log-level",
            o.log_level};
  if (!o.executor.artifacts_dir.empty()) {
    c.args.insert(c.args.end(), {"--artifacts-dir", o.executor.artifacts_dir});
  }
  if (!o.executor.cache_dir.empty()) {
    c.args.insert(c.args.end(), {"--cache-dir", o.executor.cache_dir});
  }
  if (o.executor.allow_fault_injection) c.args.push_back("--enable-fault-injection");
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    if (o.memory_fraction > 0 && (absl::StartsWith(entry, "PYTORCH_MPS_HIGH_WATERMARK_RATIO=") ||
                                  absl::StartsWith(entry, "PYTORCH_MPS_LOW_WATERMARK_RATIO="))) {
      continue;
    }
    if (absl::StartsWith(entry, "PYTORCH_ENABLE_MPS_FALLBACK=")) continue;
    if (absl::StartsWith(entry, "NCCL_NVLS_ENABLE=")) continue;
    c.env.emplace_back(entry);
  }
  c.env.push_back(absl::StrCat("PYTORCH_ENABLE_MPS_FALLBACK=", o.mps_fallback ? 1 : 0));
  // NCCL's NVLink SHARP (multicast) stays off for distributed jobs' NCCL process groups.
  c.env.push_back("NCCL_NVLS_ENABLE=0");
  if (o.memory_fraction > 0) {
    c.env.push_back(absl::StrCat("PYTORCH_MPS_HIGH_WATERMARK_RATIO=", o.memory_fraction));
    c.env.push_back(
        absl::StrCat("PYTORCH_MPS_LOW_WATERMARK_RATIO=", o.memory_fraction * 1.4 / 1.7));
  }
  return c;
}

}  // namespace

std::string DefaultExecutorPath() {
  const std::filesystem::path self = SelfExecutable();
  if (self.empty()) return "mpsd-executor";
  const std::filesystem::path dir = self.parent_path();
  const std::filesystem::path libexec = dir.parent_path() / "libexec" / "mpsd" / "mpsd-executor";
  const std::vector<std::filesystem::path> candidates = {
      dir / "mpsd-executor", libexec, dir.parent_path() / "trainer" / "mpsd-executor"};
  for (const auto& candidate : candidates) {
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return libexec.string();
}

ExecutorSupervisor::ExecutorSupervisor(const Options& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<ExecutorSupervisor>> ExecutorSupervisor::Start(
    const Options& options) {
  if (options.executor_path.empty()) {
    return absl::InvalidArgumentError("executor.path: empty");
  }
  if (options.socket_path.empty() || options.socket_path.size() > 107) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor socket path must be 1 to 107 bytes: ", options.socket_path));
  }
  if (options.executor.cpu_threads < 0 || options.executor.steps_per_readback <= 0 ||
      options.restart_after_jobs < 0 || options.restart_above_baseline_bytes < 0 ||
      options.memory_limit_bytes < 0 || !(options.cancel_grace_s >= 0) ||
      options.user_code_timeout <= absl::ZeroDuration() ||
      options.user_code_stall_timeout <= absl::ZeroDuration() ||
      !(options.memory_fraction >= 0 && options.memory_fraction <= 2)) {
    return absl::InvalidArgumentError("executor: an option is out of range");
  }
  if (absl::Status s = api::CheckInputLimits(options.executor.input_limits, "executor"); !s.ok()) {
    return s;
  }
  if (access(options.executor_path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("executor.path: ", options.executor_path, " is not an executable program (",
                     strerror(errno), "); build mpsd-executor or set executor.path in the config"));
  }
  std::unique_ptr<ExecutorSupervisor> supervisor(new ExecutorSupervisor(options));
  ExecutorSupervisor* s = supervisor.get();
  s->monitor_ = std::thread([s] { s->MonitorLoop(); });
  std::string error;
  {
    absl::MutexLock lock(&s->mu_);
    auto started = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
      return s->current_ != nullptr || !s->start_error_.empty();
    };
    s->mu_.Await(absl::Condition(&started));
    if (s->current_ == nullptr) error = s->start_error_;
  }
  // The destructor stops the monitor, which would otherwise retry.
  if (!error.empty()) return absl::FailedPreconditionError(error);
  return supervisor;
}

ExecutorSupervisor::~ExecutorSupervisor() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  if (monitor_.joinable()) monitor_.join();
}

void ExecutorSupervisor::MonitorLoop() {
  absl::Duration backoff = absl::Milliseconds(500);
  for (;;) {
    std::shared_ptr<Child> child;
    int generation = 0;
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_) break;
      child = current_;
      if (child == nullptr && !options_.respawn && generations_ > 0) {
        // One executor only (a distributed job's extra rank): none after it ends.
        auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutting_down_; };
        mu_.Await(absl::Condition(&stop));
        break;
      }
      if (child == nullptr) generation = ++generations_;
    }
    if (child == nullptr) {
      absl::StatusOr<std::shared_ptr<Child>> started = Spawn(generation);
      absl::MutexLock lock(&mu_);
      if (!started.ok()) {
        if (options_.on_ready_changed) {
          mu_.Unlock();
          options_.on_ready_changed(false);
          mu_.Lock();
        }
        start_error_ = std::string(started.status().message());
        spdlog::error("executor: {}; retrying in {}", start_error_, absl::FormatDuration(backoff));
        auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutting_down_; };
        mu_.AwaitWithTimeout(absl::Condition(&stop), backoff);
        backoff = std::min(backoff * 2, absl::Seconds(30));
        continue;
      }
      backoff = absl::Milliseconds(500);
      start_error_.clear();
      if (generation > 1) {
        ++restarts_;
        ++restarts_by_reason_[last_end_reason_];
      }
      current_ = *std::move(started);
      last_device_ = current_->device;
      if (options_.on_ready_changed) {
        mu_.Unlock();
        options_.on_ready_changed(true);
        mu_.Lock();
      }
      continue;
    }
    if (const std::optional<int> status = child->process->TryReap()) {
      const std::string how = DescribeExitStatus(*status);
      absl::MutexLock lock(&mu_);
      if (child->retire_reason.empty()) {
        spdlog::error("executor pid {} {}; starting a new one", child->pid, how);
      }
      child->exited = true;
      child->job_running_at_exit = child->runs_in_flight > 0;
      child->exit_description = how;
      last_end_reason_ = RestartLabel(child->retire_label);
      current_ = nullptr;
      if (options_.on_ready_changed) {
        mu_.Unlock();
        options_.on_ready_changed(false);
        mu_.Lock();
      }
      continue;
    }
    std::string retire;
    std::string retire_label;
    bool kill_now = false;
    {
      absl::MutexLock lock(&mu_);
      // Woken by the process's exit (its watcher thread), a retirement or mpsd stopping.
      auto wake = [this, &child]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return shutting_down_ || child->process_exited ||
               (!child->retire_reason.empty() && !child->kill_sent);
      };
      mu_.Await(absl::Condition(&wake));
      if (shutting_down_) break;
      if (child->process_exited) continue;  // reaped on the next turn
      retire = child->retire_reason;
      retire_label = child->retire_label;
      kill_now = child->kill;
      if (kill_now) child->kill_sent = true;
    }
    if (kill_now) {
      child->process->Signal(SIGKILL);  // its exit wakes the monitor, which reaps it
    } else if (!retire.empty()) {
      if (options_.on_ready_changed) options_.on_ready_changed(false);
      Stop(*child, retire);
      absl::MutexLock lock(&mu_);
      last_end_reason_ = RestartLabel(retire_label);
      current_ = nullptr;
    }
  }
  std::shared_ptr<Child> last;
  {
    absl::MutexLock lock(&mu_);
    last = current_;
  }
  if (last != nullptr && !last->exited) Stop(*last, "mpsd is stopping");
}

absl::StatusOr<std::shared_ptr<ExecutorSupervisor::Child>> ExecutorSupervisor::Spawn(
    int generation) {
  std::error_code ignored;
  std::filesystem::remove(options_.socket_path, ignored);
  Command command = BuildCommand(options_);
  auto child = std::make_shared<Child>();
  // The watcher runs until the process exits, and the process is reaped (which waits for the
  // watcher) before the Child goes away: `raw` outlives it.
  Child* raw = child.get();
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Spawn(std::move(command.args), std::move(command.env), [this, raw] {
        absl::MutexLock lock(&mu_);
        raw->process_exited = true;
      });
  if (!process.ok()) return process.status();
  child->generation = generation;
  child->process = *std::move(process);
  child->pid = child->process->pid();
  const pid_t pid = child->pid;
  child->started = absl::Now();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A channel of its own per executor: never a subchannel (or its reconnect back-off) shared
  // with the channel of the executor it replaces, which listened on the same path.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  child->channel = grpc::CreateCustomChannel("unix://" + options_.socket_path,
                                             grpc::InsecureChannelCredentials(), args);
  child->stub = executor_v1::Executor::NewStub(child->channel);

  const absl::Time deadline = absl::Now() + options_.start_timeout;
  for (;;) {
    if (const std::optional<int> status = child->process->TryReap()) {
      return absl::FailedPreconditionError(absl::StrCat(options_.executor_path, " ",
                                                        DescribeExitStatus(*status),
                                                        " during start-up (its log is in mpsd's)"));
    }
    if (absl::Now() > deadline) {
      child->process->Signal(SIGKILL);
      child->process->Reap();
      return absl::DeadlineExceededError(
          absl::StrCat(options_.executor_path, " did not answer within ",
                       absl::FormatDuration(options_.start_timeout), "; killed it"));
    }
    if (std::filesystem::exists(options_.socket_path, ignored)) {
      grpc::ClientContext context;
      context.set_deadline(DeadlineIn(absl::Seconds(10)));
      context.set_wait_for_ready(true);
      const grpc::Status rpc =
          child->stub->GetDevice(&context, mpsd::v1::GetDeviceRequest(), &child->device);
      if (rpc.ok()) break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  child->baseline_resident_bytes = api::ResidentSetBytes(pid);
  spdlog::info(
      "executor pid {} ready (generation {}, {}, baseline {} allocated, {} reserved, {} resident)",
      pid, generation, child->device.name(), FormatBytes(child->device.baseline_allocated_bytes()),
      FormatBytes(child->device.baseline_reserved_bytes()),
      FormatBytes(child->baseline_resident_bytes));
  return child;
}

void ExecutorSupervisor::Stop(Child& child, const std::string& why) {
  spdlog::info("stopping executor pid {}: {}", child.pid, why);
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(2)));
    executor_v1::ShutdownResponse response;
    child.stub->Shutdown(&context, executor_v1::ShutdownRequest(), &response);
  }
  std::optional<int> status = child.process->ReapWithin(kStopGrace);
  if (!status.has_value()) {
    spdlog::warn("executor pid {} still runs {} after Shutdown; killing it", child.pid,
                 absl::FormatDuration(kStopGrace));
    child.process->Signal(SIGKILL);
    status = child.process->Reap();
  }
  absl::MutexLock lock(&mu_);
  child.exited = true;
  child.exit_description = absl::StrCat(DescribeExitStatus(*status), " (", why, ")");
}

absl::StatusOr<std::shared_ptr<ExecutorSupervisor::Child>> ExecutorSupervisor::WaitForChild(
    absl::Duration timeout, const Child* not_this) const {
  absl::MutexLock lock(&mu_);
  auto ready = [this, not_this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutting_down_ ||
           (current_ != nullptr && current_.get() != not_this && current_->retire_reason.empty() &&
            !current_->process_exited && !current_->exited);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout) || shutting_down_) {
    absl::Status none = absl::UnavailableError(
        absl::StrCat("no executor is running", shutting_down_ ? " (mpsd is stopping)" : "",
                     start_error_.empty() ? "" : ": ", start_error_));
    if (shutting_down_) return api::WithCause(none, api::ErrorCause::EXECUTOR_STOPPING);
    return none;
  }
  return current_;
}

std::string ExecutorSupervisor::WaitForExit(Child& child, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto exited = [&child]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return child.exited; };
  mu_.AwaitWithTimeout(absl::Condition(&exited), timeout);
  return child.exited ? child.exit_description : "";
}

void ExecutorSupervisor::Retire(Child& child, const RetireReason& reason, bool kill) {
  absl::MutexLock lock(&mu_);
  if (child.retire_reason.empty()) {
    child.retire_reason = reason.text;
    child.retire_label = reason.label;
  }
  child.kill = child.kill || kill;
}

ExecutorSupervisor::RetireReason ExecutorSupervisor::RestartReason(
    Child& child, const mpsd::v1::JobSummary* summary) {
  int64_t jobs_run = 0;
  {
    absl::MutexLock lock(&mu_);
    jobs_run = ++child.jobs_run;
  }
  if (options_.per_job) return {std::string(kRestartPerJob), "isolation: per_job"};
  if (options_.restart_after_jobs > 0 && jobs_run >= options_.restart_after_jobs) {
    return {std::string(kRestartAfterJobs),
            absl::StrCat("restart_after_jobs: ", jobs_run, " jobs run")};
  }
  if (options_.restart_above_baseline_bytes > 0 && summary != nullptr) {
    const std::string limit =
        absl::StrCat(" (limit ", FormatBytes(options_.restart_above_baseline_bytes), ")");
    const mpsd::v1::MemoryStats& m = summary->memory();
    const int64_t above = std::max(m.allocated_after_bytes() - m.baseline_allocated_bytes(),
                                   m.reserved_after_bytes() - m.baseline_reserved_bytes());
    if (above > options_.restart_above_baseline_bytes) {
      return {std::string(kRestartMemory),
              absl::StrCat("memory after cleanup ", FormatBytes(above), " above baseline", limit)};
    }
    // On CPU the allocator keeps no statistics: the process's resident memory stands in.
    if (summary->device() == "cpu" && child.baseline_resident_bytes > 0) {
      const int64_t resident_above =
          api::ResidentSetBytes(child.pid) - child.baseline_resident_bytes;
      if (resident_above > options_.restart_above_baseline_bytes) {
        return {std::string(kRestartMemory),
                absl::StrCat("resident memory after cleanup ", FormatBytes(resident_above),
                             " above baseline", limit)};
      }
    }
  }
  return {};
}

absl::Status ExecutorSupervisor::Validate(const mpsd::v1::SubmitJobRequest& spec) const {
  if (std::optional<api::UserCode> code = api::UserCodeOf(spec)) {
    return ValidateUserCode(spec, *code);
  }
  // A weights file is read and unpickled at the check: a file made to crash the reader must
  // not take the warm executor, and the jobs on it, with it.
  if (spec.has_train_job() && !spec.train_job().model().weights().empty()) {
    return ValidateUserCode(
        spec, api::UserCode{"train_job.model.weights", spec.train_job().model().weights()});
  }
  executor_v1::ValidateRequest request;
  *request.mutable_spec() = spec;
  // An executor being replaced (after a crash, restart_after_jobs, per_job isolation) fails the
  // call or goes away under it: then the call waits for its successor and goes to that one,
  // for up to start_timeout in all. Kept until then, so that no new Child reuses its address.
  std::shared_ptr<Child> failed;
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  for (;;) {
    absl::StatusOr<std::shared_ptr<Child>> child =
        WaitForChild(std::max(deadline - absl::Now(), absl::ZeroDuration()), failed.get());
    if (!child.ok()) return child.status();
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(kUnaryDeadline));
    executor_v1::Status response;
    const grpc::Status rpc = (*child)->stub->Validate(&context, request, &response);
    if (rpc.ok()) return api::FromExecutorStatus(response);
    const bool going_away = rpc.error_code() == grpc::StatusCode::UNAVAILABLE ||
                            rpc.error_code() == grpc::StatusCode::CANCELLED;
    if (going_away) {
      // An executor that died by itself during this check (not one being replaced) was most
      // likely killed by it (a file it read): checking again would crash its successor, and
      // the jobs on it, again and again. The submit fails instead.
      if (std::optional<std::string> crash = CrashedDuring(**child)) {
        spdlog::error(
            "submit: executor pid {} {} while checking a job; the submit fails and "
            "is not checked again",
            (*child)->pid, *crash);
        return absl::InvalidArgumentError(
            absl::StrCat("the job crashed the executor while checking it (executor pid ",
                         (*child)->pid, " ", *crash,
                         "); not retried: a file the job names may be damaged (mpsd's log has the "
                         "executor's last words)"));
      }
    }
    if (going_away && absl::Now() < deadline) {
      failed = *std::move(child);
      continue;
    }
    return absl::UnavailableError(absl::StrCat("executor: ", rpc.error_message()));
  }
}

std::optional<std::string> ExecutorSupervisor::CrashedDuring(const Child& child) const {
  absl::MutexLock lock(&mu_);
  // The monitor reaps an executor that exited within moments; one still alive after this is
  // not a crash (a broken connection).
  auto ended = [&child, this]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutting_down_ || child.exited; };
  mu_.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(5));
  // A job running on it when it died is what crashed it (and fails as EXECUTOR_CRASHED).
  if (!child.exited || !child.retire_reason.empty() || child.job_running_at_exit) {
    return std::nullopt;
  }
  return child.exit_description;
}

absl::Status ExecutorSupervisor::ValidateUserCode(const mpsd::v1::SubmitJobRequest& spec,
                                                  const api::UserCode& code) const {
  int64_t number = 0;
  {
    absl::MutexLock lock(&mu_);
    auto free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutting_down_ || user_code_checks_ < kMaxUserCodeChecks;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&free), options_.user_code_timeout) ||
        shutting_down_) {
      return absl::UnavailableError(
          absl::StrCat(code.field, ": ", kMaxUserCodeChecks,
                       " checks of user code are running and none ended "
                       "within ",
                       absl::FormatDuration(options_.user_code_timeout),
                       shutting_down_ ? " (mpsd is stopping)" : "; submit again later"));
    }
    ++user_code_checks_;
    number = ++user_code_checks_started_;
  }
  const absl::Status status = RunUserCodeCheck(spec, code, number);
  absl::MutexLock lock(&mu_);
  --user_code_checks_;
  return status;
}

absl::Status ExecutorSupervisor::RunUserCodeCheck(const mpsd::v1::SubmitJobRequest& spec,
                                                  const api::UserCode& code, int64_t number) const {
  const std::string base = absl::StrCat(options_.socket_path, ".check", number);
  const std::string request_path = base + ".request";
  const std::string result_path = base + ".result";
  auto remove_files = [&] {
    std::error_code ignored;
    std::filesystem::remove(request_path, ignored);
    std::filesystem::remove(result_path, ignored);
  };
  executor_v1::ValidateRequest request;
  *request.mutable_spec() = spec;
  if (absl::Status s = WriteMessage(request_path, request); !s.ok()) {
    remove_files();
    return absl::UnavailableError(absl::StrCat("checking user code: ", s.message()));
  }
  Command command = BuildCommand(options_);
  command.args.insert(command.args.end(),
                      {"--validate-request", request_path, "--validate-result", result_path});
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Spawn(std::move(command.args), std::move(command.env));
  if (!process.ok()) {
    remove_files();
    return absl::UnavailableError(absl::StrCat("checking user code: ", process.status().message()));
  }
  const pid_t pid = (*process)->pid();
  const std::optional<int> status = (*process)->ReapWithin(options_.user_code_timeout);
  const std::string limit = absl::FormatDuration(options_.user_code_timeout);
  if (!status.has_value()) {
    (*process)->Signal(SIGKILL);
    (*process)->Reap();
    remove_files();
    // One process checks every file of the job in turn: when there are several, which one hung
    // is not known, and naming the first would send the user to a file that works.
    const std::vector<api::UserCode> all = api::AllUserCodeOf(spec);
    std::vector<std::string> described;
    for (const api::UserCode& each : all) described.push_back(Describe(each));
    const std::string what = all.size() > 1 ? absl::StrJoin(described, ", ") : Describe(code);
    spdlog::warn(
        "submit: the check of {} did not end within {} (executor.user_code_timeout_s); "
        "killed its process pid {}",
        what, limit, pid);
    if (all.size() > 1) {
      const std::string job = code.field.substr(0, code.field.find('.'));
      return absl::InvalidArgumentError(
          absl::StrCat(job, ": the check of its user code (", what,
                       ", each run on a probe batch in turn) did not end within ", limit,
                       " (executor.user_code_timeout_s): one of them does not return; the check's "
                       "process was killed"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(code.field, ": ", code.path.empty() ? "a trial's model" : code.path,
                     ": its check (", CheckedBy(code), ") did not end within ", limit,
                     " (executor.user_code_timeout_s); the check's process was killed"));
  }
  executor_v1::Status result;
  bool have_result = false;
  {
    std::ifstream in(result_path, std::ios::binary);
    have_result = in && result.ParseFromIstream(&in);
  }
  remove_files();
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0 && have_result) {
    return api::FromExecutorStatus(result);
  }
  const std::string how = DescribeExitStatus(*status);
  spdlog::warn("submit: the check of {} in process pid {} {}", Describe(code), pid, how);
  if (WIFSIGNALED(*status)) {
    return absl::InvalidArgumentError(
        absl::StrCat(code.field, ": ", code.path.empty() ? "a trial's model" : code.path,
                     ": crashed the executor while checking it (", CheckedBy(code),
                     "): the check's process ", how, "; not retried"));
  }
  return absl::UnavailableError(absl::StrCat("checking user code: ", options_.executor_path, " ",
                                             how, " (its log is in mpsd's)"));
}

absl::StatusOr<mpsd::v1::ListModelsResponse> ExecutorSupervisor::ListModels(
    const mpsd::v1::ListModelsRequest& request) const {
  absl::StatusOr<std::shared_ptr<Child>> child = WaitForChild(options_.start_timeout);
  if (!child.ok()) return child.status();
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(kUnaryDeadline));
  mpsd::v1::ListModelsResponse response;
  const grpc::Status rpc = (*child)->stub->ListModels(&context, request, &response);
  if (!rpc.ok()) return api::FromGrpcStatus(rpc);
  return response;
}

int ExecutorSupervisor::CurrentPid() const {
  absl::MutexLock lock(&mu_);
  if (current_ == nullptr || current_->process_exited || current_->exited) return 0;
  return current_->pid > 0 ? current_->pid : 0;
}

std::map<std::string, int64_t> ExecutorSupervisor::RestartsByReason() const {
  absl::MutexLock lock(&mu_);
  return restarts_by_reason_;
}

mpsd::v1::DeviceInfo ExecutorSupervisor::GetDevice() const {
  // Between two executors (a restart) the answer waits for the new one, a few seconds.
  absl::StatusOr<std::shared_ptr<Child>> child = WaitForChild(absl::Seconds(30));
  mpsd::v1::DeviceInfo info;
  bool answered = false;
  if (child.ok()) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(absl::Seconds(10)));
    answered = (*child)->stub->GetDevice(&context, mpsd::v1::GetDeviceRequest(), &info).ok();
  }
  absl::MutexLock lock(&mu_);
  if (answered) {
    last_device_ = info;
    info.set_executor_pid((*child)->pid);
    info.set_executor_uptime_s(absl::ToDoubleSeconds(absl::Now() - (*child)->started));
  } else {
    info = last_device_;
    info.set_executor_pid(0);
    info.set_executor_uptime_s(0);
  }
  info.set_executor_restarts(restarts_);
  return info;
}

absl::StatusOr<std::shared_ptr<ExecutorSupervisor::Child>> ExecutorSupervisor::ChildForJob(
    const api::CancelFlag& cancelled) const {
  // An executor may be starting (after a crash, or per_job); a cancel ends the wait.
  absl::StatusOr<std::shared_ptr<Child>> child;
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  do {
    child = WaitForChild(absl::Milliseconds(100));
  } while (!child.ok() && !cancelled.cancelled() && absl::Now() < deadline &&
           !api::HasCause(child.status(), api::ErrorCause::EXECUTOR_STOPPING));
  if (child.ok()) return child;
  if (cancelled.cancelled()) {
    return absl::CancelledError("cancelled while no executor was running");
  }
  return api::WithFailureReason(child.status(), mpsd::v1::Job::EXECUTOR_CRASHED);
}

ExecutorSupervisor::RunOutcome ExecutorSupervisor::ForwardRun(
    Child& child, const api::JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
    const api::EventSink& sink, const api::CancelFlag& cancelled) {
  executor_v1::RunRequest request;
  request.set_job_id(job.job_id);
  request.set_resume_checkpoint(job.resume_checkpoint);
  request.set_local_rank(job.local_rank);
  *request.mutable_spec() = spec;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<executor_v1::RunUpdate>> reader =
      child.stub->Run(&context, request);
  // The last step time reported, milliseconds: it sets a cancel's grace.
  std::atomic<double> step_time_ms{0};
  absl::Mutex grace_mu;
  absl::Duration granted;  // set when the cancel comes, on the watchdog's thread
  // Passes a cancel on to the executor, and kills an executor that ignores it. A cancel that
  // comes while the executor is still taking the job (the Run call sent, its handler not yet
  // running the job) finds no job to cancel there: it is asked again until the executor has
  // it, else it would be lost and the job run to its end.
  CancelWatchdog::Options watch;
  watch.grace = [&] {
    absl::MutexLock lock(&grace_mu);
    granted = CancelGrace(absl::Milliseconds(step_time_ms.load()));
    return granted;
  };
  watch.ask = [&] { return AskToCancel(child, job.job_id); };
  watch.kill = [&] {
    std::string reason;
    {
      absl::MutexLock lock(&grace_mu);
      reason = CancelNotHonoured(granted);
    }
    spdlog::warn("job {}: executor pid {}: {}; killing and replacing it", job.job_id, child.pid,
                 reason);
    Retire(child, {std::string(kRestartCancelTimeout), reason}, /*kill=*/true);
  };
  CancelWatchdog watchdog(cancelled, std::move(watch));
  // A job with user code that reports nothing for user_code_stall_timeout is hung in it.
  const std::optional<api::UserCode> code = api::UserCodeOf(spec);
  std::string stalled;  // written by the watch's thread, read after Stop()
  StallWatch stall(
      code.has_value() ? options_.user_code_stall_timeout : absl::InfiniteDuration(), [&] {
        stalled = absl::StrCat(Describe(*code), ": the job's user code reported nothing for ",
                               absl::FormatDuration(options_.user_code_stall_timeout),
                               " (executor.user_code_stall_timeout_s)");
        spdlog::warn("job {}: executor pid {}: {}; killing and replacing it", job.job_id, child.pid,
                     stalled);
        Retire(child, {std::string(kRestartUserCodeTimeout), stalled}, /*kill=*/true);
      });
  RunOutcome outcome;
  executor_v1::RunUpdate update;
  while (reader->Read(&update)) {
    stall.Touch();
    if (update.has_result()) {
      outcome.result = api::FromExecutorStatus(update.result());
      continue;
    }
    mpsd::v1::JobEvent& event = *update.mutable_event();
    if (event.has_step()) {
      outcome.last_step = event.step().step();
      step_time_ms.store(event.step().step_time_ms());
    }
    if (event.has_epoch()) {
      outcome.last_epoch = event.epoch().epoch();
      outcome.last_train_loss = event.epoch().train_loss();
      if (event.epoch().evaluated()) outcome.last_evaluated = event.epoch();
    }
    if (event.has_summary()) {
      outcome.summary = std::move(event);  // sent last, once the restart decision is in it
      continue;
    }
    sink(std::move(event));
  }
  outcome.rpc = reader->Finish();
  if (stall.Stop()) outcome.stalled = stalled;
  outcome.killed_for_cancel = watchdog.Stop();
  absl::MutexLock lock(&grace_mu);
  outcome.cancel_grace = granted;
  return outcome;
}

absl::Status ExecutorSupervisor::Conclude(Child& child, const std::string& job_id,
                                          const RunOutcome& outcome, std::string& restart_reason) {
  if (outcome.result.has_value()) {
    RetireReason restart =
        RestartReason(child, outcome.summary ? &outcome.summary->summary() : nullptr);
    restart_reason = restart.text;
    if (!restart.text.empty()) Retire(child, restart, /*kill=*/false);
    return *outcome.result;
  }
  // No result: the executor died, or the call broke and the executor must go.
  std::string how = WaitForExit(child, absl::Seconds(5));
  if (how.empty()) {
    spdlog::warn(
        "job {}: the Run call to executor pid {} ended without a result ({}); "
        "killing it",
        job_id, child.pid, outcome.rpc.error_message());
    Retire(child, {std::string(kRestartCrash), "its Run call broke"}, /*kill=*/true);
    how = WaitForExit(child, absl::Seconds(30));
  }
  if (!outcome.stalled.empty()) {
    restart_reason = outcome.stalled;
    return api::WithFailureReason(
        absl::DeadlineExceededError(absl::StrCat(outcome.stalled, "; executor pid ", child.pid,
                                                 " was killed and replaced")),
        mpsd::v1::Job::USER_CODE_TIMEOUT);
  }
  if (outcome.killed_for_cancel) {
    restart_reason = CancelNotHonoured(outcome.cancel_grace);
    return api::WithCause(absl::CancelledError(absl::StrCat(restart_reason, "; executor pid ",
                                                            child.pid, " was killed and replaced")),
                          api::ErrorCause::CANCEL_NOT_HONOURED);
  }
  restart_reason = absl::StrCat("crashed: ", how);
  return api::WithFailureReason(
      absl::UnavailableError(absl::StrFormat("executor crashed: pid %d %s; last step reported: %d",
                                             child.pid, how, outcome.last_step)),
      mpsd::v1::Job::EXECUTOR_CRASHED);
}

void ExecutorSupervisor::SendSummary(const Child& child, RunOutcome& outcome,
                                     const std::string& restart_reason,
                                     const api::EventSink& sink) const {
  if (!outcome.summary.has_value()) {
    outcome.summary.emplace();
    mpsd::v1::JobSummary& s = *outcome.summary->mutable_summary();
    s.set_device(child.device.kind());
    s.set_steps(outcome.last_step);
    s.set_epochs(outcome.last_epoch);
    s.set_final_train_loss(outcome.last_train_loss);
    if (outcome.last_evaluated.has_value()) {
      s.set_test_loss(outcome.last_evaluated->test_loss());
      s.set_test_accuracy(outcome.last_evaluated->test_accuracy());
    }
    s.set_total_time_s(absl::ToDoubleSeconds(absl::Now() - outcome.started));
    s.mutable_memory()->set_baseline_allocated_bytes(child.device.baseline_allocated_bytes());
    s.mutable_memory()->set_baseline_reserved_bytes(child.device.baseline_reserved_bytes());
  }
  outcome.summary->mutable_summary()->set_executor_pid(child.pid);
  outcome.summary->mutable_summary()->set_executor_restart_reason(restart_reason);
  sink(*std::move(outcome.summary));
}

absl::Duration ExecutorSupervisor::CancelGrace(absl::Duration step_time) const {
  const absl::Duration configured = absl::Seconds(options_.cancel_grace_s);
  if (3 * step_time <= configured) return configured;
  return absl::Ceil(3 * step_time, absl::Seconds(1));
}

std::string ExecutorSupervisor::CancelNotHonoured(absl::Duration grace) const {
  const absl::Duration configured = absl::Seconds(options_.cancel_grace_s);
  if (grace <= configured) {
    return absl::StrCat("cancel not honoured within ", options_.cancel_grace_s, " s");
  }
  return absl::StrCat("cancel not honoured within ", options_.cancel_grace_s,
                      " s (cancel_grace_s, extended to ", absl::ToInt64Seconds(grace),
                      " s: 3 × its last step time)");
}

absl::Status ExecutorSupervisor::Run(const mpsd::api::JobContext& job,
                                     const mpsd::v1::SubmitJobRequest& spec,
                                     const mpsd::api::EventSink& sink,
                                     const mpsd::api::CancelFlag& cancelled) {
  const int nproc = spec.has_train_job() && spec.train_job().has_distributed()
                        ? spec.train_job().distributed().nproc_per_node()
                        : 1;
  if (nproc > 1) return RunRanks(job, spec, sink, cancelled, nproc);
  return RunHere(job, spec, sink, cancelled, nullptr);
}

void ExecutorSupervisor::KillCurrent(const std::string& reason) {
  std::shared_ptr<Child> child;
  {
    absl::MutexLock lock(&mu_);
    child = current_;
  }
  if (child != nullptr) Retire(*child, {std::string(kRestartCrash), reason}, /*kill=*/true);
}

absl::Status ExecutorSupervisor::RunHere(const mpsd::api::JobContext& job,
                                         const mpsd::v1::SubmitJobRequest& spec,
                                         const mpsd::api::EventSink& sink,
                                         const mpsd::api::CancelFlag& cancelled,
                                         const std::function<void(pid_t)>& on_pid) {
  absl::StatusOr<std::shared_ptr<Child>> started = ChildForJob(cancelled);
  if (!started.ok()) return started.status();
  const std::shared_ptr<Child> child = *std::move(started);
  if (on_pid) on_pid(child->pid);
  {
    absl::MutexLock lock(&mu_);
    ++child->runs_in_flight;
  }
  RunOutcome outcome = ForwardRun(*child, job, spec, sink, cancelled);
  std::string restart_reason;
  const absl::Status status = Conclude(*child, job.job_id, outcome, restart_reason);
  {
    absl::MutexLock lock(&mu_);
    --child->runs_in_flight;
  }
  SendSummary(*child, outcome, restart_reason, sink);
  return status;
}

absl::StatusOr<std::vector<int>> ExecutorSupervisor::PlanFusion(
    const std::vector<mpsd::v1::SubmitJobRequest>& specs, int max_trials) const {
  absl::StatusOr<std::shared_ptr<Child>> child = WaitForChild(options_.start_timeout);
  if (!child.ok()) return child.status();
  executor_v1::PlanFusionRequest request;
  for (const mpsd::v1::SubmitJobRequest& spec : specs) *request.add_specs() = spec;
  request.set_max_trials(max_trials);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(kUnaryDeadline));
  executor_v1::PlanFusionResponse response;
  const grpc::Status rpc = (*child)->stub->PlanFusion(&context, request, &response);
  if (!rpc.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the executor did not answer PlanFusion: ", rpc.error_message()));
  }
  if (absl::Status planned = api::FromExecutorStatus(response.status()); !planned.ok()) {
    return planned;
  }
  // The executor's answer, checked: indices into `specs`, 0 first, each once, in order.
  std::vector<int> trials(response.trials().begin(), response.trials().end());
  for (size_t i = 0; i < trials.size(); ++i) {
    if (trials[i] < 0 || trials[i] >= static_cast<int>(specs.size()) ||
        (i == 0 ? trials[i] != 0 : trials[i] <= trials[i - 1])) {
      return absl::InternalError("the executor's PlanFusion answer is not a plan of these trials");
    }
  }
  return trials;
}

std::vector<absl::Status> ExecutorSupervisor::RunFused(const std::vector<api::TrialRun>& trials,
                                                       const api::FusionOptions& options) {
  std::vector<absl::Status> results(trials.size());
  std::vector<bool> ended(trials.size(), false);
  // Waits for an executor as Run does; no single trial's cancel may end the wait for all.
  const api::CancelFlag none;
  absl::StatusOr<std::shared_ptr<Child>> started = ChildForJob(none);
  if (!started.ok()) {
    for (size_t i = 0; i < trials.size(); ++i) {
      results[i] = started.status();
      if (trials[i].done) trials[i].done(results[i]);
    }
    return results;
  }
  const std::shared_ptr<Child> child = *std::move(started);
  {
    absl::MutexLock lock(&mu_);
    ++child->runs_in_flight;
  }
  executor_v1::RunFusedRequest request;
  request.set_shared_data_order(options.shared_data_order);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < trials.size(); ++i) {
    executor_v1::RunRequest& trial = *request.add_trials();
    trial.set_job_id(trials[i].job.job_id);
    trial.set_resume_checkpoint(trials[i].job.resume_checkpoint);
    *trial.mutable_spec() = trials[i].spec;
    index[trials[i].job.job_id] = i;
  }
  // Per trial: what Run's ForwardRun keeps for one job, and its cancel's watchdog.
  struct Watched {
    RunOutcome outcome;
    std::atomic<double> step_time_ms{0};
    absl::Mutex grace_mu;
    absl::Duration granted;
    std::unique_ptr<CancelWatchdog> watchdog;
    bool killed_for_cancel = false;
  };
  std::vector<std::unique_ptr<Watched>> watched;
  for (size_t i = 0; i < trials.size(); ++i) {
    auto w = std::make_unique<Watched>();
    Watched* raw = w.get();
    const std::string id = trials[i].job.job_id;
    CancelWatchdog::Options watch;
    watch.grace = [this, raw] {
      absl::MutexLock lock(&raw->grace_mu);
      raw->granted = CancelGrace(absl::Milliseconds(raw->step_time_ms.load()));
      return raw->granted;
    };
    watch.ask = [this, &child, id] { return AskToCancel(*child, id); };
    watch.kill = [this, &child, raw, id] {
      std::string reason;
      {
        absl::MutexLock lock(&raw->grace_mu);
        reason = absl::StrCat("job ", id, ": ", CancelNotHonoured(raw->granted));
      }
      spdlog::warn("executor pid {}: {} (a fused run); killing and replacing it", child->pid,
                   reason);
      Retire(*child, {std::string(kRestartCancelTimeout), reason}, /*kill=*/true);
    };
    w->watchdog = std::make_unique<CancelWatchdog>(*trials[i].cancelled, std::move(watch));
    watched.push_back(std::move(w));
  }
  auto end_trial = [&](size_t i, const absl::Status& status, const std::string& restart_reason) {
    if (ended[i]) return;
    ended[i] = true;
    // The watchdog is registered on the trial's cancel flag, which `done` may destroy (the
    // scheduler settles the job and drops its flag): it goes first.
    watched[i]->watchdog.reset();
    SendSummary(*child, watched[i]->outcome, restart_reason, trials[i].sink);
    results[i] = status;
    if (trials[i].done) trials[i].done(status);
  };

  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<executor_v1::RunUpdate>> reader =
      child->stub->RunFused(&context, request);
  std::optional<absl::Status> result;
  std::optional<mpsd::v1::JobSummary> last_summary;
  executor_v1::RunUpdate update;
  while (reader->Read(&update)) {
    if (update.has_result()) {
      result = api::FromExecutorStatus(update.result());
      continue;
    }
    if (update.has_trial_result()) {
      auto it = index.find(update.trial_result().job_id());
      if (it == index.end()) continue;
      const size_t i = it->second;
      if (ended[i]) continue;  // reported twice: the first counts
      watched[i]->killed_for_cancel = watched[i]->watchdog->Stop();
      if (watched[i]->outcome.summary.has_value()) {
        last_summary = watched[i]->outcome.summary->summary();
      }
      end_trial(i, api::FromExecutorStatus(update.trial_result().status()), "");
      continue;
    }
    mpsd::v1::JobEvent& event = *update.mutable_event();
    auto it = index.find(event.job_id());
    if (it == index.end()) continue;
    const size_t i = it->second;
    if (ended[i]) continue;
    event.clear_job_id();  // the receiver's, as for Run
    RunOutcome& outcome = watched[i]->outcome;
    if (event.has_step()) {
      outcome.last_step = event.step().step();
      watched[i]->step_time_ms.store(event.step().step_time_ms());
    }
    if (event.has_epoch()) {
      outcome.last_epoch = event.epoch().epoch();
      outcome.last_train_loss = event.epoch().train_loss();
      if (event.epoch().evaluated()) outcome.last_evaluated = event.epoch();
    }
    if (event.has_summary()) {
      outcome.summary = std::move(event);  // sent with the trial's result
      continue;
    }
    trials[i].sink(std::move(event));
  }
  const grpc::Status rpc = reader->Finish();
  for (size_t i = 0; i < trials.size(); ++i) {
    if (ended[i]) continue;
    watched[i]->killed_for_cancel = watched[i]->watchdog->Stop();
  }
  std::string restart_reason;
  if (result.has_value()) {
    // The executor ended the run: the restart policy counts it as one job.
    const RetireReason restart =
        RestartReason(*child, last_summary.has_value() ? &*last_summary : nullptr);
    restart_reason = restart.text;
    if (!restart.text.empty()) Retire(*child, restart, /*kill=*/false);
  }
  std::string killed_for;  // the trial whose ignored cancel killed the executor
  for (size_t i = 0; i < trials.size(); ++i) {
    if (watched[i]->killed_for_cancel) killed_for = trials[i].job.job_id;
  }
  for (size_t i = 0; i < trials.size(); ++i) {
    if (ended[i]) continue;
    RunOutcome& outcome = watched[i]->outcome;
    outcome.rpc = rpc;
    outcome.killed_for_cancel = watched[i]->killed_for_cancel;
    {
      absl::MutexLock lock(&watched[i]->grace_mu);
      outcome.cancel_grace = watched[i]->granted;
    }
    if (result.has_value()) {
      end_trial(i,
                absl::InternalError("the executor's fused run ended without this trial's result"),
                restart_reason);
      continue;
    }
    std::string reason;
    absl::Status status = Conclude(*child, trials[i].job.job_id, outcome, reason);
    if (!killed_for.empty() && !outcome.killed_for_cancel) {
      status = api::WithFailureReason(
          absl::UnavailableError(absl::StrCat(
              "executor pid ", child->pid, " was killed and replaced: job ", killed_for,
              ", fused with this one, did not honour its cancel; last step reported: ",
              outcome.last_step)),
          mpsd::v1::Job::EXECUTOR_CRASHED);
    }
    end_trial(i, status, reason);
  }
  {
    absl::MutexLock lock(&mu_);
    --child->runs_in_flight;
  }
  return results;
}

bool ExecutorSupervisor::AskToCancel(Child& child, const std::string& job_id) const {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(absl::Seconds(5)));
  executor_v1::CancelRequest cancel;
  cancel.set_job_id(job_id);
  executor_v1::CancelResponse response;
  return child.stub->Cancel(&context, cancel, &response).ok() && response.cancelled();
}

}  // namespace mpsd::server
