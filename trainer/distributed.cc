// DataParallel (distributed.h) on c10d: TCPStore, ProcessGroupGloo and, in CUDA builds with
// NCCL, ProcessGroupNCCL. The CMake target defines USE_C10D_GLOO with MPSD_TRAINER_WITH_GLOO
// for this file where gloo's headers are (the Gloo header is empty without USE_C10D_GLOO, and
// a pip LibTorch defines USE_C10D_GLOO for every file yet ships no gloo headers, so the test is
// on our own macro), and USE_C10D_NCCL with MPSD_TRAINER_WITH_NCCL where NCCL is there.
#include "trainer/distributed.h"

#if defined(MPSD_TRAINER_WITH_GLOO)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(MPSD_TRAINER_WITH_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/torch_errors.h"

namespace mpsd::trainer {

// What ProcessGroupGloo and ProcessGroupNCCL derive from: ProcessGroup in LibTorch 1.x, Backend
// since 2.0 (the one c10d difference this file meets; kept here, beside the c10d includes,
// rather than in trainer/compat/, whose headers most of trainer/ includes).
#if TORCH_VERSION_MAJOR >= 2
using BackendBase = ::c10d::Backend;
#else
using BackendBase = ::c10d::ProcessGroup;
#endif

struct DataParallel::Group {
  c10::intrusive_ptr<::c10d::Store> store;
  c10::intrusive_ptr<BackendBase> group;
};

namespace {

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// The key rank r sets once it reached the store: what names the ranks that never joined.
std::string JoinedKey(int rank) { return absl::StrCat("mpsd/joined/", rank); }

// Where the ranks meet, for messages: the store file, or master_addr:master_port.
std::string StoreAddress(const DistributedConfig& config) {
  return config.store_file.empty()
             ? absl::StrFormat("%s:%d", config.master_addr, config.master_port)
             : config.store_file;
}

// Waits until every rank has set its JoinedKey, up to `timeout`; DEADLINE_EXCEEDED naming the
// ranks (and so their nodes) that did not.
absl::Status AwaitRanks(::c10d::Store& store, const DistributedConfig& config) {
  const auto deadline = std::chrono::steady_clock::now() + Millis(config.timeout_s);
  for (;;) {
    std::vector<int> missing;
    for (int r = 0; r < config.world_size; ++r) {
      if (!store.check({JoinedKey(r)})) missing.push_back(r);
    }
    if (missing.empty()) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<std::string> names;
      for (const int r : missing) {
        names.push_back(absl::StrFormat("%d (node %d)", r, r / config.nproc_per_node));
      }
      return absl::DeadlineExceededError(absl::StrFormat(
          "rendezvous at %s: rank(s) %s of %d did not join within %g s (distributed.timeout_s)",
          StoreAddress(config), absl::StrJoin(names, ", "), config.world_size, config.timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

#if defined(MPSD_TRAINER_WITH_GLOO)
// Gloo's transport device: the loopback address when every rank is on this host (one node, or
// a rendezvous on a loopback address, which only this host's ranks can reach); else the
// interface GLOO_SOCKET_IFNAME names (as torch.distributed reads it), else this host's name.
std::shared_ptr<::gloo::transport::Device> GlooDevice(const DistributedConfig& config) {
  if (config.nnodes == 1 || absl::StartsWith(config.master_addr, "127.") ||
      config.master_addr == "localhost" || config.master_addr == "::1") {
    return ::c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
      interface != nullptr && *interface != '\0') {
    return ::c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  }
  return ::c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

c10::intrusive_ptr<BackendBase> MakeGroup(const c10::intrusive_ptr<::c10d::Store>& store,
                                          const DistributedConfig& config) {
  if (config.backend == DistributedBackend::kNccl) {
#if defined(MPSD_TRAINER_WITH_NCCL)
    auto options = ::c10d::ProcessGroupNCCL::Options::create();
    options->timeout = Millis(config.timeout_s);
    return c10::make_intrusive<::c10d::ProcessGroupNCCL>(store, config.rank, config.world_size,
                                                         options);
#else
    TORCH_CHECK(false, "this build of mpsd-executor has no NCCL");
#endif
  }
#if defined(MPSD_TRAINER_WITH_GLOO)
  auto options = ::c10d::ProcessGroupGloo::Options::create(Millis(config.timeout_s));
  options->devices.push_back(GlooDevice(config));
  return c10::make_intrusive<::c10d::ProcessGroupGloo>(store, config.rank, config.world_size,
                                                       options);
#else
  TORCH_CHECK(false, "this build of mpsd-executor has no Gloo (its LibTorch lacks gloo's headers)");
#endif
}

}  // namespace

std::string DistributedBackendName(DistributedBackend backend) {
  return backend == DistributedBackend::kNccl ? "nccl" : "gloo";
}

bool HasNccl() {
#if defined(MPSD_TRAINER_WITH_NCCL)
  return true;
#else
  return false;
#endif
}

absl::StatusOr<DistributedConfig> ResolveDistributed(const mpsd::v1::TrainJob& spec, int local_rank,
                                                     const DeviceInventory& inventory,
                                                     const FieldChecks& job_fields,
                                                     torch::Device& device) {
  DistributedConfig config;
  if (!spec.has_distributed()) return config;
  const mpsd::v1::DistributedSpec& d = spec.distributed();
  const FieldChecks fields = job_fields.Sub("distributed");
  config.enabled = true;
  config.nproc_per_node = d.has_nproc_per_node() ? d.nproc_per_node() : 1;
  if (absl::Status s = fields.InRange("nproc_per_node", config.nproc_per_node, 1, 64); !s.ok()) {
    return s;
  }
  config.nnodes = d.has_nnodes() ? d.nnodes() : 1;
  if (absl::Status s = fields.InRange("nnodes", config.nnodes, 1, 1024); !s.ok()) return s;
  config.node_rank = d.node_rank();
  if (d.node_rank() < 0 || d.node_rank() >= config.nnodes) {
    return fields.Error("node_rank", absl::StrFormat("must be in [0, nnodes = %d), got %d",
                                                     config.nnodes, d.node_rank()));
  }
  if (local_rank < 0 || local_rank >= config.nproc_per_node) {
    return fields.Error("nproc_per_node", absl::StrFormat("local rank %d is not below %d",
                                                          local_rank, config.nproc_per_node));
  }
  config.local_rank = local_rank;
  config.world_size = config.nproc_per_node * config.nnodes;
  config.rank = config.node_rank * config.nproc_per_node + local_rank;
  if (d.master_addr().empty() && config.nnodes > 1) {
    return fields.Error("master_addr", "required when nnodes > 1 (the host of node 0)");
  }
  if (!d.master_addr().empty()) config.master_addr = d.master_addr();
  config.master_port = d.has_master_port() ? d.master_port() : 29500;
  if (absl::Status s = fields.InRange("master_port", config.master_port, 1, 65535); !s.ok()) {
    return s;
  }
  config.timeout_s = d.has_timeout_s() ? d.timeout_s() : 300;
  if (absl::Status s = fields.InRange("timeout_s", config.timeout_s, {0, false, 86400, true});
      !s.ok()) {
    return s;
  }
  if (d.devices_size() > 0 && d.devices_size() != config.nproc_per_node) {
    return fields.Error("devices",
                        absl::StrFormat("must name one device per local rank (nproc_per_node "
                                        "= %d), got %d",
                                        config.nproc_per_node, d.devices_size()));
  }
  for (int i = 0; i < d.devices_size(); ++i) {
    absl::StatusOr<torch::Device> named = ResolveDevice(d.devices(i), inventory);
    if (!named.ok()) return fields.Error(Indexed("devices", i), named.status().message());
    if (i == local_rank) device = *named;
  }
  if (d.devices_size() == 0 && device.is_cuda()) {
    if (config.nproc_per_node > inventory.cuda_device_count) {
      return fields.Error("nproc_per_node",
                          absl::StrFormat("%d ranks need %d CUDA devices, %d available (or "
                                          "name them in distributed.devices)",
                                          config.nproc_per_node, config.nproc_per_node,
                                          inventory.cuda_device_count));
    }
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  }
  const std::string& backend = d.backend();
  if (backend.empty() || backend == "auto") {
    config.backend =
        device.is_cuda() && HasNccl() ? DistributedBackend::kNccl : DistributedBackend::kGloo;
  } else if (backend == "gloo") {
    config.backend = DistributedBackend::kGloo;
  } else if (backend == "nccl") {
    if (!device.is_cuda()) {
      return fields.Error("backend", absl::StrCat("nccl needs CUDA devices; the job's is ",
                                                  DeviceString(device), " (use gloo)"));
    }
    if (!HasNccl()) return fields.Error("backend", "this mpsd-executor was built without NCCL");
    config.backend = DistributedBackend::kNccl;
  } else {
    return fields.Error(
        "backend", absl::StrFormat("unknown backend \"%s\" (known: auto, gloo, nccl)", backend));
  }
  return config;
}

DataParallel::DataParallel(const DistributedConfig& config, std::unique_ptr<Group> group)
    : config_(config), group_(std::move(group)) {}

DataParallel::~DataParallel() = default;

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::Connect(const DistributedConfig& config,
                                                                    const torch::Device& device) {
  auto group = std::make_unique<Group>();
  const std::string where = StoreAddress(config);
  if (!config.store_file.empty()) {
    try {
      std::error_code error;
      std::filesystem::create_directories(std::filesystem::path(config.store_file).parent_path(),
                                          error);
      // One rank alone has nobody to race: a file left by a run that crashed goes first. (With
      // more ranks, the daemon removes it before it starts them: ExecutorSupervisor::RunRanks.)
      if (config.world_size == 1) std::filesystem::remove(config.store_file, error);
      group->store = c10::make_intrusive<::c10d::FileStore>(config.store_file, config.world_size);
      group->store->setTimeout(Millis(config.timeout_s));
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrFormat(
          "rendezvous: rank %d cannot open the store file %s: %s", config.rank, where, e.what()));
    }
  } else {
    try {
      ::c10d::TCPStoreOptions options;
      options.port = static_cast<uint16_t>(config.master_port);
      options.isServer = config.rank == 0;
      options.numWorkers = static_cast<size_t>(config.world_size);
      options.waitWorkers = false;  // AwaitRanks names the ranks that do not come
      options.timeout = Millis(config.timeout_s);
      group->store = c10::make_intrusive<::c10d::TCPStore>(config.master_addr, options);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrFormat(
          "rendezvous: rank %d cannot %s the store at %s (distributed.master_addr/master_port): "
          "%s",
          config.rank, config.rank == 0 ? "serve" : "reach", where, e.what()));
    }
  }
  try {
    group->store->set(JoinedKey(config.rank), std::vector<uint8_t>{1});
    if (absl::Status s = AwaitRanks(*group->store, config); !s.ok()) return s;
#if defined(MPSD_TRAINER_WITH_NCCL)
    if (device.is_cuda()) c10::cuda::set_device(device.index());
#endif
    group->group = MakeGroup(group->store, config);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrFormat("rendezvous at %s: rank %d: %s", where, config.rank, e.what()));
  }
  return std::unique_ptr<DataParallel>(new DataParallel(config, std::move(group)));
}

namespace {

// Waits for `work`; its failure (a peer gone, the timeout passed) as c10::Error naming what
// failed and where.
void Wait(const c10::intrusive_ptr<::c10d::Work>& work, const char* what,
          const DistributedConfig& config) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    throw CollectiveError(
        c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        absl::StrCat(what, " failed on rank ", config.rank, " of ", config.world_size, " (",
                     DistributedBackendName(config.backend), "): ", e.what()),
        config.rank);
  }
}

}  // namespace

void DataParallel::Broadcast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors = module.parameters();
  for (const torch::Tensor& buffer : module.buffers()) tensors.push_back(buffer);
  for (torch::Tensor& tensor : tensors) {
    std::vector<torch::Tensor> one = {tensor};
    ::c10d::BroadcastOptions options;
    options.rootRank = 0;
    Wait(group_->group->broadcast(one, options), "broadcast of rank 0's weights", config_);
  }
}

void DataParallel::AllReduceGradients(const std::vector<torch::Tensor>& parameters) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
    torch::Tensor parameter = *it;
    if (!parameter.requires_grad()) continue;
    if (!parameter.grad().defined()) parameter.mutable_grad() = torch::zeros_like(parameter);
    grads.push_back(parameter.grad());
  }
  const double scale = 1.0 / config_.world_size;
  size_t first = 0;
  while (first < grads.size()) {
    // One bucket: consecutive gradients of one dtype up to kBucketBytes (at least one).
    size_t end = first;
    int64_t bytes = 0;
    while (end < grads.size() && grads[end].scalar_type() == grads[first].scalar_type() &&
           (end == first || bytes + grads[end].nbytes() <= kBucketBytes)) {
      bytes += static_cast<int64_t>(grads[end].nbytes());
      ++end;
    }
    std::vector<torch::Tensor> flat_parts;
    for (size_t i = first; i < end; ++i) flat_parts.push_back(grads[i].reshape({-1}));
    std::vector<torch::Tensor> bucket = {torch::cat(flat_parts)};
    Wait(group_->group->allreduce(bucket), "all-reduce of gradients", config_);
    bucket[0].mul_(scale);
    int64_t offset = 0;
    for (size_t i = first; i < end; ++i) {
      const int64_t n = grads[i].numel();
      grads[i].copy_(bucket[0].narrow(/*dim=*/0, offset, n).view_as(grads[i]));
      offset += n;
    }
    first = end;
  }
}

torch::Tensor DataParallel::AllReduceSum(torch::Tensor values) {
  std::vector<torch::Tensor> one = {values};
  Wait(group_->group->allreduce(one), "all-reduce of metrics", config_);
  return values;
}

bool DataParallel::WeightsAgree(torch::nn::Module& module, uint64_t& fingerprint) {
  torch::NoGradGuard no_grad;
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a 64 (Fowler, Noll, Vo)
  std::vector<torch::Tensor> tensors = module.parameters();
  for (const torch::Tensor& buffer : module.buffers()) tensors.push_back(buffer);
  for (const torch::Tensor& tensor : tensors) {
    const torch::Tensor host = tensor.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(host.data_ptr());
    for (size_t i = 0; i < host.nbytes(); ++i) {
      hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
    }
  }
  fingerprint = hash & ((uint64_t{1} << 62) - 1);
  const auto value = static_cast<int64_t>(fingerprint);
  torch::Tensor extremes = torch::tensor({value, -value}, torch::kInt64);
  if (config_.backend == DistributedBackend::kNccl) extremes = extremes.to(torch::kCUDA);
  std::vector<torch::Tensor> one = {extremes};
  ::c10d::AllreduceOptions options;
  options.reduceOp = ::c10d::ReduceOp::MAX;
  Wait(group_->group->allreduce(one, options), "weight check", config_);
  const torch::Tensor host = extremes.to(torch::kCPU);
  return host[0].item<int64_t>() == -host[1].item<int64_t>();
}

torch::Tensor DataParallel::Shard(const torch::Tensor& order, bool drop_last) const {
  const int64_t n = order.size(0);
  const int64_t w = config_.world_size;
  torch::Tensor indices = order;
  if (drop_last) {
    indices = order.narrow(/*dim=*/0, /*start=*/0, (n / w) * w);
  } else if (n % w != 0) {
    const int64_t padding = (n + w - 1) / w * w - n;
    // As DistributedSampler: repeat the permutation's start (several times for a tiny set).
    const int64_t repeats = (padding + n - 1) / n;
    indices = torch::cat({order, order.repeat({repeats}).narrow(/*dim=*/0, 0, padding)});
  }
  return indices.slice(/*dim=*/0, /*start=*/config_.rank, /*end=*/indices.size(0), /*step=*/w)
      .contiguous();
}

TensorSplit DataParallel::ShardSplit(const TensorSplit& split) const {
  if (split.size() == 0) return split;
  const torch::Tensor index =
      torch::arange(config_.rank, split.size(), config_.world_size,
                    torch::TensorOptions().dtype(torch::kInt64).device(split.labels.device()));
  TensorSplit shard;
  shard.images = split.images.index_select(/*dim=*/0, index);
  shard.labels = split.labels.index_select(/*dim=*/0, index);
  shard.preprocess = split.preprocess;
  return shard;
}

}  // namespace mpsd::trainer
