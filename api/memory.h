// Memory figures, in bytes, as every part reports them: what a device's allocator holds (the
// trainer reads it, the supervisor compares it against the executor's baseline) and a process's
// resident set (the daemon's own in GetServerStatus, the executor's on CPU).
#ifndef MPSD_API_MEMORY_H_
#define MPSD_API_MEMORY_H_

#include <sys/types.h>

#include <cstdint>

namespace mpsd::api {

// Bytes held by one device's allocator: "allocated" is live tensors, "reserved" what the CUDA
// caching allocator holds from the driver or what the Metal driver allocated (MPS). LibTorch's
// CPU allocator keeps no statistics: every figure is 0 on cpu. Peaks are since the last reset
// (CUDA; the executor resets them at each job's start); MPS keeps none, so there they equal the
// current figures.
struct MemoryFigures {
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
};

// Resident set size of process `pid`, bytes: the second field of /proc/PID/statm (pages) times
// the page size. 0 where there is no /proc (macOS), or the process is gone or not readable.
// Thread-safe.
int64_t ResidentSetBytes(pid_t pid);

}  // namespace mpsd::api

#endif  // MPSD_API_MEMORY_H_
