// TempDir: mkdtemp and remove_all.
#include "tests/common/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "gtest/gtest.h"

namespace mpsd::testing {

TempDir::TempDir(const std::string& prefix) {
  std::string pattern =
      (std::filesystem::path(::testing::TempDir()) / (prefix + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << pattern << ": " << std::strerror(errno);
    return;
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace mpsd::testing
