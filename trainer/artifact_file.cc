// WriteArtifactFile: free-space check, temporary, fsync, rename.
#include "trainer/artifact_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "api/failure_reason.h"
#include "trainer/scoped_fd.h"

namespace mpsd::trainer {
namespace {

bool IsOutOfSpace(int error) { return error == ENOSPC || error == EDQUOT || error == EFBIG; }

absl::Status DiskFull(std::string message) {
  return api::WithFailureReason(absl::ResourceExhaustedError(std::move(message)),
                                mpsd::v1::Job::DISK_FULL);
}

// The room for `size` bytes at `path`: statvfs of its folder and the file size limit.
absl::Status CheckRoom(const std::string& path, int64_t size) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  struct statvfs fs {};
  if (statvfs(dir.empty() ? "." : dir.c_str(), &fs) == 0) {
    const int64_t free_bytes =
        static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
    if (size + kArtifactFreeMargin > free_bytes) {
      return DiskFull(absl::StrCat("disk full: ", path, " needs ", size, " bytes (+",
                                   kArtifactFreeMargin, " kept free), ", free_bytes,
                                   " bytes are free on its file system"));
    }
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      static_cast<uint64_t>(size) > static_cast<uint64_t>(limit.rlim_cur)) {
    return DiskFull(absl::StrCat("disk full: ", path, " needs ", size,
                                 " bytes, beyond this process's file size limit (RLIMIT_FSIZE) of ",
                                 limit.rlim_cur, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status WriteError(const std::string& path, const char* step, int error, int64_t size) {
  if (IsOutOfSpace(error)) {
    return DiskFull(absl::StrCat("disk full: ", path, " needs ", size, " bytes; ", step,
                                 " failed: ", std::strerror(error)));
  }
  return absl::InternalError(absl::StrCat(path, ": ", step, ": ", std::strerror(error)));
}

// Writes and flushes `bytes` into the new file `path`.
absl::Status WriteAndSync(const std::string& path, absl::string_view bytes) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) return WriteError(path, "open", errno, size);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return WriteError(path, "write", n < 0 ? errno : ENOSPC, size);
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return WriteError(path, "fsync", errno, size);
  if (::close(fd.release()) != 0) return WriteError(path, "close", errno, size);
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteArtifactFile(const std::string& path, absl::string_view bytes) {
  if (absl::Status room = CheckRoom(path, static_cast<int64_t>(bytes.size())); !room.ok()) {
    return room;
  }
  const std::string temporary = path + ".tmp";
  absl::Status status = WriteAndSync(temporary, bytes);
  if (status.ok() && std::rename(temporary.c_str(), path.c_str()) != 0) {
    status = absl::InternalError(
        absl::StrCat("rename ", temporary, " to ", path, ": ", std::strerror(errno)));
  }
  if (!status.ok()) std::remove(temporary.c_str());
  return status;
}

}  // namespace mpsd::trainer
