// Torch archives read once and checked (torch_archive.h).
#include "trainer/torch_archive.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainer/input_limits.h"
#include "trainer/pickle_scan.h"
#include "trainer/zip_index.h"

namespace mpsd::trainer {

size_t MemoryReadAdapter::read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const {
  if (pos >= bytes_.size()) return 0;
  const size_t count = std::min<uint64_t>(n, bytes_.size() - pos);
  std::memcpy(buf, bytes_.data() + pos, count);
  return count;
}

absl::StatusOr<std::vector<char>> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    if (error == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(path, ": permission denied"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(error)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const int64_t limit = CurrentInputLimits().max_file_bytes;
  if (st.st_size > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", st.st_size, " bytes, more than executor.max_file_bytes (", limit, ")"));
  }
  std::vector<char> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
    if (got == 0) break;  // it shrank while being read: what was read is what is checked
    done += static_cast<size_t>(got);
  }
  bytes.resize(done);
  return bytes;
}

const std::vector<ArchivePickle>& ScriptPickles() {
  static const auto* pickles =
      new std::vector<ArchivePickle>{{"data.pkl", "data/"}, {"constants.pkl", "constants/"}};
  return *pickles;
}

absl::StatusOr<std::vector<ZipEntry>> CheckedArchiveIndex(
    absl::string_view bytes, const std::vector<std::string>& storage_folders) {
  absl::StatusOr<std::vector<ZipEntry>> index = ReadZipIndexOfBytes(bytes);
  if (!index.ok()) return absl::InvalidArgumentError(index.status().message());
  const int64_t limit = CurrentInputLimits().max_unpacked_bytes;
  if (absl::Status s = CheckArchiveClaims(*index, storage_folders, static_cast<uint64_t>(limit));
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (executor.max_unpacked_bytes: ", limit, ")"));
  }
  return index;
}

absl::Status CheckTorchArchive(absl::string_view bytes, const std::vector<ArchivePickle>& pickles) {
  std::vector<std::string> folders;
  for (const ArchivePickle& pickle : pickles) folders.push_back(pickle.folder);
  absl::StatusOr<std::vector<ZipEntry>> index = CheckedArchiveIndex(bytes, folders);
  if (!index.ok()) return index.status();
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<MemoryReadAdapter>(bytes));
    for (const ArchivePickle& pickle : pickles) {
      if (!reader.hasRecord(pickle.record)) continue;
      auto [data, size] = reader.getRecord(pickle.record);
      if (absl::Status s =
              CheckPickledTensors(absl::string_view(static_cast<const char*>(data.get()), size),
                                  RecordSizesUnder(*index, pickle.folder), pickle.folder);
          !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(pickle.record, ": ", s.message()));
      }
    }
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    if (absl::StrContains(message, "version")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "written by a newer PyTorch in a format this LibTorch (" TORCH_VERSION ") cannot read: ",
          message));
    }
    return absl::InvalidArgumentError(absl::StrCat("a damaged archive: ", message));
  }
  return absl::OkStatus();
}

}  // namespace mpsd::trainer
