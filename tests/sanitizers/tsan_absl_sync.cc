// ThreadSanitizer builds only (deploy/test-sanitizers.sh links this object into every program
// of build-tsan/): tells TSan about the happens-before edges of absl::Mutex and absl::CondVar.
// Debian's libabsl is compiled without TSan, so its locks are invisible to TSan (they use futex
// directly), and everything they guard would be reported as a race. Each wrapper here replaces
// the library's function (a definition in the program interposes on the shared library's, for
// every caller: our code, gRPC's and abseil's own) and calls it through dlsym(RTLD_NEXT):
// a lock acquires the mutex's address, an unlock releases it, a wait does both. Accesses that
// absl makes on another thread while it evaluates a waiter's Condition inside Unlock are not
// ordered by this; tests/sanitizers/tsan.supp suppresses reports under these wrappers' Unlock.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

template <typename F>
F Real(const char* mangled) {
  void* f = dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found: %s\n", mangled, dlerror());
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

#define MPSD_REAL(type, name) static const auto real = Real<type>(name)

void Mutex::Lock() {
  MPSD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::ReaderLock() {
  MPSD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}
bool Mutex::TryLock() {
  MPSD_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  MPSD_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::Unlock() {
  MPSD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  MPSD_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}
void Mutex::LockWhen(const Condition& cond) {
  MPSD_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  MPSD_REAL(void (*)(Mutex*, const Condition&),
            "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Duration),
            "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool result = real(this, cond, timeout);
  __tsan_acquire(this);
  return result;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Time),
            "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = real(this, cond, deadline);
  __tsan_acquire(this);
  return result;
}
void Mutex::Await(const Condition& cond) {
  MPSD_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Duration),
            "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool result = real(this, cond, timeout);
  __tsan_acquire(this);
  return result;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Time),
            "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool result = real(this, cond, deadline);
  __tsan_acquire(this);
  return result;
}
void CondVar::Wait(Mutex* mu) {
  MPSD_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  MPSD_REAL(bool (*)(CondVar*, Mutex*, Duration),
            "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool result = real(this, mu, timeout);
  __tsan_acquire(mu);
  return result;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  MPSD_REAL(bool (*)(CondVar*, Mutex*, Time),
            "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool result = real(this, mu, deadline);
  __tsan_acquire(mu);
  return result;
}

#undef MPSD_REAL

ABSL_NAMESPACE_END
}  // namespace absl
