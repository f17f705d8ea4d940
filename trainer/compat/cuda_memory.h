// The CUDA device's memory and name through LibTorch's caching allocator, where LibTorch has
// CUDA (c10_cuda); without it every function answers zeros / "cuda" and does nothing. Device
// indices are CUDA's (0-based). Internal to trainer/.
#ifndef MPSD_TRAINER_COMPAT_CUDA_MEMORY_H_
#define MPSD_TRAINER_COMPAT_CUDA_MEMORY_H_

#include <cstdint>
#include <string>

#include "api/memory.h"

namespace mpsd::trainer::compat {

// Bytes: the caching allocator's allocated and reserved memory on the device, current and peak
// (torch.cuda.memory_allocated / memory_reserved / max_*). Zeros before the process first
// allocated on CUDA.
api::MemoryFigures CudaStats(int device_index);

// torch.cuda.reset_peak_memory_stats(device_index).
void CudaResetPeak(int device_index);

// torch.cuda.empty_cache(), and cuBLAS's per-stream workspaces too (LibTorch >= 2; what
// torch._C._cuda_clearCublasWorkspaces does), which otherwise stay allocated between jobs.
void CudaEmptyCache();

// The marketing name ("NVIDIA H200") and total memory in bytes; {"cuda", 0} when unknown.
struct CudaProperties {
  std::string name = "cuda";
  int64_t total_memory_bytes = 0;
};
CudaProperties GetCudaProperties(int device_index);

// Bytes a new allocation on the device could get: the driver's free memory (cudaMemGetInfo)
// plus the caching allocator's reserved but unallocated blocks, as torch.cuda.mem_get_info()
// plus (memory_reserved() - memory_allocated()). 0 without CUDA. Throws c10::Error on a CUDA
// error.
int64_t CudaFreeBytes(int device_index);

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_CUDA_MEMORY_H_
