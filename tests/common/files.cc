#include "tests/common/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace mpsd::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    ADD_FAILURE() << "stat " << path << ": " << std::strerror(errno);
    return 0;
  }
  return st.st_mode & 07777;
}

}  // namespace mpsd::testing
