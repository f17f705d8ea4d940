// BenchJob: times inference and training steps of zoo models over batch sizes, devices,
// precisions and memory formats, one BenchRow per combination (mpsd.proto, BenchJob and
// BenchRow). The executor calls these on its own thread; this header is torch-free.
#ifndef MPSD_TRAINER_BENCH_H_
#define MPSD_TRAINER_BENCH_H_

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {

struct DeviceInventory;  // trainer/device.h

// Checks a BenchJob without building a model or touching device memory: at least one model,
// each known and able to take input_shape (each model's natural input when unset); batch sizes
// > 0; devices known and available ("all" = every available device); mode, precisions and
// memory formats known; warmup_iters in [0, 100000], iters in [1, 1000000], min_time_ms in
// [0, 1 hour], cpu_threads > 0, num_classes in range; at most 1000 rows (models × batch sizes
// × devices × modes × precisions × memory formats; the error names batch_sizes); fault_injection
// only when `allow_fault_injection`, of kind "oom" (row at_step throws an out-of-memory error from
// inside the row, which is recorded) or one of the executor's kinds (trainer/fault_injection.h; the
// executor injects those). INVALID_ARGUMENT whose message starts with the field path, e.g.
// "bench_job.batch_sizes[1]: must be > 0, got 0". Thread-safe.
//
// A models entry is a zoo name, a TorchScript file (a name ending in ".pt" or holding a '/':
// torch.jit.save, e.g. a TorchScript job's model.pt; needs input_shape, and is loaded and its
// forward tried on one example), or a finished TrainJob's id: its model as
// <artifacts_dir>/<id>/model.json describes it (trainer/model_export.h), at the job's input
// shape and class count, with its model.state_dict.pt for a zoo model. Rows name them as
// "tinynet.pt" and "job 12 (resnet18)".
absl::Status ValidateBenchJob(const mpsd::v1::BenchJob& job, const DeviceInventory& inventory,
                              bool allow_fault_injection, const std::string& artifacts_dir);

// Runs a BenchJob that passed ValidateBenchJob, on the calling thread (the executor's), in the
// order model × batch size × mode × precision × memory format × device, the cpu first among
// the devices so that the other devices' rows carry speedup_vs_cpu. Per row: builds the model
// (torch seeded with job.seed, so every row has the same weights), draws random inputs on the
// device, runs warmup_iters untimed iterations, then times iterations with the device
// synchronised before every clock read; releases the model and inputs afterwards.
//
// Emits one `bench_row` event per row as soon as it is measured, a few `log` events, and last a
// `summary` event with every row (bench_rows), the devices, total time and the memory figures of
// the first non-cpu device (after synchronize and empty_cache). A row that runs out of memory is
// an OUT_OF_MEMORY row, a precision or memory format the device or model cannot run an
// UNSUPPORTED row, any other LibTorch error an ERROR row; the next row runs in every case.
// Checks `cancelled` before every iteration and then returns CANCELLED after emitting the rows
// finished so far and the summary. cpu rows run with job.cpu_threads intra-op threads when set;
// torch's setting is restored after each such row.
//
// Errors: INVALID_ARGUMENT for a spec that fails ValidateBenchJob (nothing emitted); CANCELLED.
// Never throws. Not thread-safe with itself (one device owner).
absl::Status RunBenchJob(const mpsd::v1::BenchJob& job, const DeviceInventory& inventory,
                         bool allow_fault_injection, const std::string& artifacts_dir,
                         const EventSink& sink, const std::atomic<bool>& cancelled);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_BENCH_H_
