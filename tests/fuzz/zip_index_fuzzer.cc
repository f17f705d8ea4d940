// libFuzzer target: the zip table of contents a checkpoint's validation reads first
// (trainer/zip_index.h). Any bytes give entries or an error; none crashes, and what is returned
// never exceeds what the central directory limit allows to be read.
#include <cstdint>
#include <cstdlib>

#include "tests/fuzz/fuzz_file.h"
#include "trainer/zip_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpsd::fuzz::WriteScratchFile("checkpoint.pt", data, size);
  constexpr uint64_t kLimit = 4096;  // small, so that the over-limit path is reached too
  absl::StatusOr<std::vector<mpsd::trainer::ZipEntry>> index =
      mpsd::trainer::ReadZipIndex(path, kLimit);
  if (index.ok()) {
    // Each entry took at least its 46-byte header and its name out of the directory.
    uint64_t bytes = 0;
    for (const mpsd::trainer::ZipEntry& entry : *index) bytes += 46 + entry.name.size();
    if (bytes > kLimit || bytes > size) std::abort();
  }
  return 0;
}
