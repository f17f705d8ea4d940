// Devices: which ones this process can use, how a job's "device" string maps to one, and the
// memory its allocator holds. Internal to trainer/: includes torch.
#ifndef MPSD_TRAINER_DEVICE_H_
#define MPSD_TRAINER_DEVICE_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/memory.h"

namespace mpsd::trainer {

// What LibTorch can run on in this process, probed once. Probing asks the drivers how many
// devices there are; it allocates no device memory. Immutable afterwards, so any thread may read
// it.
struct DeviceInventory {
  // The device "auto" resolves to: mps if available, else cuda:0, else cpu.
  torch::Device preferred = torch::kCPU;
  // Every name a job may give, in the order "cpu", "cuda", "cuda:0", …, "mps".
  std::vector<std::string> available;
  int cuda_device_count = 0;
  bool mps_available = false;
};

DeviceInventory ProbeDevices();

// Maps a job's device string to a device of `inventory`: "auto" (or "") → inventory.preferred;
// "cpu"; "cuda" → the current CUDA device (cuda:0); "cuda:N"; "mps". INVALID_ARGUMENT, with no
// field path (the caller adds it): "cuda is not available (available: cpu)", "unknown device
// \"tpu\" (expected auto, cpu, cuda, cuda:N or mps)".
absl::StatusOr<torch::Device> ResolveDevice(absl::string_view name,
                                            const DeviceInventory& inventory);

// "cpu", "cuda:0", "mps".
std::string DeviceString(const torch::Device& device);

// Kind ("cpu", "cuda", "mps"), a human name ("NVIDIA H200", "Apple M1", "cpu (2 threads)") and
// the memory a job could use, bytes (system RAM for cpu and mps's unified memory; 0 if unknown).
struct DeviceDescription {
  std::string kind;
  std::string name;
  int64_t total_memory_bytes = 0;
};

DeviceDescription DescribeDevice(const torch::Device& device);

// Bytes held by the device's allocator (api/memory.h says what each figure means); peaks are
// since the last ResetPeakMemory. Reads the allocator's counters; no device synchronisation.
// Thread-safe.
api::MemoryFigures ReadMemory(const torch::Device& device);
void ResetPeakMemory(const torch::Device& device);

// Waits for every queued kernel on the device to finish (no-op on cpu). Asynchronous device
// errors surface here, as c10::Error.
void Synchronize(const torch::Device& device);

// A generator of `device`'s kind (so random draws with it run on the device), separate from the
// default generator that weight initialisation and dropout draw from, seeded with `seed`: what it
// draws depends on the seed alone. Thread-safe (it locks the default generator to clone it).
at::Generator MakeDeviceGenerator(const torch::Device& device, uint64_t seed);

// Returns the caching allocator's unused blocks to the driver, like torch.cuda.empty_cache()
// (no-op on cpu).
void EmptyCache(const torch::Device& device);

// cuDNN's algorithm choice for convolutions while in scope, as torch.backends.cudnn.benchmark:
// true searches (the first convolution of each shape times cuDNN's algorithms and the fastest is
// cached for that shape; the workspaces of those it tries count in the peak device memory), false
// takes cuDNN's heuristic choice (PyTorch's default, and LibTorch's at start). The previous
// setting comes back when the scope ends, also by an exception. The setting is process-wide
// (at::globalContext()): a job sets it for its own run, and an executor runs one job at a time.
// Not for two threads at once. Changes nothing on devices without cuDNN.
class CudnnBenchmarkScope {
 public:
  explicit CudnnBenchmarkScope(bool benchmark) : previous_(at::globalContext().benchmarkCuDNN()) {
    at::globalContext().setBenchmarkCuDNN(benchmark);
  }
  ~CudnnBenchmarkScope() { at::globalContext().setBenchmarkCuDNN(previous_); }
  CudnnBenchmarkScope(const CudnnBenchmarkScope&) = delete;
  CudnnBenchmarkScope& operator=(const CudnnBenchmarkScope&) = delete;

 private:
  const bool previous_;
};

// The setting now, for a job's log: "cuDNN's algorithm search (cudnn_benchmark)" or "cuDNN's
// heuristics".
inline const char* CudnnChoiceName() {
  return at::globalContext().benchmarkCuDNN() ? "cuDNN's algorithm search (cudnn_benchmark)"
                                              : "cuDNN's heuristics";
}

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_DEVICE_H_
