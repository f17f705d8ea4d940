// The LibTorch executor: api/executor.h's Executor, running jobs in this process on the devices
// LibTorch can see. mpsd-executor (executor_main.cc) serves it to the daemon over
// executor.proto (executor_service.h); tests run it directly.
//
// TrainJob trials of a sweep that PlanFusion accepts (trainer/fused_models.h's FusedModelNames;
// the features it refuses are listed in trainer/fused_train.h's FusionRefusal) train horizontally
// fused in one RunFused (trainer/fused_train.h); other trials run one after another as the
// interface's default.
//
// Torch-free header: it names only the interface.
#ifndef MPSD_TRAINER_TORCH_EXECUTOR_H_
#define MPSD_TRAINER_TORCH_EXECUTOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "api/executor.h"

namespace mpsd::trainer {

// The interface's names, which trainer code uses unqualified.
using ::mpsd::api::CancelFlag;
using ::mpsd::api::EventSink;
using ::mpsd::api::Executor;
using ::mpsd::api::JobContext;

// Initialises the device(s) LibTorch can see and returns the executor that runs jobs on them.
// Errors: INVALID_ARGUMENT for a negative cpu_threads or steps_per_readback <= 0; INTERNAL if
// LibTorch cannot start.
// cpu_threads 0 sets LibTorch's intra-op threads to AvailableCpuCount().
absl::StatusOr<std::unique_ptr<Executor>> CreateTorchExecutor(const Executor::Options& options);

// The CPUs this process may run on (sched_getaffinity: a cpuset or taskset narrows it), or
// std::thread::hardware_concurrency() where that call fails; at least 1. Thread-safe.
int AvailableCpuCount();

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TORCH_EXECUTOR_H_
