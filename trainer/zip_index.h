// The table of contents of a zip archive (the container of PyTorch's and mpsd's .pt files),
// read with a bound on the bytes read, so that checking a file someone named costs a few
// reads whatever the file holds. Torch-free (mpsd_trainer_base); fuzzed by
// tests/fuzz/zip_index_fuzzer.cc.
//
// Why our own reader: caffe2::serialize::PyTorchStreamReader (LibTorch's miniz) reads the whole
// central directory and allocates each record's uncompressed size as the directory states it,
// with no limit; LibTorch 1.13 offers no way to ask a record's size first. Format: PKWARE's
// APPNOTE.TXT 6.3.x, sections 4.3.12 (central directory header), 4.3.14-4.3.16 (Zip64 end of
// central directory record and locator, end of central directory record), 4.5.3 (the Zip64
// extended information extra field).
#ifndef MPSD_TRAINER_ZIP_INDEX_H_
#define MPSD_TRAINER_ZIP_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {

// One file of the archive as its central directory describes it (nothing is checked against
// the local headers or the data). A plain value.
struct ZipEntry {
  // The entry's path inside the archive, as stored (bytes; not checked to be UTF-8).
  std::string name;
  // 0 stored, 8 deflate (APPNOTE 4.4.5).
  int method = 0;
  // Bytes, from the Zip64 extra field where the 32-bit field says 0xFFFFFFFF.
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
};

// The largest central directory ReadZipIndex reads, bytes (1 MiB: an mpsd checkpoint's has
// three entries of under 100 bytes; a torch.save archive one per tensor).
inline constexpr uint64_t kMaxZipCentralDirectoryBytes = uint64_t{1} << 20;

// The entries of the zip archive at `path`, in directory order. Reads at most the last 64 KiB +
// 42 bytes (the end records) and the central directory, which must be at most
// `max_central_directory_bytes`. Errors (the message does not name the file; the caller adds
// it): NOT_FOUND for a file that cannot be opened; INVALID_ARGUMENT for no end of central
// directory record (not a zip archive, or cut short), a directory or entry that lies outside
// the file, a multi-disk archive; OUT_OF_RANGE for a directory over the limit (the message
// gives both sizes). Opens and closes the file itself; keeps nothing. Thread-safe.
absl::StatusOr<std::vector<ZipEntry>> ReadZipIndex(
    const std::string& path, uint64_t max_central_directory_bytes = kMaxZipCentralDirectoryBytes);

// The same for an archive already read into memory (`bytes`, borrowed for the call), so that a
// caller checks exactly the bytes it then parses; never NOT_FOUND.
absl::StatusOr<std::vector<ZipEntry>> ReadZipIndexOfBytes(
    absl::string_view bytes, uint64_t max_central_directory_bytes = kMaxZipCentralDirectoryBytes);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_ZIP_INDEX_H_
