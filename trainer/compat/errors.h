// Which LibTorch errors are an out-of-memory, across versions and devices. Internal to trainer/:
// includes torch.
#ifndef MPSD_TRAINER_COMPAT_ERRORS_H_
#define MPSD_TRAINER_COMPAT_ERRORS_H_

#include <c10/util/Exception.h>

namespace mpsd::trainer::compat {

// c10::OutOfMemoryError exists since 1.13 and is what the CUDA allocator throws; the CPU
// allocator (and MPS before 2.1) throws a plain c10::Error, recognisable only by its text
// ("out of memory", "can't allocate memory"). Thread-safe.
bool IsOutOfMemory(const c10::Error& e);

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_ERRORS_H_
