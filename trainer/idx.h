// Reader for the IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
// a big-endian header (magic 0x0000 08 NN: unsigned-byte data, NN dimensions), NN big-endian
// uint32 sizes, then the bytes. Files may be gzip-compressed when named *.gz. Torch-free.
#ifndef MPSD_TRAINER_IDX_H_
#define MPSD_TRAINER_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mpsd::trainer {

// One IDX array of unsigned bytes, e.g. images dims {N, 28, 28} or labels dims {N}.
struct IdxArray {
  std::vector<int64_t> dims;
  // Row-major, exactly the product of dims bytes.
  std::vector<uint8_t> data;
};

// Reads a whole IDX file of unsigned bytes (type code 0x08), decompressing it when the name
// ends in ".gz" (gzip only; several concatenated gzip members read as one stream). Reads at
// most `max_items` entries of the first dimension (0, or more than the file holds = all); the
// returned dims[0] is the number read. A subset decodes only what it returns, so a .gz file is
// checked only that far, while an uncompressed file's size is always checked in full. Never
// returns partial data. Safe to call from any thread. Every error names the file:
//   NOT_FOUND           the file does not exist;
//   DATA_LOSS           bad magic (says so when the bytes are gzip but the name is not .gz, a
//                       .gz name holds no gzip, or the magic looks byte-swapped), a type code
//                       other than unsigned byte, 0 or more than 4 dimensions, a zero or absurd
//                       dimension (data over 4 GiB), a header or body shorter than it declares
//                       ("expected N bytes of data after the 16-byte header, got M"), bytes
//                       beyond the data (strict: "N bytes beyond the data"), corrupt gzip;
//   FAILED_PRECONDITION the path is a directory or another non-regular file;
//   INVALID_ARGUMENT    max_items < 0;
//   other codes         from errno when the file cannot be opened or read (PERMISSION_DENIED…).
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int64_t max_items = 0);

// Returns root/name if it exists, else root/name.gz if that exists, else NOT_FOUND naming both;
// FAILED_PRECONDITION "PATH: not a regular file, expected an IDX file" when the one found is not
// a regular file after following symbolic links (a FIFO would block whoever opens it). Only
// stat()s. An empty root means the current directory.
absl::StatusOr<std::string> FindIdxFile(const std::string& root, const std::string& name);

// Images and their labels read as one split, e.g. Fashion-MNIST's 60,000 training examples.
struct IdxSplit {
  IdxArray images;  // dims {N, H, W}
  IdxArray labels;  // dims {N}, every value < num_classes
};

// Reads `<prefix>-images-idx3-ubyte[.gz]` and `<prefix>-labels-idx1-ubyte[.gz]` under root
// (prefix "train" or "t10k"; each found as FindIdxFile does), keeping the first `limit`
// examples (0 = all). Both headers are checked before either body is decoded. Errors name the
// file: the above, plus DATA_LOSS for images that are not 3-dimensional, labels not
// 1-dimensional, a count mismatch between the two headers, whatever the limit ("60000 images
// in X but 59999 labels in Y"), and a kept label >= num_classes ("label 10 at index 17 in Y,
// expected < 10"); INVALID_ARGUMENT for limit < 0 or num_classes outside 1..256.
absl::StatusOr<IdxSplit> ReadIdxSplit(const std::string& root, const std::string& prefix,
                                      int64_t limit, int num_classes);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_IDX_H_
