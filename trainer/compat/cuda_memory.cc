// The CUDA device's memory and name (trainer/compat/cuda_memory.h).
#include "trainer/compat/cuda_memory.h"

#include "trainer/compat/platform.h"

namespace mpsd::trainer::compat {
namespace {

#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
// Until the process first allocates on CUDA the caching allocator has no per-device state, and
// its statistics calls throw "Invalid device argument" (1.13 to 2.11 alike; 1.13 has no
// initialized() to ask first). Nothing is allocated then, so that reads as zero.
template <typename Fn>
void IfCudaAllocatorInitialized(Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error&) {
  }
}
#endif

}  // namespace

// Index 0 of every StatArray is StatType::AGGREGATE (small and large pools together); the enum
// moved namespaces in LibTorch 2.5, the index did not.
api::MemoryFigures CudaStats(int device_index) {
  api::MemoryFigures stats;
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  IfCudaAllocatorInitialized([&] {
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device_index));
    stats.allocated_bytes = s.allocated_bytes[0].current;
    stats.reserved_bytes = s.reserved_bytes[0].current;
    stats.peak_allocated_bytes = s.allocated_bytes[0].peak;
    stats.peak_reserved_bytes = s.reserved_bytes[0].peak;
  });
#else
  (void)device_index;
#endif
  return stats;
}

void CudaResetPeak(int device_index) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  IfCudaAllocatorInitialized([&] {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device_index));
  });
#else
  (void)device_index;
#endif
}

void CudaEmptyCache() {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
#if TORCH_VERSION_MAJOR >= 2
  at::cuda::clearCublasWorkspaces();
#endif
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

CudaProperties GetCudaProperties(int device_index) {
  CudaProperties props;
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  const auto* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device_index));
  props.name = p->name;
  props.total_memory_bytes = static_cast<int64_t>(p->totalGlobalMem);
#else
  (void)device_index;
#endif
  return props;
}

int64_t CudaFreeBytes(int device_index) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  size_t free_bytes = 0, total_bytes = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const api::MemoryFigures stats = CudaStats(device_index);
  return static_cast<int64_t>(free_bytes) + stats.reserved_bytes - stats.allocated_bytes;
#else
  (void)device_index;
  return 0;
#endif
}

}  // namespace mpsd::trainer::compat
