// What this LibTorch and platform have, as macros: included only by trainer/compat/*.cc, the one
// place where LibTorch versions (1.13 and 2.x) and platforms (CUDA, Apple MPS, CPU-only builds)
// differ. No header sees these macros, so no class layout depends on them (a unit compiled
// with other definitions once allocated a smaller object than the trainer's constructors
// filled). Internal to trainer/compat/: includes torch and, where present, CUDA's and MPS's
// headers.
#ifndef MPSD_TRAINER_COMPAT_PLATFORM_H_
#define MPSD_TRAINER_COMPAT_PLATFORM_H_

#include <torch/torch.h>
#include <torch/version.h>

// MPS exists from LibTorch 2 on, and only on Apple. MPSD_MPS_COMPILE_CHECK (CMake option
// -DMPSD_MPS_COMPILE_CHECK=ON) compiles the MPS branches off Apple too, against a LibTorch 2.x
// whose MPS API is there and answers "not available" (torch::mps::is_available() is false, so
// no job ever reaches the others): a typo in them fails a Linux build instead of a user's Mac.
// Only the sysctl calls stay Apple-only.
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
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#else
#define MPSD_TRAINER_HAS_CUDA_GRAPHS 0
#endif
// CUDA graphs that advance generators other than the default CUDA generator per replay
// (CUDAGraph::register_generator_state) exist from LibTorch 2.4 on.
#if MPSD_TRAINER_HAS_CUDA_GRAPHS && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
#define MPSD_TRAINER_CUDA_GRAPHS_TAKE_GENERATORS 1
#else
#define MPSD_TRAINER_CUDA_GRAPHS_TAKE_GENERATORS 0
#endif

// _foreach_mul_ with a tensor scalar (a [] tensor on the device, read by the kernel, so a CUDA
// graph follows its value) exists from LibTorch 2.1 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define MPSD_TRAINER_HAS_FOREACH_TENSOR_SCALAR 1
#else
#define MPSD_TRAINER_HAS_FOREACH_TENSOR_SCALAR 0
#endif

#endif  // MPSD_TRAINER_COMPAT_PLATFORM_H_
