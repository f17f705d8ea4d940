#include "api/tensorboard/crc32c.h"

#if MPSD_CRC32C_ABSL
#include "absl/crc/crc32c.h"
#else
#include "generic_crc.h"  // crcutil (pkg-config libcrcutil puts include/crcutil on the path)
#endif

namespace mpsd::tensorboard {
namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8;

#if !MPSD_CRC32C_ABSL
// crcutil's portable table-driven implementation (its SSE4.2 class needs -msse4.2 at every
// includer and exists only on x86). 64-bit words, 4-way interleaved, as crcutil's own
// interface.cc picks for amd64; the .so holds the tuned CrcMultiword for this instantiation.
using Crc = crcutil::GenericCrc<uint64_t, uint64_t, uint64_t, 4>;
constexpr uint64_t kCastagnoliReflected = 0x82f63b78;

const Crc& Tables() {
  static const Crc* const crc = new Crc(kCastagnoliReflected, /*degree=*/32, /*canonical=*/true);
  return *crc;
}
#endif

}  // namespace

uint32_t Crc32c(absl::string_view data) {
#if MPSD_CRC32C_ABSL
  return static_cast<uint32_t>(absl::ComputeCrc32c(data));
#else
  return static_cast<uint32_t>(Tables().CrcDefault(data.data(), data.size(), 0));
#endif
}

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace mpsd::tensorboard
