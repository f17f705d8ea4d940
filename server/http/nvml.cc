// Nvml: four symbols of libnvidia-ml.so.1, resolved with dlsym. The struct layout and the
// return code 0 (NVML_SUCCESS) are NVML's stable C ABI (nvml.h).
#include "server/http/nvml.h"

#include <dlfcn.h>

namespace mpsd::server {
namespace {

// nvmlUtilization_t: percentages over the last sample period.
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};

constexpr int kNvmlSuccess = 0;

}  // namespace

std::unique_ptr<Nvml> Nvml::Load() {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return nullptr;
  auto init = reinterpret_cast<InitFn>(dlsym(library, "nvmlInit_v2"));
  std::unique_ptr<Nvml> nvml(new Nvml());
  nvml->library_ = library;
  nvml->shutdown_ = reinterpret_cast<ShutdownFn>(dlsym(library, "nvmlShutdown"));
  nvml->handle_by_index_ =
      reinterpret_cast<HandleByIndexFn>(dlsym(library, "nvmlDeviceGetHandleByIndex_v2"));
  nvml->utilization_ =
      reinterpret_cast<UtilizationFn>(dlsym(library, "nvmlDeviceGetUtilizationRates"));
  if (init == nullptr || nvml->shutdown_ == nullptr || nvml->handle_by_index_ == nullptr ||
      nvml->utilization_ == nullptr || init() != kNvmlSuccess) {
    nvml->shutdown_ = nullptr;  // Not initialised: nothing to shut down.
    return nullptr;
  }
  return nvml;
}

Nvml::~Nvml() {
  if (shutdown_ != nullptr) shutdown_();
  if (library_ != nullptr) dlclose(library_);
}

std::optional<double> Nvml::Utilization(unsigned int index) {
  void* device = nullptr;
  if (handle_by_index_(index, &device) != kNvmlSuccess) return std::nullopt;
  NvmlUtilization utilization{};
  if (utilization_(device, &utilization) != kNvmlSuccess) return std::nullopt;
  return utilization.gpu / 100.0;
}

}  // namespace mpsd::server
