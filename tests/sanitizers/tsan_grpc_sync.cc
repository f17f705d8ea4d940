// ThreadSanitizer builds only (deploy/test-sanitizers.sh links this object into every program
// of build-tsan/): tells TSan that a gRPC operation's start happens before its completion.
// Debian's libgrpc is compiled without TSan, and it hands an operation from the thread that
// starts it to the thread that completes it through its own lock-free queues and atomics. gRPC's
// C++ API is header code, compiled with TSan in our units: the tag and the operation set that
// the starting thread fills in (CallbackWithSuccessTag::Set, CallOpSet) and reads back on the
// completing thread (CallbackWithSuccessTag::Run, FinalizeResult) would be reported as races.
// Each edge is keyed by the operation's tag: grpc_call_start_batch releases it, grpc_cq_end_op
// (gRPC's core completing the operation; every completion, callback or queued, goes through it,
// and the library calls it through its PLT, so this definition replaces it) acquires it and
// releases it again for grpc_completion_queue_next / _pluck, which acquire the tag they return.
// A callback that gRPC runs on another thread than the one completing the operation is ordered
// after it by gRPC's executor locks (absl::Mutex: tests/sanitizers/tsan_absl_sync.cc).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "grpc/grpc.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

struct grpc_cq_completion;

namespace {

template <typename F>
F Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_grpc_sync: %s not found: %s\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

#define MPSD_REAL(type, name) static const auto real = Real<type>(name)

extern "C" grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops,
                                                 void* tag, void* reserved) {
  MPSD_REAL(grpc_call_error(*)(grpc_call*, const grpc_op*, size_t, void*, void*),
            "grpc_call_start_batch");
  __tsan_release(tag);
  return real(call, ops, nops, tag, reserved);
}

extern "C" grpc_event grpc_completion_queue_next(grpc_completion_queue* cq, gpr_timespec deadline,
                                                 void* reserved) {
  MPSD_REAL(grpc_event(*)(grpc_completion_queue*, gpr_timespec, void*),
            "grpc_completion_queue_next");
  const grpc_event event = real(cq, deadline, reserved);
  if (event.type == GRPC_OP_COMPLETE) __tsan_acquire(event.tag);
  return event;
}

extern "C" grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag,
                                                  gpr_timespec deadline, void* reserved) {
  MPSD_REAL(grpc_event(*)(grpc_completion_queue*, void*, gpr_timespec, void*),
            "grpc_completion_queue_pluck");
  const grpc_event event = real(cq, tag, deadline, reserved);
  if (event.type == GRPC_OP_COMPLETE) __tsan_acquire(event.tag);
  return event;
}

// gRPC's internal completion (src/core/lib/surface/completion_queue.h):
//   bool grpc_cq_end_op(grpc_completion_queue*, void* tag, absl::Status error,
//                       void (*done)(void*, grpc_cq_completion*), void* done_arg,
//                       grpc_cq_completion* storage, bool internal);
// declared here by its symbol, the absl::Status as what the ABI passes (the address of the
// caller's object, which the caller destroys), so that this object needs no absl library.
#define MPSD_CQ_END_OP                                                 \
  "_Z14grpc_cq_end_opP21grpc_completion_queuePvN4absl7debian36StatusE" \
  "PFvS1_P18grpc_cq_completionES1_S6_b"
using CqDone = void (*)(void*, grpc_cq_completion*);
bool CqEndOp(grpc_completion_queue* cq, void* tag, void* error, CqDone done, void* done_arg,
             grpc_cq_completion* storage, bool internal) __asm__(MPSD_CQ_END_OP);
bool CqEndOp(grpc_completion_queue* cq, void* tag, void* error, CqDone done, void* done_arg,
             grpc_cq_completion* storage, bool internal) {
  MPSD_REAL(
      bool (*)(grpc_completion_queue*, void*, void*, CqDone, void*, grpc_cq_completion*, bool),
      MPSD_CQ_END_OP);
  __tsan_acquire(tag);
  __tsan_release(tag);
  return real(cq, tag, error, done, done_arg, storage, internal);
}

#undef MPSD_CQ_END_OP
#undef MPSD_REAL
