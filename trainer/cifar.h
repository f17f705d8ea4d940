// Reader for the binary version of CIFAR-10 (https://www.cs.toronto.edu/~kriz/cifar.html):
// data_batch_1.bin … data_batch_5.bin (training) and test_batch.bin (test), each a sequence of
// 3,073-byte records: one label byte (0-9), then 1,024 bytes each of red, green and blue, each
// plane a row-major 32×32 image. Torch-free.
#ifndef MPSD_TRAINER_CIFAR_H_
#define MPSD_TRAINER_CIFAR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mpsd::trainer {

inline constexpr int64_t kCifarImageBytes = 3 * 32 * 32;               // 3,072
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;     // 3,073
inline constexpr int64_t kCifar100RecordBytes = 2 + kCifarImageBytes;  // coarse + fine label
inline constexpr int kCifarClasses = 10;

enum class CifarSplitKind { kTrain, kTest };

// The file names of a split, in reading order: data_batch_1.bin … data_batch_5.bin, or
// test_batch.bin.
std::vector<std::string> CifarFileNames(CifarSplitKind split);

// Records exactly as they are in the files: `count` records of kCifarRecordBytes each, byte 0
// the label, bytes 1..3072 the image as [3, 32, 32] uint8 (R, G, B planes, row-major). The
// caller moves them to the device as they are and splits label from image there.
struct CifarRecords {
  int64_t count = 0;
  std::vector<uint8_t> bytes;  // count × kCifarRecordBytes
  uint8_t label(int64_t i) const { return bytes[static_cast<size_t>(i * kCifarRecordBytes)]; }
  const uint8_t* image(int64_t i) const {
    return bytes.data() + static_cast<size_t>(i * kCifarRecordBytes + 1);
  }
};

// Checks without reading them that `root` is a directory holding the six files of both splits,
// each a regular file whose size is a positive multiple of 3,073 bytes (any number of records,
// not only 10,000). Safe to call from any thread. Every error names the directory or the file:
//   NOT_FOUND           the directory does not exist or is not a directory; a file is missing
//                       ("<root>/data_batch_3.bin: no such file; a CIFAR-10 root holds …");
//   FAILED_PRECONDITION a file is a directory or another non-regular file;
//   DATA_LOSS           a file is empty, or its size is not a multiple of 3,073 (saying when it
//                       is a multiple of 3,074: CIFAR-100's binary format, 2 label bytes);
//   other codes         from errno when a file cannot be examined (PERMISSION_DENIED…).
absl::Status CheckCifarFiles(const std::string& root);

// Reads the first `limit` records (0 = all) of a split's files under `root`, in file order, and
// reads no file past what it keeps. Every file of the split is checked as CheckCifarFiles does
// before any is read. Never returns partial data. Safe to call from any thread. Errors: those of
// CheckCifarFiles; DATA_LOSS naming the file for a label >= 10 ("label 12 at record 37 (byte
// offset 113,701), expected 0 to 9") or a file that got shorter while it was read;
// INVALID_ARGUMENT for limit < 0; errno codes when a file cannot be opened or read.
absl::StatusOr<CifarRecords> ReadCifarSplit(const std::string& root, CifarSplitKind split,
                                            int64_t limit);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_CIFAR_H_
