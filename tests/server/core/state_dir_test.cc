// server/core/state_dir.h on real folders, files and sockets in a temp dir. The same cases against
// a real mpsd process: tests/e2e/fault_e2e_test.cc.
#include "server/core/state_dir.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace mpsd::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void Touch(const std::string& path, const std::string& text = "x") { std::ofstream(path) << text; }

// A socket file at `path`; listening unless `stale`. Returns the fd (-1 once closed).
int MakeSocket(const std::string& path, bool stale) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
  if (stale) {
    close(fd);
    return -1;
  }
  EXPECT_EQ(listen(fd, 1), 0);
  return fd;
}

class StateDirTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_ / name; }
  testing::TempDir dir_{"state-dir"};
};

TEST_F(StateDirTest, SocketDirOfOurOwnIsSafe) {
  EXPECT_TRUE(CheckSocketDir(dir_.str(), geteuid()).ok());
}

TEST_F(StateDirTest, SocketDirWritableByGroupOrOthersIsRefusedUnlessSticky) {
  ASSERT_EQ(chmod(dir_.str().c_str(), 0770), 0);
  absl::Status status = CheckSocketDir(dir_.str(), geteuid());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("has mode 0770"));
  EXPECT_THAT(status.message(), HasSubstr("chmod 700 " + dir_.str()));
  ASSERT_EQ(chmod(dir_.str().c_str(), 01777), 0);
  EXPECT_TRUE(CheckSocketDir(dir_.str(), geteuid()).ok());
  ASSERT_EQ(chmod(dir_.str().c_str(), 0700), 0);
}

TEST_F(StateDirTest, SocketDirOwnedBySomeoneElseIsRefused) {
  // Ours, looked at as another user would: owned by neither them nor root.
  if (geteuid() == 0) GTEST_SKIP() << "as root every folder is owned by root or by us";
  absl::Status status = CheckSocketDir(dir_.str(), geteuid() + 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("is owned by"));
}

TEST_F(StateDirTest, SocketDirOwnedByAnotherUserIsRefusedAsRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  const std::string theirs = Path("theirs");
  fs::create_directory(theirs);
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  absl::Status status = CheckSocketDir(theirs, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("uid 65534"));
}

TEST_F(StateDirTest, ASocketFolderThatIsAFileIsRefused) {
  Touch(Path("file"));
  EXPECT_THAT(CheckSocketDir(Path("file"), geteuid()).message(), HasSubstr("not a directory"));
}

TEST_F(StateDirTest, RemoveStaleSocketRemovesOnlyAStaleSocket) {
  EXPECT_TRUE(RemoveStaleSocket(Path("none")).ok());

  MakeSocket(Path("stale.sock"), /*stale=*/true);
  EXPECT_TRUE(RemoveStaleSocket(Path("stale.sock")).ok());
  EXPECT_FALSE(fs::exists(Path("stale.sock")));

  const int fd = MakeSocket(Path("live.sock"), /*stale=*/false);
  absl::Status live = RemoveStaleSocket(Path("live.sock"));
  EXPECT_EQ(live.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(live.message(), HasSubstr("another process already listens"));
  EXPECT_TRUE(fs::exists(Path("live.sock")));
  close(fd);

  Touch(Path("file"), "keep");
  absl::Status file = RemoveStaleSocket(Path("file"));
  EXPECT_EQ(file.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(file.message(), HasSubstr("is not a socket (a regular file)"));
  EXPECT_TRUE(fs::exists(Path("file")));

  fs::create_symlink(Path("file"), Path("link"));
  EXPECT_THAT(RemoveStaleSocket(Path("link")).message(), HasSubstr("(a symbolic link)"));
  EXPECT_TRUE(fs::is_symlink(Path("link")));
}

TEST_F(StateDirTest, DatabaseNotLostInAFreshOrHealthyStateDir) {
  EXPECT_TRUE(CheckDatabaseNotLost(dir_.str()).ok());  // nothing at all
  fs::create_directories(Path("artifacts"));
  EXPECT_TRUE(CheckDatabaseNotLost(dir_.str()).ok());  // an empty artifacts/
  fs::create_directories(Path("artifacts/3"));
  Touch(Path("mpsd.db"), "SQLite format 3");
  EXPECT_TRUE(CheckDatabaseNotLost(dir_.str()).ok());  // a database and its artifacts
}

TEST_F(StateDirTest, DatabaseLostBesideArtifactsOrWalIsRefused) {
  for (const char* job : {"2", "10", "1", "not-a-job"})
    fs::create_directories(Path("artifacts/") + job);
  absl::Status missing = CheckDatabaseNotLost(dir_.str());
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.message(), HasSubstr("mpsd.db is missing but"));
  EXPECT_THAT(missing.message(), HasSubstr("with 3 job(s) (1, 2, 10)"));

  Touch(Path("mpsd.db"), "");
  Touch(Path("mpsd.db-shm"));
  absl::Status empty = CheckDatabaseNotLost(dir_.str());
  EXPECT_THAT(empty.message(), HasSubstr("mpsd.db is empty but " + Path("mpsd.db-shm") + " and"));
}

TEST_F(StateDirTest, HighestArtifactJobIdCountsOnlyJobIds) {
  EXPECT_EQ(HighestArtifactJobId(Path("artifacts")), 0);
  for (const char* name : {"9", "12", "07", "x", "-3"})
    fs::create_directories(Path("artifacts/") + name);
  EXPECT_EQ(HighestArtifactJobId(Path("artifacts")), 12);
}

TEST_F(StateDirTest, CheckStateDirModeMakesTheDatabasePrivate) {
  Touch(Path("mpsd.db"));
  ASSERT_EQ(chmod(Path("mpsd.db").c_str(), 0644), 0);
  ASSERT_EQ(chmod(dir_.str().c_str(), 0755), 0);
  EXPECT_TRUE(CheckStateDirMode(dir_.str()).ok());
  struct stat st {};
  ASSERT_EQ(stat(Path("mpsd.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir_.str().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);  // Only warned about: it may be shared on purpose.
  chmod(dir_.str().c_str(), 0700);
}

TEST_F(StateDirTest, CheckStateDirModeNeverChangesAFileThroughASymlink) {
  const std::string outside = Path("outside-file");
  Touch(outside);
  ASSERT_EQ(chmod(outside.c_str(), 0644), 0);
  ASSERT_EQ(symlink(outside.c_str(), Path("mpsd.db").c_str()), 0);
  EXPECT_FALSE(CheckStateDirMode(dir_.str()).ok());
  struct stat st {};
  ASSERT_EQ(stat(outside.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(StateDirTest, WatchReportsADeletedDatabaseOnce) {
  const std::string state = Path("state");
  fs::create_directories(state);
  Touch(state + "/mpsd.db");
  absl::Notification lost;
  int calls = 0;
  absl::Status reported;
  StateDirWatch::Options options;
  options.state_dir = state;
  options.database = state + "/mpsd.db";
  options.interval = absl::Milliseconds(10);
  options.on_lost = [&](const absl::Status& status) {
    ++calls;
    reported = status;
    lost.Notify();
  };
  absl::StatusOr<std::unique_ptr<StateDirWatch>> watch = StateDirWatch::Start(options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_TRUE((*watch)->Check().ok());
  fs::remove(state + "/mpsd.db");
  ASSERT_TRUE(lost.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(reported.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reported.message(), HasSubstr(state + "/mpsd.db is gone"));
  EXPECT_EQ((*watch)->Check(), reported);
  watch->reset();
  EXPECT_EQ(calls, 1);
}

TEST_F(StateDirTest, WatchReportsAReplacedStateDir) {
  const std::string state = Path("state");
  fs::create_directories(state);
  Touch(state + "/mpsd.db");
  StateDirWatch::Options options;
  options.state_dir = state;
  options.database = state + "/mpsd.db";
  options.interval = absl::Hours(1);  // Check() by hand only.
  absl::StatusOr<std::unique_ptr<StateDirWatch>> watch = StateDirWatch::Start(options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  fs::rename(state, Path("old"));
  fs::create_directories(state);
  fs::copy_file(Path("old/mpsd.db"), state + "/mpsd.db");
  EXPECT_THAT((*watch)->Check().message(), HasSubstr(state + " was replaced by another file"));
}

TEST_F(StateDirTest, WatchNeedsTheDatabaseAtStart) {
  StateDirWatch::Options options;
  options.state_dir = dir_.str();
  options.database = Path("mpsd.db");
  EXPECT_EQ(StateDirWatch::Start(options).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mpsd::server
