// The one place where LibTorch versions (1.13 and 2.x) and platforms (CUDA, Apple MPS, CPU-only
// builds) differ. Everything else in trainer/ calls these functions and has no #if of its own.
// Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_COMPAT_H_
#define MPSD_TRAINER_COMPAT_H_

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <string>

// MPS exists from LibTorch 2 on, and only on Apple.
#if defined(__APPLE__) && TORCH_VERSION_MAJOR >= 2
#define MPSD_TRAINER_HAS_MPS 1
#include <ATen/detail/MPSHooksInterface.h>
#include <sys/sysctl.h>
#include <torch/mps.h>
#else
#define MPSD_TRAINER_HAS_MPS 0
#endif

// CUDA memory statistics need c10_cuda, which only a CUDA LibTorch ships. The header alone is not
// enough: Debian's CPU-only libtorch-dev installs c10/cuda/*.h without the library or the CUDA
// runtime headers they include, so trainer/CMakeLists.txt defines MPSD_TRAINER_WITH_CUDA only
// when find_package(Torch) found c10_cuda.
#if defined(MPSD_TRAINER_WITH_CUDA) && __has_include(<c10/cuda/CUDACachingAllocator.h>)
#define MPSD_TRAINER_HAS_CUDA_ALLOCATOR 1
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#else
#define MPSD_TRAINER_HAS_CUDA_ALLOCATOR 0
#endif

namespace mpsd::trainer::compat {

// Bytes held by one device's allocator. Peak is since the last ResetPeak (CUDA only).
struct AllocatorStats {
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t peak_allocated_bytes = 0;
};

// ---- MPS ------------------------------------------------------------------------------------

inline bool MpsIsAvailable() {
#if MPSD_TRAINER_HAS_MPS
  return torch::mps::is_available();
#else
  return false;
#endif
}

inline void MpsSynchronize() {
#if MPSD_TRAINER_HAS_MPS
  torch::mps::synchronize();
#endif
}

inline void MpsEmptyCache() {
#if MPSD_TRAINER_HAS_MPS
  at::detail::getMPSHooks().emptyCache();
#endif
}

// MPS keeps no peak; "reserved" is what the Metal driver has allocated for the process.
inline AllocatorStats MpsStats() {
  AllocatorStats stats;
#if MPSD_TRAINER_HAS_MPS
  const auto& hooks = at::detail::getMPSHooks();
  stats.allocated_bytes = static_cast<int64_t>(hooks.getCurrentAllocatedMemory());
  stats.reserved_bytes = static_cast<int64_t>(hooks.getDriverAllocatedMemory());
  stats.peak_allocated_bytes = stats.allocated_bytes;
#endif
  return stats;
}

// The chip ("Apple M1") and its unified memory, bytes; {"mps", 0} when unknown.
struct MpsProperties {
  std::string name = "mps";
  int64_t total_memory_bytes = 0;
};

inline MpsProperties GetMpsProperties() {
  MpsProperties props;
#if MPSD_TRAINER_HAS_MPS
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

// ---- CUDA -----------------------------------------------------------------------------------

#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
// Until the process first allocates on CUDA the caching allocator has no per-device state, and
// its statistics calls throw "Invalid device argument" (1.13 to 2.11 alike; 1.13 has no
// initialized() to ask first). Nothing is allocated then, so that reads as zero.
template <typename Fn>
inline void IfCudaAllocatorInitialized(Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error&) {
  }
}
#endif

// Index 0 of every StatArray is StatType::AGGREGATE (small and large pools together); the enum
// moved namespaces in LibTorch 2.5, the index did not.
inline AllocatorStats CudaStats(int device_index) {
  AllocatorStats stats;
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  IfCudaAllocatorInitialized([&] {
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device_index));
    stats.allocated_bytes = s.allocated_bytes[0].current;
    stats.reserved_bytes = s.reserved_bytes[0].current;
    stats.peak_allocated_bytes = s.allocated_bytes[0].peak;
  });
#else
  (void)device_index;
#endif
  return stats;
}

inline void CudaResetPeak(int device_index) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  IfCudaAllocatorInitialized([&] {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device_index));
  });
#else
  (void)device_index;
#endif
}

inline void CudaEmptyCache() {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

// The marketing name ("NVIDIA H200") and total memory in bytes; {"cuda", 0} when unknown.
struct CudaProperties {
  std::string name = "cuda";
  int64_t total_memory_bytes = 0;
};

inline CudaProperties GetCudaProperties(int device_index) {
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

// ---- Errors ---------------------------------------------------------------------------------

// c10::OutOfMemoryError exists since 1.13 and is what the CUDA allocator throws; the CPU
// allocator (and MPS before 2.1) throws a plain c10::Error, recognisable only by its text.
inline bool IsOutOfMemory(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string message = e.what_without_backtrace();
  return message.find("out of memory") != std::string::npos ||
         message.find("can't allocate memory") != std::string::npos;
}

// ---- Autograd -------------------------------------------------------------------------------

// Drops the gradients instead of zeroing them: PyTorch 2's default (set_to_none=true), which
// saves one kernel per parameter per step. LibTorch 1.13's zero_grad() can only zero.
inline void ZeroGradToNone(torch::optim::Optimizer& optimizer) {
#if TORCH_VERSION_MAJOR >= 2
  optimizer.zero_grad(/*set_to_none=*/true);
#else
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      if (param.grad().defined()) param.mutable_grad().reset();
    }
  }
#endif
}

// ---- Attention ------------------------------------------------------------------------------

// softmax(q·kᵀ / √d)·v with dropout `dropout_p` on the probabilities; q, k, v: [N, heads, T, d].
// LibTorch 2 has a fused kernel (flash / memory-efficient attention on CUDA); 1.13 has none, so
// it is spelled out there (same result, more memory).
inline torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                               const torch::Tensor& v, double dropout_p) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor probabilities =
      torch::softmax(torch::matmul(q, k.transpose(/*dim0=*/-2, /*dim1=*/-1)) * scale, /*dim=*/-1);
  if (dropout_p > 0) probabilities = torch::dropout(probabilities, dropout_p, /*train=*/true);
  return torch::matmul(probabilities, v);
#endif
}

// ---- Autocast (mixed precision) -------------------------------------------------------------

// LibTorch 2.4 replaced the per-backend autocast switches (set_enabled for CUDA, set_cpu_enabled,
// set_autocast_gpu_dtype, ...) by ones taking the device type; MPS autocast exists from 2.5.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE 1
#else
#define MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE 0
#endif

// Whether this LibTorch autocasts to `dtype` (kHalf or kBFloat16) on `device_type`: CUDA both;
// CPU bfloat16 only (1.13's CPU autocast silently falls back to float32 for float16, so it is
// reported as unsupported everywhere rather than measured wrong); MPS float16 from 2.5.
inline bool AutocastSupported(c10::DeviceType device_type, c10::ScalarType dtype) {
  const bool half = dtype == c10::ScalarType::Half;
  const bool bfloat16 = dtype == c10::ScalarType::BFloat16;
  switch (device_type) {
    case c10::DeviceType::CUDA:
      return half || bfloat16;
    case c10::DeviceType::CPU:
      return bfloat16;
    case c10::DeviceType::MPS:
      return MPSD_TRAINER_HAS_MPS && MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE &&
             (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5) && half;
    default:
      return false;
  }
}

// Autocast to `dtype` on `device_type` for the calling thread while alive, as
// `with torch.autocast(device_type, dtype):` does; the destructor restores the previous setting
// and drops the cast-weight cache. `AutocastSupported(device_type, dtype)` must hold. Autocast
// state is thread-local: create and destroy the guard on the same thread. Not copyable.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype) : device_type_(device_type) {
#if MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE
    previous_enabled_ = at::autocast::is_autocast_enabled(device_type_);
    previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
    at::autocast::set_autocast_dtype(device_type_, dtype);
    at::autocast::set_autocast_enabled(device_type_, true);
#else
    const bool cpu = device_type_ == c10::DeviceType::CPU;
    previous_enabled_ = cpu ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
    previous_dtype_ =
        cpu ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
    if (cpu) {
      at::autocast::set_autocast_cpu_dtype(dtype);
      at::autocast::set_cpu_enabled(true);
    } else {
      at::autocast::set_autocast_gpu_dtype(dtype);
      at::autocast::set_enabled(true);
    }
#endif
  }

  ~AutocastGuard() {
#if MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE
    at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
    at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
#else
    if (device_type_ == c10::DeviceType::CPU) {
      at::autocast::set_cpu_enabled(previous_enabled_);
      at::autocast::set_autocast_cpu_dtype(previous_dtype_);
    } else {
      at::autocast::set_enabled(previous_enabled_);
      at::autocast::set_autocast_gpu_dtype(previous_dtype_);
    }
#endif
    at::autocast::clear_cache();
  }

  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  const c10::DeviceType device_type_;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Float;
};

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_H_
