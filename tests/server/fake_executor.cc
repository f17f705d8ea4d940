// FakeExecutor: scripted jobs behind the real executor interface.
#include "tests/server/fake_executor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/error_cause.h"

namespace mpsd::testing {
namespace {

mpsd::v1::JobEvent EpochEvent(int epoch, double loss) {
  mpsd::v1::JobEvent event;
  event.mutable_epoch()->set_epoch(epoch);
  event.mutable_epoch()->set_train_loss(loss);
  event.mutable_epoch()->set_val_loss(loss);
  return event;
}

}  // namespace

FakeExecutor::Script FakeExecutor::Held(int steps) {
  Script script;
  script.steps = steps;
  script.hold = true;
  return script;
}

FakeExecutor::Script FakeExecutor::EndsWith(absl::Status result) {
  Script script;
  script.result = std::move(result);
  return script;
}

mpsd::v1::SubmitJobRequest FakeTrainRequest(int priority, const std::string& request_id,
                                            const std::string& model) {
  mpsd::v1::SubmitJobRequest request;
  request.mutable_train_job()->mutable_model()->set_name(model);
  request.mutable_train_job()->mutable_dataset()->set_name("fashion-mnist");
  request.set_priority(priority);
  request.set_request_id(request_id);
  return request;
}

void FakeExecutor::FailValidation(const std::string& model, absl::Status error) {
  absl::MutexLock lock(&mu_);
  failing_model_ = model;
  validation_error_ = std::move(error);
}

void FakeExecutor::QueueScript(Script script) {
  absl::MutexLock lock(&mu_);
  scripts_.push_back(std::move(script));
}

void FakeExecutor::Release() {
  absl::MutexLock lock(&mu_);
  released_ = true;
}

bool FakeExecutor::WaitForRuns(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto started = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(runs_.size()) >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&started), timeout);
}

bool FakeExecutor::WaitUntilHeld(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&holding_), timeout);
}

std::vector<FakeExecutor::RunRecord> FakeExecutor::runs() const {
  absl::MutexLock lock(&mu_);
  return runs_;
}

absl::Status FakeExecutor::Validate(const mpsd::v1::SubmitJobRequest& spec) const {
  absl::MutexLock lock(&mu_);
  if (!failing_model_.empty() && spec.train_job().model().name() == failing_model_) {
    return validation_error_;
  }
  return absl::OkStatus();
}

bool FakeExecutor::Hold(const api::CancelFlag& cancelled) {
  {
    absl::MutexLock lock(&mu_);
    cancel_seen_ = false;
    holding_ = true;
  }
  // Woken by the flag itself: the callback runs on the thread that cancels, under the flag's
  // lock, so the callback is registered and removed without holding mu_.
  api::CancelFlag::Callback on_cancel(cancelled, [this] {
    absl::MutexLock lock(&mu_);
    cancel_seen_ = true;
  });
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancel_seen_ || released_; };
  mu_.Await(absl::Condition(&done));
  holding_ = false;
  return cancel_seen_;
}

absl::Status FakeExecutor::Run(const api::JobContext& job, const mpsd::v1::SubmitJobRequest& spec,
                               const api::EventSink& sink, const api::CancelFlag& cancelled) {
  Script script;
  {
    absl::MutexLock lock(&mu_);
    runs_.push_back(RunRecord{job, spec});
    if (!scripts_.empty()) {
      script = std::move(scripts_.front());
      scripts_.pop_front();
    }
  }
  auto finish = [&](absl::Status status) {
    mpsd::v1::JobEvent summary;
    summary.mutable_summary()->set_device("fake");
    sink(std::move(summary));
    return status;
  };
  for (int step = 1; step <= script.steps; ++step) {
    mpsd::v1::JobEvent event;
    event.mutable_step()->set_step(step);
    event.mutable_step()->set_epoch(1);
    event.mutable_step()->set_loss(1.0f / step);
    sink(std::move(event));
    if (cancelled.cancelled()) {
      return finish(absl::CancelledError(absl::StrCat("cancelled after step ", step)));
    }
  }
  for (size_t i = 0; i < script.epoch_losses.size(); ++i) {
    sink(EpochEvent(static_cast<int>(i) + 1, script.epoch_losses[i]));
    if (cancelled.cancelled()) {
      return finish(absl::CancelledError(absl::StrCat("cancelled after epoch ", i + 1)));
    }
  }
  if (script.hold && Hold(cancelled)) return finish(absl::CancelledError("cancelled while held"));
  return finish(script.result);
}

void FakeExecutor::FuseUpTo(int n) {
  absl::MutexLock lock(&mu_);
  fuse_up_to_ = n;
}

std::vector<std::vector<std::string>> FakeExecutor::fused_runs() const {
  absl::MutexLock lock(&mu_);
  return fused_runs_;
}

absl::StatusOr<std::vector<int>> FakeExecutor::PlanFusion(
    const std::vector<mpsd::v1::SubmitJobRequest>& specs, int max_trials) const {
  absl::MutexLock lock(&mu_);
  const int n = std::min(max_trials, fuse_up_to_);
  std::vector<int> trials;
  int differs = -1;  // the first trial left out for its model
  for (int i = 0; i < static_cast<int>(specs.size()) && static_cast<int>(trials.size()) < n; ++i) {
    if (specs[i].train_job().model().name() == specs[0].train_job().model().name()) {
      trials.push_back(i);
    } else if (differs < 0) {
      differs = i;
    }
  }
  if (trials.size() < 2) {
    if (n < 2 || differs < 0) return absl::FailedPreconditionError("fake: fusing off");
    // As TorchExecutor says it: the trial by its place among `specs`, and as data.
    constexpr absl::string_view kReason = " differs in train_job.model.name";
    return api::WithTrialNotFusable(
        absl::FailedPreconditionError(absl::StrCat("trial ", differs, kReason)), differs, kReason);
  }
  return trials;
}

std::vector<absl::Status> FakeExecutor::RunFused(const std::vector<api::TrialRun>& trials,
                                                 const api::FusionOptions& /*options*/) {
  std::vector<Script> scripts;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string>& ids = fused_runs_.emplace_back();
    for (const api::TrialRun& trial : trials) {
      ids.push_back(trial.job.job_id);
      runs_.push_back(RunRecord{trial.job, trial.spec});
      Script& script = scripts.emplace_back();
      if (!scripts_.empty()) {
        script = std::move(scripts_.front());
        scripts_.pop_front();
      }
    }
  }
  std::vector<absl::Status> results(trials.size());
  std::vector<bool> ended(trials.size(), false);
  auto end = [&](size_t i, absl::Status status) {
    mpsd::v1::JobEvent summary;
    summary.mutable_summary()->set_device("fake");
    trials[i].sink(std::move(summary));
    ended[i] = true;
    results[i] = status;
    if (trials[i].done) trials[i].done(status);
  };
  int most_steps = 0;
  for (const Script& script : scripts) most_steps = std::max(most_steps, script.steps);
  for (int step = 1; step <= most_steps; ++step) {
    for (size_t i = 0; i < trials.size(); ++i) {
      if (ended[i] || step > scripts[i].steps) continue;
      mpsd::v1::JobEvent event;
      event.mutable_step()->set_step(step);
      event.mutable_step()->set_epoch(1);
      event.mutable_step()->set_loss(1.0f / step);
      trials[i].sink(std::move(event));
      if (trials[i].cancelled->cancelled()) {
        end(i, absl::CancelledError(absl::StrCat("cancelled after step ", step)));
      }
    }
  }
  size_t most_epochs = 0;
  for (const Script& script : scripts)
    most_epochs = std::max(most_epochs, script.epoch_losses.size());
  for (size_t epoch = 0; epoch < most_epochs; ++epoch) {
    for (size_t i = 0; i < trials.size(); ++i) {
      if (ended[i] || epoch >= scripts[i].epoch_losses.size()) continue;
      // Cancelled by what another trial's event decided (its sweep's rule): ends before this
      // epoch, as a fused run's trial ends at its next step.
      if (trials[i].cancelled->cancelled()) {
        end(i, absl::CancelledError(absl::StrCat("cancelled after epoch ", epoch)));
        continue;
      }
      trials[i].sink(EpochEvent(static_cast<int>(epoch) + 1, scripts[i].epoch_losses[epoch]));
      if (trials[i].cancelled->cancelled()) {
        end(i, absl::CancelledError(absl::StrCat("cancelled after epoch ", epoch + 1)));
      }
    }
  }
  // Held trials wait together, each until it is cancelled, or all until Release().
  for (;;) {
    bool holding = false;
    for (size_t i = 0; i < trials.size(); ++i) {
      if (ended[i] || !scripts[i].hold) continue;
      if (trials[i].cancelled->cancelled()) {
        end(i, absl::CancelledError("cancelled while held"));
      } else {
        holding = true;
      }
    }
    absl::MutexLock lock(&mu_);
    holding_ = holding && !released_;
    if (!holding_) break;
    mu_.AwaitWithTimeout(absl::Condition(&released_), absl::Milliseconds(5));
  }
  for (size_t i = 0; i < trials.size(); ++i) {
    if (!ended[i]) end(i, scripts[i].result);
  }
  return results;
}

mpsd::v1::DeviceInfo FakeExecutor::GetDevice() const {
  mpsd::v1::DeviceInfo info;
  info.set_kind("fake");
  info.set_name("fake executor");
  absl::MutexLock lock(&mu_);
  info.set_jobs_run(static_cast<int64_t>(runs_.size()));
  return info;
}

absl::StatusOr<mpsd::v1::ListModelsResponse> FakeExecutor::ListModels(
    const mpsd::v1::ListModelsRequest& /*request*/) const {
  mpsd::v1::ListModelsResponse response;
  mpsd::v1::ModelInfo* model = response.add_models();
  model->set_name("fake");
  model->set_parameters(1);
  return response;
}

}  // namespace mpsd::testing
