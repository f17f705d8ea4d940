// Writes CIFAR-10 binary files for tests: records whose label and pixels follow from their index,
// so a test can say which bytes it expects back. Header-only, torch-free.
#ifndef MPSD_TESTS_TRAINER_CIFAR_FILES_H_
#define MPSD_TESTS_TRAINER_CIFAR_FILES_H_

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace mpsd::trainer::testing {

inline constexpr int64_t kRecordBytes = 3073;

// Record `index` of a test data set: label index % 10, pixel j = (index × 7 + j × 13) mod 256.
inline std::vector<uint8_t> MakeRecord(int64_t index) {
  std::vector<uint8_t> record(kRecordBytes);
  record[0] = static_cast<uint8_t>(index % 10);
  for (int64_t j = 0; j < kRecordBytes - 1; ++j) {
    record[j + 1] = static_cast<uint8_t>((index * 7 + j * 13) % 256);
  }
  return record;
}

inline void WriteBytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Records [first, first + count) of the test data set, concatenated.
inline std::vector<uint8_t> MakeRecords(int64_t first, int64_t count) {
  std::vector<uint8_t> bytes;
  for (int64_t i = first; i < first + count; ++i) {
    const std::vector<uint8_t> record = MakeRecord(i);
    bytes.insert(bytes.end(), record.begin(), record.end());
  }
  return bytes;
}

// Writes data_batch_1.bin … data_batch_5.bin with `per_train_file` records each (the training
// set's records 0, 1, 2, … in file order) and test_batch.bin with `test` records (numbered from
// 1,000,000 so that they differ from the training records).
inline void WriteCifarRoot(const std::filesystem::path& root, int64_t per_train_file,
                           int64_t test) {
  std::filesystem::create_directories(root);
  for (int file = 0; file < 5; ++file) {
    WriteBytes(root / ("data_batch_" + std::to_string(file + 1) + ".bin"),
               MakeRecords(file * per_train_file, per_train_file));
  }
  WriteBytes(root / "test_batch.bin", MakeRecords(1000000, test));
}

}  // namespace mpsd::trainer::testing

#endif  // MPSD_TESTS_TRAINER_CIFAR_FILES_H_
