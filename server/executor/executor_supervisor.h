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
// Starting, signalling and reaping the process is server/executor/child_process.h's; passing a
// cancel on and enforcing cancel_grace_s is server/executor/cancel_watchdog.h's.
#ifndef MPSD_SERVER_EXECUTOR_EXECUTOR_SUPERVISOR_H_
#define MPSD_SERVER_EXECUTOR_EXECUTOR_SUPERVISOR_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/support/status.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/executor.h"
#include "api/user_code.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Where mpsd looks for mpsd-executor when the config names none, in order: next to the running
// mpsd binary; in the install layout's libexec/mpsd/ (`cmake --install`, the .deb, Homebrew:
// /usr/bin/mpsd → /usr/libexec/mpsd/mpsd-executor); in the build tree's trainer/ beside its
// server/ (build/server/mpsd → build/trainer/mpsd-executor). Returns the first that exists,
// else the libexec one (so that the start-up error names where an install puts it).
std::string DefaultExecutorPath();

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
    // executor was asked to stop it gets its executor killed and replaced, seconds. A job whose
    // steps are slower gets longer: 3 × its last measured step time (rounded up to whole
    // seconds) when that is longer, since the executor checks for a cancel between steps.
    double cancel_grace_s = 30;
    // The executor's RLIMIT_AS, bytes; 0 = none. On CPU an allocation beyond it fails as out of
    // memory (the job FAILS with OUT_OF_MEMORY) instead of the kernel's OOM killer acting.
    int64_t memory_limit_bytes = 0;
    // In (0, 2]: PYTORCH_MPS_HIGH_WATERMARK_RATIO in the executor's environment, and
    // PYTORCH_MPS_LOW_WATERMARK_RATIO = memory_fraction × 1.4 / 1.7 (PyTorch's default
    // proportion between the two); 0 = leave PyTorch's defaults. Only MPS reads them.
    double memory_fraction = 0;
    // PYTORCH_ENABLE_MPS_FALLBACK=1 (true) or =0 in the executor's environment, replacing the
    // daemon's own; only MPS reads it (operators MPS lacks then run on the CPU).
    bool mps_fallback = false;
    // The executor's log level (spdlog names); it logs to the daemon's stderr.
    std::string log_level = "info";
    // Start a new executor when one ends (crash, retirement); false: the first is the only one
    // (a distributed job's extra ranks, started for one job).
    bool respawn = true;
    // How long an executor may take to start (LibTorch, device, baseline) before it is killed.
    absl::Duration start_timeout = absl::Seconds(120);
    // Validate of a job with user code (api/user_code.h: a TorchScript model, whose forward
    // runs on one example) never reaches the warm executor: it runs in an mpsd-executor of its
    // own (--validate-request), started for that one check and killed (SIGKILL) if it has not
    // answered within this, its start (about a second on CPU) included. At most
    // kMaxUserCodeChecks such processes run at once. > 0.
    absl::Duration user_code_timeout = absl::Seconds(30);
    // A running job with user code that reports nothing (no step, epoch or log event) for this
    // long is taken as hung in its user code: its executor is killed and replaced, and the job
    // FAILS with USER_CODE_TIMEOUT. Steps are reported in groups of steps_per_readback, so a
    // group of steps must take less than this. > 0.
    absl::Duration user_code_stall_timeout = absl::Seconds(600);
    // Called on the monitor thread with true when an executor became ready, false when it
    // died, is being replaced, or could not be started (health checking). Never called with
    // the supervisor's lock held; may be called after Start returns an error, never after the
    // destructor returns.
    std::function<void(bool ready)> on_ready_changed;
  };

  // Starts the first executor and waits until it answers. Errors: INVALID_ARGUMENT for bad
  // options; FAILED_PRECONDITION naming the program when it is missing or exits during
  // start-up (with its exit status); DEADLINE_EXCEEDED when it does not answer within
  // start_timeout.
  static absl::StatusOr<std::unique_ptr<ExecutorSupervisor>> Start(const Options& options);

  // Asks the executor to shut down, kills it after 10 s, and reaps it. A job must not be running.
  ~ExecutorSupervisor() override;

  // How many checks of user code (Options::user_code_timeout) run at once; more wait for one
  // to end, up to user_code_timeout.
  static constexpr int kMaxUserCodeChecks = 2;

  // Forwarded to the executor (waiting for one to be ready, up to start_timeout). An executor
  // that dies or is replaced during the call (a crash, restart_after_jobs, per_job) is no error:
  // the call goes to its successor. UNAVAILABLE when no executor could be started within
  // start_timeout. A job with user code is checked in a process of its own instead
  // (Options::user_code_timeout): INVALID_ARGUMENT naming the field when the check did not end
  // in time (the process is killed, and mpsd logs it) or its process died of a signal;
  // UNAVAILABLE when kMaxUserCodeChecks checks ran for all of user_code_timeout, or the process
  // could not run. Thread-safe; never waits for a running job.
  absl::Status Validate(const mpsd::v1::SubmitJobRequest& spec) const override;

  // Runs the job in the executor and forwards its events; the summary (last) gains
  // executor_pid and executor_restart_reason. A data-parallel TrainJob with
  // distributed.nproc_per_node = N > 1 runs local rank 0 in this executor and ranks 1..N-1 each
  // in an executor of its own, started for the job (sockets <socket_path>.rank<k>) and stopped
  // after it (server/executor/executor_ranks.cc); the job's events are rank 0's (step and epoch
  // metrics are global). When any rank fails, the others are cancelled and, if still running
  // 5 s later, killed (rank 0's executor is then replaced); the job then fails with the first
  // failure: "rank 1 of 2 (host h, pid N): <cause>". Beyond api/executor.h's errors: UNAVAILABLE
  // "executor crashed: pid N killed by signal 9 (SIGKILL); last step reported: 12" when the
  // executor died during the job (it is replaced before the next), and UNAVAILABLE when no
  // executor could be started for it, both with the failure reason EXECUTOR_CRASHED attached
  // (api/failure_reason.h); CANCELLED "cancel not honoured within 30 s; executor pid N was killed
  // and replaced" when a cancelled job was not honoured within its grace (Options's
  // cancel_grace_s) and the executor was killed. One job at a time.
  absl::Status Run(const mpsd::api::JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
                   const mpsd::api::EventSink& sink,
                   const mpsd::api::CancelFlag& cancelled) override;

  // Forwarded to the executor (waiting up to start_timeout for one). Errors: the executor's
  // (FAILED_PRECONDITION saying why nothing fuses), UNAVAILABLE when no executor answers.
  // Thread-safe.
  absl::StatusOr<std::vector<int>> PlanFusion(const std::vector<mpsd::v1::SubmitJobRequest>& specs,
                                              int max_trials) const override;

  // Runs the trials fused in the executor (executor.proto RunFused) and forwards each trial's
  // events to its sink; a trial's summary (with executor_pid) and its `done` come as soon as
  // the executor reports it ended. Each trial's cancel has a watchdog of its own, as Run's: a
  // cancel not honoured within its grace kills the executor, which ends that trial CANCELLED
  // and every other unfinished trial as Run's crash does (EXECUTOR_CRASHED, naming the trial
  // whose cancel was ignored). The executor's restart policy counts the fused run as one job
  // (decided when it ends; trials that ended before carry no restart reason). One run at a time.
  std::vector<absl::Status> RunFused(const std::vector<mpsd::api::TrialRun>& trials,
                                     const mpsd::api::FusionOptions& options) override;

  // The executor's answer plus executor_pid, executor_uptime_s, executor_restarts; while no
  // executor answers (one is starting), the last answer with executor_pid 0. Thread-safe.
  mpsd::v1::DeviceInfo GetDevice() const override;

  // Forwarded. Errors: the executor's (INVALID_ARGUMENT), UNAVAILABLE. Thread-safe.
  absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(
      const mpsd::v1::ListModelsRequest& request) const override;

  // Executor replacements since Start, by reason: "crash" (it died, or its call broke),
  // "per_job", "restart_after_jobs", "memory" (above the baseline after cleanup),
  // "cancel_timeout" (killed for an ignored cancel), "user_code_timeout" (killed for user code
  // that reported nothing for user_code_stall_timeout). Their sum is
  // DeviceInfo.executor_restarts.
  // Thread-safe.
  std::map<std::string, int64_t> RestartsByReason() const;

  // The pid of the executor process running now, without waiting for one; 0 when none is
  // (starting, or between two). Thread-safe.
  int CurrentPid() const;

 private:
  struct Child;

  // How one Run call to the executor ended.
  struct RunOutcome {
    // The executor's result; none when it died or the call broke before it answered.
    std::optional<absl::Status> result;
    // The summary event, held back to carry the restart decision.
    std::optional<mpsd::v1::JobEvent> summary;
    int64_t last_step = 0;
    // The newest epoch reported, and when the Run call began: the summary of an executor that
    // died says how far and how long the job got.
    int32_t last_epoch = 0;
    // The newest epoch's train loss, and the newest evaluated epoch (its test metrics): the
    // summary made here for an executor that died reports what was measured, never zeros.
    double last_train_loss = 0;
    std::optional<mpsd::v1::EpochMetrics> last_evaluated;
    absl::Time started = absl::Now();
    grpc::Status rpc;
    // The cancel watchdog killed the executor: the cancel was not honoured in time.
    bool killed_for_cancel = false;
    // What the cancel was given (CancelGrace when it came); zero without a cancel.
    absl::Duration cancel_grace;
    // Non-empty: the job's user code reported nothing for user_code_stall_timeout and the
    // executor was killed for it; says so, naming the field.
    std::string stalled;
  };

  explicit ExecutorSupervisor(const Options& options);

  // How `child` ended, if it died by itself (not retired or killed by the supervisor) by the
  // time the monitor reaped it, waiting up to 5 s for that; nullopt if it is alive or was
  // retired.
  std::optional<std::string> CrashedDuring(const Child& child) const;

  // Validate for a job with user code, or a weights file to read: in an mpsd-executor of its
  // own, killed at user_code_timeout.
  absl::Status ValidateUserCode(const mpsd::v1::SubmitJobRequest& spec,
                                const api::UserCode& code) const;
  // One check in its own process; `number` names its files (<socket_path>.check<number>.*).
  absl::Status RunUserCodeCheck(const mpsd::v1::SubmitJobRequest& spec, const api::UserCode& code,
                                int64_t number) const;

  // Run for one executor (this one's): a job of one process, or local rank 0 of a distributed
  // one (job.local_rank). `on_pid` (may be empty) is told the executor's pid first.
  absl::Status RunHere(const mpsd::api::JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
                       const mpsd::api::EventSink& sink, const mpsd::api::CancelFlag& cancelled,
                       const std::function<void(pid_t)>& on_pid);
  // A distributed job's ranks on this node (server/executor/executor_ranks.cc): local rank 0
  // through RunHere, ranks 1..nproc_per_node-1 each in an ExecutorSupervisor of its own (socket
  // <socket_path>.rank<k>, started in parallel, never respawned), owned by the call and
  // destroyed when the job ends (its executor asked to exit, killed after 10 s). Run's comment
  // says how a rank's failure ends the others and which status the job gets; UNAVAILABLE with
  // EXECUTOR_CRASHED, naming the rank, when a rank's executor does not start. Rank 0 runs on
  // the calling thread, each other rank and a coordinator on threads of their own, all joined
  // before it returns.
  absl::Status RunRanks(const mpsd::api::JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
                        const mpsd::api::EventSink& sink, const mpsd::api::CancelFlag& cancelled,
                        int nproc_per_node);
  // Kills the running executor (it is replaced), e.g. a rank left behind by a failed peer.
  void KillCurrent(const std::string& reason);

  // The monitor thread: starts executors, reaps them, replaces them.
  void MonitorLoop();
  // Starts one executor and waits until it answers GetDevice.
  absl::StatusOr<std::shared_ptr<Child>> Spawn(int generation);
  // Asks `child` to exit, kills it after 10 s, reaps it.
  void Stop(Child& child, const std::string& why);
  // The current executor once it is ready (not retired, its process not exited) and is not
  // `not_this` (one a call just failed on), waiting up to `timeout`. UNAVAILABLE after that, or
  // when mpsd is stopping.
  absl::StatusOr<std::shared_ptr<Child>> WaitForChild(absl::Duration timeout,
                                                      const Child* not_this = nullptr) const;
  // Waits (up to `timeout`) until the monitor reaped `child`; returns how it ended, or "" if
  // it still runs.
  std::string WaitForExit(Child& child, absl::Duration timeout) const;
  // Why an executor is replaced: `label` is RestartsByReason's key ("crash", "per_job",
  // "restart_after_jobs", "cancel_timeout", "memory"), `text` what the log and the summary say.
  struct RetireReason {
    std::string label;
    std::string text;
  };
  // Asks for the executor to be replaced (killed at once with `kill`) once the monitor sees it.
  void Retire(Child& child, const RetireReason& reason, bool kill);
  // Why `child` must be replaced after a job that ended normally; an empty text if it may stay.
  RetireReason RestartReason(Child& child, const mpsd::v1::JobSummary* summary);

  // Run's steps. The executor to run a job on, waiting while one starts (up to start_timeout;
  // a cancel ends the wait).
  absl::StatusOr<std::shared_ptr<Child>> ChildForJob(const mpsd::api::CancelFlag& cancelled) const;
  // The Run call: forwards every event but the summary to `sink` until the stream ends, with a
  // CancelWatchdog on `cancelled` for as long as the call lasts.
  RunOutcome ForwardRun(Child& child, const mpsd::api::JobContext& job,
                        const mpsd::v1::SubmitJobRequest& spec, const mpsd::api::EventSink& sink,
                        const mpsd::api::CancelFlag& cancelled);
  // The job's status from the outcome, and the restart reason (retiring `child` if it must go).
  absl::Status Conclude(Child& child, const std::string& job_id, const RunOutcome& outcome,
                        std::string& restart_reason);
  // The summary, last: the executor's, or one made here when it sent none.
  void SendSummary(const Child& child, RunOutcome& outcome, const std::string& restart_reason,
                   const mpsd::api::EventSink& sink) const;
  // The cancel watchdog's request to the executor; true when the executor was running the job
  // (executor.proto CancelResponse.cancelled), false when it was not (yet) or did not answer.
  bool AskToCancel(Child& child, const std::string& job_id) const;
  // The grace of a cancel for a job whose last step took `step_time` (zero: none measured yet):
  // cancel_grace_s, or 3 × step_time rounded up to whole seconds when that is longer.
  absl::Duration CancelGrace(absl::Duration step_time) const;
  // "cancel not honoured within 30 s", and "(cancel_grace_s, extended to 120 s: 3 × its last
  // step time)" when the step time set the grace.
  std::string CancelNotHonoured(absl::Duration grace) const;

  // Constant after construction.
  const Options options_;

  mutable absl::Mutex mu_;
  // The running (or starting, or retiring) executor; nullptr while none.
  std::shared_ptr<Child> current_ ABSL_GUARDED_BY(mu_);
  // Why the last start failed; empty once one succeeds.
  std::string start_error_ ABSL_GUARDED_BY(mu_);
  int generations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t restarts_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> restarts_by_reason_ ABSL_GUARDED_BY(mu_);
  // Why the last executor ended (a RestartsByReason key), counted when the next one starts.
  std::string last_end_reason_ ABSL_GUARDED_BY(mu_) = "crash";
  mutable mpsd::v1::DeviceInfo last_device_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Checks of user code running now, and started in all (their files' numbers).
  mutable int user_code_checks_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int64_t user_code_checks_started_ ABSL_GUARDED_BY(mu_) = 0;

  // Started last in Start(), joined first in the destructor.
  std::thread monitor_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_EXECUTOR_EXECUTOR_SUPERVISOR_H_
