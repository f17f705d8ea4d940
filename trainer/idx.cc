// IDX reader: a byte source (raw file or gzip stream, decoded with zlib's inflate straight into
// the destination buffer), a header parser that explains every way a header can be wrong, and
// the split reader that checks images against labels.
#include "trainer/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "trainer/input_limits.h"
#include "trainer/scoped_fd.h"

namespace mpsd::trainer {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;
constexpr int kMaxDims = 4;
// Compressed input is read in chunks of this size; small enough that a subset read touches
// little more of the file than it decodes.
constexpr size_t kInputChunkBytes = size_t{128} << 10;
// A gzip body is decoded into a buffer grown in steps from this size, so that a header claiming
// gigabytes in front of a tiny file cannot make us allocate gigabytes.
constexpr size_t kFirstGzipAllocBytes = size_t{64} << 20;
// zlib counts in uInt; stay well inside it.
constexpr size_t kMaxInflateStep = size_t{1} << 30;

// ---- Formatting helpers --------------------------------------------------------------------

std::string DimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// The type codes of the IDX format; only unsigned byte is supported.
const char* TypeName(uint8_t code) {
  switch (code) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "short";
    case 0x0C:
      return "int";
    case 0x0D:
      return "float";
    case 0x0E:
      return "double";
    default:
      return nullptr;
  }
}

absl::Status FileError(absl::StatusCode code, const std::string& path, absl::string_view what) {
  return absl::Status(code, absl::StrCat(path, ": ", what));
}

absl::Status DataLoss(const std::string& path, absl::string_view what) {
  return FileError(absl::StatusCode::kDataLoss, path, what);
}

// ---- Byte sources --------------------------------------------------------------------------

// Reads up to n bytes at the file offset, retrying short reads; returns the count, or -1 with
// errno set.
ssize_t ReadFully(int fd, uint8_t* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, dst + got, std::min(n - got, kMaxInflateStep));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

// The decoded bytes of a file, read front to back.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Fills dst[0, n) and returns n, or returns fewer only where the data ends.
  virtual absl::StatusOr<size_t> Read(uint8_t* dst, size_t n) = 0;
  // "file is 10 bytes" / "file decompresses to 10 bytes", for messages about short data.
  virtual std::string DescribeSize(uint64_t decoded_bytes) const = 0;
};

class RawSource : public ByteSource {
 public:
  RawSource(const std::string& path, int fd) : path_(path), fd_(fd) {}

  absl::StatusOr<size_t> Read(uint8_t* dst, size_t n) override {
    ssize_t got = ReadFully(fd_, dst, n);
    if (got < 0) return absl::ErrnoToStatus(errno, absl::StrCat(path_, ": read failed"));
    return static_cast<size_t>(got);
  }

  std::string DescribeSize(uint64_t decoded_bytes) const override {
    return absl::StrCat("file is ", decoded_bytes, " bytes");
  }

 private:
  const std::string path_;
  const int fd_;  // borrowed
};

// Inflates gzip members (several concatenated members are one stream, as gzip(1) reads them).
class GzipSource : public ByteSource {
 public:
  static absl::StatusOr<std::unique_ptr<GzipSource>> Create(const std::string& path, int fd) {
    auto source = std::unique_ptr<GzipSource>(new GzipSource(path, fd));
    // 16 + MAX_WBITS: gzip wrapper only, with its CRC-32 and length checked at the end.
    if (inflateInit2(&source->strm_, 16 + MAX_WBITS) != Z_OK) {
      return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot start zlib inflate"));
    }
    source->initialised_ = true;
    return source;
  }

  ~GzipSource() override {
    if (initialised_) inflateEnd(&strm_);
  }

  absl::StatusOr<size_t> Read(uint8_t* dst, size_t n) override {
    size_t got = 0;
    while (got < n && !finished_) {
      if (strm_.avail_in == 0 && !input_eof_) {
        if (absl::Status s = FillInput(); !s.ok()) return s;
      }
      const size_t step = std::min(n - got, kMaxInflateStep);
      strm_.next_out = dst + got;
      strm_.avail_out = static_cast<uInt>(step);
      const int ret = inflate(&strm_, Z_NO_FLUSH);
      const size_t produced = step - strm_.avail_out;
      got += produced;
      decoded_ += produced;
      if (ret == Z_STREAM_END) {
        if (absl::Status s = StartNextMember(); !s.ok()) return s;
      } else if (ret == Z_BUF_ERROR) {
        // No progress: the loop above refills input, so only the end of the file gets here.
        if (strm_.avail_in != 0 || !input_eof_) {
          return absl::InternalError(absl::StrCat(path_, ": inflate made no progress"));
        }
        return DataLoss(path_, absl::StrCat("gzip data ends early (the .gz file is truncated) "
                                            "after decompressing ",
                                            decoded_, " bytes"));
      } else if (ret == Z_MEM_ERROR) {
        return absl::ResourceExhaustedError(absl::StrCat(path_, ": out of memory in inflate"));
      } else if (ret != Z_OK) {
        return DataLoss(path_, absl::StrCat("corrupt gzip data (zlib: ",
                                            strm_.msg ? strm_.msg : "unknown error",
                                            ") after decompressing ", decoded_, " bytes"));
      }
    }
    return got;
  }

  std::string DescribeSize(uint64_t decoded_bytes) const override {
    return absl::StrCat("file decompresses to ", decoded_bytes, " bytes");
  }

 private:
  GzipSource(const std::string& path, int fd) : path_(path), fd_(fd), input_(kInputChunkBytes) {
    strm_.zalloc = Z_NULL;
    strm_.zfree = Z_NULL;
    strm_.opaque = Z_NULL;
    strm_.next_in = Z_NULL;
    strm_.avail_in = 0;
  }

  // Appends file bytes after the unread ones, so that a peek can see two bytes across chunks.
  absl::Status FillInput() {
    const size_t kept = strm_.avail_in;
    if (kept > 0 && strm_.next_in != input_.data()) {
      std::copy_n(strm_.next_in, kept, input_.data());
    }
    ssize_t r = ReadFully(fd_, input_.data() + kept, input_.size() - kept);
    if (r < 0) return absl::ErrnoToStatus(errno, absl::StrCat(path_, ": read failed"));
    if (static_cast<size_t>(r) < input_.size() - kept) input_eof_ = true;
    strm_.next_in = input_.data();
    strm_.avail_in = static_cast<uInt>(kept + static_cast<size_t>(r));
    return absl::OkStatus();
  }

  // After the end of a member: finished at end of file, another member, or garbage.
  absl::Status StartNextMember() {
    while (strm_.avail_in < 2 && !input_eof_) {
      if (absl::Status s = FillInput(); !s.ok()) return s;
    }
    if (strm_.avail_in == 0) {
      finished_ = true;
      return absl::OkStatus();
    }
    if (strm_.avail_in < 2 || strm_.next_in[0] != 0x1f || strm_.next_in[1] != 0x8b) {
      return DataLoss(path_,
                      "unexpected bytes after the end of the gzip data (not another gzip "
                      "member starting with 1f 8b)");
    }
    inflateReset(&strm_);
    return absl::OkStatus();
  }

  const std::string path_;
  const int fd_;  // borrowed
  std::vector<uint8_t> input_;
  z_stream strm_;
  bool initialised_ = false;
  bool input_eof_ = false;
  bool finished_ = false;
  uint64_t decoded_ = 0;
};

// ---- The reader ----------------------------------------------------------------------------

// An open IDX file whose header has been checked; Read() then decodes the body once.
class IdxReader {
 public:
  static absl::StatusOr<std::unique_ptr<IdxReader>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  // As in the header: dims[0] is the file's full item count.
  const std::vector<int64_t>& dims() const { return dims_; }

  // Reads the first min(max_items, dims[0]) items (all when max_items is 0). Call once.
  absl::StatusOr<IdxArray> Read(int64_t max_items);

 private:
  IdxReader(std::string path, int fd, bool gzip, uint64_t file_bytes)
      : path_(std::move(path)), fd_(fd), gzip_(gzip), file_bytes_(file_bytes) {}

  absl::Status OpenSource();
  absl::Status ReadHeader();
  absl::Status CheckMagic(const uint8_t magic[4]);
  absl::Status CheckDims();
  absl::Status CheckRawFileSize() const;
  absl::Status CheckNothingBeyond(uint64_t data_bytes);

  std::string DataSizeMismatch(uint64_t got) const {
    return absl::StrCat("expected ", data_bytes_, " bytes of data after the ", header_bytes_,
                        "-byte header, got ", got);
  }

  const std::string path_;
  ScopedFd fd_;
  const bool gzip_;
  const uint64_t file_bytes_;  // on disk, compressed or not
  std::unique_ptr<ByteSource> source_;
  std::vector<int64_t> dims_;
  uint64_t header_bytes_ = 0;
  uint64_t item_bytes_ = 0;  // bytes per entry of the first dimension
  uint64_t data_bytes_ = 0;  // of the whole file
};

absl::StatusOr<std::unique_ptr<IdxReader>> IdxReader::Open(const std::string& path) {
  absl::StatusOr<int> fd = OpenRegularFile(path, "an IDX file");
  if (!fd.ok()) return fd.status();
  ScopedFd owner(*fd);
  struct stat st;
  if (fstat(*fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot stat"));
  const bool gzip = absl::EndsWithIgnoreCase(path, ".gz");
  auto reader = std::unique_ptr<IdxReader>(
      new IdxReader(path, owner.release(), gzip, static_cast<uint64_t>(st.st_size)));
  if (absl::Status s = reader->OpenSource(); !s.ok()) return s;
  if (absl::Status s = reader->ReadHeader(); !s.ok()) return s;
  return reader;
}

// Checks that the name and the first bytes agree about compression, then picks the source.
absl::Status IdxReader::OpenSource() {
  uint8_t lead[4] = {0, 0, 0, 0};
  ssize_t n = pread(fd_.get(), lead, sizeof(lead), 0);
  if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat(path_, ": read failed"));
  const bool gzip_magic = n >= 2 && lead[0] == 0x1f && lead[1] == 0x8b;
  if (gzip_magic && !gzip_) {
    return DataLoss(path_,
                    "looks gzip-compressed (starts with 1f 8b) but is not named .gz; "
                    "name it *.gz or gunzip it");
  }
  if (!gzip_magic && gzip_) {
    if (n == 0) return DataLoss(path_, "is named .gz but is empty, expected gzip data");
    // The file's own bytes are never quoted: the file may be one the caller cannot read.
    return DataLoss(path_,
                    "is named .gz but is not gzip-compressed (expected it to start with "
                    "1f 8b)");
  }
  if (!gzip_) {
    source_ = std::make_unique<RawSource>(path_, fd_.get());
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<GzipSource>> gz = GzipSource::Create(path_, fd_.get());
  if (!gz.ok()) return gz.status();
  source_ = *std::move(gz);
  return absl::OkStatus();
}

absl::Status IdxReader::ReadHeader() {
  uint8_t header[4 + 4 * kMaxDims];
  absl::StatusOr<size_t> got = source_->Read(header, 4);
  if (!got.ok()) return got.status();
  if (*got < 4) {
    return DataLoss(path_, absl::StrCat(source_->DescribeSize(*got),
                                        ", too short for an IDX header (at least 4 bytes)"));
  }
  if (absl::Status s = CheckMagic(header); !s.ok()) return s;
  const int ndim = header[3];
  header_bytes_ = 4 + 4 * static_cast<uint64_t>(ndim);
  got = source_->Read(header + 4, 4 * ndim);
  if (!got.ok()) return got.status();
  if (*got < 4 * static_cast<size_t>(ndim)) {
    return DataLoss(
        path_, absl::StrCat(source_->DescribeSize(4 + *got), ", too short for an IDX header of ",
                            ndim, " dimensions (", header_bytes_, " bytes)"));
  }
  for (int i = 0; i < ndim; ++i) {
    const uint8_t* p = header + 4 + 4 * i;
    dims_.push_back((int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | p[3]);
  }
  if (absl::Status s = CheckDims(); !s.ok()) return s;
  return gzip_ ? absl::OkStatus() : CheckRawFileSize();
}

absl::Status IdxReader::CheckMagic(const uint8_t magic[4]) {
  if (magic[0] != 0 || magic[1] != 0) {
    // Written by a little-endian int32 store: NN 08 00 00.
    if (magic[2] == 0 && magic[3] == 0 && TypeName(magic[1]) != nullptr && magic[0] >= 1 &&
        magic[0] <= kMaxDims) {
      return DataLoss(path_,
                      "magic looks byte-swapped (little-endian, NN 08 00 00), expected "
                      "00 00 08 NN (IDX of unsigned bytes, NN dimensions)");
    }
    // Only the expected magic: quoting the file's first bytes would hand them to whoever named
    // the file (a symlink to /etc/shadow came back as "starts with 72 6f 6f 74").
    return DataLoss(path_,
                    "bad magic, expected 00 00 08 NN (IDX of unsigned bytes, "
                    "NN dimensions)");
  }
  if (magic[2] != kUnsignedByte) {
    const char* name = TypeName(magic[2]);
    return DataLoss(path_, absl::StrFormat("data type 0x%02X (%s) is not supported, expected "
                                           "0x08 unsigned byte",
                                           magic[2], name ? name : "not an IDX type"));
  }
  if (magic[3] == 0 || magic[3] > kMaxDims) {
    return DataLoss(path_, absl::StrCat("header says ", static_cast<int>(magic[3]),
                                        " dimensions, expected 1 to ", kMaxDims));
  }
  return absl::OkStatus();
}

absl::Status IdxReader::CheckDims() {
  // Fashion-MNIST's training images are 47 MB; a header describing more than the executor's
  // executor.max_unpacked_bytes is refused before anything is allocated.
  const uint64_t limit = static_cast<uint64_t>(CurrentInputLimits().max_unpacked_bytes);
  uint64_t bytes = 1;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i] == 0) {
      return DataLoss(path_, absl::StrCat("dimension ", i, " of ", DimsString(dims_),
                                          " is 0, expected at least 1"));
    }
    const uint64_t dim = static_cast<uint64_t>(dims_[i]);
    if (bytes > limit / dim) {
      return DataLoss(path_,
                      absl::StrCat("dimensions ", DimsString(dims_), " describe more than ", limit,
                                   " bytes (executor.max_unpacked_bytes); "
                                   "the header is probably corrupt"));
    }
    bytes *= dim;  // <= limit: no overflow
  }
  data_bytes_ = bytes;
  item_bytes_ = bytes / static_cast<uint64_t>(dims_[0]);
  return absl::OkStatus();
}

// An uncompressed file's size is known up front, so both truncation and trailing bytes are
// reported before anything is read.
absl::Status IdxReader::CheckRawFileSize() const {
  const uint64_t body = file_bytes_ - header_bytes_;  // ReadHeader() read header_bytes_
  if (body < data_bytes_) return DataLoss(path_, DataSizeMismatch(body));
  if (body > data_bytes_) {
    return DataLoss(path_, absl::StrCat(body - data_bytes_,
                                        " bytes beyond the data: ", DataSizeMismatch(body)));
  }
  return absl::OkStatus();
}

// Decodes to the end (which also checks gzip's CRC) and counts what follows the data, up to
// kMaxCountedExtraBytes: a small .gz of trailing zeros that inflates to gigabytes is refused
// after that much, not inflated whole.
absl::Status IdxReader::CheckNothingBeyond(uint64_t data_bytes) {
  constexpr uint64_t kMaxCountedExtraBytes = uint64_t{1} << 20;
  std::vector<uint8_t> scratch(kInputChunkBytes);
  uint64_t extra = 0;
  while (extra <= kMaxCountedExtraBytes) {
    absl::StatusOr<size_t> got = source_->Read(scratch.data(), scratch.size());
    if (!got.ok()) return got.status();
    extra += *got;
    if (*got < scratch.size()) break;
  }
  if (extra == 0) return absl::OkStatus();
  if (extra > kMaxCountedExtraBytes) {
    return DataLoss(
        path_, absl::StrCat("at least ", extra, " bytes beyond the data (counting stopped there): ",
                            DataSizeMismatch(data_bytes + extra)));
  }
  return DataLoss(
      path_, absl::StrCat(extra, " bytes beyond the data: ", DataSizeMismatch(data_bytes + extra)));
}

absl::StatusOr<IdxArray> IdxReader::Read(int64_t max_items) {
  const bool subset = max_items > 0 && max_items < dims_[0];
  const int64_t items = subset ? max_items : dims_[0];
  const size_t want = static_cast<size_t>(items * item_bytes_);
  IdxArray out;
  // A raw file's size was checked, so allocate once; a gzip body grows as it is decoded.
  size_t have = 0;
  size_t capacity = gzip_ ? std::min(want, kFirstGzipAllocBytes) : want;
  while (true) {
    out.data.resize(capacity);
    absl::StatusOr<size_t> got = source_->Read(out.data.data() + have, capacity - have);
    if (!got.ok()) return got.status();
    have += *got;
    if (have < capacity) return DataLoss(path_, DataSizeMismatch(have));
    if (have == want) break;
    capacity = std::min(want, capacity * 2);
  }
  if (!subset) {
    if (absl::Status s = CheckNothingBeyond(want); !s.ok()) return s;
  }
  out.dims = dims_;
  out.dims[0] = items;
  return out;
}

std::string JoinPath(const std::string& root, const std::string& name) {
  if (root.empty()) return name;
  if (root.back() == '/') return root + name;
  return absl::StrCat(root, "/", name);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::StatusOr<std::unique_ptr<IdxReader>> OpenIdx(const std::string& root,
                                                   const std::string& name) {
  absl::StatusOr<std::string> path = FindIdxFile(root, name);
  if (!path.ok()) return path.status();
  return IdxReader::Open(*path);
}

absl::Status CheckSplitShapes(const IdxReader& images, const IdxReader& labels) {
  if (images.dims().size() != 3) {
    return DataLoss(images.path(), absl::StrCat("has ", images.dims().size(), " dimensions ",
                                                DimsString(images.dims()),
                                                ", expected 3 for images (N, height, width)"));
  }
  if (labels.dims().size() != 1) {
    return DataLoss(labels.path(),
                    absl::StrCat("has ", labels.dims().size(), " dimensions ",
                                 DimsString(labels.dims()), ", expected 1 for labels (N)"));
  }
  if (images.dims()[0] != labels.dims()[0]) {
    return absl::DataLossError(absl::StrCat(images.dims()[0], " images in ", images.path(), " but ",
                                            labels.dims()[0], " labels in ", labels.path()));
  }
  return absl::OkStatus();
}

absl::Status CheckLabels(const std::string& path, const std::vector<uint8_t>& labels,
                         int num_classes) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      return absl::DataLossError(absl::StrCat("label ", static_cast<int>(labels[i]), " at index ",
                                              i, " in ", path, ", expected < ", num_classes));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int64_t max_items) {
  if (max_items < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": max_items is ", max_items, ", expected >= 0 (0 = all)"));
  }
  absl::StatusOr<std::unique_ptr<IdxReader>> reader = IdxReader::Open(path);
  if (!reader.ok()) return reader.status();
  return (*reader)->Read(max_items);
}

absl::StatusOr<std::string> FindIdxFile(const std::string& root, const std::string& name) {
  const std::string raw = JoinPath(root, name);
  const std::string gz = raw + ".gz";
  for (const std::string& path : {raw, gz}) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": not a regular file, expected an IDX file"));
    }
    return path;
  }
  std::string message = absl::StrCat("neither ", raw, " nor ", gz, " exists");
  if (!root.empty() && !IsDirectory(root)) {
    absl::StrAppend(&message, " (", root, " is not a directory)");
  }
  return absl::NotFoundError(message);
}

absl::StatusOr<IdxSplit> ReadIdxSplit(const std::string& root, const std::string& prefix,
                                      int64_t limit, int num_classes) {
  if (limit < 0) {
    return absl::InvalidArgumentError(absl::StrCat("limit is ", limit, ", expected >= 0"));
  }
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes is ", num_classes, ", expected 1 to 256 for byte labels"));
  }
  // Both headers first, so that a mismatch is reported before either body is decoded.
  absl::StatusOr<std::unique_ptr<IdxReader>> images =
      OpenIdx(root, absl::StrCat(prefix, "-images-idx3-ubyte"));
  if (!images.ok()) return images.status();
  absl::StatusOr<std::unique_ptr<IdxReader>> labels =
      OpenIdx(root, absl::StrCat(prefix, "-labels-idx1-ubyte"));
  if (!labels.ok()) return labels.status();
  if (absl::Status s = CheckSplitShapes(**images, **labels); !s.ok()) return s;

  IdxSplit split;
  // Labels are small: check them before decoding the images.
  absl::StatusOr<IdxArray> label_array = (*labels)->Read(limit);
  if (!label_array.ok()) return label_array.status();
  if (absl::Status s = CheckLabels((*labels)->path(), label_array->data, num_classes); !s.ok()) {
    return s;
  }
  absl::StatusOr<IdxArray> image_array = (*images)->Read(limit);
  if (!image_array.ok()) return image_array.status();
  split.images = *std::move(image_array);
  split.labels = *std::move(label_array);
  return split;
}

}  // namespace mpsd::trainer
