// Small file helpers that several test suites share.
#ifndef MPSD_TESTS_COMMON_FILES_H_
#define MPSD_TESTS_COMMON_FILES_H_

#include <sys/types.h>

#include <functional>
#include <string>

namespace mpsd::testing {

// The whole file's bytes; "" when it cannot be opened (tests assert on the content, so a missing
// file shows up as the difference). Thread-safe.
std::string ReadFile(const std::string& path);

// The permission bits (st_mode & 07777) of `path`, following symlinks; fails the test (and
// returns 0) when stat fails, naming the path and errno's text. Thread-safe.
mode_t ModeOf(const std::string& path);

// What `body` returns when run as a user who is neither root nor the files' owner: in a child
// process that drops to uid/gid 65534 (nobody) when the test runs as root, else in this
// process (the test's files are then made unreadable to their owner instead: see
// RunsAsAnotherUser). `body` must not start threads; its string comes back through a pipe.
std::string AsAnotherUser(const std::function<std::string()>& body);

// True when AsAnotherUser runs as a user other than the files' owner (the tests run as root).
bool RunsAsAnotherUser();

}  // namespace mpsd::testing

#endif  // MPSD_TESTS_COMMON_FILES_H_
