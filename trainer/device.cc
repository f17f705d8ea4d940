// Device discovery, resolution of job device strings, and allocator statistics.
#include "trainer/device.h"

#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/compat/cuda_memory.h"
#include "trainer/compat/mps.h"

namespace mpsd::trainer {
namespace {

int64_t SystemMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * page_size;
}

absl::Status NotAvailable(absl::string_view name, const DeviceInventory& inventory) {
  return absl::InvalidArgumentError(absl::StrFormat("%s is not available (available: %s)", name,
                                                    absl::StrJoin(inventory.available, ", ")));
}

// "cuda" or "cuda:N" → the index, or an error.
absl::StatusOr<int> ParseCudaIndex(absl::string_view name, const DeviceInventory& inventory) {
  int index = 0;
  if (name != "cuda") {
    const absl::string_view digits = name.substr(absl::string_view("cuda:").size());
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit) ||
        !absl::SimpleAtoi(digits, &index)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown device \"%s\" (expected auto, cpu, cuda, cuda:N or mps)", name));
    }
  }
  if (index >= inventory.cuda_device_count) return NotAvailable(name, inventory);
  return index;
}

}  // namespace

DeviceInventory ProbeDevices() {
  DeviceInventory inventory;
  inventory.available.push_back("cpu");
  if (torch::cuda::is_available()) {
    inventory.cuda_device_count = static_cast<int>(torch::cuda::device_count());
    inventory.available.push_back("cuda");
    for (int i = 0; i < inventory.cuda_device_count; ++i) {
      inventory.available.push_back(absl::StrCat("cuda:", i));
    }
  }
  inventory.mps_available = compat::MpsIsAvailable();
  if (inventory.mps_available) inventory.available.push_back("mps");

  if (inventory.mps_available) {
    inventory.preferred = torch::Device(torch::kMPS);
  } else if (inventory.cuda_device_count > 0) {
    inventory.preferred = torch::Device(torch::kCUDA, 0);
  }
  return inventory;
}

absl::StatusOr<torch::Device> ResolveDevice(absl::string_view name,
                                            const DeviceInventory& inventory) {
  if (name.empty() || name == "auto") return inventory.preferred;
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name == "mps") {
    if (!inventory.mps_available) return NotAvailable(name, inventory);
    return torch::Device(torch::kMPS);
  }
  if (name == "cuda" || absl::StartsWith(name, "cuda:")) {
    absl::StatusOr<int> index = ParseCudaIndex(name, inventory);
    if (!index.ok()) return index.status();
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(*index));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown device \"%s\" (expected auto, cpu, cuda, cuda:N or mps)", name));
}

std::string DeviceString(const torch::Device& device) {
  if (device.is_cuda() && !device.has_index()) return "cuda:0";
  return device.str();
}

DeviceDescription DescribeDevice(const torch::Device& device) {
  DeviceDescription description;
  if (device.is_cuda()) {
    const compat::CudaProperties props = compat::GetCudaProperties(device.index());
    description.kind = "cuda";
    description.name = props.name;
    description.total_memory_bytes = props.total_memory_bytes;
  } else if (device.is_mps()) {
    const compat::MpsProperties props = compat::GetMpsProperties();
    description.kind = "mps";
    description.name = props.name;
    description.total_memory_bytes = props.total_memory_bytes;
  } else {
    description.kind = "cpu";
    const int threads = torch::get_num_threads();
    description.name = absl::StrFormat("cpu (%d thread%s)", threads, threads == 1 ? "" : "s");
    description.total_memory_bytes = SystemMemoryBytes();
  }
  return description;
}

api::MemoryFigures ReadMemory(const torch::Device& device) {
  if (device.is_cuda()) return compat::CudaStats(device.has_index() ? device.index() : 0);
  if (device.is_mps()) return compat::MpsStats();
  return api::MemoryFigures{};
}

void ResetPeakMemory(const torch::Device& device) {
  if (device.is_cuda()) compat::CudaResetPeak(device.has_index() ? device.index() : 0);
}

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) {
    torch::cuda::synchronize(device.has_index() ? device.index() : -1);
  } else if (device.is_mps()) {
    compat::MpsSynchronize();
  }
}

void EmptyCache(const torch::Device& device) {
  if (device.is_cuda()) {
    compat::CudaEmptyCache();
  } else if (device.is_mps()) {
    compat::MpsEmptyCache();
  }
}

at::Generator MakeDeviceGenerator(const torch::Device& device, uint64_t seed) {
  at::Generator default_generator = at::globalContext().defaultGenerator(device);
  at::Generator generator;
  {
    std::lock_guard<std::mutex> lock(default_generator.mutex());
    generator = default_generator.clone();
  }
  generator.set_current_seed(seed);
  return generator;
}

}  // namespace mpsd::trainer
