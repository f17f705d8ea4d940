// Owns a POSIX file descriptor and closes it when it goes out of scope, and opens the data files
// a job names without blocking on what is not a regular file. Torch-free; internal to trainer/
// (the IDX and CIFAR readers). ScopedFd is not thread-safe: one owner at a time; move ownership
// out with release().
#ifndef MPSD_TRAINER_SCOPED_FD_H_
#define MPSD_TRAINER_SCOPED_FD_H_

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {

class ScopedFd {
 public:
  // Takes ownership of `fd`; a negative fd owns nothing.
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }
  // Gives up ownership without closing; returns the descriptor.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Opens `path` read-only for a reader of `expected` ("an IDX file", "CIFAR-10 records") and
// returns the descriptor, which the caller owns. The open never blocks: O_NONBLOCK (so that a
// FIFO or a device named as a data file is refused, not waited on forever), cleared again once
// fstat says it is a regular file. Errors: NOT_FOUND "PATH: no such file"; FAILED_PRECONDITION
// "PATH: not a regular file, expected EXPECTED"; errno's code with "PATH: cannot open" or
// "PATH: cannot stat". Thread-safe.
inline absl::StatusOr<int> OpenRegularFile(const std::string& path, absl::string_view expected) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::ErrnoToStatus(error, absl::StrCat(path, ": cannot open"));
  }
  ScopedFd owner(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot stat"));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not a regular file, expected ", expected));
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  }
  return owner.release();
}

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_SCOPED_FD_H_
