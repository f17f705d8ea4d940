#include "api/input_limits.h"

#include "absl/strings/str_cat.h"

namespace mpsd::api {

absl::Status CheckInputLimits(const InputLimits& limits, absl::string_view where) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  constexpr int64_t kTiB = int64_t{1} << 40;
  const struct {
    const char* key;
    int64_t value;
    int64_t low;
    int64_t high;
  } bounds[] = {{"max_file_bytes", limits.max_file_bytes, kMiB, kTiB},
                {"max_unpacked_bytes", limits.max_unpacked_bytes, kMiB, kTiB},
                {"max_image_pixels", limits.max_image_pixels, 1, int64_t{1} << 32}};
  for (const auto& bound : bounds) {
    if (bound.value < bound.low || bound.value > bound.high) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".", bound.key, ": must be in [",
                                                     bound.low, ", ", bound.high, "], got ",
                                                     bound.value));
    }
  }
  return absl::OkStatus();
}

}  // namespace mpsd::api
