// The scheduler owns every job's state: it validates and queues submitted jobs (highest
// priority first, FIFO within a priority; request_id makes a submit idempotent), runs them one
// at a time on the executor thread (the only thread that touches the device), numbers their
// events and hands them to the EventLog, and answers queries from memory.
#ifndef MPSD_SERVER_SCHEDULER_H_
#define MPSD_SERVER_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "api/executor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "server/event_log.h"
#include "server/job_query.h"
#include "server/job_store.h"

namespace mpsd::server {

// Thread-safe: every public method may be called from any thread (gRPC's). Borrows the store
// and the executor, which must outlive it.
class Scheduler {
 public:
  struct Options {
    // SubmitJob fails with RESOURCE_EXHAUSTED beyond this many QUEUED jobs.
    int max_queued = 1000;
    // Called with every event as it is published (numbered, before it is stored), under the
    // scheduler's lock: it must be quick and must not call the scheduler (metrics counters).
    std::function<void(const mpsd::v1::Job&, const mpsd::v1::JobEvent&)> on_event;
  };

  // Longest SubmitJobRequest.request_id accepted, bytes.
  static constexpr size_t kMaxRequestIdBytes = 128;

  // What GetServerStatus reports about the queue.
  struct QueueStats {
    int queued_jobs = 0;
    // Empty when no job runs.
    std::string running_job_id;
    int64_t jobs_total = 0;
  };

  // Loads the stored jobs: those left RUNNING by a daemon that died become INTERRUPTED (or,
  // with restart_policy "resume" and a checkpoint in Job.last_checkpoint, QUEUED again with a
  // state event naming the checkpoint, to run from it: JobContext::resume_checkpoint), those
  // QUEUED are queued again in their original order (by priority, then submission), and
  // request ids are remembered. Then starts the executor thread.
  // Errors: the store's.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const Options& options,
                                                           JobStore* store,
                                                           mpsd::api::Executor* executor);

  // Stops as Shutdown() does.
  ~Scheduler();

  // Validates the spec against the executor and queues the job behind every queued job of the
  // same or a higher priority. A request whose request_id names a job already submitted
  // returns that job as it is now, without validating or queueing anything. Errors:
  // INVALID_ARGUMENT naming the field (a request_id over kMaxRequestIdBytes too; for a
  // BenchJob see trainer/bench.h), ALREADY_EXISTS for a request_id used with a different request,
  // RESOURCE_EXHAUSTED "queue full (N)", UNAVAILABLE while shutting down. Returns once the
  // job and its QUEUED event are stored. `submitted_by` goes into Job.submitted_by.
  absl::StatusOr<mpsd::v1::Job> Submit(const mpsd::v1::SubmitJobRequest& request,
                                       const std::string& submitted_by = "local");

  // From now on every Submit fails with `why` (not OK), e.g. when the state dir was deleted
  // under the daemon (server/state_dir.h: StateDirWatch): a job accepted then would be lost.
  // Jobs already queued or running go on. A request_id that names an earlier job still
  // returns it.
  void RefuseSubmits(absl::Status why);

  // INVALID_ARGUMENT "job_id: ..." for what is not a job id at all ("", "abc"; api/job_id.h),
  // NOT_FOUND for an unknown well-formed id; DATA_LOSS for a job whose stored row could not be
  // read at start-up (a damaged database page), whose id also gives DATA_LOSS to Cancel.
  absl::StatusOr<mpsd::v1::Job> Get(const std::string& job_id) const;

  // The jobs `query` selects, newest (highest id) first, at most query.limit.
  std::vector<mpsd::v1::Job> List(const JobQuery& query) const;

  // A QUEUED job becomes CANCELLED now (stored before this returns); a RUNNING job is asked
  // to stop at its next step boundary (the returned job is still RUNNING; its stream ends
  // with CANCELLED).
  // INVALID_ARGUMENT for what is not a job id, NOT_FOUND for an unknown id,
  // FAILED_PRECONDITION for a finished job.
  absl::StatusOr<mpsd::v1::Job> Cancel(const std::string& job_id);

  mpsd::v1::DeviceInfo GetDevice() const;

  // The models jobs may name, with parameter counts (Executor::ListModels): INVALID_ARGUMENT
  // naming a bad input_shape or num_classes. Arithmetic only: answers at once, also while a job
  // runs.
  absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(
      const mpsd::v1::ListModelsRequest& request) const;

  // The job's state and, when QUEUED, its place in the queue (1 = runs next), for stream
  // heartbeats. STATE_UNSPECIFIED for an unknown id.
  mpsd::v1::Heartbeat HeartbeatOf(const std::string& job_id) const;

  QueueStats GetQueueStats() const;

  // The jobs the scheduler knows, counted by (state, kind); pairs without jobs are absent.
  std::map<std::pair<mpsd::v1::Job::State, mpsd::v1::Job::Kind>, int64_t> CountJobs() const;

  // Committed events, for streams.
  EventLog& events() { return event_log_; }

  // Refuses new jobs, stops the running job at its next step boundary (it becomes
  // INTERRUPTED, or QUEUED to resume from its newest checkpoint on the next start when its spec
  // has restart_policy "resume"; queued jobs stay QUEUED in the store for the next start), waits
  // for the executor thread and commits every event. Idempotent.
  void Shutdown();

 private:
  Scheduler(const Options& options, JobStore* store, mpsd::api::Executor* executor);

  absl::Status Recover();
  // NOT_FOUND for an id the scheduler does not know; DATA_LOSS for one whose stored row is
  // damaged (JobStore::ListJobsSkippingDamaged).
  absl::Status UnknownJob(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job an earlier Submit with this request's request_id created, or nullptr if none did
  // (or request_id is empty). ALREADY_EXISTS if that job was submitted with another request.
  absl::StatusOr<const mpsd::v1::Job*> EarlierSubmit(const mpsd::v1::SubmitJobRequest& request)
      const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submit after validation: the request_id check again, shutdown, queue limit, Enqueue.
  absl::StatusOr<mpsd::v1::Job> SubmitValidated(const mpsd::v1::SubmitJobRequest& request,
                                                const std::string& submitted_by)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cancel's decision and state change, without waiting for the store.
  absl::StatusOr<mpsd::v1::Job> RequestCancel(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Stores a new QUEUED job for `request` and queues it; returns it as stored.
  absl::StatusOr<mpsd::v1::Job> Enqueue(const mpsd::v1::SubmitJobRequest& request,
                                        const std::string& submitted_by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts a QUEUED job into queue_ behind every job of the same or a higher priority.
  void InsertInQueue(const mpsd::v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExecutorLoop();
  // Runs one job, already RUNNING, on the executor thread; returns when it reached a terminal
  // state (or, stopped by Shutdown with restart_policy: resume and a checkpoint, QUEUED again).
  // `resume_checkpoint`: JobContext::resume_checkpoint, empty for a fresh start.
  void RunJob(const std::string& job_id, const mpsd::v1::SubmitJobRequest& spec,
              const std::string& resume_checkpoint);
  // Sets a job's state and publishes the StateChange event.
  void SetState(mpsd::v1::Job& job, mpsd::v1::Job::State state,
                mpsd::v1::Job::FailureReason reason, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Numbers, timestamps and records an event, and queues it with the job's row for storage.
  void Publish(mpsd::v1::Job& job, mpsd::v1::JobEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Options options_;
  JobStore* const store_;
  mpsd::api::Executor* const executor_;

  EventLog event_log_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, mpsd::v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  // Ids of QUEUED jobs in the order they will run.
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  // SubmitJobRequest.request_id -> job id, for every job that has one.
  absl::flat_hash_map<std::string, std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  std::string running_job_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Jobs whose stored rows could not be read at start-up, with their DATA_LOSS status.
  absl::flat_hash_map<std::string, absl::Status> damaged_ ABSL_GUARDED_BY(mu_);
  // RefuseSubmits' reason; OK while submits are accepted.
  absl::Status refuse_submits_ ABSL_GUARDED_BY(mu_);
  int64_t jobs_run_ ABSL_GUARDED_BY(mu_) = 0;

  // Set to stop the running job; reset (under mu_) before each job starts.
  mpsd::api::CancelFlag cancel_running_;
  // Why the running job was stopped: CANCELLED by a user, or INTERRUPTED by shutdown.
  std::atomic<mpsd::v1::Job::State> stop_as_{mpsd::v1::Job::CANCELLED};

  std::thread executor_thread_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_SCHEDULER_H_
