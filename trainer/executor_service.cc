// ExecutorService: executor.proto's calls mapped onto an api::Executor.
#include "trainer/executor_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
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
    return shutdown_requested_ && !running_;
  };
  mu_.Await(absl::Condition(&done));
}

grpc::Status ExecutorService::Validate(grpc::ServerContext* /*context*/,
                                       const mpsd::v1::executor::ValidateRequest* request,
                                       mpsd::v1::executor::Status* response) {
  *response = api::ToExecutorStatus(executor_->Validate(request->spec()));
  return grpc::Status::OK;
}

grpc::Status ExecutorService::Run(grpc::ServerContext* context,
                                  const mpsd::v1::executor::RunRequest* request,
                                  grpc::ServerWriter<mpsd::v1::executor::RunUpdate>* writer) {
  if (start_delay_ > absl::ZeroDuration()) absl::SleepFor(start_delay_);
  {
    absl::MutexLock lock(&mu_);
    if (running_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("job ", running_job_, " is running"));
    }
    if (shutdown_requested_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the executor is shutting down");
    }
    running_ = true;
    running_job_ = request->job_id();
    cancel_.Reset();
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
    if (!writer->Write(update) || context->IsCancelled()) cancel_.Cancel();
  };
  Log(LogLevel::kInfo, absl::StrCat("job ", job.job_id, " running"));
  const absl::Status status = executor_->Run(job, request->spec(), sink, cancel_);
  Log(LogLevel::kInfo, absl::StrCat("job ", job.job_id, " ended: ",
                                    status.ToString(absl::StatusToStringMode::kWithNoExtraData)));
  mpsd::v1::executor::RunUpdate result;
  *result.mutable_result() = api::ToExecutorStatus(status);
  writer->Write(result);
  absl::MutexLock lock(&mu_);
  running_ = false;
  running_job_.clear();
  return grpc::Status::OK;
}

grpc::Status ExecutorService::Cancel(grpc::ServerContext* /*context*/,
                                     const mpsd::v1::executor::CancelRequest* request,
                                     mpsd::v1::executor::CancelResponse* response) {
  absl::MutexLock lock(&mu_);
  if (running_ && running_job_ == request->job_id()) {
    cancel_.Cancel();
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
  cancel_.Cancel();
  return grpc::Status::OK;
}

void ExecutorService::CompleteSummary(mpsd::v1::JobSummary& summary) const {
  mpsd::v1::MemoryStats& memory = *summary.mutable_memory();
  memory.set_baseline_allocated_bytes(baseline_.allocated_bytes);
  memory.set_baseline_reserved_bytes(baseline_.reserved_bytes);
}

}  // namespace mpsd::trainer
