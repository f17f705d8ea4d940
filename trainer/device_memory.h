// Device memory figures by device name, for torch-free code in trainer/ (the executor's gRPC
// service and entry point): the executor's baseline, and readings the summary needs.
#ifndef MPSD_TRAINER_DEVICE_MEMORY_H_
#define MPSD_TRAINER_DEVICE_MEMORY_H_

#include <string>

#include "absl/status/statusor.h"
#include "api/memory.h"

namespace mpsd::trainer {

// Reads the allocator's counters of `device` ("cpu", "cuda", "cuda:0", "mps": what
// DeviceInfo.kind or JobSummary.device holds), without synchronising. INVALID_ARGUMENT for a
// string LibTorch does not parse; INTERNAL for a LibTorch error. Thread-safe.
absl::StatusOr<api::MemoryFigures> ReadDeviceMemory(const std::string& device);

// The executor's baseline: runs one warm-up operation on `device` (a 256×256 float32 matmul,
// which creates the device context, the allocator's first block and the BLAS handles), waits
// for it, releases it, empties the caching allocator and reads what is left. Errors as
// ReadDeviceMemory. Call once, before any job runs.
absl::StatusOr<api::MemoryFigures> MeasureBaseline(const std::string& device);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_DEVICE_MEMORY_H_
