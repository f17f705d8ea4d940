// CRC-32C (Castagnoli), as TFRecord frames use it, computed by abseil's absl/crc where it has one
// (macOS/Homebrew), else by crcutil (Debian libcrcutil-dev).
#ifndef MPSD_API_TENSORBOARD_CRC32C_H_
#define MPSD_API_TENSORBOARD_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace mpsd::tensorboard {

// CRC-32C of `data` (polynomial 0x1EDC6F41 reflected, initial value and final xor 0xFFFFFFFF):
// Crc32c("123456789") == 0xE3069283. Thread-safe (the tables are built once).
uint32_t Crc32c(absl::string_view data);

// TFRecord's mask (tensorflow/core/lib/hash/crc32c.h, Mask): rotate right by 15 bits, add
// 0xA282EAD8, so that a CRC of data that itself holds CRCs is not degenerate.
uint32_t MaskCrc(uint32_t crc);
uint32_t UnmaskCrc(uint32_t masked);

}  // namespace mpsd::tensorboard

#endif  // MPSD_API_TENSORBOARD_CRC32C_H_
