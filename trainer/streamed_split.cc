// The streamed split's ring of staging buffers: batch b uses slot b % (depth + 1), so the
// batches ahead never overwrite the one in use.
#include "trainer/streamed_split.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace mpsd::trainer {
namespace {

// dst[i] = src[index[i]] for whole rows of contiguous tensors, one memcpy per row, the rows split
// over the intra-op threads. A [128, 3, 224, 224] uint8 batch is 19 MB; index_select's
// element-wise kernel gathered it slowly enough to leave the GPU waiting on this thread.
void GatherRows(const torch::Tensor& src, const torch::Tensor& index, const torch::Tensor& dst) {
  const int64_t n = src.size(0);
  const int64_t row_bytes = src.numel() / std::max<int64_t>(n, 1) * src.element_size();
  const auto* in = static_cast<const char*>(src.data_ptr());
  auto* out = static_cast<char*>(dst.data_ptr());
  const int64_t* rows = index.data_ptr<int64_t>();
  at::parallel_for(0, index.size(0), /*grain_size=*/8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      TORCH_CHECK(rows[i] >= 0 && rows[i] < n, "StreamedSplit: row ", rows[i], " out of [0, ", n,
                  ")");
      std::memcpy(out + i * row_bytes, in + rows[i] * row_bytes, row_bytes);
    }
  });
}

}  // namespace

torch::Tensor InputTransform::Apply(const torch::Tensor& raw) const {
  torch::Tensor x = raw.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  if (scale_uint8) x.div_(255.0);
  if (mean.defined()) x.sub_(mean).div_(std);
  return x;
}

StreamedSplit::StreamedSplit(torch::Tensor host, torch::Tensor labels, InputTransform transform,
                             const torch::Device& device, int depth,
                             std::shared_ptr<const void> keep_alive)
    : host_(host.contiguous()),  // a no-op for the decode cache; GatherRows needs it
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
    slot.device =
        torch::empty(shape, torch::TensorOptions().dtype(host_.scalar_type()).device(device_));
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
  GatherRows(host_, order_.narrow(/*dim=*/0, start, rows), staging);
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
