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
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/memory.h"

// LibTorch's profiler: Kineto (torch.profiler's engine; on CUDA also the kernels, through CUPTI)
// in LibTorch 2.x; the legacy profiler (host operators only) in 1.13, as Debian builds it
// without Kineto.
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#else
#include <torch/csrc/autograd/profiler_legacy.h>
#endif

// MPS exists from LibTorch 2 on, and only on Apple. MPSD_MPS_COMPILE_CHECK (CMake option
// -DMPSD_MPS_COMPILE_CHECK=ON) compiles the MPS branches off Apple too, against a LibTorch 2.x
// whose MPS API is there and answers "not available" (torch::mps::is_available() is false, so
// no job ever reaches the others): a typo in them fails a Linux build instead of a user's Mac.
// Only the sysctl calls below stay Apple-only.
#if TORCH_VERSION_MAJOR >= 2 && (defined(__APPLE__) || defined(MPSD_MPS_COMPILE_CHECK))
#define MPSD_TRAINER_HAS_MPS 1
#include <ATen/detail/MPSHooksInterface.h>
#include <torch/mps.h>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif
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
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#else
#define MPSD_TRAINER_HAS_CUDA_ALLOCATOR 0
#endif

// LibTorch 2.4 replaced the per-backend autocast functions (set_enabled for CUDA,
// set_cpu_enabled, set_autocast_gpu_dtype, ...) with ones that take the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE 1
#else
#define MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE 0
#endif

// The fused (multi-tensor, device-side bias correction) Adam/AdamW kernels with a tensor learning
// rate, at::_fused_adam_ / at::_fused_adamw_, exist from LibTorch 2.2 on (CUDA; CPU from 2.4).
// CUDA graphs of a whole training step need them plus at::cuda::CUDAGraph, so only a CUDA
// LibTorch >= 2.2 can capture.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
#define MPSD_TRAINER_HAS_FUSED_ADAM 1
#else
#define MPSD_TRAINER_HAS_FUSED_ADAM 0
#endif
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR && MPSD_TRAINER_HAS_FUSED_ADAM
#define MPSD_TRAINER_HAS_CUDA_GRAPHS 1
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#else
#define MPSD_TRAINER_HAS_CUDA_GRAPHS 0
#endif

namespace mpsd::trainer::compat {

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
inline api::MemoryFigures MpsStats() {
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

// The chip ("Apple M1") and its unified memory, bytes; {"mps", 0} when unknown.
struct MpsProperties {
  std::string name = "mps";
  int64_t total_memory_bytes = 0;
};

inline MpsProperties GetMpsProperties() {
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
inline api::MemoryFigures CudaStats(int device_index) {
  api::MemoryFigures stats;
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  IfCudaAllocatorInitialized([&] {
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device_index));
    stats.allocated_bytes = s.allocated_bytes[0].current;
    stats.reserved_bytes = s.reserved_bytes[0].current;
    stats.peak_allocated_bytes = s.allocated_bytes[0].peak;
    stats.peak_reserved_bytes = s.reserved_bytes[0].peak;
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

// Also drops cuBLAS's per-stream workspaces (LibTorch >= 2; what
// torch._C._cuda_clearCublasWorkspaces does), which otherwise stay allocated between jobs.
inline void CudaEmptyCache() {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
#if TORCH_VERSION_MAJOR >= 2
  at::cuda::clearCublasWorkspaces();
#endif
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

// Bytes a new allocation on the CUDA device could get: the driver's free memory
// (cudaMemGetInfo) plus the caching allocator's reserved but unallocated blocks, as
// torch.cuda.mem_get_info() plus (memory_reserved() - memory_allocated()). 0 without CUDA.
inline int64_t CudaFreeBytes(int device_index) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  size_t free_bytes = 0, total_bytes = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const api::MemoryFigures stats = CudaStats(device_index);
  return static_cast<int64_t>(free_bytes) + stats.reserved_bytes - stats.allocated_bytes;
#else
  (void)device_index;
  return 0;
#endif
}

// ---- Copies to the device on a side stream ---------------------------------------------------

// Host memory for staging copies to `device`: page-locked (pinned, so that a copy can run
// asynchronously) for CUDA, ordinary elsewhere.
inline torch::Tensor EmptyStaging(at::IntArrayRef shape, c10::ScalarType dtype,
                                  const torch::Device& device) {
  return torch::empty(shape, torch::TensorOptions().dtype(dtype).pinned_memory(device.is_cuda()));
}

// Host-to-device copies into `slots` buffers on a CUDA stream of their own, ordered against the
// current stream with two events per slot: `copied` (the copy finished) and `consumed` (the
// current stream's work queued so far, which read the slot's device buffer). Off CUDA every copy
// is a plain synchronous copy_ and the events are no-ops. One thread at a time.
class SideStreamCopier {
 public:
  SideStreamCopier(const torch::Device& device, int slots) : device_(device) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
    if (device_.is_cuda()) {
      const auto index = static_cast<c10::DeviceIndex>(device_.has_index() ? device_.index() : 0);
      side_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
      copied_.resize(slots);
      consumed_.resize(slots);
    }
#else
    (void)slots;
#endif
  }

  // Blocks the host until the slot's last copy has read its (staging) source.
  void WaitCopied(int slot) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
    if (side_.has_value()) copied_[slot].synchronize();
#else
    (void)slot;
#endif
  }

  // dst.copy_(src): on CUDA queued on the side stream after the current stream's work that read
  // the slot before (MarkConsumed), with src pinned host memory.
  void Copy(int slot, torch::Tensor& dst, const torch::Tensor& src) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
    if (side_.has_value()) {
      consumed_[slot].block(*side_);
      const c10::cuda::CUDAStreamGuard guard(*side_);
      dst.copy_(src, /*non_blocking=*/true);
      copied_[slot].record(*side_);
      return;
    }
#endif
    (void)slot;
    dst.copy_(src);
  }

  // The current stream waits (on the device, not the host) for the slot's copy.
  void WaitOnCurrentStream(int slot) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
    if (side_.has_value()) {
      copied_[slot].block(c10::cuda::getCurrentCUDAStream(side_->device_index()));
    }
#else
    (void)slot;
#endif
  }

  // Marks the current stream's queued work as the last reader of the slot's device buffer.
  void MarkConsumed(int slot) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
    if (side_.has_value()) {
      consumed_[slot].record(c10::cuda::getCurrentCUDAStream(side_->device_index()));
    }
#else
    (void)slot;
#endif
  }

  // Waits for every queued copy.
  void Synchronize() {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
    if (side_.has_value()) side_->synchronize();
#endif
  }

 private:
  const torch::Device device_;
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  std::optional<c10::cuda::CUDAStream> side_;
  std::vector<at::cuda::CUDAEvent> copied_;
  std::vector<at::cuda::CUDAEvent> consumed_;
#endif
};

// ---- Fused Adam and CUDA graphs ---------------------------------------------------------------

// The key of a parameter in torch::optim::Optimizer::state(): the TensorImpl's address printed
// as a string in LibTorch 1.x, the address itself (void*) in 2.x.
inline auto OptimizerStateKey(const torch::Tensor& param) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<void*>(param.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(param.unsafeGetTensorImpl());
#endif
}

constexpr bool kHasFusedAdam = MPSD_TRAINER_HAS_FUSED_ADAM;
constexpr bool kHasCudaGraphs = MPSD_TRAINER_HAS_CUDA_GRAPHS;

// One Adam (decoupled = false: L2 weight decay, torch.optim.Adam) or AdamW (decoupled = true)
// update of every parameter in a few kernel launches, as torch.optim.Adam(fused=True) does:
// state_steps (one [] float32 tensor per parameter, on the device) += 1, then the fused kernel
// with the bias corrections computed on the device from them. `lr` is a [] float32 tensor on
// the device, so a CUDA graph that captured this call follows a schedule. All lists have the
// same length; exp_avgs/exp_avg_sqs are the first and second moments, shaped like the params.
// Without MPSD_TRAINER_HAS_FUSED_ADAM: throws c10::Error (callers check kHasFusedAdam first).
inline void FusedAdamUpdate(const std::vector<torch::Tensor>& params,
                            const std::vector<torch::Tensor>& grads,
                            const std::vector<torch::Tensor>& exp_avgs,
                            const std::vector<torch::Tensor>& exp_avg_sqs,
                            const std::vector<torch::Tensor>& state_steps, const torch::Tensor& lr,
                            double beta1, double beta2, double weight_decay, double eps,
                            bool decoupled) {
#if MPSD_TRAINER_HAS_FUSED_ADAM
  at::_foreach_add_(state_steps, 1);
  if (decoupled) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, state_steps, lr,
                      beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, state_steps, lr,
                     beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  }
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)state_steps, (void)lr;
  (void)beta1, (void)beta2, (void)weight_decay, (void)eps, (void)decoupled;
  TORCH_CHECK(false, "fused Adam needs LibTorch >= 2.2, this is ", TORCH_VERSION);
#endif
}

// _foreach_mul_ with a tensor scalar (a [] tensor on the device, read by the kernel, so a CUDA
// graph follows its value) exists from LibTorch 2.1 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define MPSD_TRAINER_HAS_FOREACH_TENSOR_SCALAR 1
#else
#define MPSD_TRAINER_HAS_FOREACH_TENSOR_SCALAR 0
#endif

// One torch.optim.SGD update (dampening 0; the formula of PyTorch's _multi_tensor_sgd) of every
// parameter, with `lr` and `momentum` [] float32 tensors on the parameters' device (so a CUDA
// graph that captured this call follows a schedule): d = g + weight_decay·p; with `use_momentum`,
// buf = momentum·buf + d (a zero buffer gives PyTorch's first step, buf = d), then
// d = nesterov ? d + momentum·buf : buf; finally p -= lr·d. `buffers` is empty without momentum,
// else one per parameter. Multi-tensor (_foreach) kernels from LibTorch 2.1; one tensor at a
// time before (same arithmetic).
inline void MultiTensorSgdUpdate(const std::vector<torch::Tensor>& params,
                                 const std::vector<torch::Tensor>& grads,
                                 const std::vector<torch::Tensor>& buffers, const torch::Tensor& lr,
                                 const torch::Tensor& momentum, double weight_decay, bool nesterov,
                                 bool use_momentum) {
  if (params.empty()) return;
#if MPSD_TRAINER_HAS_FOREACH_TENSOR_SCALAR
  std::vector<torch::Tensor> d =
      weight_decay != 0 ? at::_foreach_add(grads, params, weight_decay) : grads;
  if (use_momentum) {
    at::_foreach_mul_(buffers, momentum);
    at::_foreach_add_(buffers, d);
    if (nesterov) {
      d = at::_foreach_add(d, at::_foreach_mul(buffers, momentum));
    } else {
      d = buffers;
    }
  }
  at::_foreach_sub_(params, at::_foreach_mul(d, lr));
#else
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor d = weight_decay != 0 ? grads[i].add(params[i], weight_decay) : grads[i];
    if (use_momentum) {
      buffers[i].mul_(momentum).add_(d);
      d = nesterov ? d.add(buffers[i] * momentum) : buffers[i];
    }
    params[i].sub_(d * lr);
  }
#endif
}

// A CUDA graph of work issued on the current thread: Capture(fn) runs `fn` on a side stream
// while the graph records it (nothing executes), Replay() launches the recorded kernels on the
// current stream. Tensors created inside `fn` live in the graph's private memory pool for the
// graph's lifetime: their addresses are what Replay reads and writes. Dropout and other RNG
// users draw from the default CUDA generator, which PyTorch advances per replay. Without
// MPSD_TRAINER_HAS_CUDA_GRAPHS every call throws c10::Error. Not thread-safe.
class CudaGraph {
 public:
  template <typename Fn>
  void Capture(int device_index, Fn&& fn) {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
    OnSideStream(device_index, [&] {
      graph_.capture_begin();
      fn();
      graph_.capture_end();
    });
#else
    (void)device_index, (void)fn;
    TORCH_CHECK(false, "CUDA graphs need a CUDA LibTorch >= 2.2");
#endif
  }

  // Runs `fn` eagerly on the graph's side stream (warm-up before a capture, as PyTorch's recipe
  // does: cuBLAS/cuDNN handles and workspaces get created outside the graph). Warm-up and capture
  // share one side stream, so that cuBLAS keeps one workspace for it.
  template <typename Fn>
  void OnSideStream(int device_index, Fn&& fn) {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
    const auto index = static_cast<c10::DeviceIndex>(device_index);
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(index);
    if (!side_.has_value()) side_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    const c10::cuda::CUDAStream side = *side_;
    at::cuda::CUDAEvent current_ready;  // the side stream starts after the current one's work
    current_ready.record(current);
    current_ready.block(side);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      fn();
    }
    at::cuda::CUDAEvent side_done;  // and the current stream continues after the side's
    side_done.record(side);
    side_done.block(current);
#else
    (void)device_index, (void)fn;
    TORCH_CHECK(false, "CUDA graphs need a CUDA LibTorch >= 2.2");
#endif
  }

  // The default CUDA generator's state (seed and Philox offset), to put back after a warm-up so
  // that the replays draw dropout's numbers where an eager run from the same seed would.
  static torch::Tensor GetRngState(int device_index) {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
    at::Generator generator =
        at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(device_index));
    std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
#else
    (void)device_index;
    TORCH_CHECK(false, "CUDA graphs need a CUDA LibTorch >= 2.2");
    return {};
#endif
  }
  static void SetRngState(int device_index, const torch::Tensor& state) {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
    at::Generator generator =
        at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(device_index));
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
#else
    (void)device_index, (void)state;
    TORCH_CHECK(false, "CUDA graphs need a CUDA LibTorch >= 2.2");
#endif
  }

  void Replay() {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
    graph_.replay();
#else
    TORCH_CHECK(false, "CUDA graphs need a CUDA LibTorch >= 2.2");
#endif
  }

 private:
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
  at::cuda::CUDAGraph graph_;
  std::optional<c10::cuda::CUDAStream> side_;
#endif
};

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

// ---- Loss scaling ---------------------------------------------------------------------------

// GradScaler's unscale_: multiplies every gradient in place by `inverse_scale` ([1] float32 on
// their device) and adds a positive number to `found_inf` ([1] float32, same device) when any
// holds inf or NaN. No synchronisation. On CUDA: at::_amp_foreach_non_finite_check_and_unscale_,
// the fused kernel torch.cuda.amp.GradScaler uses (all gradients on one device); elsewhere spelled
// out per gradient (LibTorch 1.13 has no CPU kernel for it).
inline void NonFiniteCheckAndUnscale(std::vector<torch::Tensor>& gradients,
                                     torch::Tensor& found_inf, const torch::Tensor& inverse_scale) {
  if (gradients.empty()) return;
  if (found_inf.is_cuda()) {
    at::_amp_foreach_non_finite_check_and_unscale_(gradients, found_inf, inverse_scale);
    return;
  }
  for (torch::Tensor& gradient : gradients) {
    found_inf.add_(gradient.isfinite().all().logical_not());
    gradient.mul_(inverse_scale.to(gradient.scalar_type()));
  }
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

// ---- Autocast (mixed precision) ------------------------------------------------------------

// Why `device_type` cannot autocast to `dtype` (kHalf or kBFloat16) with this LibTorch; "" when
// it can. The one decision for TrainJob (rejected at submit) and BenchJob (an UNSUPPORTED row).
// CUDA: both (bf16 needs an Ampere or newer GPU, which LibTorch checks when it runs). CPU: bf16
// always; fp16 only from LibTorch 2.4 (1.13's CPU autocast knows bf16 alone and would run fp16
// in float32). MPS: fp16 from LibTorch 2.5 (MPS autocast's first release), bf16 from 2.6
// (pytorch/pytorch#139390, which needs macOS 14).
inline std::string AutocastUnsupportedReason(c10::DeviceType device_type, c10::ScalarType dtype) {
  const bool half = dtype == c10::kHalf;
  switch (device_type) {
    case c10::DeviceType::CUDA:
      return "";
    case c10::DeviceType::CPU:
      if (!half || MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE) return "";
      return "fp16 autocast is not available on cpu with LibTorch " TORCH_VERSION
             " (it needs LibTorch >= 2.4); use bf16 or fp32 on cpu";
    case c10::DeviceType::MPS:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
      return "";
#elif TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR == 5
      if (half) return "";
      return "bf16 autocast on mps needs LibTorch >= 2.6; use fp16 or fp32 on mps";
#else
      return "autocast on mps needs LibTorch >= 2.5";
#endif
    default:
      return "autocast is not available on this device";
  }
}

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
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype, bool cache_enabled = true)
      : device_type_(device_type) {
    previous_enabled_ = IsEnabled(device_type_);
    previous_dtype_ = GetDtype(device_type_);
    previous_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(cache_enabled);
    Set(device_type_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    Set(device_type_, previous_enabled_, previous_dtype_);
    at::autocast::set_autocast_cache_enabled(previous_cache_enabled_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  static bool IsEnabled(c10::DeviceType device_type) {
#if MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE
    return at::autocast::is_autocast_enabled(device_type);
#else
    return device_type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                               : at::autocast::is_enabled();
#endif
  }
  static c10::ScalarType GetDtype(c10::DeviceType device_type) {
#if MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE
    return at::autocast::get_autocast_dtype(device_type);
#else
    return device_type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                               : at::autocast::get_autocast_gpu_dtype();
#endif
  }
  static void Set(c10::DeviceType device_type, bool enabled, c10::ScalarType dtype) {
#if MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE
    at::autocast::set_autocast_dtype(device_type, dtype);
    at::autocast::set_autocast_enabled(device_type, enabled);
#else
    if (device_type == c10::DeviceType::CPU) {
      at::autocast::set_autocast_cpu_dtype(dtype);
      at::autocast::set_cpu_enabled(enabled);
    } else {
      at::autocast::set_autocast_gpu_dtype(dtype);
      at::autocast::set_enabled(enabled);
    }
#endif
  }

  const c10::DeviceType device_type_;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::kFloat;
  bool previous_cache_enabled_ = true;
};

// One recording of LibTorch's profiler, from construction to Stop (or destruction): the
// operators run on the constructing thread and the autograd threads it starts, and with `cuda`
// (LibTorch 2.x) the device's kernels and copies. Stop writes a Chrome-trace JSON file to
// `path` (chrome://tracing, https://ui.perfetto.dev): Kineto's trace ({"traceEvents": [...]})
// in 2.x, the legacy profiler's event array in 1.13. One at a time per process; not
// thread-safe. Throws c10::Error where LibTorch refuses (a profiler already running).
class ProfilerSession {
 public:
  ProfilerSession(std::string path, bool cuda) : path_(std::move(path)) {
#if TORCH_VERSION_MAJOR >= 2
    namespace impl = torch::profiler::impl;
    const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
    std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
    if (cuda) activities.insert(impl::ActivityType::CUDA);
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    running_ = true;
#else
    (void)cuda;  // 1.13's legacy profiler records host operators only
    legacy_ = std::make_unique<torch::autograd::profiler::RecordProfile>(path_);
#endif
  }
  ~ProfilerSession() {
    try {
      Stop();
    } catch (const std::exception&) {  // a destructor does not throw; Stop's caller sees errors
    }
  }
  ProfilerSession(const ProfilerSession&) = delete;
  ProfilerSession& operator=(const ProfilerSession&) = delete;

  // Stops recording and writes the trace; later calls do nothing.
  void Stop() {
#if TORCH_VERSION_MAJOR >= 2
    if (!running_) return;
    running_ = false;
    torch::autograd::profiler::disableProfiler()->save(path_);
#else
    legacy_.reset();  // RecordProfile writes its file when destroyed
#endif
  }

 private:
  const std::string path_;
#if TORCH_VERSION_MAJOR >= 2
  bool running_ = false;
#else
  std::unique_ptr<torch::autograd::profiler::RecordProfile> legacy_;
#endif
};

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_H_
