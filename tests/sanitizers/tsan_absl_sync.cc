// ThreadSanitizer builds only (deploy/test-sanitizers.sh links this object into every program
// of build-tsan/): tells TSan about the happens-before edges of absl::Mutex, absl::CondVar and
// absl::Notification. Debian's libabsl is compiled without TSan, so its locks are invisible to
// TSan (they use futex directly), and everything they guard would be reported as a race. Each
// wrapper here replaces the library's function (a definition in the program interposes on the
// shared library's, for every caller: our code, gRPC's and abseil's own) and calls it through
// dlsym(RTLD_NEXT): a lock acquires the mutex's address, an unlock releases it, a wait does both.
// A waiter's Condition is evaluated inside the library, by the waiter after a wake-up it never
// returns to us for, or by another thread inside its Unlock; every wrapper that takes a
// Condition hands the library one that acquires the mutex before it calls the caller's and
// releases it after (the library evaluates a Condition only while it owns the mutex).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
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

// The caller's Condition, evaluated between an acquire and a release of its mutex. The library
// may evaluate it on another thread, inside that thread's Unlock: the waiter's writes before it
// handed the Condition over (the caller's Condition object, this one) happen before that
// evaluation only through the library's own atomics, so the waiter releases this object's
// address when it builds it and Eval acquires that address before it reads anything. The
// absl::Condition handed to the library is built by the library's constructor (dlsym) and read
// only by the library, so no instrumented code reads it before Eval's acquire.
class AnnotatedCondition {
 public:
  AnnotatedCondition(absl::Mutex* mu, const absl::Condition& cond) : mu_(mu), cond_(&cond) {
    static const auto construct = Real<void (*)(void*, bool (*)(void*), void*)>(
        "_ZN4absl7debian39ConditionC1EPFbPvES2_");  // Condition(bool (*)(void*), void*)
    construct(storage_, &AnnotatedCondition::Eval, this);
    __tsan_release(this);
  }
  const absl::Condition& Get() const { return *reinterpret_cast<const absl::Condition*>(storage_); }

 private:
  static bool Eval(void* arg) {
    __tsan_acquire(arg);
    const auto* self = static_cast<const AnnotatedCondition*>(arg);
    // Condition::Eval through dlsym too: this object must link without libabsl (CMake's
    // compiler check links a program with these flags and nothing else).
    static const auto eval =
        Real<bool (*)(const absl::Condition*)>("_ZNK4absl7debian39Condition4EvalEv");
    __tsan_acquire(self->mu_);
    const bool result = eval(self->cond_);
    __tsan_release(self->mu_);
    return result;
  }
  absl::Mutex* mu_;
  const absl::Condition* cond_;
  alignas(absl::Condition) unsigned char storage_[sizeof(absl::Condition)];
};

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
  MPSD_REAL(void (*)(Mutex*, const Condition&),
            "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  real(this, AnnotatedCondition(this, cond).Get());
  __tsan_acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  MPSD_REAL(void (*)(Mutex*, const Condition&),
            "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, AnnotatedCondition(this, cond).Get());
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Duration),
            "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool result = real(this, AnnotatedCondition(this, cond).Get(), timeout);
  __tsan_acquire(this);
  return result;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Time),
            "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = real(this, AnnotatedCondition(this, cond).Get(), deadline);
  __tsan_acquire(this);
  return result;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Duration),
            "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool result = real(this, AnnotatedCondition(this, cond).Get(), timeout);
  __tsan_acquire(this);
  return result;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Time),
            "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = real(this, AnnotatedCondition(this, cond).Get(), deadline);
  __tsan_acquire(this);
  return result;
}
void Mutex::Await(const Condition& cond) {
  MPSD_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, AnnotatedCondition(this, cond).Get());
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Duration),
            "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool result = real(this, AnnotatedCondition(this, cond).Get(), timeout);
  __tsan_acquire(this);
  return result;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  MPSD_REAL(bool (*)(Mutex*, const Condition&, Time),
            "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool result = real(this, AnnotatedCondition(this, cond).Get(), deadline);
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

// Notify's store and WaitForNotification's fast path (already notified: no lock taken) are
// atomics inside the library: a release on Notify, an acquire once a wait sees it.
void Notification::Notify() {
  MPSD_REAL(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}
void Notification::WaitForNotification() const {
  MPSD_REAL(void (*)(const Notification*),
            "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  MPSD_REAL(bool (*)(const Notification*, Duration),
            "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  MPSD_REAL(bool (*)(const Notification*, Time),
            "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

#undef MPSD_REAL

ABSL_NAMESPACE_END
}  // namespace absl
