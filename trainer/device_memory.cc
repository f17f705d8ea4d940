// Device memory by name: trainer/device.h behind a torch-free interface, and the warm-up that
// defines the executor's baseline.
#include "trainer/device_memory.h"

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "trainer/device.h"

namespace mpsd::trainer {
namespace {

// Runs `fn`, converting what LibTorch throws.
template <typename Fn>
absl::StatusOr<api::MemoryFigures> Guarded(const std::string& device, Fn&& fn) {
  try {
    return fn(torch::Device(device));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("device ", device, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("device \"", device, "\": ", e.what()));
  }
}

}  // namespace

absl::StatusOr<api::MemoryFigures> MeasureBaseline(const std::string& device) {
  return Guarded(device, [](const torch::Device& d) {
    {
      torch::NoGradGuard no_grad;
      const torch::Tensor a = torch::ones({256, 256}, torch::dtype(torch::kFloat32).device(d));
      const torch::Tensor product = torch::matmul(a, a);
      (void)product.sum().item<float>();  // waits for the device
    }
    Synchronize(d);
    EmptyCache(d);
    return ReadMemory(d);
  });
}

}  // namespace mpsd::trainer
