// Sweeps: a SubmitJobRequest with `sweep:` expanded into one trial request per point of its
// grid and random draws, each a plain job spec with the swept fields set. Pure functions of the
// request (no I/O), so the scheduler, the data-roots check and tests all expand it the same way.
#ifndef MPSD_SERVER_CORE_SWEEP_H_
#define MPSD_SERVER_CORE_SWEEP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Most trials one sweep may have, grid points × random draws (mpsd.proto, SweepSpec).
inline constexpr int kMaxSweepTrials = 1000;

// One trial of a sweep before it is queued. A plain value: owns its messages; copy freely.
struct SweepTrialRequest {
  // The sweep's request without `sweep` and `request_id`, with this trial's values set and
  // `name` "<sweep name>/<index>" (left empty when the sweep has none).
  mpsd::v1::SubmitJobRequest request;
  // index and parameters; sweep_id is left for the scheduler to fill in.
  mpsd::v1::SweepTrial trial;
};

// The trials of `request.sweep` in order (mpsd.proto, SweepSpec: grid points with the first
// parameter varying slowest, random draws fastest, draws from mt19937_64 seeded with
// random.seed). Deterministic: the same request gives the same trials on every platform.
// INVALID_ARGUMENT naming the field path ("sweep.grid[1].path", "sweep.random.parameters[0]
// .uniform", "sweep.grid[0].values[2]") for: no grid and no random parameters, a path that is
// not a scalar field of the spec, a path swept twice, a value that is not of the field's type,
// a range that is not [low, high] with low < high (log_uniform: low > 0), random.trials < 1,
// more than kMaxSweepTrials trials; a bad sweep.fuse or data_order (ReadSweepFusion) or
// sweep.scheduler (server/core/trial_stopping.h, ReadTrialStopping, against MaxTrialEpochs), and
// any of them on a sweep whose trials are not TrainJobs. Swept values are in the field's own
// units (a learning rate as is, batch_size in examples); integer fields take uniform/log_uniform
// draws rounded to the nearest integer. The returned requests are copies: `request` is only
// read. Thread-safe.
absl::StatusOr<std::vector<SweepTrialRequest>> ExpandSweep(
    const mpsd::v1::SubmitJobRequest& request);

// Most trials one fused run may train together (SweepSpec.fuse "auto", and the largest K).
inline constexpr int kMaxFusedTrials = 64;

// SweepSpec.fuse and data_order, read. A plain value.
struct SweepFusion {
  // At most this many trials per fused run; 1 = "off".
  int max_trials = kMaxFusedTrials;
  // data_order "shared".
  bool shared_data_order = false;
};

// The sweep's fusion settings: fuse "", "auto" (or "true") → kMaxFusedTrials, "off" (or
// "false", what YAML 1.1 makes of an unquoted off) → 1, an integer K in [2, kMaxFusedTrials]
// → K; data_order "" / "per_trial" or "shared" (not with fuse off). INVALID_ARGUMENT
// naming "sweep.fuse" or "sweep.data_order" otherwise. ExpandSweep checks it too, and refuses
// either field on a sweep whose trials are not TrainJobs. Pure.
absl::StatusOr<SweepFusion> ReadSweepFusion(const mpsd::v1::SweepSpec& sweep);

// The largest TrainJob.epochs of `trials` (the effective value: 1 when unset); 1 for none.
// Pure.
int MaxTrialEpochs(const std::vector<SweepTrialRequest>& trials);

// "optimizer.learning_rate=0.01, batch_size=64": a trial's values as stored in
// trial.parameters (in their order, as their text), for messages and tables; "" for none. Never
// fails; pure and thread-safe.
std::string DescribeTrial(const mpsd::v1::SweepTrial& trial);

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_SWEEP_H_
