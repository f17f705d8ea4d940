// Small file helpers that several test suites share.
#ifndef MPSD_TESTS_COMMON_FILES_H_
#define MPSD_TESTS_COMMON_FILES_H_

#include <sys/types.h>

#include <string>

namespace mpsd::testing {

// The whole file's bytes; "" when it cannot be opened (tests assert on the content, so a missing
// file shows up as the difference). Thread-safe.
std::string ReadFile(const std::string& path);

// The permission bits (st_mode & 07777) of `path`, following symlinks; fails the test (and
// returns 0) when stat fails, naming the path and errno's text. Thread-safe.
mode_t ModeOf(const std::string& path);

}  // namespace mpsd::testing

#endif  // MPSD_TESTS_COMMON_FILES_H_
