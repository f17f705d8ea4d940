// ExecutorSupervisor: the daemon's side of the executor process. It implements
// mpsd::api::Executor (api/executor.h) by starting `mpsd-executor` as a child process and
// forwarding every call over proto/mpsd/v1/executor.proto on a private unix socket, so that the
// daemon never links LibTorch and a crash, an abort inside a kernel or a poisoned device context
// kills one job, never the daemon.
//
// Process model: one executor at a time, kept warm between jobs. A monitor thread starts it,
// reaps it and starts the next one: after it died (crash, SIGKILL, abort), after a job when the
// restart policy says so (isolation: per_job, restart_after_jobs, memory after cleanup above the
// baseline), or when a cancelled job did not stop within cancel_grace_s (then it is killed).
#ifndef MPSD_SERVER_EXECUTOR_SUPERVISOR_H_
#define MPSD_SERVER_EXECUTOR_SUPERVISOR_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/executor.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Where mpsd looks for mpsd-executor when the config names none: next to the running mpsd
// binary (an install: /usr/bin/mpsd, /usr/bin/mpsd-executor), else in the build tree's
// trainer/ beside its server/ (build/server/mpsd → build/trainer/mpsd-executor). Returns the
// first that exists, else the first candidate (so that the start-up error names it).
std::string DefaultExecutorPath();

// "killed by signal 9 (SIGKILL)", "exited with code 1": a waitpid status in words.
std::string DescribeExitStatus(int wait_status);

class ExecutorSupervisor final : public mpsd::api::Executor {
 public:
  struct Options {
    // The mpsd-executor program. Required.
    std::string executor_path;
    // The unix socket the executor serves on; its directory must be private (the state dir).
    // The file is replaced at every executor start. Required; at most 107 bytes.
    std::string socket_path;
    // Passed to the executor as flags (cpu_threads, steps_per_readback, artifacts_dir,
    // allow_fault_injection).
    mpsd::api::Executor::Options executor;
    // Start a new executor for every job ("isolation: per_job").
    bool per_job = false;
    // Replace the executor after it ran this many jobs; 0 = never.
    int64_t restart_after_jobs = 0;
    // Replace the executor after a job whose memory after cleanup exceeds the executor's
    // baseline by more than this, bytes (allocated, or reserved where the device has it);
    // 0 = never. On CPU, where LibTorch's allocator keeps no statistics, the executor's
    // resident memory (Linux /proc) against its resident memory when it became ready.
    int64_t restart_above_baseline_bytes = 0;
    // A cancelled job (CancelJob or daemon shutdown) that has not ended this long after the
    // executor was asked to stop it gets its executor killed and replaced, seconds.
    double cancel_grace_s = 30;
    // The executor's RLIMIT_AS, bytes; 0 = none. On CPU an allocation beyond it fails as out of
    // memory (the job FAILS with OUT_OF_MEMORY) instead of the kernel's OOM killer acting.
    int64_t memory_limit_bytes = 0;
    // In (0, 2]: PYTORCH_MPS_HIGH_WATERMARK_RATIO in the executor's environment, and
    // PYTORCH_MPS_LOW_WATERMARK_RATIO = memory_fraction × 1.4 / 1.7 (PyTorch's default
    // proportion between the two); 0 = leave PyTorch's defaults. Only MPS reads them.
    double memory_fraction = 0;
    // The executor's log level (spdlog names); it logs to the daemon's stderr.
    std::string log_level = "info";
    // How long an executor may take to start (LibTorch, device, baseline) before it is killed.
    absl::Duration start_timeout = absl::Seconds(120);
  };

  // Starts the first executor and waits until it answers. Errors: INVALID_ARGUMENT for bad
  // options; FAILED_PRECONDITION naming the program when it is missing or exits during
  // start-up (with its exit status); DEADLINE_EXCEEDED when it does not answer within
  // start_timeout.
  static absl::StatusOr<std::unique_ptr<ExecutorSupervisor>> Start(const Options& options);

  // Asks the executor to shut down, kills it after 10 s, and reaps it. A job must not be running.
  ~ExecutorSupervisor() override;

  // Forwarded to the executor (waiting for one to be ready, up to start_timeout). UNAVAILABLE
  // when no executor could be started or it died during the call. Thread-safe.
  absl::Status Validate(const mpsd::v1::SubmitJobRequest& spec) const override;

  // Runs the job in the executor and forwards its events; the summary (last) gains
  // executor_pid and executor_restart_reason. Beyond api/executor.h's errors: UNAVAILABLE
  // "executor crashed: pid N killed by signal 9 (SIGKILL); last step reported: 12" when the
  // executor died during the job (it is replaced before the next), and UNAVAILABLE when no
  // executor could be started for it, both with the failure reason EXECUTOR_CRASHED attached
  // (api/failure_reason.h); CANCELLED also when a cancelled job was not honoured within
  // cancel_grace_s and the executor was killed. One job at a time.
  absl::Status Run(const mpsd::api::JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
                   const mpsd::api::EventSink& sink,
                   const mpsd::api::CancelFlag& cancelled) override;

  // The executor's answer plus executor_pid, executor_uptime_s, executor_restarts; while no
  // executor answers (one is starting), the last answer with executor_pid 0. Thread-safe.
  mpsd::v1::DeviceInfo GetDevice() const override;

  // Forwarded. Errors: the executor's (INVALID_ARGUMENT), UNAVAILABLE. Thread-safe.
  absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(
      const mpsd::v1::ListModelsRequest& request) const override;

 private:
  struct Child;

  explicit ExecutorSupervisor(const Options& options);

  // The monitor thread: starts executors, reaps them, replaces them.
  void MonitorLoop();
  // Starts one executor and waits until it answers GetDevice.
  absl::StatusOr<std::shared_ptr<Child>> Spawn(int generation);
  // Asks `child` to exit, kills it after 10 s, reaps it.
  void Stop(Child& child, const std::string& why);
  // The current executor once it is ready, waiting up to `timeout`.
  absl::StatusOr<std::shared_ptr<Child>> WaitForChild(absl::Duration timeout) const;
  // Waits (up to `timeout`) until the monitor reaped `child`; returns how it ended, or "" if
  // it still runs.
  std::string WaitForExit(Child& child, absl::Duration timeout) const;
  // Asks for the executor to be replaced (killed at once with `kill`) once the monitor sees it.
  void Retire(Child& child, const std::string& reason, bool kill);
  // Why `child` must be replaced after a job that ended normally; "" if it may stay.
  std::string RestartReason(Child& child, const mpsd::v1::JobSummary* summary);

  // Constant after construction.
  const Options options_;

  mutable absl::Mutex mu_;
  // The running (or starting, or retiring) executor; nullptr while none.
  std::shared_ptr<Child> current_ ABSL_GUARDED_BY(mu_);
  // Why the last start failed; empty once one succeeds.
  std::string start_error_ ABSL_GUARDED_BY(mu_);
  int generations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t restarts_ ABSL_GUARDED_BY(mu_) = 0;
  mutable mpsd::v1::DeviceInfo last_device_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;

  // Started last in Start(), joined first in the destructor.
  std::thread monitor_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_EXECUTOR_SUPERVISOR_H_
