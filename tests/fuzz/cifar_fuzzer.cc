// libFuzzer target: CIFAR-10 binary files (trainer/cifar.h). The first input byte is how many
// records to read (0 = all), the rest is test_batch.bin. Any bytes give records or an error
// naming the file; none crashes.
#include <cstdint>
#include <cstdlib>

#include "tests/fuzz/fuzz_file.h"
#include "trainer/cifar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t limit = data[0];
  mpsd::fuzz::WriteScratchFile("test_batch.bin", data + 1, size - 1);
  absl::StatusOr<mpsd::trainer::CifarRecords> records = mpsd::trainer::ReadCifarSplit(
      mpsd::fuzz::ScratchDir(), mpsd::trainer::CifarSplitKind::kTest, limit);
  if (records.ok()) {
    if (records->bytes.size() !=
        static_cast<size_t>(records->count * mpsd::trainer::kCifarRecordBytes)) {
      std::abort();
    }
    if (limit > 0 && records->count > limit) std::abort();
    for (int64_t i = 0; i < records->count; ++i) {
      if (records->label(i) >= mpsd::trainer::kCifarClasses) std::abort();
    }
  }
  return 0;
}
