// The executor's memory baseline by device name, for torch-free code in trainer/ (the executor's
// entry point). Readings during and after a job are trainer/device.h's ReadMemory, which the
// torch-side code calls directly.
#ifndef MPSD_TRAINER_DEVICE_MEMORY_H_
#define MPSD_TRAINER_DEVICE_MEMORY_H_

#include <string>

#include "absl/status/statusor.h"
#include "api/memory.h"

namespace mpsd::trainer {

// The executor's baseline: runs one warm-up operation on `device` (a 256×256 float32 matmul,
// which creates the device context, the allocator's first block and the BLAS handles), waits
// for it, releases it, empties the caching allocator and reads the allocator's counters
// (trainer/device.h's ReadMemory). `device`: "cpu", "cuda", "cuda:0", "mps" (what DeviceInfo.kind
// holds). INVALID_ARGUMENT for a string LibTorch does not parse; INTERNAL for a LibTorch error.
// Call once, before any job runs.
absl::StatusOr<api::MemoryFigures> MeasureBaseline(const std::string& device);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_DEVICE_MEMORY_H_
