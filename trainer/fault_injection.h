// Fault injection for tests of the daemon's executor supervision (SubmitJobRequest's
// TrainJob.fault_injection / BenchJob.fault_injection): the executor process aborts, segfaults,
// allocates device memory without bound or hangs at a chosen step; or (TrainJob) steps get a NaN
// loss ("nan_loss", which the training loop plants: TrainJobConfig::nan_loss_from). Accepted
// only when the executor runs with Executor::Options::allow_fault_injection (mpsd
// --enable-fault-injection).
#ifndef MPSD_TRAINER_FAULT_INJECTION_H_
#define MPSD_TRAINER_FAULT_INJECTION_H_

#include <string>

#include "absl/status/status.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {

// OK when the spec asks for no fault. Kind "segfault_in_check" (with `allowed`) raises SIGSEGV
// here, in the submit-time check, as a file that crashes its reader would. INVALID_ARGUMENT
// naming the field otherwise:
// "train_job.fault_injection: accepted only when mpsd runs with --enable-fault-injection" when
// `allowed` is false; an unknown kind ("train_job.fault_injection.kind: ...") or a negative
// at_step. Thread-safe.
absl::Status CheckFaultInjection(const mpsd::v1::SubmitJobRequest& spec, bool allowed);

// `sink` itself when the spec asks for no fault; else a sink that forwards every event and
// injects the fault once, on the calling (training) thread: at the job's first event when
// at_step <= 1, else when the step (or bench row) event of step at_step - 1 is emitted, so
// that the last step reported before the fault is at_step - 1. Faults: "abort" (std::abort),
// "segfault" (SIGSEGV), "hang" (sleeps forever, deaf to cancellation), "allocate_unbounded"
// (holds 1 GiB uninitialised uint8 tensors on `device` until the allocator throws; the error
// propagates as c10::Error to the executor's firewall, out of memory, after a log event with the
// bytes held). abort and segfault first set RLIMIT_CORE to 0: tests leave no core files.
// `device`: as DeviceString gives it ("cpu", "cuda:0"). The returned sink holds a copy of
// `sink` and must be called on one thread.
EventSink WithFaultInjection(const mpsd::v1::SubmitJobRequest& spec, const std::string& device,
                             EventSink sink);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_FAULT_INJECTION_H_
