// Data-parallel training on LibTorch's own c10d, as PyTorch's DistributedDataParallel and
// DistributedSampler do it (LibTorch has no C++ DDP module): a TCPStore rendezvous, rank 0's
// weights broadcast, each rank's shard of the epoch's permutation, gradients averaged by
// all-reduce in flat buckets, metrics summed across ranks. Gloo on CPU (and MPS), NCCL on CUDA
// where the LibTorch build has it. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_DISTRIBUTED_H_
#define MPSD_TRAINER_DISTRIBUTED_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/datasets.h"
#include "trainer/device.h"
#include "trainer/field_checks.h"

namespace mpsd::trainer {

// c10d's process group backends (ProcessGroupGloo, ProcessGroupNCCL).
enum class DistributedBackend { kGloo, kNccl };

// A TrainJob's `distributed` block resolved for one rank (ResolveDistributed), in torchrun's
// terms. A plain value, checked by ResolveDistributed; copy freely.
struct DistributedConfig {
  // The job has a distributed block (even at world size 1: the NCCL path on one GPU).
  bool enabled = false;
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  // This process's rank on its node, in [0, nproc_per_node), and in the job,
  // node_rank × nproc_per_node + local_rank.
  int local_rank = 0;
  int rank = 0;
  int world_size = 1;
  // Where node 0's rank 0 serves the TCPStore: a host name or IP address, and a TCP port in
  // [1, 65535] (torchrun's default 29500).
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  DistributedBackend backend = DistributedBackend::kGloo;
  // Every collective and the rendezvous, seconds.
  double timeout_s = 300;
  // One node (nnodes 1) that knows its job directory: the rendezvous store is this file
  // (c10d FileStore, <job_dir>/.rendezvous), which only this host's processes can open, instead
  // of a TCPStore, whose server listens on every network interface whatever master_addr says.
  // Set by the training loop; empty: the TCPStore at master_addr:master_port.
  std::string store_file;
};

// Examples per rank and epoch of a training set of `n` examples (DistributedSampler's
// num_samples): floor(n / world_size) with drop_last, else ceil(n / world_size). `n` itself at
// world size 1. `n` >= 0 and `world_size` >= 1 (the caller's config guarantees it). Pure.
inline int64_t ShardSize(int64_t n, int world_size, bool drop_last) {
  return drop_last ? n / world_size : (n + world_size - 1) / world_size;
}

// "gloo" / "nccl", as the job file spells them. Pure; thread-safe.
std::string DistributedBackendName(DistributedBackend backend);

// True when this LibTorch build has ProcessGroupNCCL (a CUDA build with NCCL's header found): a
// build-time fact, the same on every call. Thread-safe.
bool HasNccl();

// Resolves spec.distributed for the process that runs local rank `local_rank` (JobContext's; 0
// at submit), and the device it trains on: `devices[local_rank]`, else cuda:<local_rank> when
// `device` is CUDA, else `device`. INVALID_ARGUMENT naming the field ("distributed.node_rank:
// must be in [0, nnodes = 2), got 2") through `fields`, for a value out of range, a backend this
// build or the device cannot run (nccl off CUDA), a devices list whose length is not
// nproc_per_node or that names a device `inventory` lacks. `device` is read (the job's device)
// and overwritten with this rank's; nothing else is kept. A spec without a distributed block
// gives the default DistributedConfig (enabled false, world size 1) and leaves `device` as is.
// Pure apart from `device`; thread-safe for distinct arguments.
absl::StatusOr<DistributedConfig> ResolveDistributed(const mpsd::v1::TrainJob& spec, int local_rank,
                                                     const DeviceInventory& inventory,
                                                     const FieldChecks& fields,
                                                     torch::Device& device);

// One rank's membership of the job's process group. Construct with Connect; every collective
// is a blocking call that returns when this rank's part is done (Gloo), or is queued on the
// device's current stream (NCCL); each throws c10::Error naming the operation, this rank and
// the backend's cause when the group fails (a peer died, a timeout passed). Not thread-safe:
// the training thread alone uses it. Every rank must call the same collectives in the same
// order. Owns the TCPStore connection and the process group (destroyed with it); borrows
// nothing: modules and tensors passed to a call are used during that call only.
class DataParallel {
 public:
  // Rendezvous through `config.store_file` when set (one node), else at master_addr:master_port
  // (node 0's rank 0 serves the TCPStore); every rank then publishes its arrival; then the
  // process group on `device`. DEADLINE_EXCEEDED naming
  // the ranks that did not join within timeout_s; UNAVAILABLE when the store cannot be served
  // or reached (the port taken, the host unreachable), naming master_addr:master_port;
  // INTERNAL for a backend failure.
  static absl::StatusOr<std::unique_ptr<DataParallel>> Connect(const DistributedConfig& config,
                                                               const torch::Device& device);
  // Leaves the group: releases this rank's process group and store connection (rank 0's
  // TCPStore server with it).
  ~DataParallel();

  int rank() const { return config_.rank; }
  int world_size() const { return config_.world_size; }
  const DistributedConfig& config() const { return config_; }

  // Copies rank 0's parameters and buffers into every rank's `module` in place (DDP's
  // construction): one broadcast per tensor, so every rank's module must have the same
  // parameters and buffers in the same order, shapes and dtypes, on the group's device.
  void Broadcast(torch::nn::Module& module);

  // Averages the gradients of `parameters` across ranks in place: flat buckets of about
  // kBucketBytes, filled in reverse parameter order (the order backward produces them, as
  // DDP's Reducer), each all-reduced (sum) and divided by world_size. An undefined gradient
  // (an unused parameter) counts as zeros and is defined afterwards. `parameters` are on the
  // group's device; their gradients are written, the tensors themselves are not kept.
  void AllReduceGradients(const std::vector<torch::Tensor>& parameters);

  // Sums `values` (any shape, float32/float64/int64, on the group's device, the same shape and
  // dtype on every rank) across ranks in place and returns it (the same tensor).
  torch::Tensor AllReduceSum(torch::Tensor values);

  // Whether every rank's `module` holds bitwise the same parameters and buffers: a 62-bit
  // FNV-1a hash of their bytes (copied to the host) compared by two all-reduces (max of h and
  // of -h). Returns this rank's hash in `fingerprint`. A check for the end of training: it
  // copies every parameter and buffer to the host (bytes: the model's size) and blocks until
  // every rank answered.
  bool WeightsAgree(torch::nn::Module& module, uint64_t& fingerprint);

  // Rank r's shard of a permutation `order` [n] int64 (DistributedSampler): with drop_last the
  // first world_size × floor(n / world_size) entries, else the entries padded by repeating
  // from the start to world_size × ceil(n / world_size); then positions r, r + world_size, ….
  // Returns a contiguous int64 tensor of ShardSize(n, world_size, drop_last) entries on
  // `order`'s device. No communication.
  torch::Tensor Shard(const torch::Tensor& order, bool drop_last) const;

  // The rows r, r + world_size, … of `split` (device-resident; not streamed), so that each rank
  // evaluates its part of the test set and the sums reduce to the whole set's once each. The
  // shard holds new tensors (index_select) on the split's device: images
  // [ceil((N - r) / world_size), ...] and their int64 labels; an empty split comes back as it
  // is; `split` is not changed. No communication.
  TensorSplit ShardSplit(const TensorSplit& split) const;

  // DDP's default bucket_cap_mb: 25 MiB.
  static constexpr int64_t kBucketBytes = int64_t{25} << 20;

 private:
  // The store and the process group (c10d types, kept out of this header).
  struct Group;
  DataParallel(const DistributedConfig& config, std::unique_ptr<Group> group);

  const DistributedConfig config_;
  std::unique_ptr<Group> group_;
};

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_DISTRIBUTED_H_
