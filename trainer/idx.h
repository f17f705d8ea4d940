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
// ends in ".gz". Reads at most `max_items` entries of the first dimension (0 = all), so a
// subset does not decode the whole file. Every error names the file:
//   NOT_FOUND      the file does not exist;
//   DATA_LOSS      bad magic (says so when the bytes are gzip but the name is not .gz, or the
//                  magic looks byte-swapped), a type code other than unsigned byte, zero or
//                  absurd dimensions, a truncated body ("expected N bytes, got M"), corrupt gzip.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int64_t max_items = 0);

// Returns root/name if it exists, else root/name.gz if that exists, else NOT_FOUND naming both.
absl::StatusOr<std::string> FindIdxFile(const std::string& root, const std::string& name);

// Images and their labels read as one split, e.g. Fashion-MNIST's 60,000 training examples.
struct IdxSplit {
  IdxArray images;  // dims {N, H, W}
  IdxArray labels;  // dims {N}, every value < num_classes
};

// Reads `<prefix>-images-idx3-ubyte[.gz]` and `<prefix>-labels-idx1-ubyte[.gz]` under root
// (prefix "train" or "t10k"), keeping the first `limit` examples (0 = all). Errors name the
// file: the above, plus DATA_LOSS for images that are not 3-dimensional, labels not
// 1-dimensional, a count mismatch between the two files ("60000 images but 59999 labels"),
// and a label >= num_classes ("label 10 at index 17, expected < 10").
absl::StatusOr<IdxSplit> ReadIdxSplit(const std::string& root, const std::string& prefix,
                                      int64_t limit, int num_classes);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_IDX_H_
