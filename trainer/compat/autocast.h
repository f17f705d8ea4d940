// Mixed precision (autocast) across LibTorch versions and devices. Internal to trainer/:
// includes torch.
#ifndef MPSD_TRAINER_COMPAT_AUTOCAST_H_
#define MPSD_TRAINER_COMPAT_AUTOCAST_H_

#include <torch/torch.h>

#include <optional>
#include <string>

namespace mpsd::trainer::compat {

// Why `device_type` cannot autocast to `dtype` (kHalf or kBFloat16) with this LibTorch; "" when
// it can. The one decision for TrainJob (rejected at submit) and BenchJob (an UNSUPPORTED row).
// CUDA: both (bf16 needs an Ampere or newer GPU, which LibTorch checks when it runs). CPU: bf16
// always; fp16 only from LibTorch 2.4 (1.13's CPU autocast knows bf16 alone and would run fp16
// in float32). MPS: fp16 from LibTorch 2.5 (MPS autocast's first release), bf16 from 2.6
// (pytorch/pytorch#139390, which needs macOS 14). Thread-safe.
std::string AutocastUnsupportedReason(c10::DeviceType device_type, c10::ScalarType dtype);

// The dtype autocast casts `device_type`'s matmul inputs to, when it is on with its cast cache
// (the default), or nullopt. The cache casts a float32 leaf (a weight) once per autocast scope,
// so that all its uses in a forward share one cast and autograd sums their gradients in that
// dtype before casting back; a view of a leaf (a fused trial's slice) is cast afresh at every
// use instead. Thread-local, as autocast's state.
std::optional<c10::ScalarType> CachedAutocastDtype(c10::DeviceType device_type);

// Runs the forward passes of a scope under autocast to `dtype` on `device_type`, like
// `with torch.autocast(device_type, dtype)`: on entry enables it (and bumps the nesting count),
// on exit restores the previous state and, leaving the outermost autocast, clears the cache of
// casted weights. Autocast state is thread-local: use the guard on the thread that runs the
// forward. Not copyable. The caller checks AutocastUnsupportedReason first.
class AutocastGuard {
 public:
  // cache_enabled false: like torch.autocast(..., cache_enabled=False), every forward casts the
  // weights afresh (what a CUDA graph capture needs: a cached cast would be made once, outside
  // what the graph replays).
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype, bool cache_enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  const c10::DeviceType device_type_;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::kFloat;
  bool previous_cache_enabled_ = true;
};

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_AUTOCAST_H_
