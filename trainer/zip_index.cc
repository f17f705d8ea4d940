// A bounded reader of a zip archive's central directory (APPNOTE.TXT 6.3.x).
#include "trainer/zip_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {
namespace {

constexpr uint32_t kEndSignature = 0x06054b50;           // APPNOTE 4.3.16
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;  // 4.3.15
constexpr uint32_t kZip64EndSignature = 0x06064b50;      // 4.3.14
constexpr uint32_t kEntrySignature = 0x02014b50;         // 4.3.12
constexpr size_t kEndBytes = 22;
constexpr size_t kZip64LocatorBytes = 20;
constexpr size_t kZip64EndBytes = 56;
constexpr size_t kEntryBytes = 46;
constexpr size_t kMaxCommentBytes = 0xFFFF;

uint64_t Le(const unsigned char* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// An open file, or bytes already in memory.
class File {
 public:
  explicit File(int fd) : fd_(fd) {}
  explicit File(absl::string_view bytes) : bytes_(bytes) {}
  ~File() {
    if (fd_ >= 0) close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Exactly `n` bytes at `offset`, or false.
  bool Read(uint64_t offset, size_t n, std::string& out) const {
    if (fd_ < 0) {
      if (offset > bytes_.size() || n > bytes_.size() - offset) return false;
      out.assign(bytes_.data() + offset, n);
      return true;
    }
    out.resize(n);
    size_t done = 0;
    while (done < n) {
      const ssize_t got =
          pread(fd_, out.data() + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      done += static_cast<size_t>(got);
    }
    return true;
  }

 private:
  int fd_ = -1;
  absl::string_view bytes_;
};

absl::Status Corrupt(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("not a zip archive, or cut short: ", what));
}

struct Directory {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t entries = 0;
};

// The end of central directory record (and the Zip64 one when a locator precedes it) among
// the last bytes of a file of `file_size` bytes.
absl::StatusOr<Directory> FindDirectory(const File& file, uint64_t file_size) {
  if (file_size < kEndBytes) return Corrupt("shorter than a zip archive's end record");
  const uint64_t tail_size =
      std::min<uint64_t>(file_size, kEndBytes + kMaxCommentBytes + kZip64LocatorBytes);
  const uint64_t tail_offset = file_size - tail_size;
  std::string tail;
  if (!file.Read(tail_offset, tail_size, tail)) return Corrupt("cannot read its end");
  const auto* bytes = reinterpret_cast<const unsigned char*>(tail.data());
  std::optional<size_t> end;
  for (size_t i = tail_size - kEndBytes + 1; i-- > 0;) {
    if (Le(bytes + i, 4) == kEndSignature && i + kEndBytes + Le(bytes + i + 20, 2) == tail_size) {
      end = i;
      break;
    }
  }
  if (!end.has_value()) return Corrupt("no end of central directory record");
  const unsigned char* e = bytes + *end;
  if (Le(e + 4, 2) != 0 || Le(e + 6, 2) != 0) {
    return absl::InvalidArgumentError("a multi-disk zip archive");
  }
  Directory directory{Le(e + 16, 4), Le(e + 12, 4), Le(e + 10, 2)};
  uint64_t directory_end = tail_offset + *end;  // the directory lies before its end records
  if (*end >= kZip64LocatorBytes && Le(e - kZip64LocatorBytes, 4) == kZip64LocatorSignature) {
    const uint64_t zip64_end = Le(e - kZip64LocatorBytes + 8, 8);
    std::string record;
    if (zip64_end > file_size - kZip64EndBytes || !file.Read(zip64_end, kZip64EndBytes, record) ||
        Le(reinterpret_cast<const unsigned char*>(record.data()), 4) != kZip64EndSignature) {
      return Corrupt("a Zip64 locator that points at no Zip64 end record");
    }
    const auto* z = reinterpret_cast<const unsigned char*>(record.data());
    directory = Directory{Le(z + 48, 8), Le(z + 40, 8), Le(z + 32, 8)};
    directory_end = zip64_end;
  }
  if (directory.offset > directory_end || directory.size > directory_end - directory.offset) {
    return Corrupt("its central directory lies outside the file");
  }
  return directory;
}

// The Zip64 extended information (APPNOTE 4.5.3) for the fields that are 0xFFFFFFFF.
absl::Status ApplyZip64Extra(absl::string_view extra, ZipEntry& entry) {
  const auto* p = reinterpret_cast<const unsigned char*>(extra.data());
  size_t at = 0;
  while (at + 4 <= extra.size()) {
    const uint64_t id = Le(p + at, 2);
    const uint64_t size = Le(p + at + 2, 2);
    if (at + 4 + size > extra.size()) break;
    if (id == 0x0001) {
      size_t field = at + 4;
      for (uint64_t* value : {&entry.uncompressed_size, &entry.compressed_size}) {
        if (*value != 0xFFFFFFFF) continue;
        if (field + 8 > at + 4 + size) return Corrupt("a short Zip64 extra field");
        *value = Le(p + field, 8);
        field += 8;
      }
      return absl::OkStatus();
    }
    at += 4 + size;
  }
  if (entry.uncompressed_size == 0xFFFFFFFF || entry.compressed_size == 0xFFFFFFFF) {
    return Corrupt("an entry's size is in a Zip64 field that is missing");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ZipEntry>> ParseDirectory(absl::string_view directory,
                                                     uint64_t expected_entries) {
  std::vector<ZipEntry> entries;
  const auto* p = reinterpret_cast<const unsigned char*>(directory.data());
  size_t at = 0;
  while (entries.size() < expected_entries) {
    if (at + kEntryBytes > directory.size() || Le(p + at, 4) != kEntrySignature) {
      return Corrupt(absl::StrCat("central directory entry ", entries.size() + 1, " of ",
                                  expected_entries, " is missing or damaged"));
    }
    const size_t name = Le(p + at + 28, 2), extra = Le(p + at + 30, 2),
                 comment = Le(p + at + 32, 2);
    if (at + kEntryBytes + name + extra + comment > directory.size()) {
      return Corrupt("a central directory entry runs past the directory");
    }
    ZipEntry entry;
    entry.method = static_cast<int>(Le(p + at + 10, 2));
    entry.compressed_size = Le(p + at + 20, 4);
    entry.uncompressed_size = Le(p + at + 24, 4);
    entry.name = std::string(directory.substr(at + kEntryBytes, name));
    if (absl::Status s = ApplyZip64Extra(directory.substr(at + kEntryBytes + name, extra), entry);
        !s.ok()) {
      return s;
    }
    entries.push_back(std::move(entry));
    at += kEntryBytes + name + extra + comment;
  }
  return entries;
}

// The entries of the archive `file` of `file_size` bytes (ReadZipIndex).
absl::StatusOr<std::vector<ZipEntry>> ReadIndex(const File& file, uint64_t file_size,
                                                uint64_t max_central_directory_bytes) {
  absl::StatusOr<Directory> directory = FindDirectory(file, file_size);
  if (!directory.ok()) return directory.status();
  if (directory->size > max_central_directory_bytes) {
    return absl::OutOfRangeError(absl::StrCat("its zip central directory is ", directory->size,
                                              " bytes, more than the ", max_central_directory_bytes,
                                              " read to check a file"));
  }
  std::string bytes;
  if (!file.Read(directory->offset, directory->size, bytes)) {
    return Corrupt("cannot read its central directory");
  }
  return ParseDirectory(bytes, directory->entries);
}

}  // namespace

absl::StatusOr<std::vector<ZipEntry>> ReadZipIndex(const std::string& path,
                                                   uint64_t max_central_directory_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open: ", std::strerror(errno)));
  const File file(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError("not a regular file");
  }
  return ReadIndex(file, static_cast<uint64_t>(st.st_size), max_central_directory_bytes);
}

absl::StatusOr<std::vector<ZipEntry>> ReadZipIndexOfBytes(absl::string_view bytes,
                                                          uint64_t max_central_directory_bytes) {
  const File file(bytes);
  return ReadIndex(file, bytes.size(), max_central_directory_bytes);
}

}  // namespace mpsd::trainer
