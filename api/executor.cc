// The executor interface's defaults: nothing is fused, fused runs run one trial after another.
#include "api/executor.h"

#include <utility>

namespace mpsd::api {

absl::StatusOr<std::vector<int>> Executor::PlanFusion(
    const std::vector<mpsd::v1::SubmitJobRequest>& /*specs*/, int /*max_trials*/) const {
  return absl::FailedPreconditionError("this executor trains no trials fused");
}

std::vector<absl::Status> Executor::RunFused(const std::vector<TrialRun>& trials,
                                             const FusionOptions& /*options*/) {
  std::vector<absl::Status> results;
  results.reserve(trials.size());
  for (const TrialRun& trial : trials) {
    results.push_back(Run(trial.job, trial.spec, trial.sink, *trial.cancelled));
    if (trial.done) trial.done(results.back());
  }
  return results;
}

}  // namespace mpsd::api
