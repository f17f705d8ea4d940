// TempDir: a fresh directory for one test's files, removed with everything in it at the end.
#ifndef MPSD_TESTS_COMMON_TEMP_DIR_H_
#define MPSD_TESTS_COMMON_TEMP_DIR_H_

#include <filesystem>
#include <string>

namespace mpsd::testing {

// Not thread-safe; one owner.
class TempDir {
 public:
  // Creates "<gtest's TempDir()>/<prefix>-XXXXXX" (mkdtemp: unique, mode 0700). The path stays
  // short (a unix socket inside must fit in 107 bytes). Fails the test if it cannot be created.
  explicit TempDir(const std::string& prefix = "mpsd-test");
  // Removes the directory and everything in it; errors are ignored.
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // The path of `name` inside the directory.
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace mpsd::testing

#endif  // MPSD_TESTS_COMMON_TEMP_DIR_H_
