// The executor interface: the one component that touches tensors owns the device, validates job
// specs against it, and runs one job at a time, reporting progress as JobEvent payloads.
//
// Torch-free on purpose: the daemon (server/) talks to the executor only in proto messages.
// Two implementations: the LibTorch executor inside the mpsd-executor process
// (trainer/torch_executor.h, CreateTorchExecutor) and the daemon's proxy for that process
// (server/executor/executor_supervisor.h), which forwards every call over
// proto/mpsd/v1/executor.proto.
#ifndef MPSD_API_EXECUTOR_H_
#define MPSD_API_EXECUTOR_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/cancel_flag.h"
#include "api/input_limits.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::api {

// Receives one job's event payloads in the order they happen. The executor fills the payload
// (step, epoch, log or summary) and leaves job_id, seq and time to the receiver, which owns the
// numbering. Called on the thread that called Executor::Run; must not block for long (it runs
// between training steps).
using EventSink = std::function<void(mpsd::v1::JobEvent event)>;

// The c10d FileStore through which the ranks of a single-node data-parallel TrainJob
// (distributed.nnodes 1) meet: a file of this name in the job's directory,
// <artifacts_dir>/<job_id>/ (trainer/distributed.h: DistributedConfig::store_file). The ranks
// create it as they connect, and c10d's FileStore removes it when the last rank lets go of it.
// One that a crashed run left is removed before the ranks start: by the daemon before it starts
// a job's ranks (ExecutorSupervisor::RunRanks), by a lone rank itself. It is no artifact:
// ListArtifacts (server/core/artifacts.h) leaves it out.
inline constexpr char kRendezvousFileName[] = ".rendezvous";

// What the executor knows of a job besides its spec.
struct JobContext {
  // The daemon's id of the job ("17", api/job_id.h). Names the job's artifact directory
  // (<artifacts_dir>/<job_id>/: checkpoints, the finished model).
  std::string job_id;
  // The checkpoint file to resume from, resolved by the caller from restart_policy: resume;
  // empty = as the spec says (resume_from, or start fresh). Overrides the spec's resume_from.
  std::string resume_checkpoint;
  // A data-parallel job (TrainJob.distributed): which of this daemon's ranks this executor
  // runs, in [0, nproc_per_node); its rank in the job is node_rank × nproc_per_node + this.
  // 0 for every other job.
  int local_rank = 0;
};

// One trial of a fused run (Executor::RunFused). Borrows nothing but `cancelled`.
struct TrialRun {
  JobContext job;
  mpsd::v1::SubmitJobRequest spec;
  // This trial's events, exactly as Run's sink would receive them for this trial alone (its
  // steps, epochs, logs and, last, its summary). Called on RunFused's thread.
  EventSink sink;
  // The caller's, must outlive the call. Once set this trial stops at the next step boundary
  // and ends CANCELLED; the other trials go on.
  const CancelFlag* cancelled = nullptr;
  // May be empty. Called once, on RunFused's thread, as soon as this trial has ended (after its
  // summary), with the status RunFused will return for it: the caller can settle the trial
  // while the others still train.
  std::function<void(const absl::Status&)> done;
};

// How a fused run trains its trials (mpsd.proto SweepSpec).
struct FusionOptions {
  // SweepSpec.data_order "shared": every trial sees the first trial's data order.
  bool shared_data_order = false;
};

class Executor {
 public:
  // How an executor is configured (mpsd-executor's flags, which the supervisor passes on).
  struct Options {
    // Intra-op threads for CPU work; 0 = one per CPU this process may run on (its affinity).
    int cpu_threads = 0;
    // Training steps whose metrics are read back from the device in one transfer (one
    // host-device synchronisation per group). Step events lag the device by up to this many
    // steps; 1 synchronises every step (tests, debugging).
    int steps_per_readback = 32;
    // Where jobs write checkpoints and finished models: <artifacts_dir>/<job_id>/. Empty: jobs
    // that ask for a checkpoint are rejected at Validate and no finished model is saved.
    std::string artifacts_dir;
    // Where image_folder datasets keep their decode caches (trainer/dataset_cache.h); mpsd sets
    // <state_dir>/cache. Empty: every job decodes its images again, into memory.
    std::string cache_dir;
    // Accept FaultInjection in specs (mpsd --enable-fault-injection, for tests only); when
    // false such a spec fails Validate with INVALID_ARGUMENT.
    bool allow_fault_injection = false;
    // What reading one file a job names may cost (api/input_limits.h); the executor applies
    // them to every file it reads for a job (trainer/input_limits.h).
    InputLimits input_limits;
  };

  virtual ~Executor() = default;

  // Checks a job before it is queued, without touching the device's memory: every field in
  // range, the device available, the dataset's files present, the model able to take the
  // dataset's input shape (by shape arithmetic). Errors: INVALID_ARGUMENT whose
  // message starts with the field path ("train_job.batch_size: must be > 0, got 0",
  // "bench_job.models[0]: unknown model ..."; BenchJob: see trainer/bench.h). A TrainJob with
  // `sweep.scheduler` set (a sweep trial, validated with its sweep's scheduler and nothing else
  // of the sweep) also needs scheduler.metric to be an epoch metric the job reports every
  // epoch ("sweep.scheduler.metric: ..."). Thread-safe.
  virtual absl::Status Validate(const mpsd::v1::SubmitJobRequest& spec) const = 0;

  // Runs one job to its end on the calling thread: loads the data onto the device, trains,
  // evaluates, then synchronises, releases the model, optimizer and data and empties the
  // caching allocator. Emits one `step` event per optimizer step (read back from the device in
  // groups, so they lag the device by a few steps), one `epoch` event per epoch and, last, one
  // `summary` event (also emitted for a failed or cancelled job, with the memory figures), plus
  // a few `log` events. A spec that fails Validate() returns its error before anything runs and
  // emits nothing. Stops at the next step boundary once `cancelled` is set (after emitting the
  // events of the steps that ran) and returns CANCELLED; the flag is the caller's and must
  // outlive the call.
  //
  // Errors (the job fails; the executor stays usable): INVALID_ARGUMENT for a spec problem found
  // only at run time; DATA_LOSS for a dataset file that is corrupt or truncated, NOT_FOUND for
  // one that disappeared after validation (the message names the file); RESOURCE_EXHAUSTED for
  // out of device memory; CANCELLED; INTERNAL for any other LibTorch error. The job's
  // Job.FailureReason is FailureReasonOf(the error) (api/failure_reason.h): the reason attached
  // to the status when there is one, else the one these codes stand for. The supervisor
  // (server/executor/executor_supervisor.h) attaches EXECUTOR_CRASHED when the executor process
  // died during the job.
  //
  // A BenchJob instead emits one `bench_row` event per measured row and a summary with every
  // row (trainer/bench.h); an out-of-memory row is recorded in its row, not a failed job.
  //
  // Not thread-safe with itself: one job at a time (the device has one owner).
  virtual absl::Status Run(const JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
                           const EventSink& sink, const CancelFlag& cancelled) = 0;

  // Which of `specs` (TrainJob trials of one sweep, in the order they would run) one RunFused
  // call may train together with specs[0]: their indices into `specs`, 0 first, then in order
  // every trial that can be fused with it (the same model, data, input shape and batch size;
  // differing only in values that change no shape, such as learning rate, weight decay, seed),
  // skipping the others, at least 2 and at most `max_trials`, and no more than fit the device's
  // free memory. FAILED_PRECONDITION when fewer than 2 can be fused, with a message saying why
  // for the job log ("trial 0: model vgg11 has no fused form yet", "trial 1 differs in
  // train_job.batch_size"). Reads the specs' dataset headers and the device's memory: touches no
  // tensor on the device, never disturbs a running job. Thread-safe. The default fuses nothing.
  virtual absl::StatusOr<std::vector<int>> PlanFusion(
      const std::vector<mpsd::v1::SubmitJobRequest>& specs, int max_trials) const;

  // Trains `trials` (specs PlanFusion accepted, in the same order) together in one run, as one
  // horizontally fused model and optimizer on the device, each trial's events to its own sink.
  // Returns one status per trial, in order, each what Run would have returned for that trial
  // alone (CANCELLED for a trial whose flag was set; a trial that fails ends alone unless the
  // failure is the run's, e.g. out of memory, which fails every trial still running). Each
  // trial saves its own artifacts under <artifacts_dir>/<its job_id>/ as Run does. Not
  // thread-safe with Run or itself. The default runs the trials one after another with Run.
  virtual std::vector<absl::Status> RunFused(const std::vector<TrialRun>& trials,
                                             const FusionOptions& options);

  // The default device and its memory now. Thread-safe.
  virtual mpsd::v1::DeviceInfo GetDevice() const = 0;

  // The models a job may name, each with its parameter count at the request's input shape and
  // class count (each model at its natural input by default); a model that cannot take the
  // requested shape is listed with `unsupported` saying why. Arithmetic only: builds no model
  // and draws no random numbers, so it never disturbs a running job. Errors: INVALID_ARGUMENT
  // whose message starts with the field ("input_shape: ...", "num_classes: ..."). Thread-safe.
  virtual absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(
      const mpsd::v1::ListModelsRequest& request) const = 0;
};

}  // namespace mpsd::api

#endif  // MPSD_API_EXECUTOR_H_
