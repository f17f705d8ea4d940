// Out-of-memory errors across LibTorch versions (trainer/compat/errors.h).
#include "trainer/compat/errors.h"

#include <string>

namespace mpsd::trainer::compat {

bool IsOutOfMemory(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string message = e.what_without_backtrace();
  return message.find("out of memory") != std::string::npos ||
         message.find("can't allocate memory") != std::string::npos;
}

}  // namespace mpsd::trainer::compat
