// Tests for api/memory.h's resident-set reader, against this process and a reaped child.
#include "api/memory.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include <gtest/gtest.h>

namespace mpsd::api {
namespace {

TEST(ResidentSetBytesTest, GrowsWithTouchedMemory) {
  if (!std::filesystem::exists("/proc/self/statm")) GTEST_SKIP() << "no /proc";
  const int64_t before = ResidentSetBytes(getpid());
  EXPECT_GT(before, 0);
  std::vector<char> block(64 << 20, 1);  // 64 MiB, every page written
  const int64_t after = ResidentSetBytes(getpid());
  EXPECT_GE(after - before, int64_t{48} << 20) << "before " << before << ", after " << after;
  EXPECT_EQ(block[block.size() / 2], 1);
}

TEST(ResidentSetBytesTest, ZeroForAProcessThatIsGone) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(ResidentSetBytes(pid), 0);
}

}  // namespace
}  // namespace mpsd::api
