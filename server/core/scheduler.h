// The scheduler owns every job's state: it validates and queues submitted jobs (highest
// priority first, FIFO within a priority; request_id makes a submit idempotent), runs them one
// at a time on the executor thread (the only thread that touches the device), numbers their
// events and hands them to the EventLog, and answers queries from memory. It also keeps the
// queue's order of work: dependencies (SubmitJobRequest.after: a job runs only once each one
// SUCCEEDED, and is CANCELLED with DEPENDENCY_FAILED at once when one ends otherwise), sweeps
// (a parent Job of kind SWEEP over trial jobs, server/core/sweep.h, whose scheduler may stop
// trials early: server/core/trial_stopping.h), pause and re-prioritising.
#ifndef MPSD_SERVER_CORE_SCHEDULER_H_
#define MPSD_SERVER_CORE_SCHEDULER_H_

#include <algorithm>
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
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "api/executor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "server/core/event_log.h"
#include "server/core/job_query.h"
#include "server/core/job_store.h"
#include "server/core/trial_stopping.h"

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
    // OK while the storage the scheduler writes to (the state dir and its database) is still
    // the one it opened (server/core/state_dir.h: StateDirWatch::Check). Called, never under the
    // scheduler's lock, before a submit is acknowledged and before a queued job starts: a job
    // stored in a state dir that was moved away would otherwise be acknowledged, or would write
    // its artifacts into whatever now lies at the state dir's path. It may call RefuseSubmits.
    // Empty: always OK.
    std::function<absl::Status()> check_storage;
    // Called, never under the scheduler's lock, when a queued job starts, with its submitter
    // (Job.submitted_by) and spec: OK, or the error that FAILS the job instead of running it.
    // The daemon checks the paths the job reads against data_roots again (server/server.cc): a
    // path may have been swapped for a link outside them while the job was queued. Empty: OK.
    std::function<absl::Status(const std::string& submitted_by,
                               const mpsd::v1::SubmitJobRequest& spec)>
        check_paths;
    // EventLog's on_storage_error: commits of events started failing (the error), or work
    // again (OK). Runs on the event log's writer thread; must be quick and must not call the
    // scheduler.
    std::function<void(const absl::Status&)> on_storage_error;
  };

  // Longest SubmitJobRequest.request_id accepted, bytes.
  static constexpr size_t kMaxRequestIdBytes = 128;

  // What GetServerStatus reports about the queue.
  struct QueueStats {
    int queued_jobs = 0;
    // Empty when no job runs.
    std::string running_job_id;
    int64_t jobs_total = 0;
    // PauseQueue in effect.
    bool paused = false;
  };

  // Longest SubmitJobRequest.name and label value, bytes; most labels and dependencies.
  static constexpr size_t kMaxNameBytes = 256;
  static constexpr int kMaxLabels = 64;
  static constexpr int kMaxAfter = 64;
  // Most values of any other repeated field of a request (bench_job.batch_sizes, devices,
  // input_shape, normalize.mean, …): every answer that carries the spec (GetJob, ListJobs, the
  // events) stays far below gRPC's 4 MiB message limit. A sweep's values and choices may hold
  // up to kMaxSweepValues (a sweep has at most 1000 trials).
  static constexpr int kMaxRepeatedValues = 64;
  static constexpr int kMaxSweepValues = 1000;
  // The label mpsd gives a sweep's trials (the sweep's id); refused in a submitted request.
  static constexpr char kSweepLabel[] = "sweep";

  // Loads the stored jobs: those left RUNNING by a daemon that died become INTERRUPTED (or,
  // with restart_policy "resume" and a checkpoint in Job.last_checkpoint, QUEUED again with a
  // state event naming the checkpoint, to run from it: JobContext::resume_checkpoint), those
  // QUEUED are queued again in their original order (by priority, then submission), and
  // request ids are remembered; queued jobs whose dependency ended other than SUCCEEDED are
  // CANCELLED (DEPENDENCY_FAILED), sweeps whose trials all ended get their final state, and the
  // stored pause (PauseQueue) holds the queue again. The early-stopping rule of each unfinished
  // sweep with a scheduler is rebuilt by feeding it its trials' stored epoch events in the order
  // they were published (event time, then job id); a trial that rule had stopped but that had
  // not ended when mpsd stopped (RUNNING, or QUEUED to resume) ends CANCELLED with
  // EARLY_STOPPED instead of INTERRUPTED or resuming. Events a killed daemon had not yet
  // committed are lost with the trial's own record of them. Then starts the executor thread.
  // Errors: the store's.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const Options& options, JobStore* store,
                                                           mpsd::api::Executor* executor);

  // Stops as Shutdown() does.
  ~Scheduler();

  // Validates the spec against the executor and queues the job behind every queued job of the same
  // or a higher priority. A sweep (request.sweep) is expanded (server/core/sweep.h), every trial
  // validated (an error names the trial, its values and the field; with sweep.scheduler, the
  // executor also checks that the trial reports its metric), and stored as a parent Job of
  // kind SWEEP, returned, plus one queued job per trial. A request whose request_id names a job
  // `submitted_by` already submitted returns that job as it is now, without validating or queueing
  // anything. Errors: INVALID_ARGUMENT naming the field (a request_id over kMaxRequestIdBytes too,
  // a bad name or label, an `after` entry that names no earlier job, a repeated field over
  // kMaxRepeatedValues, an EvalJob's or PredictJob's model naming a job that is not a SUCCEEDED
  // TrainJob; for a BenchJob see trainer/bench.h, for an EvalJob trainer/eval_job.h),
  // ALREADY_EXISTS for a request_id used with a different request, RESOURCE_EXHAUSTED "queue full
  // (N)", UNAVAILABLE while shutting down, FAILED_PRECONDITION once RefuseSubmits was called or
  // Options::check_storage fails, the store's error while events cannot be stored
  // (EventLog::StorageError; a job stored just before either failed is CANCELLED in the store it
  // went to, and not acknowledged). Returns once the job and its QUEUED event are stored.
  // `submitted_by` goes into Job.submitted_by. `may_submit`, when given, is asked about the request
  // and, for a sweep, about each trial as the sweep expanded it (the one expansion of this submit),
  // before anything is validated; its error refuses the submit (the job service's data-roots and
  // resume_from checks for remote callers).
  using SubmitCheck = std::function<absl::Status(const mpsd::v1::SubmitJobRequest&)>;
  absl::StatusOr<mpsd::v1::Job> Submit(const mpsd::v1::SubmitJobRequest& request,
                                       const std::string& submitted_by = "local",
                                       const SubmitCheck& may_submit = nullptr);

  // From now on every Submit fails with `why` (not OK), e.g. when the state dir was deleted
  // under the daemon (server/core/state_dir.h: StateDirWatch): a job accepted then would be lost.
  // The running job goes on; queued jobs stay QUEUED (stored in the database mpsd opened, they
  // run when a daemon starts on it again) instead of writing artifacts where their record is
  // not. A request_id that names an earlier job still returns it.
  void RefuseSubmits(absl::Status why);

  // INVALID_ARGUMENT "job_id: ..." for what is not a job id at all ("", "abc"; api/job_id.h),
  // NOT_FOUND for an unknown well-formed id; DATA_LOSS for a job whose stored row could not be
  // read at start-up (a damaged database page), whose id also gives DATA_LOSS to Cancel.
  absl::StatusOr<mpsd::v1::Job> Get(const std::string& job_id) const;

  // The jobs `query` selects, newest (highest id) first, at most query.limit. Damaged rows
  // (DamagedJobIds) are not among them: nothing of them can be read to match a query.
  std::vector<mpsd::v1::Job> List(const JobQuery& query) const;

  // The ids of jobs whose stored rows could not be read at start-up (Get answers DATA_LOSS for
  // them), highest first; empty for an intact database.
  std::vector<std::string> DamagedJobIds() const;

  // A QUEUED job becomes CANCELLED now (stored before this returns); a RUNNING job is asked
  // to stop at its next step boundary (the returned job is still RUNNING; its stream ends
  // with CANCELLED). A sweep: each of its unfinished trials so; the sweep ends CANCELLED once
  // they all ended. Jobs waiting for a cancelled job end CANCELLED (DEPENDENCY_FAILED).
  // INVALID_ARGUMENT for what is not a job id, NOT_FOUND for an unknown id,
  // FAILED_PRECONDITION for a finished job.
  absl::StatusOr<mpsd::v1::Job> Cancel(const std::string& job_id);

  // Holds / releases the queue (PauseQueue, ResumeQueue): while paused no queued job starts;
  // the running one goes on. Stored before returning, so a restart keeps it. Idempotent.
  // Errors: the store's.
  absl::Status Pause();
  absl::Status Resume();

  // Gives a QUEUED job (for a sweep: its queued trials) `priority` and moves it behind every
  // queued job of the same or a higher priority. NOT_FOUND for an unknown id,
  // FAILED_PRECONDITION for a job that is not QUEUED (a sweep with no queued trial).
  absl::StatusOr<mpsd::v1::Job> Move(const std::string& job_id, int32_t priority);

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
  // The job an earlier Submit by `submitted_by` with this request's request_id created, or
  // nullptr if none did (or request_id is empty): request ids are each submitter's own, so one
  // submitter's id never returns another's job. ALREADY_EXISTS if that job was submitted with
  // another request.
  absl::StatusOr<const mpsd::v1::Job*> EarlierSubmit(const mpsd::v1::SubmitJobRequest& request,
                                                     const std::string& submitted_by) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // request_ids_'s key: request ids are scoped by submitter (Job.submitted_by).
  static std::string RequestKey(const std::string& submitted_by, const std::string& request_id);
  // Submit after validation: the request_id check again, shutdown, queue limit, Enqueue.
  // `trials` and `info`: a sweep's trial requests and what makes each a trial (empty for a
  // plain job). `*created` says whether the job is new (false: an earlier submit's, by
  // request_id, which a failure after this call must leave alone).
  absl::StatusOr<mpsd::v1::Job> SubmitValidated(
      const mpsd::v1::SubmitJobRequest& request,
      const std::vector<mpsd::v1::SubmitJobRequest>& trials,
      const std::vector<mpsd::v1::SweepTrial>& info, const std::string& submitted_by, bool* created)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cancel's decision and state change, without waiting for the store.
  absl::StatusOr<mpsd::v1::Job> RequestCancel(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Stores a new QUEUED job for `request` and queues it; returns it as stored. `trial`: the
  // sweep trial it is (nullptr for a plain job). `check_dependencies`: a dependency that
  // already ended other than SUCCEEDED cancels the job at once.
  absl::StatusOr<mpsd::v1::Job> Enqueue(const mpsd::v1::SubmitJobRequest& request,
                                        const std::string& submitted_by,
                                        const mpsd::v1::SweepTrial* trial = nullptr,
                                        bool check_dependencies = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores the parent of a sweep and queues its trials; returns the parent.
  absl::StatusOr<mpsd::v1::Job> EnqueueSweep(const mpsd::v1::SubmitJobRequest& request,
                                             const std::vector<mpsd::v1::SubmitJobRequest>& trials,
                                             const std::vector<mpsd::v1::SweepTrial>& info,
                                             const std::string& submitted_by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Options::check_storage, or OK when there is none. Not under mu_ (it may RefuseSubmits).
  absl::Status CheckStorage() const ABSL_LOCKS_EXCLUDED(mu_);
  // A submit whose storage failed after `job` was stored: the job (a sweep: its trials) ends
  // CANCELLED, in the store it went to, "not accepted: <why>"; it is never acknowledged.
  void WithdrawSubmit(const mpsd::v1::Job& job, const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Every `after` entry names a job the scheduler knows: INVALID_ARGUMENT naming the entry.
  absl::Status CheckAfter(const mpsd::v1::SubmitJobRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // eval_job.model or predict_job.model, when a job id, names a TrainJob that SUCCEEDED:
  // INVALID_ARGUMENT naming the field otherwise (no such job, another kind, not succeeded).
  absl::Status CheckModelJob(const mpsd::v1::SubmitJobRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when train_job.resume_from names an unfinished job that `after` also names: the
  // checkpoint it will resume from does not exist yet, so validation leaves resume_from out.
  bool ResumesFromDependency(const mpsd::v1::SubmitJobRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The priority the queue orders a job by (Job.priority, else spec.priority).
  static int32_t PriorityOf(const mpsd::v1::Job& job);
  // Every job `job` waits for (its spec's `after`) SUCCEEDED; an id no longer known counts as
  // succeeded.
  bool DependenciesSucceeded(const mpsd::v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first queued job whose dependencies all SUCCEEDED; queue_.end() when none.
  std::deque<std::string>::const_iterator NextReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first of the job's dependencies that ended other than SUCCEEDED, or nullptr.
  const mpsd::v1::Job* FailedDependency(const mpsd::v1::Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a state change of `job`: its sweep's state, and, when it ended other than
  // SUCCEEDED, the jobs waiting for it.
  void AfterStateChange(const mpsd::v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a queued job (a sweep: with its unfinished trials) CANCELLED with DEPENDENCY_FAILED
  // because `dependency` ended other than SUCCEEDED.
  void CancelForDependency(const std::string& job_id, const mpsd::v1::Job& dependency)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a QUEUED job from the queue and ends it CANCELLED with `reason` and `message`.
  void CancelQueued(mpsd::v1::Job& job, mpsd::v1::Job::FailureReason reason,
                    const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A sweep's state from its trials': RUNNING while one runs, QUEUED again (saying so) when the
  // queue is paused and none runs, final once all ended.
  void UpdateSweep(const std::string& sweep_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UpdateSweep for every unfinished sweep (after Pause).
  void UpdateSweeps() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recover's last step: trial lists from the trials, dependencies and sweeps settled.
  void SettleRecovered() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One stored epoch event of a sweep trial, for rebuilding its sweep's stopping rule.
  struct StoredEpoch {
    int64_t time_us = 0;
    int64_t job_id = 0;
    int64_t seq = 0;
    mpsd::v1::EpochMetrics epoch;
  };
  // The stored epoch events of the trials of every unfinished sweep with a scheduler among
  // `jobs` (as listed at start-up), in the order they were published. Reads the store: not
  // under mu_. A trial whose events cannot be read is left out, with a warning.
  std::vector<StoredEpoch> ReadStoppingHistory(const std::vector<mpsd::v1::Job>& jobs) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The stopping rule of `sweep` (a SWEEP job with a scheduler), new, in stoppers_, for trials
  // of at most `max_epochs` epochs; nothing for a sweep without one (or one that no longer
  // reads: logged).
  void AddStopper(const mpsd::v1::Job& sweep, int max_epochs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recover: the stoppers of the unfinished sweeps rebuilt from `history`; returns the trials
  // their rules stopped, each with the reason.
  absl::flat_hash_map<std::string, std::string> ReplayStoppingHistory(
      const std::vector<StoredEpoch>& history) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A running trial's epoch (job.last_epoch, just published) fed to its sweep's rule; on a stop,
  // the trial is told why in its log and stopped as a cancel stops it (its flag), to end
  // CANCELLED with EARLY_STOPPED (FinishJob). A fused run's trial waits in fused_epochs_ until
  // every unsettled trial of its run reached the same epoch boundary: their results are then
  // decided together (SweepStopper::ObserveTogether).
  void ObserveTrialEpoch(mpsd::v1::Job& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fused run's trials' epochs, while any of them runs: those that reached the current epoch
  // boundary wait here for the rest.
  struct FusedEpochs {
    std::string sweep_id;
    // The run's trials not settled yet.
    absl::flat_hash_set<std::string> running;
    std::vector<SweepStopper::TrialEpoch> waiting;
    // Whether trial `id` has an epoch in `waiting`.
    bool Waits(const std::string& id) const {
      return std::any_of(
          waiting.begin(), waiting.end(),
          [&id](const SweepStopper::TrialEpoch& epoch) { return epoch.trial == id; });
    }
  };
  // Decides `run`'s waiting epochs once every running trial of it has one (`now`: at once).
  void DecideFusedEpochs(FusedEpochs& run, bool now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A decision of the sweep's rule on running trial `trial`, carried out.
  void ApplyStop(mpsd::v1::Job& trial, const StopDecision& decision)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publish for an event of a running job's executor, then ObserveTrialEpoch for an epoch.
  void PublishRunEvent(const std::string& job_id, mpsd::v1::JobEvent event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts a QUEUED job into queue_ behind every job of the same or a higher priority.
  void InsertInQueue(const mpsd::v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wall time the job spent RUNNING before its newest RUNNING event, from its stored state
  // events (a job that resumes after a restart: its earlier runs). Reads the store: not under
  // mu_.
  absl::Duration EarlierRunTime(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // A queued job may start now: not paused, the state dir intact, one job ready.
  bool CanStartJob() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExecutorLoop();
  // A running job's cancel: the flag the executor reads, and what a set flag ends it as.
  struct Running {
    mpsd::api::CancelFlag cancel;
    // CANCELLED by a user, or INTERRUPTED by shutdown.
    std::atomic<mpsd::v1::Job::State> stop_as{mpsd::v1::Job::CANCELLED};
  };
  // Marks a QUEUED job, taken off the queue, RUNNING and gives it its cancel flag.
  void StartRunning(mpsd::v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops a running job (its flag set, to end as `as`); false when it does not run.
  bool StopRunning(const std::string& job_id, mpsd::v1::Job::State as)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The trials that may be trained fused with `lead` (a sweep trial just taken off the queue):
  // the QUEUED, ready trials of its sweep in queue order, not resuming, fewer than the sweep's
  // fuse limit; empty when the sweep has fuse: off or `lead` is no trial.
  std::vector<std::string> FusionCandidates(const mpsd::v1::Job& lead, int max_trials) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one job, already RUNNING, on the executor thread; returns when it reached a terminal
  // state (or, stopped by Shutdown with restart_policy: resume and a checkpoint, QUEUED again).
  // `resume_checkpoint`: JobContext::resume_checkpoint, empty for a fresh start.
  void RunJob(const std::string& job_id, const std::string& submitted_by,
              const mpsd::v1::SubmitJobRequest& spec, const std::string& resume_checkpoint);
  // Runs sweep trials, already RUNNING, fused (Executor::RunFused) on the executor thread;
  // each trial is settled as soon as it ends.
  void RunFusedJobs(const std::vector<std::string>& job_ids, const std::string& submitted_by,
                    const std::vector<mpsd::v1::SubmitJobRequest>& specs, bool shared_data_order);
  // A run of `job_id` ended with `status`: its final state (or QUEUED again to resume; a trial
  // its sweep's rule stopped ends CANCELLED with EARLY_STOPPED when the run was cancelled).
  void FinishJob(const std::string& job_id, const absl::Status& status,
                 const std::string& resume_checkpoint) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets a job's state and publishes the StateChange event.
  void SetState(mpsd::v1::Job& job, mpsd::v1::Job::State state, mpsd::v1::Job::FailureReason reason,
                const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // RequestKey(Job.submitted_by, SubmitJobRequest.request_id) -> job id, for every job that
  // has one.
  absl::flat_hash_map<std::string, std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  // The job the executor runs (for a fused run, its first trial); empty when none.
  std::string running_job_ ABSL_GUARDED_BY(mu_);
  // Every running job (a fused run's trials) and its cancel flag; an entry lives until the job
  // is settled.
  absl::flat_hash_map<std::string, std::unique_ptr<Running>> running_ ABSL_GUARDED_BY(mu_);
  // The early-stopping rule of every unfinished sweep with a scheduler (SweepSpec.scheduler), by
  // sweep id; dropped when the sweep ends.
  absl::flat_hash_map<std::string, std::unique_ptr<SweepStopper>> stoppers_ ABSL_GUARDED_BY(mu_);
  // The trials of the fused run that is running (when its sweep has a scheduler), each to the
  // run's epochs; an entry lives until its trial is settled.
  absl::flat_hash_map<std::string, std::shared_ptr<FusedEpochs>> fused_epochs_ ABSL_GUARDED_BY(mu_);
  // Running trials their sweep's rule stopped, with the reason, until FinishJob settles them.
  absl::flat_hash_map<std::string, std::string> early_stops_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // PauseQueue in effect (stored as setting "queue_paused").
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  // Jobs whose stored rows could not be read at start-up, with their DATA_LOSS status.
  absl::flat_hash_map<std::string, absl::Status> damaged_ ABSL_GUARDED_BY(mu_);
  // RefuseSubmits' reason; OK while submits are accepted.
  absl::Status refuse_submits_ ABSL_GUARDED_BY(mu_);
  int64_t jobs_run_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread executor_thread_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_SCHEDULER_H_
