// The scheduler owns every job's state: it validates and queues submitted jobs, runs them one
// at a time on the executor thread (the only thread that touches the device), numbers their
// events and hands them to the EventLog, and answers queries from memory.
#ifndef MPSD_SERVER_SCHEDULER_H_
#define MPSD_SERVER_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "mpsd/v1/mpsd.pb.h"
#include "server/event_log.h"
#include "server/job_store.h"
#include "trainer/executor.h"

namespace mpsd::server {

// True for SUCCEEDED, FAILED, CANCELLED and INTERRUPTED: a job in one of these never changes.
bool IsTerminal(mpsd::v1::Job::State state);

// Thread-safe: every public method may be called from any thread (gRPC's). Borrows the store
// and the executor, which must outlive it.
class Scheduler {
 public:
  struct Options {
    // SubmitJob fails with RESOURCE_EXHAUSTED beyond this many QUEUED jobs.
    int max_queued = 1000;
  };

  // Loads the stored jobs: those left RUNNING by a daemon that died become INTERRUPTED, those
  // QUEUED are queued again in their original order. Then starts the executor thread.
  // Errors: the store's.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const Options& options,
                                                           JobStore* store,
                                                           mpsd::trainer::Executor* executor);

  // Stops as Shutdown() does.
  ~Scheduler();

  // Validates the spec against the executor and queues the job. Errors: INVALID_ARGUMENT
  // naming the field, UNIMPLEMENTED for BenchJob, RESOURCE_EXHAUSTED "queue full (N)",
  // UNAVAILABLE while shutting down.
  absl::StatusOr<mpsd::v1::Job> Submit(const mpsd::v1::SubmitJobRequest& request);

  // NOT_FOUND for an unknown id.
  absl::StatusOr<mpsd::v1::Job> Get(const std::string& job_id) const;

  // All jobs, newest first.
  std::vector<mpsd::v1::Job> List() const;

  // A QUEUED job becomes CANCELLED now; a RUNNING job is asked to stop at its next step
  // boundary (the returned job is still RUNNING; its stream ends with CANCELLED).
  // NOT_FOUND for an unknown id, FAILED_PRECONDITION for a finished job.
  absl::StatusOr<mpsd::v1::Job> Cancel(const std::string& job_id);

  mpsd::v1::DeviceInfo GetDevice() const;

  // The models jobs may name, with parameter counts (Executor::ListModels): INVALID_ARGUMENT
  // naming a bad input_shape or num_classes. Arithmetic only: answers at once, also while a job
  // runs.
  absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(
      const mpsd::v1::ListModelsRequest& request) const;

  // Committed events, for streams.
  EventLog& events() { return event_log_; }

  // Refuses new jobs, stops the running job at its next step boundary (it becomes
  // INTERRUPTED; queued jobs stay QUEUED in the store for the next start), waits for the
  // executor thread and commits every event. Idempotent.
  void Shutdown();

 private:
  Scheduler(const Options& options, JobStore* store, mpsd::trainer::Executor* executor);

  absl::Status Recover();
  void ExecutorLoop();
  // Runs one job, already RUNNING, on the executor thread; returns when it reached a terminal
  // state.
  void RunJob(const std::string& job_id, const mpsd::v1::SubmitJobRequest& spec);
  // Sets a job's state and publishes the StateChange event.
  void SetState(mpsd::v1::Job& job, mpsd::v1::Job::State state,
                mpsd::v1::Job::FailureReason reason, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Numbers, timestamps and records an event, and queues it with the job's row for storage.
  void Publish(mpsd::v1::Job& job, mpsd::v1::JobEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Options options_;
  JobStore* const store_;
  mpsd::trainer::Executor* const executor_;

  EventLog event_log_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, mpsd::v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::string running_job_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  int64_t jobs_run_ ABSL_GUARDED_BY(mu_) = 0;

  // Set to stop the running job; read by the training loop at step boundaries.
  std::atomic<bool> cancel_running_{false};
  // Why the running job was stopped: CANCELLED by a user, or INTERRUPTED by shutdown.
  std::atomic<mpsd::v1::Job::State> stop_as_{mpsd::v1::Job::CANCELLED};

  std::thread executor_thread_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_SCHEDULER_H_
