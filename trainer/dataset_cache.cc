// Parallel decoding of an image_folder split straight into a memory-mapped cache file, and
// reading that file back.
#include "trainer/dataset_cache.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/image_decode.h"
#include "trainer/scoped_fd.h"

namespace mpsd::trainer {
namespace {

constexpr char kMagic[8] = {'M', 'P', 'S', 'D', 'I', 'M', 'G', '1'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 4096;
constexpr int kMaxSkippedErrors = 5;  // kept for the log

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint8_t digest[32];
  int64_t count;
  int32_t channels, height, width, reserved;
  int64_t skipped;
  double mean[3];
  double std[3];
};
static_assert(sizeof(Header) <= kHeaderBytes);

size_t LabelsOffset(int64_t count, int64_t example_bytes) {
  const size_t end = kHeaderBytes + static_cast<size_t>(count * example_bytes);
  return (end + 7) / 8 * 8;
}

size_t FileBytes(int64_t count, int64_t example_bytes) {
  return LabelsOffset(count, example_bytes) + static_cast<size_t>(count) * sizeof(int64_t);
}

// SHA-256 of `text` (OpenSSL's EVP interface).
std::string Sha256(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string OptionsText(const ImageDecodeOptions& options) {
  return absl::StrFormat(
      "format %d; size %dx%d; channels %d; resample pillow-bilinear; "
      "bad images %s\n",
      kFormatVersion, options.height, options.width, options.channels,
      options.skip_bad_images ? "skipped" : "fail");
}

// Names the cache file: the same folder, split and options always map to the same file.
std::string CachePath(const std::string& cache_dir, const ImageFolderSplit& split,
                      const ImageDecodeOptions& options) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(split.dir, ec);
  const std::string name = Sha256(absl::StrCat(
      ec ? split.dir : absolute.lexically_normal().string(), "\n", OptionsText(options)));
  return absl::StrCat(cache_dir, "/image_folder-", absl::BytesToHexString(name.substr(0, 12)), "-",
                      std::filesystem::path(split.dir).filename().string(), ".u8");
}

// What the cache must have been decoded from: the options, the classes and every file's path,
// label, size and mtime.
std::string KeyDigest(const ImageFolderListing& listing, const ImageFolderSplit& split,
                      const ImageDecodeOptions& options) {
  std::string key = OptionsText(options);
  for (const std::string& name : listing.classes) absl::StrAppend(&key, "class ", name, "\n");
  for (const ImageFile& f : split.files) {
    absl::StrAppend(&key, f.path, "\t", f.label, "\t", f.size_bytes, "\t", f.mtime_ns, "\n");
  }
  return Sha256(key);
}

}  // namespace

DecodedSplit::~DecodedSplit() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

// Builds DecodedSplits: maps an existing cache file, or decodes into a new one.
class DecodedSplitBuilder {
 public:
  DecodedSplitBuilder(const ImageFolderSplit& split, const ImageDecodeOptions& options,
                      std::string digest)
      : split_(split), options_(options), digest_(std::move(digest)) {}

  // The cache at `path` if it is valid for this split; nullptr when missing, stale or damaged.
  std::shared_ptr<DecodedSplit> TryMap(const std::string& path) const;
  // Decodes into `path` (a temporary next to it, renamed), or into memory when `path` is "".
  absl::StatusOr<std::shared_ptr<DecodedSplit>> Decode(const std::string& path) const;

 private:
  struct Stats {  // per decoding thread
    uint64_t sum[3] = {0, 0, 0};
    uint64_t sum_squares[3] = {0, 0, 0};
  };
  struct Failure {
    size_t index;
    absl::Status status;
  };

  // Decodes every file into `pixels` (row i = file i), marking `bad`; runs `threads` threads.
  absl::Status DecodeAll(uint8_t* pixels, std::vector<char>& bad, std::vector<Failure>& failures,
                         Stats& total, int threads) const;
  static void FillHeader(Header& header, const DecodedSplit& split, const std::string& digest);

  const ImageFolderSplit& split_;
  const ImageDecodeOptions& options_;
  const std::string digest_;
};

std::shared_ptr<DecodedSplit> DecodedSplitBuilder::TryMap(const std::string& path) const {
  const ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return nullptr;
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) < kHeaderBytes) return nullptr;
  Header header;
  if (pread(fd.get(), &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    return nullptr;
  }
  const int64_t example_bytes = int64_t{header.channels} * header.height * header.width;
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0 || header.version != kFormatVersion ||
      std::memcmp(header.digest, digest_.data(), sizeof(header.digest)) != 0 ||
      header.channels != options_.channels || header.height != options_.height ||
      header.width != options_.width || header.count <= 0 ||
      static_cast<size_t>(st.st_size) != FileBytes(header.count, example_bytes)) {
    return nullptr;
  }
  void* mapping = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (mapping == MAP_FAILED) return nullptr;
  std::shared_ptr<DecodedSplit> out(new DecodedSplit());
  out->mapping_ = mapping;
  out->mapping_bytes_ = static_cast<size_t>(st.st_size);
  out->count_ = header.count;
  out->channels_ = header.channels;
  out->height_ = header.height;
  out->width_ = header.width;
  out->pixels_ = static_cast<const uint8_t*>(mapping) + kHeaderBytes;
  out->labels_ = reinterpret_cast<const int64_t*>(static_cast<const uint8_t*>(mapping) +
                                                  LabelsOffset(header.count, example_bytes));
  out->mean_.assign(header.mean, header.mean + header.channels);
  out->std_.assign(header.std, header.std + header.channels);
  out->skipped_ = header.skipped;
  out->cache_path_ = path;
  out->reused_ = true;
  return out;
}

absl::Status DecodedSplitBuilder::DecodeAll(uint8_t* pixels, std::vector<char>& bad,
                                            std::vector<Failure>& failures, Stats& total,
                                            int threads) const {
  const size_t n = split_.files.size();
  const int64_t example_bytes = int64_t{options_.channels} * options_.height * options_.width;
  const size_t plane = static_cast<size_t>(options_.height) * options_.width;
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;  // guards failures and total
  auto worker = [&] {
    Stats stats;
    for (size_t i = next.fetch_add(1); i < n && !stop.load(); i = next.fetch_add(1)) {
      const ImageFile& file = split_.files[i];
      absl::StatusOr<RgbImage> image =
          file.size_bytes < 0 ? absl::DataLossError(absl::StrCat(file.path, ": ", file.error))
                              : ReadImageFile(file.path);
      if (!image.ok()) {
        bad[i] = 1;
        const std::lock_guard<std::mutex> lock(mu);
        failures.push_back({i, image.status()});
        if (!options_.skip_bad_images) stop.store(true);
        continue;
      }
      uint8_t* row = pixels + i * static_cast<size_t>(example_bytes);
      ResizeInto(*image, options_.height, options_.width, options_.channels, row);
      for (int c = 0; c < options_.channels; ++c) {
        for (size_t p = 0; p < plane; ++p) {
          const uint32_t v = row[c * plane + p];
          stats.sum[c] += v;
          stats.sum_squares[c] += v * v;
        }
      }
    }
    const std::lock_guard<std::mutex> lock(mu);
    for (int c = 0; c < 3; ++c) {
      total.sum[c] += stats.sum[c];
      total.sum_squares[c] += stats.sum_squares[c];
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  std::sort(failures.begin(), failures.end(),
            [](const Failure& a, const Failure& b) { return a.index < b.index; });
  if (!options_.skip_bad_images && !failures.empty()) return failures.front().status;
  return absl::OkStatus();
}

void DecodedSplitBuilder::FillHeader(Header& header, const DecodedSplit& split,
                                     const std::string& digest) {
  std::memset(&header, 0, sizeof(header));
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kFormatVersion;
  header.header_bytes = kHeaderBytes;
  std::memcpy(header.digest, digest.data(), sizeof(header.digest));
  header.count = split.count_;
  header.channels = split.channels_;
  header.height = split.height_;
  header.width = split.width_;
  header.skipped = split.skipped_;
  for (int c = 0; c < split.channels_; ++c) {
    header.mean[c] = split.mean_[c];
    header.std[c] = split.std_[c];
  }
}

absl::StatusOr<std::shared_ptr<DecodedSplit>> DecodedSplitBuilder::Decode(
    const std::string& path) const {
  const int64_t n = static_cast<int64_t>(split_.files.size());
  const int64_t example_bytes = int64_t{options_.channels} * options_.height * options_.width;
  const size_t capacity = FileBytes(n, example_bytes);
  const std::string temporary = path.empty() ? "" : absl::StrCat(path, ".tmp.", getpid());
  const ScopedFd fd(
      path.empty() ? -1 : open(temporary.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!path.empty()) {
    if (fd.get() < 0) return absl::ErrnoToStatus(errno, absl::StrCat(temporary, ": cannot create"));
    if (ftruncate(fd.get(), static_cast<off_t>(capacity)) != 0) {
      const int error = errno;
      unlink(temporary.c_str());
      return absl::ErrnoToStatus(error, absl::StrCat(temporary, ": cannot size"));
    }
  }
  void* mapping =
      path.empty()
          ? mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
          : mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (mapping == MAP_FAILED) {
    const int error = errno;
    if (!path.empty()) unlink(temporary.c_str());
    return absl::ErrnoToStatus(
        error, absl::StrCat(path.empty() ? "decode buffer" : temporary, ": cannot map"));
  }
  std::shared_ptr<DecodedSplit> out(new DecodedSplit());
  out->mapping_ = mapping;
  out->mapping_bytes_ = capacity;
  auto fail = [&](absl::Status status) {
    if (!path.empty()) unlink(temporary.c_str());
    return status;
  };

  uint8_t* pixels = static_cast<uint8_t*>(mapping) + kHeaderBytes;
  std::vector<char> bad(n, 0);
  std::vector<Failure> failures;
  Stats stats;
  const int threads = options_.threads > 0
                          ? options_.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = DecodeAll(pixels, bad, failures, stats, threads); !s.ok()) return fail(s);
  out->decode_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out->decode_threads_ = threads;

  // Close the gaps the skipped files left, then write the labels after the kept rows.
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    if (bad[i]) continue;
    const size_t kept = labels.size();
    if (kept != static_cast<size_t>(i)) {
      std::memmove(pixels + kept * example_bytes, pixels + i * example_bytes, example_bytes);
    }
    labels.push_back(split_.files[i].label);
  }
  for (const Failure& f : failures) {
    if (out->skipped_errors_.size() < kMaxSkippedErrors) {
      out->skipped_errors_.emplace_back(f.status.message());
    }
  }
  out->skipped_ = n - static_cast<int64_t>(labels.size());
  if (labels.empty()) {
    return fail(absl::InvalidArgumentError(absl::StrFormat(
        "%s: none of its %d image files could be decoded (on_bad_image: skip left out all; "
        "first: %s)",
        split_.dir, n, out->skipped_errors_.empty() ? "" : out->skipped_errors_.front())));
  }
  const int64_t count = static_cast<int64_t>(labels.size());
  out->count_ = count;
  out->channels_ = options_.channels;
  out->height_ = options_.height;
  out->width_ = options_.width;
  const double values = static_cast<double>(count) * options_.height * options_.width;
  for (int c = 0; c < options_.channels; ++c) {
    const double mean = stats.sum[c] / values / 255.0;
    const double mean_squares = stats.sum_squares[c] / values / (255.0 * 255.0);
    out->mean_.push_back(mean);
    out->std_.push_back(std::sqrt(std::max(mean_squares - mean * mean, 0.0)));
  }
  uint8_t* base = static_cast<uint8_t*>(mapping);
  std::memcpy(base + LabelsOffset(count, example_bytes), labels.data(),
              labels.size() * sizeof(int64_t));
  Header header;
  FillHeader(header, *out, digest_);
  std::memcpy(base, &header, sizeof(header));
  out->pixels_ = pixels;
  out->labels_ = reinterpret_cast<const int64_t*>(base + LabelsOffset(count, example_bytes));
  if (path.empty()) return out;

  // The file shrinks to what was kept; the mapping stays valid for the pages before the end.
  const size_t size = FileBytes(count, example_bytes);
  if (msync(mapping, size, MS_SYNC) != 0 || ftruncate(fd.get(), static_cast<off_t>(size)) != 0 ||
      fsync(fd.get()) != 0) {
    return fail(absl::ErrnoToStatus(errno, absl::StrCat(temporary, ": cannot write")));
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    return fail(absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot rename into place")));
  }
  out->cache_path_ = path;
  return out;
}

absl::StatusOr<std::shared_ptr<const DecodedSplit>> LoadDecodedSplit(
    const ImageFolderListing& listing, const ImageFolderSplit& split,
    const ImageDecodeOptions& options, const std::string& cache_dir) {
  DecodedSplitBuilder builder(split, options, KeyDigest(listing, split, options));
  std::string path;
  if (!cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat(cache_dir, ": cannot create: ", ec.message()));
    }
    std::filesystem::permissions(cache_dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace, ec);
    path = CachePath(cache_dir, split, options);
    if (std::shared_ptr<DecodedSplit> cached = builder.TryMap(path)) return cached;
  }
  absl::StatusOr<std::shared_ptr<DecodedSplit>> decoded = builder.Decode(path);
  if (!decoded.ok()) return decoded.status();
  return std::shared_ptr<const DecodedSplit>(*std::move(decoded));
}

}  // namespace mpsd::trainer
