// Which part of a job spec is code the submitter wrote (a TorchScript model, loss or metric), for
// the daemon's deadlines on it: the submit-time check runs it in a process of its own that is
// killed at executor.user_code_timeout_s, and a running job whose user code reports nothing for
// executor.user_code_stall_timeout_s has its executor killed (server/executor_supervisor.h).
#ifndef MPSD_API_USER_CODE_H_
#define MPSD_API_USER_CODE_H_

#include <optional>
#include <string>
#include <vector>

#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::api {

// The user code a job names.
struct UserCode {
  // The field that names it, e.g. "train_job.model.torchscript", "train_job.loss.torchscript",
  // "train_job.metrics[0].torchscript" (the first of these a TrainJob sets), or "sweep" for a
  // sweep that sets model.torchscript per trial.
  std::string field;
  // The file, as the spec gives it ("" for a sweep's per-trial files).
  std::string path;
};

// The user code `request` would run; nullopt for a job that runs only the daemon's own code. An
// EvalJob's or PredictJob's model given as a path counts (it may be a TorchScript model.pt);
// given as a job id it does not (see docs/job-files.md, "Evaluating a model on a dataset"). A
// BenchJob's first models entry that is a file (a path with '/' or a name ending in .pt).
// Pure; thread-safe.
std::optional<UserCode> UserCodeOf(const mpsd::v1::SubmitJobRequest& request);

// Every TorchScript file a TrainJob names (its model, loss and metrics, in that order; the
// submit-time check runs them all in one process); for other job kinds UserCodeOf's one, if
// any. A message about a check that never ended names them all: which one hangs is not known.
// Pure; thread-safe.
std::vector<UserCode> AllUserCodeOf(const mpsd::v1::SubmitJobRequest& request);

}  // namespace mpsd::api

#endif  // MPSD_API_USER_CODE_H_
