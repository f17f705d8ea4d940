#include "trainer/input_limits.h"

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace mpsd::trainer {
namespace {

ABSL_CONST_INIT absl::Mutex limits_mutex(absl::kConstInit);
api::InputLimits& Limits() ABSL_EXCLUSIVE_LOCKS_REQUIRED(limits_mutex) {
  static api::InputLimits* limits = new api::InputLimits();
  return *limits;
}

}  // namespace

void SetInputLimits(const api::InputLimits& limits) {
  absl::MutexLock lock(&limits_mutex);
  Limits() = limits;
}

api::InputLimits CurrentInputLimits() {
  absl::MutexLock lock(&limits_mutex);
  return Limits();
}

}  // namespace mpsd::trainer
