// Apple's MPS device (trainer/compat/mps.h).
#include "trainer/compat/mps.h"

#include "trainer/compat/platform.h"

namespace mpsd::trainer::compat {

bool MpsIsAvailable() {
#if MPSD_TRAINER_HAS_MPS
  return torch::mps::is_available();
#else
  return false;
#endif
}

void MpsSynchronize() {
#if MPSD_TRAINER_HAS_MPS
  torch::mps::synchronize();
#endif
}

void MpsEmptyCache() {
#if MPSD_TRAINER_HAS_MPS
  at::detail::getMPSHooks().emptyCache();
#endif
}

api::MemoryFigures MpsStats() {
  api::MemoryFigures stats;
#if MPSD_TRAINER_HAS_MPS
  const auto& hooks = at::detail::getMPSHooks();
  stats.allocated_bytes = static_cast<int64_t>(hooks.getCurrentAllocatedMemory());
  stats.reserved_bytes = static_cast<int64_t>(hooks.getDriverAllocatedMemory());
  stats.peak_allocated_bytes = stats.allocated_bytes;
  stats.peak_reserved_bytes = stats.reserved_bytes;
#endif
  return stats;
}

MpsProperties GetMpsProperties() {
  MpsProperties props;
#if MPSD_TRAINER_HAS_MPS && defined(__APPLE__)
  char brand[128] = {};
  size_t size = sizeof(brand) - 1;
  if (sysctlbyname("machdep.cpu.brand_string", brand, &size, nullptr, 0) == 0) props.name = brand;
  int64_t memsize = 0;
  size = sizeof(memsize);
  if (sysctlbyname("hw.memsize", &memsize, &size, nullptr, 0) == 0) {
    props.total_memory_bytes = memsize;
  }
#endif
  return props;
}

}  // namespace mpsd::trainer::compat
