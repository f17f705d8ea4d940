// libFuzzer target: IDX files (trainer/idx.h), plain and gzip. The first input byte picks the
// name (bit 0: ".gz") and how many items to read (its upper bits; 0 = all), the rest is the
// file. Any bytes give an array or an error naming the file; none crashes or over-allocates.
#include <cstdint>
#include <cstdlib>

#include "tests/fuzz/fuzz_file.h"
#include "trainer/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool gzip = (data[0] & 1) != 0;
  const int64_t max_items = data[0] >> 1;
  const std::string path = mpsd::fuzz::WriteScratchFile(
      gzip ? "images-idx3-ubyte.gz" : "images-idx3-ubyte", data + 1, size - 1);
  absl::StatusOr<mpsd::trainer::IdxArray> array = mpsd::trainer::ReadIdxFile(path, max_items);
  if (array.ok()) {
    // The promise of the header: exactly the product of dims bytes, dims[0] at most max_items.
    int64_t bytes = 1;
    for (int64_t dim : array->dims) bytes *= dim;
    if (array->dims.empty() || static_cast<size_t>(bytes) != array->data.size()) std::abort();
    if (max_items > 0 && array->dims[0] > max_items) std::abort();
  }
  return 0;
}
