// The decoded form of an image_folder split: uint8 pixels [N, C, H, W] and int64 labels [N],
// decoded once in parallel on the CPU cores and kept in a cache file under the daemon's state
// dir, so that the next job on the same folder maps the file instead of decoding again.
// Torch-free; internal to trainer/.
//
// Cache file (machine-local, native byte order), <cache_dir>/image_folder-<name hash>-<split>.u8:
//   bytes 0-4095   header: magic "MPSDIMG1", format version, the SHA-256 key digest, count,
//                  channels, height, width, skipped images, per-channel mean and std of the
//                  pixels scaled to [0, 1];
//   4096…          pixels, count × channels × height × width bytes;
//   then (8-aligned) labels, count × int64.
// The name hash covers the folder's path, the split and the decode options, so a changed folder
// rewrites its own file; the key digest covers also every file's path, size and mtime, so a
// file added, removed, rewritten or touched makes the cache stale. A file appears by rename(2)
// of a finished temporary: a crash leaves no torn cache.
#ifndef MPSD_TRAINER_DATASET_CACHE_H_
#define MPSD_TRAINER_DATASET_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/image_folder.h"

namespace mpsd::trainer {

struct ImageDecodeOptions {
  int height = 0;
  int width = 0;
  int channels = 3;  // 3 (RGB) or 1 (luma)
  // A file that cannot be read or decoded is left out and counted (true) or fails the load.
  bool skip_bad_images = false;
  // Decoding threads; 0 = one per CPU core (std::thread::hardware_concurrency).
  int threads = 0;
};

// One decoded split, memory-mapped from its cache file (or held in anonymous memory when there
// is no cache directory). Immutable; any thread may read it; shared_ptr so that tensors viewing
// its pixels can keep the mapping alive.
class DecodedSplit {
 public:
  ~DecodedSplit();
  DecodedSplit(const DecodedSplit&) = delete;
  DecodedSplit& operator=(const DecodedSplit&) = delete;

  int64_t count() const { return count_; }
  int channels() const { return channels_; }
  int height() const { return height_; }
  int width() const { return width_; }
  int64_t example_bytes() const { return int64_t{channels_} * height_ * width_; }
  // count × channels × height × width bytes, example-major, each example planar [C, H, W].
  const uint8_t* pixels() const { return pixels_; }
  // count labels.
  const int64_t* labels() const { return labels_; }
  // Per-channel mean and (population) standard deviation of the pixels / 255.
  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& std() const { return std_; }
  // Files left out (on_bad_image: skip), and the first few of their errors for the log.
  int64_t skipped() const { return skipped_; }
  const std::vector<std::string>& skipped_errors() const { return skipped_errors_; }
  // The cache file ("" when decoded without a cache directory) and whether it was reused.
  const std::string& cache_path() const { return cache_path_; }
  bool reused() const { return reused_; }
  // Decoding this time: seconds of wall time and the threads used (0 and 0 when reused).
  double decode_seconds() const { return decode_seconds_; }
  int decode_threads() const { return decode_threads_; }

 private:
  friend class DecodedSplitBuilder;
  DecodedSplit() = default;

  void* mapping_ = nullptr;  // mmap'd region (file or anonymous)
  size_t mapping_bytes_ = 0;
  const uint8_t* pixels_ = nullptr;
  const int64_t* labels_ = nullptr;
  int64_t count_ = 0;
  int channels_ = 0, height_ = 0, width_ = 0;
  std::vector<double> mean_, std_;
  int64_t skipped_ = 0;
  std::vector<std::string> skipped_errors_;
  std::string cache_path_;
  bool reused_ = false;
  double decode_seconds_ = 0;
  int decode_threads_ = 0;
};

// The decoded form of `split` (one split of `listing`): the cache file under `cache_dir` when
// its key matches, else decoded now (in parallel, with options.threads threads) and written
// there (`cache_dir` is created, mode 0700, when missing); "" = decode into memory, no cache.
// A cache file that is stale, of another format version or damaged is replaced. Errors:
//   INVALID_ARGUMENT  the split has no image left (every file bad and skipped);
//   DATA_LOSS / errno codes, naming the file, for a file that cannot be read or decoded when
//                     skip_bad_images is false (the first such file in the split's order among
//                     those tried);
//   INTERNAL / errno codes naming the cache file when it cannot be written.
// Thread-safe for different caches; two processes writing one cache both succeed (the last
// rename wins, with identical contents).
absl::StatusOr<std::shared_ptr<const DecodedSplit>> LoadDecodedSplit(
    const ImageFolderListing& listing, const ImageFolderSplit& split,
    const ImageDecodeOptions& options, const std::string& cache_dir);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_DATASET_CACHE_H_
