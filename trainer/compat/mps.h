// Apple's MPS device, where LibTorch has it (2.x on Apple; off Apple with the MPS compile check):
// availability, synchronisation, the caching allocator and the chip's name and memory. Without
// MPS every function answers "none" (false, zeros) and does nothing. Internal to trainer/.
#ifndef MPSD_TRAINER_COMPAT_MPS_H_
#define MPSD_TRAINER_COMPAT_MPS_H_

#include <cstdint>
#include <string>

#include "api/memory.h"

namespace mpsd::trainer::compat {

// torch::mps::is_available(); false without MPS. Thread-safe.
bool MpsIsAvailable();

// Waits for the MPS device's queued work (torch::mps::synchronize()).
void MpsSynchronize();

// Returns the MPS caching allocator's unused blocks to the system (torch.mps.empty_cache()).
void MpsEmptyCache();

// Bytes: allocated = the allocator's live tensors, reserved = what the Metal driver has
// allocated for the process. MPS keeps no peak: the peaks are the current values.
api::MemoryFigures MpsStats();

// The chip ("Apple M1") and its unified memory, bytes; {"mps", 0} when unknown.
struct MpsProperties {
  std::string name = "mps";
  int64_t total_memory_bytes = 0;
};
MpsProperties GetMpsProperties();

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_MPS_H_
