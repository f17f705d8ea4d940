// Owns a POSIX file descriptor and closes it when it goes out of scope. Torch-free; internal to
// trainer/ (the IDX and CIFAR readers). Not thread-safe: one owner at a time; move ownership out
// with release().
#ifndef MPSD_TRAINER_SCOPED_FD_H_
#define MPSD_TRAINER_SCOPED_FD_H_

#include <unistd.h>

#include <utility>

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

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_SCOPED_FD_H_
