// CIFAR-10 binary reader: file checks from stat() alone (cheap enough for submit-time
// validation), then one read per file straight into the returned buffer, and a label check.
#include "trainer/cifar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "trainer/scoped_fd.h"

namespace mpsd::trainer {
namespace {

constexpr char kLayout[] =
    "a CIFAR-10 root (binary version) holds data_batch_1.bin … data_batch_5.bin and "
    "test_batch.bin";

std::string JoinPath(const std::string& root, const std::string& name) {
  if (root.empty()) return name;
  if (root.back() == '/') return root + name;
  return absl::StrCat(root, "/", name);
}

absl::Status DataLoss(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// One file of a split, checked: its size in records.
struct CifarFile {
  std::string path;
  int64_t records = 0;
};

absl::StatusOr<CifarFile> CheckFile(const std::string& root, const std::string& name) {
  CifarFile file{JoinPath(root, name), 0};
  struct stat st;
  if (stat(file.path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat(file.path, ": no such file; ", kLayout));
    }
    return absl::ErrnoToStatus(error, absl::StrCat(file.path, ": cannot stat"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(file.path, ": not a regular file, expected CIFAR-10 records"));
  }
  const int64_t size = st.st_size;
  if (size == 0) return DataLoss(file.path, "is empty, expected 3073-byte CIFAR-10 records");
  if (size % kCifarRecordBytes != 0) {
    std::string message = absl::StrCat(size, " bytes is not a multiple of the ", kCifarRecordBytes,
                                       "-byte CIFAR-10 record (1 label byte, 3072 pixel bytes)");
    if (size % kCifar100RecordBytes == 0) {
      absl::StrAppend(&message, "; it is a multiple of ", kCifar100RecordBytes,
                      ", which looks like CIFAR-100's binary format (2 label bytes: coarse, "
                      "fine), not CIFAR-10");
    }
    return DataLoss(file.path, message);
  }
  file.records = size / kCifarRecordBytes;
  return file;
}

absl::Status CheckRoot(const std::string& root) {
  struct stat st;
  if (stat(root.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("directory ", root, " does not exist"));
  }
  if (!S_ISDIR(st.st_mode)) return absl::NotFoundError(absl::StrCat(root, " is not a directory"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CifarFile>> CheckSplit(const std::string& root, CifarSplitKind split) {
  std::vector<CifarFile> files;
  for (const std::string& name : CifarFileNames(split)) {
    absl::StatusOr<CifarFile> file = CheckFile(root, name);
    if (!file.ok()) return file.status();
    files.push_back(*std::move(file));
  }
  return files;
}

// Reads the first `records` records of `file` into dst.
absl::Status ReadRecords(const CifarFile& file, int64_t records, uint8_t* dst) {
  // Checked by CheckFile, but it may have been replaced since (by a FIFO: never block on it).
  absl::StatusOr<int> fd_value = OpenRegularFile(file.path, "CIFAR-10 records");
  if (!fd_value.ok()) return fd_value.status();
  ScopedFd fd(*fd_value);
  const size_t want = static_cast<size_t>(records * kCifarRecordBytes);
  size_t got = 0;
  while (got < want) {
    const ssize_t r = read(fd.get(), dst + got, std::min(want - got, size_t{1} << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::ErrnoToStatus(errno, absl::StrCat(file.path, ": read failed"));
    if (r == 0) {
      return DataLoss(file.path, absl::StrCat("ends after ", got, " bytes, expected at least ",
                                              want, " (did the file change while it was read?)"));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::Status CheckLabels(const std::string& path, const uint8_t* records, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t label = records[i * kCifarRecordBytes];
    if (label >= kCifarClasses) {
      return DataLoss(
          path, absl::StrCat("label ", static_cast<int>(label), " at record ", i, " (byte offset ",
                             i * kCifarRecordBytes, "), expected 0 to ", kCifarClasses - 1));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> CifarFileNames(CifarSplitKind split) {
  if (split == CifarSplitKind::kTest) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back(absl::StrCat("data_batch_", i, ".bin"));
  return names;
}

absl::Status CheckCifarFiles(const std::string& root) {
  if (absl::Status s = CheckRoot(root); !s.ok()) return s;
  for (const CifarSplitKind split : {CifarSplitKind::kTrain, CifarSplitKind::kTest}) {
    if (absl::Status s = CheckSplit(root, split).status(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<CifarRecords> ReadCifarSplit(const std::string& root, CifarSplitKind split,
                                            int64_t limit) {
  if (limit < 0) {
    return absl::InvalidArgumentError(absl::StrCat("limit is ", limit, ", expected >= 0"));
  }
  if (absl::Status s = CheckRoot(root); !s.ok()) return s;
  absl::StatusOr<std::vector<CifarFile>> files = CheckSplit(root, split);
  if (!files.ok()) return files.status();
  int64_t total = 0;
  for (const CifarFile& file : *files) total += file.records;
  CifarRecords out;
  out.count = limit > 0 ? std::min(limit, total) : total;
  out.bytes.resize(static_cast<size_t>(out.count * kCifarRecordBytes));
  int64_t done = 0;
  for (const CifarFile& file : *files) {
    if (done == out.count) break;
    const int64_t take = std::min(file.records, out.count - done);
    uint8_t* dst = out.bytes.data() + static_cast<size_t>(done * kCifarRecordBytes);
    if (absl::Status s = ReadRecords(file, take, dst); !s.ok()) return s;
    if (absl::Status s = CheckLabels(file.path, dst, take); !s.ok()) return s;
    done += take;
  }
  return out;
}

}  // namespace mpsd::trainer
