// The executor process's gRPC service (proto/mpsd/v1/executor.proto): serves one
// api::Executor to the daemon that started the process, over a private unix socket.
// Torch-free: it sees the executor only through api/executor.h.
#ifndef MPSD_TRAINER_EXECUTOR_SERVICE_H_
#define MPSD_TRAINER_EXECUTOR_SERVICE_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/executor.h"
#include "mpsd/v1/executor.grpc.pb.h"
#include "trainer/device_memory.h"

namespace mpsd::trainer {

// gRPC's synchronous API: each call runs on one of gRPC's threads; Run runs the job on its
// call's thread, one job at a time (a second concurrent Run gets FAILED_PRECONDITION), while
// Validate, GetDevice, ListModels and Cancel are answered alongside. Borrows the executor, which
// must outlive the service. Thread-safe.
class ExecutorService final : public mpsd::v1::executor::Executor::Service {
 public:
  // `baseline`: memory of the executor's default device after its warm-up (MeasureBaseline),
  // put into every DeviceInfo (baseline_*) and every job summary's MemoryStats (baseline_*).
  // `start_delay`: for tests of a cancel's hand-over only (mpsd-executor
  // --enable-fault-injection with $MPSD_EXECUTOR_START_DELAY_MS): how long Run waits after a
  // job arrives before it takes the job, so that a cancel can come in between.
  ExecutorService(api::Executor* executor, const api::MemoryFigures& baseline,
                  absl::Duration start_delay = absl::ZeroDuration());

  // Blocks until Shutdown has been called and no job runs any more.
  void WaitForShutdown();

  grpc::Status Validate(grpc::ServerContext* context,
                        const mpsd::v1::executor::ValidateRequest* request,
                        mpsd::v1::executor::Status* response) override;
  grpc::Status Run(grpc::ServerContext* context, const mpsd::v1::executor::RunRequest* request,
                   grpc::ServerWriter<mpsd::v1::executor::RunUpdate>* writer) override;
  grpc::Status PlanFusion(grpc::ServerContext* context,
                          const mpsd::v1::executor::PlanFusionRequest* request,
                          mpsd::v1::executor::PlanFusionResponse* response) override;
  grpc::Status RunFused(grpc::ServerContext* context,
                        const mpsd::v1::executor::RunFusedRequest* request,
                        grpc::ServerWriter<mpsd::v1::executor::RunUpdate>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* context,
                      const mpsd::v1::executor::CancelRequest* request,
                      mpsd::v1::executor::CancelResponse* response) override;
  grpc::Status GetDevice(grpc::ServerContext* context, const mpsd::v1::GetDeviceRequest* request,
                         mpsd::v1::DeviceInfo* response) override;
  grpc::Status ListModels(grpc::ServerContext* context, const mpsd::v1::ListModelsRequest* request,
                          mpsd::v1::ListModelsResponse* response) override;
  grpc::Status Shutdown(grpc::ServerContext* context,
                        const mpsd::v1::executor::ShutdownRequest* request,
                        mpsd::v1::executor::ShutdownResponse* response) override;

 private:
  // Adds what only this process knows to a job's summary: the baseline. (The executor fills the
  // job's own memory figures, peak reserved included, on the job's device.)
  void CompleteSummary(mpsd::v1::JobSummary& summary) const;
  // Takes the executor for `job_ids` (one for Run, a fused run's trials): OK, or the RPC's
  // error while another job runs or after Shutdown. Waits start_delay first.
  grpc::Status Take(const std::vector<std::string>& job_ids);
  // Gives the executor back after Run or RunFused.
  void Release();

  // Constant after construction.
  api::Executor* const executor_;
  const api::MemoryFigures baseline_;
  const absl::Duration start_delay_;

  absl::Mutex mu_;
  // The running job's id and cancel flag, read by the job at step boundaries; a fused run has
  // one per trial. Empty when none runs. The flags live until Release.
  std::map<std::string, std::unique_ptr<api::CancelFlag>> running_ ABSL_GUARDED_BY(mu_);
  bool shutdown_requested_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_EXECUTOR_SERVICE_H_
