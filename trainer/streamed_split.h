// A dataset split that stays on the host (uint8 pixels from the memory-mapped decode cache, or a
// tensors file's x) and reaches the device one batch at a time: rows are gathered on the host
// into a pinned staging buffer and copied to the device on a side stream one or two batches
// ahead of the batch the training step uses, so the copies overlap compute. The model input is
// made on the device by the same InputTransform the resident path applies to the whole split,
// so both paths give the same batches bit for bit. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_STREAMED_SPLIT_H_
#define MPSD_TRAINER_STREAMED_SPLIT_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "trainer/compat/side_stream.h"

namespace mpsd::trainer {

// Raw examples → model input, on the raw tensor's device: float32, divided by 255 for uint8
// data, then (x - mean[c]) / std[c] when mean and std are set ([1, C, 1, …] float32 on the same
// device, C = dim 1 of the batch, or [1] for all channels). Always returns a new tensor.
struct InputTransform {
  bool scale_uint8 = false;
  torch::Tensor mean;
  torch::Tensor std;
  torch::Tensor Apply(const torch::Tensor& raw) const;
};

// Not thread-safe: the training loop's thread only. The host tensor is borrowed for the split's
// lifetime (it may view a memory mapping; `keep_alive` holds whatever owns it).
class StreamedSplit {
 public:
  // host: [N, …] uint8 or float on the CPU, contiguous. labels: [N] int64 on `device`. depth:
  // batches copied ahead of the one in use (>= 1).
  StreamedSplit(torch::Tensor host, torch::Tensor labels, InputTransform transform,
                const torch::Device& device, int depth, std::shared_ptr<const void> keep_alive);
  ~StreamedSplit();
  StreamedSplit(const StreamedSplit&) = delete;
  StreamedSplit& operator=(const StreamedSplit&) = delete;

  int64_t size() const { return host_.size(0); }
  // The labels of every row, on the device.
  const torch::Tensor& labels() const { return labels_; }
  // Bytes one example takes on the host.
  int64_t example_bytes() const;

  // Starts a pass over the rows `order` ([n] int64, any device; read back to the host once)
  // in batches of `batch_size` (the last one may be smaller). Drops what an unfinished pass had
  // in flight.
  void StartPass(const torch::Tensor& order, int64_t batch_size);
  // The pass's next batch on the device: [b, …] float32, InputTransform applied. Queues the
  // copies of the next `depth` batches before returning. Throws c10::Error past the last batch.
  torch::Tensor Next();

 private:
  struct Slot {
    torch::Tensor staging;  // [capacity, …] host (pinned on CUDA), host_'s dtype
    torch::Tensor device;   // [capacity, …] on the device, host_'s dtype
  };
  void Allocate(int64_t capacity);
  void Issue(int64_t batch);  // gathers batch `batch`'s rows and queues its copy

  const torch::Tensor host_;
  const torch::Tensor labels_;
  const InputTransform transform_;
  const torch::Device device_;
  const int depth_;
  const std::shared_ptr<const void> keep_alive_;
  compat::SideStreamCopier copier_;
  std::vector<Slot> slots_;  // depth_ + 1
  int64_t capacity_ = 0;     // rows per slot

  // The current pass.
  torch::Tensor order_;  // [n] int64 on the CPU
  int64_t batch_size_ = 0;
  int64_t batches_ = 0;
  int64_t issued_ = 0;  // batches whose copies are queued
  int64_t taken_ = 0;   // batches returned by Next
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_STREAMED_SPLIT_H_
