// Autocast across LibTorch versions (trainer/compat/autocast.h).
#include "trainer/compat/autocast.h"

#include <ATen/autocast_mode.h>

#include "trainer/compat/platform.h"

namespace mpsd::trainer::compat {
namespace {

bool IsEnabled(c10::DeviceType device_type) {
#if MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(device_type);
#else
  return device_type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                             : at::autocast::is_enabled();
#endif
}

c10::ScalarType GetDtype(c10::DeviceType device_type) {
#if MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(device_type);
#else
  return device_type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                             : at::autocast::get_autocast_gpu_dtype();
#endif
}

void Set(c10::DeviceType device_type, bool enabled, c10::ScalarType dtype) {
#if MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(device_type, dtype);
  at::autocast::set_autocast_enabled(device_type, enabled);
#else
  if (device_type == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  }
#endif
}

}  // namespace

std::string AutocastUnsupportedReason(c10::DeviceType device_type, c10::ScalarType dtype) {
  const bool half = dtype == c10::kHalf;
  switch (device_type) {
    case c10::DeviceType::CUDA:
      return "";
    case c10::DeviceType::CPU:
      if (!half || MPSD_TRAINER_AUTOCAST_BY_DEVICE_TYPE) return "";
      return "fp16 autocast is not available on cpu with LibTorch " TORCH_VERSION
             " (it needs LibTorch >= 2.4); use bf16 or fp32 on cpu";
    case c10::DeviceType::MPS:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
      return "";
#elif TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR == 5
      if (half) return "";
      return "bf16 autocast on mps needs LibTorch >= 2.6; use fp16 or fp32 on mps";
#else
      return "autocast on mps needs LibTorch >= 2.5";
#endif
    default:
      return "autocast is not available on this device";
  }
}

std::optional<c10::ScalarType> CachedAutocastDtype(c10::DeviceType device_type) {
  if (!IsEnabled(device_type) || !at::autocast::is_autocast_cache_enabled()) return std::nullopt;
  return GetDtype(device_type);
}

AutocastGuard::AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype, bool cache_enabled)
    : device_type_(device_type) {
  previous_enabled_ = IsEnabled(device_type_);
  previous_dtype_ = GetDtype(device_type_);
  previous_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(cache_enabled);
  Set(device_type_, true, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  Set(device_type_, previous_enabled_, previous_dtype_);
  at::autocast::set_autocast_cache_enabled(previous_cache_enabled_);
}

}  // namespace mpsd::trainer::compat
