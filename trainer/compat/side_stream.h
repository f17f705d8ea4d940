// Host-to-device copies on a CUDA stream of their own, overlapping the training step's work
// (the streamed data path, trainer/streamed_split.h); off CUDA plain synchronous copies.
// Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_COMPAT_SIDE_STREAM_H_
#define MPSD_TRAINER_COMPAT_SIDE_STREAM_H_

#include <torch/torch.h>

#include <memory>

namespace mpsd::trainer::compat {

// Host memory for staging copies to `device`: page-locked (pinned, so that a copy can run
// asynchronously) for CUDA, ordinary elsewhere.
torch::Tensor EmptyStaging(at::IntArrayRef shape, c10::ScalarType dtype,
                           const torch::Device& device);

// Host-to-device copies into `slots` buffers on a CUDA stream of their own, ordered against the
// current stream with two events per slot: `copied` (the copy finished) and `consumed` (the
// current stream's work queued so far, which read the slot's device buffer). Off CUDA (or with
// a LibTorch without CUDA) every copy is a plain synchronous copy_ and the events are no-ops.
// `slot` is in [0, slots). One thread at a time.
class SideStreamCopier {
 public:
  SideStreamCopier(const torch::Device& device, int slots);
  ~SideStreamCopier();
  SideStreamCopier(const SideStreamCopier&) = delete;
  SideStreamCopier& operator=(const SideStreamCopier&) = delete;

  // Blocks the host until the slot's last copy has read its (staging) source.
  void WaitCopied(int slot);

  // dst.copy_(src): on CUDA queued on the side stream after the current stream's work that read
  // the slot before (MarkConsumed), with src pinned host memory.
  void Copy(int slot, torch::Tensor& dst, const torch::Tensor& src);

  // The current stream waits (on the device, not the host) for the slot's copy.
  void WaitOnCurrentStream(int slot);

  // Marks the current stream's queued work as the last reader of the slot's device buffer.
  void MarkConsumed(int slot);

  // Waits for every queued copy.
  void Synchronize();

 private:
  struct Cuda;                  // the side stream and the events; null off CUDA
  std::unique_ptr<Cuda> cuda_;  // (trainer/compat/side_stream.cc)
};

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_SIDE_STREAM_H_
