// NVIDIA's management library (NVML), loaded at run time with dlopen, for the GPU utilisation
// that LibTorch does not report (mpsd_device_utilization_ratio). mpsd neither links nor needs
// it: where libnvidia-ml.so.1 is absent (no NVIDIA driver), Load returns nullptr.
#ifndef MPSD_SERVER_HTTP_NVML_H_
#define MPSD_SERVER_HTTP_NVML_H_

#include <memory>
#include <optional>

namespace mpsd::server {

// Thread-compatible: one caller at a time (Metrics holds its lock around it).
class Nvml {
 public:
  // dlopen("libnvidia-ml.so.1") and nvmlInit_v2; nullptr when either fails.
  static std::unique_ptr<Nvml> Load();
  // nvmlShutdown and dlclose.
  ~Nvml();

  // The fraction of the last sample period (1/6 s to 1 s, by device) in which a kernel ran on
  // GPU `index` (NVML's nvmlUtilization_t.gpu / 100), in [0, 1]; nullopt when NVML cannot say.
  std::optional<double> Utilization(unsigned int index);

 private:
  using InitFn = int (*)();
  using ShutdownFn = int (*)();
  using HandleByIndexFn = int (*)(unsigned int, void**);
  using UtilizationFn = int (*)(void*, void*);

  Nvml() = default;

  void* library_ = nullptr;
  ShutdownFn shutdown_ = nullptr;
  HandleByIndexFn handle_by_index_ = nullptr;
  UtilizationFn utilization_ = nullptr;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_NVML_H_
