// FakeExecutor: a real api::Executor without a device, for testing the server's components
// (scheduler, job service) alone. Each job plays a script: `steps` step events, optionally a
// wait (for a cancel, or for the test to release it), a summary, and a chosen result. It keeps
// what it was asked, so that tests can check the order jobs ran in and the context they got.
#ifndef MPSD_TESTS_SERVER_FAKE_EXECUTOR_H_
#define MPSD_TESTS_SERVER_FAKE_EXECUTOR_H_

#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/executor.h"

namespace mpsd::testing {

// Thread-safe.
class FakeExecutor final : public api::Executor {
 public:
  // What one Run does, in order.
  struct Script {
    // Step events 1..steps (epoch 1, loss 1/step), each followed by a look at the cancel flag:
    // once set, Run emits the summary and returns CANCELLED.
    int steps = 2;
    // After the steps, one epoch event per value (epochs 1, 2, ...; val_loss and train_loss the
    // value), each followed by a look at the cancel flag as a step's.
    std::vector<double> epoch_losses;
    // After the epochs, wait until the job is cancelled (then CANCELLED) or Release() is called.
    bool hold = false;
    // How Run ends when it was not cancelled.
    absl::Status result = absl::OkStatus();
  };

  // A job that sends `steps` steps, then waits until it is cancelled or released.
  static Script Held(int steps);
  // A job that sends two steps and ends with `result`.
  static Script EndsWith(absl::Status result);

  // What one Run was given.
  struct RunRecord {
    api::JobContext context;
    mpsd::v1::SubmitJobRequest spec;
  };

  // Validate answers `error` for a spec whose train_job.model.name is `model` (OK otherwise).
  void FailValidation(const std::string& model, absl::Status error);
  // The script for the next Run that has none queued before it; Runs beyond the queue play
  // Script{} (two steps, OK).
  void QueueScript(Script script);
  // Ends the wait of every held job (the one running now and any later one that holds).
  void Release();

  // PlanFusion fuses up to `n` trials (>= 2) from now on; by default it fuses none.
  void FuseUpTo(int n);
  // The job ids of every RunFused so far, in order.
  std::vector<std::vector<std::string>> fused_runs() const;

  // Blocks until `n` Runs have started (or `timeout` passed); false on timeout.
  bool WaitForRuns(int n, absl::Duration timeout = absl::Seconds(30)) const;
  // Blocks until a job is held (waiting in its script), or `timeout`; false on timeout.
  bool WaitUntilHeld(absl::Duration timeout = absl::Seconds(30)) const;
  // Every Run so far, in the order they started.
  std::vector<RunRecord> runs() const;

  absl::Status Validate(const mpsd::v1::SubmitJobRequest& spec) const override;
  absl::Status Run(const api::JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
                   const api::EventSink& sink, const api::CancelFlag& cancelled) override;
  // The first min(specs, max_trials, FuseUpTo's n) trials whose model name is the first's, or
  // FAILED_PRECONDITION: "trial N differs in train_job.model.name" (N the first other model's
  // index) when fusing is on, else "fake: fusing off".
  absl::StatusOr<std::vector<int>> PlanFusion(const std::vector<mpsd::v1::SubmitJobRequest>& specs,
                                              int max_trials) const override;
  // Each trial plays its own script (taken from the queue in trial order; each counts as a Run
  // in runs()), interleaved step by step, then epoch by epoch; a trial cancelled after a step, an
  // epoch (its own event's or another trial's) or while held ends alone (summary, `done`,
  // CANCELLED) and the others go on; Release() ends every hold.
  std::vector<absl::Status> RunFused(const std::vector<api::TrialRun>& trials,
                                     const api::FusionOptions& options) override;
  // kind "fake", name "fake executor", jobs_run: the Runs so far.
  mpsd::v1::DeviceInfo GetDevice() const override;
  // One model, "fake", with 1 parameter.
  absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(
      const mpsd::v1::ListModelsRequest& request) const override;

 private:
  // Waits until `cancelled` is set or Release() is called; true if cancelled.
  bool Hold(const api::CancelFlag& cancelled);

  mutable absl::Mutex mu_;
  std::string failing_model_ ABSL_GUARDED_BY(mu_);
  absl::Status validation_error_ ABSL_GUARDED_BY(mu_);
  std::deque<Script> scripts_ ABSL_GUARDED_BY(mu_);
  std::vector<RunRecord> runs_ ABSL_GUARDED_BY(mu_);
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_seen_ ABSL_GUARDED_BY(mu_) = false;
  int fuse_up_to_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<std::string>> fused_runs_ ABSL_GUARDED_BY(mu_);
};

// A TrainJob request naming `model` (FakeExecutor runs any), with a priority and request_id.
mpsd::v1::SubmitJobRequest FakeTrainRequest(int priority = 0, const std::string& request_id = "",
                                            const std::string& model = "mlp");

}  // namespace mpsd::testing

#endif  // MPSD_TESTS_SERVER_FAKE_EXECUTOR_H_
