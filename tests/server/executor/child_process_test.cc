// Tests of server/executor/child_process.cc with real programs (/bin/sh, /bin/sleep): exit statuses
// in words, signals, reaping, and the clean state a child starts in.
#include "server/executor/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

// Runs `script` under /bin/sh with `env` and returns its wait status.
int RunShell(const std::string& script, std::vector<std::string> env = {}) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn({"/bin/sh", "-c", script}, std::move(env));
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return -1;
  return (*child)->Reap();
}

std::unique_ptr<ChildProcess> Sleeper() {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn({"/bin/sleep", "60"}, {});
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

TEST(DescribeExitStatusTest, ExitCodesAndSignalsInWords) {
  EXPECT_EQ(DescribeExitStatus(RunShell("exit 0")), "exited with code 0");
  EXPECT_EQ(DescribeExitStatus(RunShell("exit 3")), "exited with code 3");
  EXPECT_EQ(DescribeExitStatus(RunShell("kill -SEGV $$")), "killed by signal 11 (SIGSEGV)");
  EXPECT_EQ(DescribeExitStatus(RunShell("kill -ABRT $$")), "killed by signal 6 (SIGABRT)");
  EXPECT_EQ(DescribeExitStatus(RunShell("kill -USR1 $$")),
            absl::StrCat("killed by signal ", SIGUSR1, " (signal)"));
  EXPECT_STREQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_STREQ(SignalName(SIGTERM), "SIGTERM");
}

TEST(ChildProcessTest, ProgramThatCannotRunExits127) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn({"/nonexistent/mpsd-executor"}, {});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(DescribeExitStatus((*child)->Reap()), "exited with code 127");
  EXPECT_EQ(ChildProcess::Spawn({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChildProcessTest, GetsExactlyTheGivenEnvironment) {
  ::setenv("MPSD_CHILD_PROCESS_TEST_PARENT", "1", /*overwrite=*/1);
  EXPECT_EQ(RunShell("test \"$GREETING\" = hello", {"GREETING=hello"}), 0);
  EXPECT_NE(RunShell("test -n \"$MPSD_CHILD_PROCESS_TEST_PARENT\"", {}), 0);
}

TEST(ChildProcessTest, StartsWithCleanSignalsStdinAndDescriptors) {
  // The parent blocks SIGTERM (as mpsd does); the child must still die of it.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  std::unique_ptr<ChildProcess> child = Sleeper();
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
  ASSERT_NE(child, nullptr);
  // Its own process group: a terminal's Ctrl-C to mpsd's group does not reach it.
  for (int i = 0; i < 500 && getpgid(child->pid()) != child->pid(); ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(getpgid(child->pid()), child->pid());
  child->Signal(SIGTERM);
  EXPECT_EQ(DescribeExitStatus(child->Reap()), "killed by signal 15 (SIGTERM)");

  // stdin is /dev/null (read sees end of file at once); a descriptor the parent holds open
  // without FD_CLOEXEC is not inherited.
  EXPECT_NE(RunShell("read line"), 0);
  const int fd = open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 3);
  if (std::filesystem::exists("/proc/self/fd")) {
    EXPECT_EQ(RunShell(absl::StrCat("test ! -e /proc/self/fd/", fd)), 0);
  }
  close(fd);
}

TEST(ChildProcessTest, TryReapAndReapWithin) {
  std::unique_ptr<ChildProcess> child = Sleeper();
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->TryReap(), std::nullopt);
  EXPECT_EQ(child->ReapWithin(absl::Milliseconds(50)), std::nullopt);
  child->Signal(SIGKILL);
  const std::optional<int> status = child->ReapWithin(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(DescribeExitStatus(*status), "killed by signal 9 (SIGKILL)");
  // Reaped: the same status again, and no signal goes to a pid that may be reused.
  EXPECT_EQ(child->TryReap(), status);
  EXPECT_EQ(child->Reap(), *status);
  child->Signal(SIGKILL);
}

TEST(ChildProcessTest, ItsExitIsAnEventThatWakesOnExitAndHasExited) {
  absl::Notification exited;
  // The child runs until the test creates `go`, then exits with code 4.
  const std::string go = absl::StrCat(::testing::TempDir(), "/child-process-go-", getpid());
  std::filesystem::remove(go);
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
      {"/bin/sh", "-c", absl::StrCat("while [ ! -e ", go, " ]; do sleep 0.01; done; exit 4")}, {},
      [&exited] { exited.Notify(); });
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_FALSE((*child)->HasExited());
  EXPECT_FALSE(exited.HasBeenNotified());
  EXPECT_EQ((*child)->TryReap(), std::nullopt);
  { std::ofstream(go) << "go"; }
  // Left unreaped until its owner reaps it: the watcher only saw it exit.
  ASSERT_TRUE(exited.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE((*child)->HasExited());
  const std::optional<int> status = (*child)->TryReap();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(DescribeExitStatus(*status), "exited with code 4");
  std::filesystem::remove(go);
}

TEST(ChildProcessTest, DestructorKillsAndReapsARunningChild) {
  std::unique_ptr<ChildProcess> child = Sleeper();
  ASSERT_NE(child, nullptr);
  const pid_t pid = child->pid();
  child.reset();
  // Reaped, so no zombie is left: the pid is no child of ours any more.
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

}  // namespace
}  // namespace mpsd::server
