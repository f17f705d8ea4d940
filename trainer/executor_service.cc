// ExecutorService: executor.proto's calls mapped onto an api::Executor.
#include "trainer/executor_service.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "api/status.h"
#include "trainer/log.h"

namespace mpsd::trainer {

ExecutorService::ExecutorService(api::Executor* executor, const api::MemoryFigures& baseline,
                                 absl::Duration start_delay)
    : executor_(executor), baseline_(baseline), start_delay_(start_delay) {}

void ExecutorService::WaitForShutdown() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_requested_ && running_.empty();
  };
  mu_.Await(absl::Condition(&done));
}

grpc::Status ExecutorService::Validate(grpc::ServerContext* /*context*/,
                                       const mpsd::v1::executor::ValidateRequest* request,
                                       mpsd::v1::executor::Status* response) {
  *response = api::ToExecutorStatus(executor_->Validate(request->spec()));
  return grpc::Status::OK;
}

grpc::Status ExecutorService::Take(const std::vector<std::string>& job_ids) {
  if (start_delay_ > absl::ZeroDuration()) absl::SleepFor(start_delay_);
  absl::MutexLock lock(&mu_);
  if (!running_.empty()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("job ", running_.begin()->first, " is running"));
  }
  if (shutdown_requested_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the executor is shutting down");
  }
  for (const std::string& id : job_ids) running_[id] = std::make_unique<api::CancelFlag>();
  return grpc::Status::OK;
}

void ExecutorService::Release() {
  absl::MutexLock lock(&mu_);
  running_.clear();
}

grpc::Status ExecutorService::Run(grpc::ServerContext* context,
                                  const mpsd::v1::executor::RunRequest* request,
                                  grpc::ServerWriter<mpsd::v1::executor::RunUpdate>* writer) {
  if (grpc::Status taken = Take({request->job_id()}); !taken.ok()) return taken;
  api::CancelFlag* cancel;
  {
    absl::MutexLock lock(&mu_);
    cancel = running_.at(request->job_id()).get();
  }
  api::JobContext job;
  job.job_id = request->job_id();
  job.resume_checkpoint = request->resume_checkpoint();
  job.local_rank = request->local_rank();
  const api::EventSink sink = [&](mpsd::v1::JobEvent event) {
    if (event.has_summary()) CompleteSummary(*event.mutable_summary());
    mpsd::v1::executor::RunUpdate update;
    *update.mutable_event() = std::move(event);
    // The daemon went away or gave up on the job: stop at the next step boundary.
    if (!writer->Write(update) || context->IsCancelled()) cancel->Cancel();
  };
  Log(LogLevel::kInfo, absl::StrCat("job ", job.job_id, " running"));
  const absl::Status status = executor_->Run(job, request->spec(), sink, *cancel);
  Log(LogLevel::kInfo, absl::StrCat("job ", job.job_id, " ended: ",
                                    status.ToString(absl::StatusToStringMode::kWithNoExtraData)));
  mpsd::v1::executor::RunUpdate result;
  *result.mutable_result() = api::ToExecutorStatus(status);
  writer->Write(result);
  Release();
  return grpc::Status::OK;
}

grpc::Status ExecutorService::PlanFusion(grpc::ServerContext* /*context*/,
                                         const mpsd::v1::executor::PlanFusionRequest* request,
                                         mpsd::v1::executor::PlanFusionResponse* response) {
  const std::vector<mpsd::v1::SubmitJobRequest> specs(request->specs().begin(),
                                                      request->specs().end());
  const absl::StatusOr<std::vector<int>> trials =
      executor_->PlanFusion(specs, request->max_trials());
  *response->mutable_status() = api::ToExecutorStatus(trials.status());
  if (trials.ok()) response->mutable_trials()->Add(trials->begin(), trials->end());
  return grpc::Status::OK;
}

grpc::Status ExecutorService::RunFused(grpc::ServerContext* context,
                                       const mpsd::v1::executor::RunFusedRequest* request,
                                       grpc::ServerWriter<mpsd::v1::executor::RunUpdate>* writer) {
  std::vector<std::string> ids;
  for (const mpsd::v1::executor::RunRequest& trial : request->trials()) {
    ids.push_back(trial.job_id());
  }
  if (absl::flat_hash_set<std::string>(ids.begin(), ids.end()).size() != ids.size()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a trial is named twice");
  }
  if (grpc::Status taken = Take(ids); !taken.ok()) return taken;
  std::vector<api::CancelFlag*> flags;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : ids) flags.push_back(running_.at(id).get());
  }
  // Every trial's sink writes to the one stream, on RunFused's thread.
  auto write = [&](mpsd::v1::executor::RunUpdate update) {
    if (!writer->Write(update) || context->IsCancelled()) {
      for (api::CancelFlag* flag : flags) flag->Cancel();
    }
  };
  std::vector<api::TrialRun> trials(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const mpsd::v1::executor::RunRequest& from = request->trials(static_cast<int>(i));
    api::TrialRun& trial = trials[i];
    trial.job.job_id = from.job_id();
    trial.job.resume_checkpoint = from.resume_checkpoint();
    trial.spec = from.spec();
    trial.cancelled = flags[i];
    trial.sink = [this, &write, id = from.job_id()](mpsd::v1::JobEvent event) {
      if (event.has_summary()) CompleteSummary(*event.mutable_summary());
      event.set_job_id(id);
      mpsd::v1::executor::RunUpdate update;
      *update.mutable_event() = std::move(event);
      write(std::move(update));
    };
    trial.done = [&write, id = from.job_id()](const absl::Status& status) {
      mpsd::v1::executor::RunUpdate update;
      update.mutable_trial_result()->set_job_id(id);
      *update.mutable_trial_result()->mutable_status() = api::ToExecutorStatus(status);
      write(std::move(update));
    };
  }
  Log(LogLevel::kInfo, absl::StrCat("jobs ", absl::StrJoin(ids, ", "), " running fused"));
  // A trial the executor returned without calling `done` still gets its result.
  std::vector<bool> reported(ids.size(), false);
  for (size_t i = 0; i < ids.size(); ++i) {
    trials[i].done = [inner = trials[i].done, &reported, i](const absl::Status& status) {
      if (reported[i]) return;
      reported[i] = true;
      inner(status);
    };
  }
  api::FusionOptions options;
  options.shared_data_order = request->shared_data_order();
  const std::vector<absl::Status> results = executor_->RunFused(trials, options);
  for (size_t i = 0; i < ids.size(); ++i) {
    const absl::Status status =
        i < results.size() ? results[i] : absl::InternalError("the fused run returned no result");
    trials[i].done(status);
    Log(LogLevel::kInfo, absl::StrCat("job ", ids[i], " ended: ",
                                      status.ToString(absl::StatusToStringMode::kWithNoExtraData)));
  }
  mpsd::v1::executor::RunUpdate result;
  *result.mutable_result() = api::ToExecutorStatus(absl::OkStatus());
  writer->Write(result);
  Release();
  return grpc::Status::OK;
}

grpc::Status ExecutorService::Cancel(grpc::ServerContext* /*context*/,
                                     const mpsd::v1::executor::CancelRequest* request,
                                     mpsd::v1::executor::CancelResponse* response) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(request->job_id());
  if (it != running_.end()) {
    it->second->Cancel();
    response->set_cancelled(true);
  }
  return grpc::Status::OK;
}

grpc::Status ExecutorService::GetDevice(grpc::ServerContext* /*context*/,
                                        const mpsd::v1::GetDeviceRequest* /*request*/,
                                        mpsd::v1::DeviceInfo* response) {
  *response = executor_->GetDevice();
  response->set_baseline_allocated_bytes(baseline_.allocated_bytes);
  response->set_baseline_reserved_bytes(baseline_.reserved_bytes);
  response->set_executor_jobs_run(response->jobs_run());
  return grpc::Status::OK;
}

grpc::Status ExecutorService::ListModels(grpc::ServerContext* /*context*/,
                                         const mpsd::v1::ListModelsRequest* request,
                                         mpsd::v1::ListModelsResponse* response) {
  absl::StatusOr<mpsd::v1::ListModelsResponse> models = executor_->ListModels(*request);
  if (!models.ok()) return api::ToGrpcStatus(models.status());
  *response = *std::move(models);
  return grpc::Status::OK;
}

grpc::Status ExecutorService::Shutdown(grpc::ServerContext* /*context*/,
                                       const mpsd::v1::executor::ShutdownRequest* /*request*/,
                                       mpsd::v1::executor::ShutdownResponse* /*response*/) {
  absl::MutexLock lock(&mu_);
  shutdown_requested_ = true;
  for (auto& [id, flag] : running_) flag->Cancel();
  return grpc::Status::OK;
}

void ExecutorService::CompleteSummary(mpsd::v1::JobSummary& summary) const {
  mpsd::v1::MemoryStats& memory = *summary.mutable_memory();
  memory.set_baseline_allocated_bytes(baseline_.allocated_bytes);
  memory.set_baseline_reserved_bytes(baseline_.reserved_bytes);
}

}  // namespace mpsd::trainer
