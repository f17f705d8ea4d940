// Copies to the device on a side stream (trainer/compat/side_stream.h).
#include "trainer/compat/side_stream.h"

#include <optional>
#include <vector>

#include "trainer/compat/platform.h"

namespace mpsd::trainer::compat {

torch::Tensor EmptyStaging(at::IntArrayRef shape, c10::ScalarType dtype,
                           const torch::Device& device) {
  return torch::empty(shape, torch::TensorOptions().dtype(dtype).pinned_memory(device.is_cuda()));
}

struct SideStreamCopier::Cuda {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  c10::cuda::CUDAStream side;
  std::vector<at::cuda::CUDAEvent> copied;
  std::vector<at::cuda::CUDAEvent> consumed;
#endif
};

SideStreamCopier::SideStreamCopier(const torch::Device& device, int slots) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  if (device.is_cuda()) {
    const auto index = static_cast<c10::DeviceIndex>(device.has_index() ? device.index() : 0);
    cuda_.reset(new Cuda{c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index), {}, {}});
    cuda_->copied.resize(slots);
    cuda_->consumed.resize(slots);
  }
#else
  (void)device, (void)slots;
#endif
}

SideStreamCopier::~SideStreamCopier() = default;

void SideStreamCopier::WaitCopied(int slot) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  if (cuda_ != nullptr) cuda_->copied[slot].synchronize();
#else
  (void)slot;
#endif
}

void SideStreamCopier::Copy(int slot, torch::Tensor& dst, const torch::Tensor& src) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  if (cuda_ != nullptr) {
    cuda_->consumed[slot].block(cuda_->side);
    const c10::cuda::CUDAStreamGuard guard(cuda_->side);
    dst.copy_(src, /*non_blocking=*/true);
    cuda_->copied[slot].record(cuda_->side);
    return;
  }
#endif
  (void)slot;
  dst.copy_(src);
}

void SideStreamCopier::WaitOnCurrentStream(int slot) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  if (cuda_ != nullptr) {
    cuda_->copied[slot].block(c10::cuda::getCurrentCUDAStream(cuda_->side.device_index()));
  }
#else
  (void)slot;
#endif
}

void SideStreamCopier::MarkConsumed(int slot) {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  if (cuda_ != nullptr) {
    cuda_->consumed[slot].record(c10::cuda::getCurrentCUDAStream(cuda_->side.device_index()));
  }
#else
  (void)slot;
#endif
}

void SideStreamCopier::Synchronize() {
#if MPSD_TRAINER_HAS_CUDA_ALLOCATOR
  if (cuda_ != nullptr) cuda_->side.synchronize();
#endif
}

}  // namespace mpsd::trainer::compat
