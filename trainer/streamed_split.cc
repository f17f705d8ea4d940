// The streamed split's ring of staging buffers: batch b uses slot b % (depth + 1), so the
// batches ahead never overwrite the one in use.
#include "trainer/streamed_split.h"

#include <algorithm>
#include <utility>

namespace mpsd::trainer {

torch::Tensor InputTransform::Apply(const torch::Tensor& raw) const {
  torch::Tensor x = raw.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  if (scale_uint8) x.div_(255.0);
  if (mean.defined()) x.sub_(mean).div_(std);
  return x;
}

StreamedSplit::StreamedSplit(torch::Tensor host, torch::Tensor labels, InputTransform transform,
                             const torch::Device& device, int depth,
                             std::shared_ptr<const void> keep_alive)
    : host_(std::move(host)),
      labels_(std::move(labels)),
      transform_(std::move(transform)),
      device_(device),
      depth_(std::max(depth, 1)),
      keep_alive_(std::move(keep_alive)),
      copier_(device, depth_ + 1) {}

StreamedSplit::~StreamedSplit() { copier_.Synchronize(); }

int64_t StreamedSplit::example_bytes() const {
  return host_.numel() / std::max<int64_t>(host_.size(0), 1) * host_.element_size();
}

void StreamedSplit::Allocate(int64_t capacity) {
  copier_.Synchronize();
  std::vector<int64_t> shape = host_.sizes().vec();
  shape[0] = capacity;
  slots_.clear();
  for (int i = 0; i < depth_ + 1; ++i) {
    Slot slot;
    slot.staging = compat::EmptyStaging(shape, host_.scalar_type(), device_);
    slot.device = torch::empty(shape, torch::TensorOptions().dtype(host_.scalar_type())
                                          .device(device_));
    slots_.push_back(std::move(slot));
  }
  capacity_ = capacity;
}

void StreamedSplit::StartPass(const torch::Tensor& order, int64_t batch_size) {
  TORCH_CHECK(batch_size > 0, "StreamedSplit: batch size must be > 0");
  copier_.Synchronize();  // nothing of an unfinished pass may still write the slots
  const int64_t rows = std::min(batch_size, std::max<int64_t>(size(), 1));  // evaluation: 1000
  if (rows > capacity_) Allocate(rows);
  order_ = order.to(torch::kCPU, torch::kInt64).contiguous();
  batch_size_ = batch_size;
  batches_ = (order_.size(0) + batch_size - 1) / batch_size;
  issued_ = 0;
  taken_ = 0;
}

void StreamedSplit::Issue(int64_t batch) {
  const int slot_index = static_cast<int>(batch % (depth_ + 1));
  Slot& slot = slots_[slot_index];
  const int64_t start = batch * batch_size_;
  const int64_t rows = std::min(batch_size_, order_.size(0) - start);
  // The staging buffer is rewritten only after its previous copy has read it.
  copier_.WaitCopied(slot_index);
  torch::Tensor staging = slot.staging.narrow(/*dim=*/0, /*start=*/0, rows);
  torch::index_select_out(staging, host_, /*dim=*/0, order_.narrow(/*dim=*/0, start, rows));
  torch::Tensor device = slot.device.narrow(/*dim=*/0, /*start=*/0, rows);
  copier_.Copy(slot_index, device, staging);
}

torch::Tensor StreamedSplit::Next() {
  TORCH_CHECK(taken_ < batches_, "StreamedSplit: the pass has no batch left");
  while (issued_ < batches_ && issued_ <= taken_ + depth_) Issue(issued_++);
  const int slot_index = static_cast<int>(taken_ % (depth_ + 1));
  const int64_t rows = std::min(batch_size_, order_.size(0) - taken_ * batch_size_);
  ++taken_;
  copier_.WaitOnCurrentStream(slot_index);
  torch::Tensor input =
      transform_.Apply(slots_[slot_index].device.narrow(/*dim=*/0, /*start=*/0, rows));
  copier_.MarkConsumed(slot_index);
  return input;
}

}  // namespace mpsd::trainer
