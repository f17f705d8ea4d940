// The fault suite (issue 14): a real mpsd against hostile files, folders and disks. A path to
// listen on that is taken by a regular file, socket folders another user could change, a state
// dir whose database is gone while its artifacts are not, a state dir deleted while mpsd runs,
// file modes under a permissive umask, a full disk, and database pages corrupted mid-file.
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/common/files.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

namespace fs = std::filesystem;
using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

// mpsd run to completion with these arguments; a daemon that starts instead of refusing is
// killed after 20 s (exit code 137), which every caller counts as a failure.
CommandResult RunMpsd(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-s", "KILL", "20", MpsdPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

HealthCheckResponse::ServingStatus Health(Daemon& daemon) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("mpsd.v1.JobService");
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

// A job that stays QUEUED or RUNNING for a while and writes nothing big: 1 epoch of the MLP.
mpsd::v1::SubmitJobRequest SmallJob() { return TrainJobRequest(256, 64, 1, 64, "mlp"); }

class FaultE2eTest : public ::testing::Test {
 protected:
  std::string state() const { return dir_ / "state"; }
  std::string socket() const { return dir_ / "mpsd.sock"; }

  TempDir dir_{"mpsd-fault"};
};

// ---- item 5: --listen on a path that is not a socket ---------------------------------------

TEST_F(FaultE2eTest, ListenOnARegularFileRefusesAndKeepsTheFile) {
  const std::string file = dir_ / "precious.txt";
  WriteFile(file, "do not delete\n");
  const CommandResult result = RunMpsd({"--listen", "unix://" + file, "--state-dir", state()});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr(file + " exists and is not a socket (a regular file)"));
  EXPECT_EQ(ReadFile(file), "do not delete\n");
}

TEST_F(FaultE2eTest, ListenOnADirectoryRefusesAndKeepsIt) {
  const std::string taken = dir_ / "taken";
  fs::create_directory(taken);
  WriteFile(taken + "/inside", "x");
  const CommandResult result = RunMpsd({"--listen", "unix://" + taken, "--state-dir", state()});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("is not a socket (a directory)"));
  EXPECT_TRUE(fs::exists(taken + "/inside"));
}

TEST_F(FaultE2eTest, AStaleSocketIsReplaced) {
  // A socket nobody listens on, as a SIGKILLed mpsd leaves it.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket().c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  ASSERT_TRUE(fs::is_socket(socket()));
  // Daemon::Start would remove it itself; this start must do it on its own.
  pid_t pid = fork();
  if (pid == 0) {
    execl(MpsdPath().c_str(), MpsdPath().c_str(), "--listen", ("unix://" + socket()).c_str(),
          "--state-dir", state().c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const bool listening = WaitUntil(
      [&] {
        const int probe = ::socket(AF_UNIX, SOCK_STREAM, 0);
        const bool ok = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
        close(probe);
        return ok;
      },
      absl::Seconds(60));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(listening) << "mpsd did not listen on the stale socket's path";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// ---- item 9: the socket's folder ------------------------------------------------------------

TEST_F(FaultE2eTest, ASocketFolderWritableByOthersIsRefused) {
  const std::string folder = dir_ / "shared";
  fs::create_directory(folder);
  ASSERT_EQ(chmod(folder.c_str(), 0777), 0);
  const CommandResult result =
      RunMpsd({"--listen", "unix://" + folder + "/mpsd.sock", "--state-dir", state()});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("socket folder " + folder + " has mode 0777"));
  EXPECT_FALSE(fs::exists(folder + "/mpsd.sock"));
}

TEST_F(FaultE2eTest, ASocketFolderOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a folder another user owns";
  // As a pre-existing /tmp/mpsd-$UID made by someone else: private to that user, and theirs.
  const std::string folder = dir_ / "theirs";
  fs::create_directory(folder);
  ASSERT_EQ(chmod(folder.c_str(), 0700), 0);
  ASSERT_EQ(chown(folder.c_str(), 65534, 65534), 0);
  const CommandResult result =
      RunMpsd({"--listen", "unix://" + folder + "/mpsd.sock", "--state-dir", state()});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("socket folder " + folder + " is owned by"));
  EXPECT_THAT(result.err, HasSubstr("uid 65534"));
  EXPECT_FALSE(fs::exists(folder + "/mpsd.sock"));
}

TEST_F(FaultE2eTest, AStickyWorldWritableFolderIsAccepted) {
  // As /tmp: others may write there but not remove or rename what is ours.
  const std::string folder = dir_ / "sticky";
  fs::create_directory(folder);
  ASSERT_EQ(chmod(folder.c_str(), 01777), 0);
  Daemon daemon(state(), folder + "/mpsd.sock");
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  EXPECT_EQ(ModeOf(folder + "/mpsd.sock") & 0777, 0600);
}

// ---- item 6: the database lost, the artifacts not ------------------------------------------

class LostDatabaseTest : public FaultE2eTest {
 protected:
  void SetUp() override {
    fs::create_directories(state() + "/artifacts/1");
    fs::create_directories(state() + "/artifacts/2");
    WriteFile(state() + "/artifacts/1/model.pt", "job 1's model");
  }
  void ExpectRefused(const std::string& why) {
    const CommandResult result =
        RunMpsd({"--listen", "unix://" + socket(), "--state-dir", state()});
    EXPECT_EQ(result.exit_code, 1) << result.err;
    EXPECT_THAT(result.err, HasSubstr("the job database " + state() + "/mpsd.db " + why));
    EXPECT_THAT(result.err, HasSubstr("Restore mpsd.db"));
    EXPECT_EQ(ReadFile(state() + "/artifacts/1/model.pt"), "job 1's model");
  }
};

TEST_F(LostDatabaseTest, AMissingDatabaseWithArtifactsIsRefused) {
  ExpectRefused("is missing but " + state() + "/artifacts/ with 2 job(s) (1, 2) is there");
  EXPECT_FALSE(fs::exists(state() + "/mpsd.db"));
}

TEST_F(LostDatabaseTest, AnEmptyDatabaseWithArtifactsIsRefused) {
  WriteFile(state() + "/mpsd.db", "");
  ExpectRefused("is empty but");
  EXPECT_EQ(fs::file_size(state() + "/mpsd.db"), 0u);
}

TEST_F(LostDatabaseTest, AMissingDatabaseWithItsWalIsRefused) {
  fs::remove_all(state() + "/artifacts");
  WriteFile(state() + "/mpsd.db-wal", "some frames");
  const CommandResult result = RunMpsd({"--listen", "unix://" + socket(), "--state-dir", state()});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("is missing but " + state() + "/mpsd.db-wal is there"));
}

TEST_F(LostDatabaseTest, AnEmptyArtifactsFolderStarts) {
  fs::remove_all(state() + "/artifacts");
  fs::create_directories(state() + "/artifacts");
  Daemon daemon(state(), socket());
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
}

TEST_F(FaultE2eTest, NewJobsNeverTakeTheIdOfStoredArtifacts) {
  {
    Daemon daemon(state(), socket());
    ASSERT_NO_FATAL_FAILURE(daemon.Start());
    absl::StatusOr<mpsd::v1::Job> first = rpc::Submit(daemon, SmallJob());
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->id(), "1");
  }
  // A database restored from a copy older than the artifacts of jobs 2..7.
  fs::create_directories(state() + "/artifacts/7");
  WriteFile(state() + "/artifacts/7/model.pt", "job 7's model");
  Daemon daemon(state(), socket() + ".2");
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  absl::StatusOr<mpsd::v1::Job> next = rpc::Submit(daemon, SmallJob());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->id(), "8");
  ASSERT_TRUE(rpc::Cancel(daemon, "8").ok());
  EXPECT_EQ(ReadFile(state() + "/artifacts/7/model.pt"), "job 7's model");
}

// ---- item 7: the state dir deleted while mpsd runs ------------------------------------------

TEST_F(FaultE2eTest, AStateDirDeletedWhileRunningStopsAcceptingJobs) {
  Daemon daemon(state(), socket());
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  ASSERT_TRUE(rpc::Submit(daemon, SmallJob()).ok());
  EXPECT_EQ(Health(daemon), HealthCheckResponse::SERVING);

  fs::remove_all(state());
  absl::Status refused;
  EXPECT_TRUE(WaitUntil(
      [&] {
        refused = rpc::Submit(daemon, SmallJob()).status();
        return !refused.ok();
      },
      absl::Seconds(30)))
      << "submits are still accepted 30 s after the state dir was deleted";
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr(state()));
  EXPECT_THAT(std::string(refused.message()), ::testing::ContainsRegex("is gone|was replaced"));
  EXPECT_EQ(Health(daemon), HealthCheckResponse::NOT_SERVING);
  // Queries still answer from memory.
  EXPECT_TRUE(rpc::Get(daemon, "1").ok());
  daemon.Stop(SIGTERM, absl::Seconds(60));
  EXPECT_THAT(ReadFile(daemon.log_path()),
              HasSubstr("[error] the state dir changed under mpsd: " + state()));
}

TEST_F(FaultE2eTest, AStateDirReplacedWhileRunningStopsAcceptingJobs) {
  Daemon daemon(state(), socket());
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  // A restore that moves another copy in place: the database is a different file now.
  fs::rename(state(), dir_ / "moved");
  fs::create_directories(state());
  fs::copy_file(dir_ / "moved/mpsd.db", state() + "/mpsd.db");
  absl::Status refused;
  EXPECT_TRUE(WaitUntil(
      [&] {
        refused = rpc::Submit(daemon, SmallJob()).status();
        return !refused.ok();
      },
      absl::Seconds(30)));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("was replaced by another file"));
  EXPECT_EQ(Health(daemon), HealthCheckResponse::NOT_SERVING);
}

// A fresh user's pass: a submit right after `mv STATE STATE.moved; mkdir STATE`, before the
// watch's next look (1 s), was acknowledged: its record went into the moved database and its
// model.pt into the new folder. The scheduler checks the state dir itself before it answers.
TEST_F(FaultE2eTest, ASubmitRightAfterTheStateDirWasMovedIsRefusedAndWritesNothingThere) {
  Daemon daemon(state(), socket());
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  fs::rename(state(), dir_ / "moved");
  fs::create_directories(state());
  const absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(daemon, SmallJob());
  ASSERT_FALSE(job.ok()) << "job " << job->id() << " was acknowledged into a moved state dir";
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr(state() + " was replaced by another file"));
  // What was stored before the check failed is CANCELLED there, never run.
  mpsd::v1::ListJobsRequest all;
  absl::StatusOr<mpsd::v1::ListJobsResponse> list = rpc::List(daemon, all);
  ASSERT_TRUE(list.ok()) << list.status();
  for (const mpsd::v1::Job& stored : list->jobs()) {
    EXPECT_EQ(stored.state(), mpsd::v1::Job::CANCELLED) << stored.id();
    EXPECT_THAT(stored.message(), HasSubstr("not accepted: the state dir changed"));
  }
  absl::SleepFor(absl::Seconds(3));  // Long enough for SmallJob to have run and saved a model.
  EXPECT_FALSE(fs::exists(state() + "/artifacts")) << "a job wrote into the new state dir";
  EXPECT_EQ(Health(daemon), HealthCheckResponse::NOT_SERVING);
}

// ---- item 10: modes -----------------------------------------------------------------------

TEST_F(FaultE2eTest, EverythingIsPrivateUnderAPermissiveUmask) {
  const mode_t old_umask = umask(0022);  // The daemon inherits it through fork.
  Daemon daemon(state(), socket());
  daemon.Start();
  umask(old_umask);
  if (HasFatalFailure()) return;
  mpsd::v1::SubmitJobRequest request = TrainJobRequest(128, 64, 1, 64);
  request.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(daemon, request);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<mpsd::v1::Job> done = rpc::WaitForEnd(daemon, job->id());
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), mpsd::v1::Job::SUCCEEDED) << done->message();

  EXPECT_EQ(ModeOf(state()), 0700u);
  EXPECT_EQ(ModeOf(socket()), 0600u);
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(state())) {
    if (entry.is_symlink() || entry.is_socket()) continue;
    const std::string path = entry.path().string();
    files.push_back(path);
    EXPECT_EQ(ModeOf(path), entry.is_directory() ? 0700u : 0600u) << path;
  }
  EXPECT_THAT(files, ::testing::Contains(state() + "/mpsd.db"));
  EXPECT_THAT(files, ::testing::Contains(state() + "/artifacts/1/model.pt"));
  EXPECT_THAT(files, ::testing::Contains(state() + "/artifacts/1/checkpoint-epoch-1.pt"));
}

TEST_F(FaultE2eTest, AStateDirReadableByOthersIsWarnedAboutAndItsDatabaseMadePrivate) {
  {
    Daemon daemon(state(), socket());
    ASSERT_NO_FATAL_FAILURE(daemon.Start());
  }
  ASSERT_EQ(chmod(state().c_str(), 0755), 0);
  ASSERT_EQ(chmod((state() + "/mpsd.db").c_str(), 0644), 0);
  Daemon daemon(state(), socket() + ".2");
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  daemon.Stop(SIGTERM, absl::Seconds(60));
  const std::string log = ReadFile(daemon.log_path());
  EXPECT_THAT(log, HasSubstr("state dir " + state() + " has mode 0755"));
  EXPECT_THAT(log, HasSubstr("run chmod 700 " + state()));
  EXPECT_EQ(ModeOf(state() + "/mpsd.db"), 0600u);
}

// ---- the last adversarial pass: the state dir's links and modes, the command line ----------

// SQLite follows a link, even a dangling one: the database was created where the link points.
TEST_F(FaultE2eTest, ADatabaseLinkInTheStateDirIsRefused) {
  fs::create_directories(state());
  ASSERT_EQ(chmod(state().c_str(), 0700), 0);
  const std::string outside = dir_ / "elsewhere.db";
  ASSERT_EQ(symlink(outside.c_str(), (state() + "/mpsd.db").c_str()), 0);
  const CommandResult result = RunMpsd({"--listen", "unix://" + socket(), "--state-dir", state()});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr(state() + "/mpsd.db is a symbolic link"));
  EXPECT_THAT(result.err, HasSubstr("remove the link (rm " + state() + "/mpsd.db)"));
  EXPECT_FALSE(fs::exists(outside));
  // The lock too.
  fs::remove(state() + "/mpsd.db");
  ASSERT_EQ(symlink(outside.c_str(), (state() + "/mpsd.lock").c_str()), 0);
  const CommandResult lock = RunMpsd({"--listen", "unix://" + socket(), "--state-dir", state()});
  EXPECT_EQ(lock.exit_code, 1) << lock.err;
  EXPECT_THAT(lock.err, HasSubstr(state() + "/mpsd.lock is a symbolic link"));
  EXPECT_FALSE(fs::exists(outside));
}

// Others who may write the state dir may swap the database: refused, saying how to fix it.
TEST_F(FaultE2eTest, AStateDirWritableByOthersIsRefused) {
  for (const mode_t mode : {0777, 0770, 0702}) {
    fs::create_directories(state());
    ASSERT_EQ(chmod(state().c_str(), mode), 0);
    const CommandResult result =
        RunMpsd({"--listen", "unix://" + socket(), "--state-dir", state()});
    EXPECT_EQ(result.exit_code, 1) << result.err;
    EXPECT_THAT(result.err, HasSubstr(absl::StrFormat("state dir %s has mode %04o: group or "
                                                      "others may write in it",
                                                      state(), mode)));
    EXPECT_THAT(result.err, HasSubstr("make it private with: chmod 700 " + state()));
    EXPECT_FALSE(fs::exists(state() + "/mpsd.db"));
  }
}

// $MPSD_ADDR is mpsctl's: a daemon started in a shell that exported it for a remote mpsctl
// listened on that address instead of its unix socket.
TEST_F(FaultE2eTest, TheDaemonDoesNotReadTheClientsAddressVariable) {
  const std::string config = dir_ / "empty.yaml";
  WriteFile(config, "log_level: info\n");
  const CommandResult result =
      RunCommand({"/usr/bin/env", "MPSD_ADDR=127.0.0.1:7070", "XDG_RUNTIME_DIR=" + dir_.str(),
                  MpsdPath(), "--check-config", config});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("listen: unix://" + dir_.str() + "/mpsd/mpsd.sock\n"));
  EXPECT_THAT(result.out, ::testing::Not(HasSubstr("7070")));
  // mpsctl still takes it.
  const CommandResult client = RunCommand(
      {"/usr/bin/env", "MPSD_ADDR=unix://" + dir_.str() + "/none.sock", MpsctlPath(), "status"});
  EXPECT_NE(client.exit_code, 0);
  EXPECT_THAT(client.err, HasSubstr(dir_.str() + "/none.sock"));
}

// CLI11's own exit codes (105 for a value outside a set) told a script nothing: usage is 2.
TEST_F(FaultE2eTest, ABadFlagValueIsAUsageError) {
  const CommandResult role = RunMpsd(
      {"token", "add", "--tokens", dir_ / "tokens.yaml", "--name", "x", "--role", "superuser"});
  EXPECT_EQ(role.exit_code, 2) << role.err;
  EXPECT_THAT(role.err, HasSubstr("--role: superuser not in {viewer,submitter,admin}"));
  EXPECT_FALSE(fs::exists(dir_ / "tokens.yaml"));
  // mpsctl list --limit -1 named its range as 0 to DBL_MAX, all 309 digits of it.
  const CommandResult limit =
      RunCommand({MpsctlPath(), "--server", "unix://" + socket(), "list", "--limit", "-1"});
  EXPECT_EQ(limit.exit_code, 64) << limit.err;  // mpsctl: EX_USAGE
  EXPECT_THAT(limit.err, HasSubstr("--limit: Value -1 not in range 0 to 2147483647"));
  EXPECT_LT(limit.err.size(), 300u) << limit.err;
  const CommandResult reconnect = RunCommand(
      {MpsctlPath(), "--server", "unix://" + socket(), "--reconnect-timeout", "-5", "status"});
  EXPECT_EQ(reconnect.exit_code, 64) << reconnect.err;
  EXPECT_THAT(reconnect.err, HasSubstr("expected seconds from 0 to 31536000 (a year), got -5"));
}

// ---- a full disk under the state dir --------------------------------------------------------

// How the disk fills: a tmpfs of a few MiB mounted over the state dir (root only), or
// RLIMIT_FSIZE on the daemon (prlimit: every file it writes stops growing at the limit).
enum class DiskLimit { kTmpfs, kFileSizeLimit };

class DiskFullTest : public FaultE2eTest, public ::testing::WithParamInterface<DiskLimit> {
 protected:
  void TearDown() override {
    if (mounted_) umount2(disk().c_str(), MNT_DETACH);
  }
  std::string disk() const { return dir_ / "disk"; }

  // Fills the tmpfs but for `slack` bytes.
  void Fill(int64_t slack) {
    const std::string filler = disk() + "/filler";
    std::ofstream out(filler, std::ios::binary);
    const std::string block(1 << 16, '\0');
    while (out.write(block.data(), block.size()) && out.flush()) {
    }
    out.close();
    const int64_t size = static_cast<int64_t>(fs::file_size(filler));
    fs::resize_file(filler, size > slack ? size - slack : 0);
  }

  bool mounted_ = false;
};

TEST_P(DiskFullTest, JobsAreRefusedClearlyAndNoneAcceptedIsLost) {
  std::string state_dir = state();
  if (GetParam() == DiskLimit::kTmpfs) {
    if (geteuid() != 0) GTEST_SKIP() << "a tmpfs needs root; the RLIMIT_FSIZE case runs instead";
    fs::create_directories(disk());
    if (mount("tmpfs", disk().c_str(), "tmpfs", 0, "size=4m,mode=0700") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
    }
    mounted_ = true;
    state_dir = disk();  // Its log, <state_dir>.log, stays outside.
  }
  Daemon daemon(state_dir, socket());
  if (GetParam() == DiskLimit::kFileSizeLimit) {
    daemon.set_wrapper({"/usr/bin/prlimit", "--fsize=" + std::to_string(256 << 10), "--"});
  }
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  if (GetParam() == DiskLimit::kTmpfs) Fill(/*slack=*/96 << 10);

  std::vector<mpsd::v1::Job> accepted;
  absl::Status refused;
  for (int i = 0; i < 5000 && refused.ok(); ++i) {
    mpsd::v1::SubmitJobRequest request = SmallJob();
    request.set_request_id("fill-" + std::to_string(i));
    absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(daemon, request);
    if (job.ok()) {
      accepted.push_back(*job);
    } else {
      refused = job.status();
    }
  }
  ASSERT_FALSE(refused.ok()) << "5000 jobs fitted";
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("is full or a file size limit was reached"));
  EXPECT_THAT(refused.message(), HasSubstr(state_dir + "/mpsd.db"));
  ASSERT_GT(accepted.size(), 0u);
  // Issue 26: `mpsctl logs ID` (no --follow) waited for events the daemon could not store; it
  // answers from what is stored, for jobs that ran while the disk was full too.
  for (size_t i = 0; i < accepted.size(); i += std::max<size_t>(1, accepted.size() / 8)) {
    const CommandResult logs =
        RunCommandWithin({MpsctlPath(), "--server", "unix://" + socket(), "logs", accepted[i].id()},
                         absl::Seconds(20));
    EXPECT_NE(logs.exit_code, -1) << "mpsctl logs " << accepted[i].id() << " did not answer";
  }
  const CommandResult last = RunCommandWithin(
      {MpsctlPath(), "--server", "unix://" + socket(), "logs", accepted.back().id()},
      absl::Seconds(20));
  EXPECT_NE(last.exit_code, -1) << "mpsctl logs " << accepted.back().id() << " did not answer";
  daemon.Stop(SIGTERM, absl::Seconds(60));

  // Room again; every job a call answered is there, with the request it was submitted with.
  if (GetParam() == DiskLimit::kTmpfs) {
    ASSERT_EQ(mount("tmpfs", disk().c_str(), "tmpfs", MS_REMOUNT, "size=64m,mode=0700"), 0)
        << std::strerror(errno);
  }
  // A new socket path: the first daemon's connections in this process are not reused.
  Daemon again(state_dir, socket() + ".2");
  ASSERT_NO_FATAL_FAILURE(again.Start());
  for (const mpsd::v1::Job& job : accepted) {
    absl::StatusOr<mpsd::v1::Job> stored = rpc::Get(again, job.id());
    ASSERT_TRUE(stored.ok()) << "job " << job.id()
                             << " was accepted and is lost: " << stored.status();
    EXPECT_EQ(stored->spec().request_id(), job.spec().request_id());
  }
  // A retry of the refused request now succeeds, under a new id.
  mpsd::v1::SubmitJobRequest retry = SmallJob();
  retry.set_request_id("fill-" + std::to_string(accepted.size()));
  absl::StatusOr<mpsd::v1::Job> retried = rpc::Submit(again, retry);
  ASSERT_TRUE(retried.ok()) << retried.status();
  for (const mpsd::v1::Job& job : accepted) EXPECT_NE(job.id(), retried->id());
}

// Issue 26 item 2: a checkpoint or model.pt that does not fit aborted the executor inside
// LibTorch's archive writer ("unexpected pos 64 vs 0", EXECUTOR_CRASHED, no word of the disk)
// and left *.tmp files filling the disk, also after a restart. Now the job FAILS with DISK_FULL
// naming the file and the sizes, nothing of the write stays, the daemon answers throughout,
// and temporaries from before are removed at start.
TEST_P(DiskFullTest, AJobWhoseArtifactsDoNotFitFailsClearlyAndLeavesNoTemporaries) {
  std::string state_dir = state();
  if (GetParam() == DiskLimit::kTmpfs) {
    if (geteuid() != 0) GTEST_SKIP() << "a tmpfs needs root; the RLIMIT_FSIZE case runs instead";
    fs::create_directories(disk());
    if (mount("tmpfs", disk().c_str(), "tmpfs", 0, "size=24m,mode=0700") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
    }
    mounted_ = true;
    state_dir = disk();
  }
  auto daemon = std::make_unique<Daemon>(state_dir, socket());
  if (GetParam() == DiskLimit::kFileSizeLimit) {
    // The job database stays far below it; convnet's model.pt (about 4.8 MB) does not.
    daemon->set_wrapper({"/usr/bin/prlimit", "--fsize=" + std::to_string(2 << 20), "--"});
  }
  ASSERT_NO_FATAL_FAILURE(daemon->Start());
  if (GetParam() == DiskLimit::kTmpfs) Fill(/*slack=*/3 << 20);

  mpsd::v1::SubmitJobRequest model_only = TrainJobRequest(128, 64, 1, 64, "convnet");
  model_only.mutable_train_job()->mutable_checkpoint()->set_every_epochs(0);
  mpsd::v1::SubmitJobRequest checkpointed = TrainJobRequest(128, 64, 1, 64, "convnet");
  checkpointed.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  const std::string artifacts = state_dir + "/artifacts/";
  for (const auto& [request, file] :
       {std::pair{model_only, std::string("model.pt")},
        std::pair{checkpointed, std::string("checkpoint-epoch-1.pt")}}) {
    SCOPED_TRACE(file);
    absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(*daemon, request);
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<mpsd::v1::Job> ended = rpc::WaitForEnd(*daemon, job->id(), absl::Seconds(120));
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_EQ(ended->state(), mpsd::v1::Job::FAILED);
    EXPECT_EQ(ended->failure_reason(), mpsd::v1::Job::DISK_FULL) << ended->message();
    EXPECT_THAT(ended->message(),
                HasSubstr("disk full: " + artifacts + job->id() + "/" + file + " needs "));
    EXPECT_THAT(ended->message(), GetParam() == DiskLimit::kTmpfs
                                      ? HasSubstr("bytes are free on its file system")
                                      : HasSubstr("file size limit (RLIMIT_FSIZE)"));
    EXPECT_TRUE(rpc::Status(*daemon).ok());
  }
  for (const auto& entry : fs::recursive_directory_iterator(artifacts)) {
    EXPECT_THAT(entry.path().string(), ::testing::Not(::testing::EndsWith(".tmp")));
  }
  daemon->Stop(SIGTERM, absl::Seconds(60));

  // A temporary an executor killed mid-write left behind is removed at the next start; with
  // room again, the same job succeeds.
  const std::string stale = artifacts + "1/checkpoint-epoch-9.pt.tmp";
  fs::create_directories(artifacts + "1");
  WriteFile(stale, std::string(1000, 'x'));
  if (GetParam() == DiskLimit::kTmpfs) fs::remove(disk() + "/filler");
  daemon = std::make_unique<Daemon>(state_dir, socket() + ".2");
  ASSERT_NO_FATAL_FAILURE(daemon->Start());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_THAT(ReadFile(daemon->log_path()), HasSubstr("removed " + stale));
  absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(*daemon, model_only);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<mpsd::v1::Job> ended = rpc::WaitForEnd(*daemon, job->id(), absl::Seconds(120));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state(), mpsd::v1::Job::SUCCEEDED) << ended->message();
  EXPECT_TRUE(fs::exists(artifacts + job->id() + "/model.pt"));
}

INSTANTIATE_TEST_SUITE_P(Limits, DiskFullTest,
                         ::testing::Values(DiskLimit::kTmpfs, DiskLimit::kFileSizeLimit),
                         [](const auto& info) {
                           return info.param == DiskLimit::kTmpfs ? "Tmpfs" : "FileSizeLimit";
                         });

// ---- database pages corrupted mid-file ------------------------------------------------------

// SQLite's variable-length integer at `p` (1 to 9 bytes, big-endian, 7 bits a byte).
int64_t ReadVarint(const unsigned char* p) {
  int64_t value = 0;
  for (int i = 0; i < 8; ++i) {
    value = (value << 7) | (p[i] & 0x7f);
    if ((p[i] & 0x80) == 0) return value;
  }
  return (value << 8) | p[8];
}

// The rowids of the cells on table-leaf page `pageno` (1-based) of the database file `bytes`.
std::vector<int64_t> RowidsOnLeaf(const std::string& bytes, int page_size, int pageno) {
  const auto* page = reinterpret_cast<const unsigned char*>(bytes.data()) +
                     static_cast<size_t>(pageno - 1) * page_size;
  const unsigned char* header = page + (pageno == 1 ? 100 : 0);
  EXPECT_EQ(header[0], 0x0d) << "page " << pageno << " is not a table leaf";
  const int cells = header[3] << 8 | header[4];
  std::vector<int64_t> rowids;
  for (int i = 0; i < cells; ++i) {
    const int offset = header[8 + 2 * i] << 8 | header[9 + 2 * i];
    const unsigned char* cell = page + offset;
    int length = 0;
    while (cell[length] & 0x80) ++length;  // The payload size, then the rowid.
    rowids.push_back(ReadVarint(cell + length + 1));
  }
  return rowids;
}

// The leaf pages of the jobs table, in page order, and the page size.
std::vector<int> JobLeafPages(const std::string& database, int* page_size) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(database.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::vector<int> pages;
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &stmt, nullptr);
  if (sqlite3_step(stmt) == SQLITE_ROW) *page_size = sqlite3_column_int(stmt, 0);
  sqlite3_finalize(stmt);
  EXPECT_EQ(sqlite3_prepare_v2(db,
                               "SELECT pageno FROM dbstat WHERE name = 'jobs' AND pagetype = "
                               "'leaf' ORDER BY pageno",
                               -1, &stmt, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  while (sqlite3_step(stmt) == SQLITE_ROW) pages.push_back(sqlite3_column_int(stmt, 0));
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return pages;
}

TEST_F(FaultE2eTest, ACorruptPageIsDataLossForItsJobsAndTheRestIsReadable) {
  constexpr int kJobs = 60;
  {
    Daemon daemon(state(), socket());
    ASSERT_NO_FATAL_FAILURE(daemon.Start());
    for (int i = 0; i < kJobs; ++i) ASSERT_TRUE(rpc::Submit(daemon, SmallJob()).ok());
    // Cancelled newest first, so that the queue does not move on while they are.
    for (int i = kJobs; i >= 1; --i) rpc::Cancel(daemon, std::to_string(i)).IgnoreError();
  }  // SIGTERM: the last connection checkpoints the WAL into mpsd.db.
  const std::string database = state() + "/mpsd.db";
  ASSERT_FALSE(fs::exists(database + "-wal") && fs::file_size(database + "-wal") > 0);
  int page_size = 0;
  const std::vector<int> leaves = JobLeafPages(database, &page_size);
  ASSERT_GE(leaves.size(), 3u) << "the jobs should span several pages";
  const int victim = leaves[leaves.size() / 2];
  std::string bytes = ReadFile(database);
  const std::vector<int64_t> damaged = RowidsOnLeaf(bytes, page_size, victim);
  ASSERT_FALSE(damaged.empty());
  {
    std::fstream file(database, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(victim - 1) * page_size);
    const std::string garbage(page_size, '\xa5');
    file.write(garbage.data(), garbage.size());
  }

  Daemon daemon(state(), socket() + ".2");
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  int readable = 0;
  for (int i = 1; i <= kJobs; ++i) {
    absl::StatusOr<mpsd::v1::Job> job = rpc::Get(daemon, std::to_string(i));
    if (std::find(damaged.begin(), damaged.end(), i) != damaged.end()) {
      EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss) << i << ": " << job.status();
      EXPECT_THAT(job.status().message(),
                  HasSubstr("job " + std::to_string(i) + " is damaged in the database"));
    } else {
      ASSERT_TRUE(job.ok()) << i << ": " << job.status();
      EXPECT_EQ(job->id(), std::to_string(i));
      ++readable;
    }
  }
  EXPECT_EQ(readable, kJobs - static_cast<int>(damaged.size()));
  mpsd::v1::ListJobsRequest all;
  all.set_page_size(1000);
  absl::StatusOr<mpsd::v1::ListJobsResponse> list = rpc::List(daemon, all);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->jobs_size(), readable);
  // An undamaged job's events still stream; new jobs are stored after the highest id.
  int64_t intact = 1;
  while (std::find(damaged.begin(), damaged.end(), intact) != damaged.end()) ++intact;
  grpc::Status end;
  EXPECT_FALSE(rpc::StreamAll(daemon, std::to_string(intact), 0, &end).empty());
  absl::StatusOr<mpsd::v1::Job> next = rpc::Submit(daemon, SmallJob());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->id(), std::to_string(kJobs + 1));
  daemon.Stop(SIGTERM, absl::Seconds(60));
  EXPECT_THAT(ReadFile(daemon.log_path()),
              HasSubstr("cannot be read from the database; it is reported as DATA_LOSS"));
}

// The page of `table` (its root, a leaf for a small table) in the database file, and the page
// size: dbstat, as JobLeafPages.
int RootPageOf(const std::string& database, const std::string& table, int* page_size) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(database.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  int page = 0;
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &stmt, nullptr);
  if (sqlite3_step(stmt) == SQLITE_ROW) *page_size = sqlite3_column_int(stmt, 0);
  sqlite3_finalize(stmt);
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT rootpage FROM sqlite_schema WHERE name = ?1", -1, &stmt,
                               nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_bind_text(stmt, 1, table.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(stmt) == SQLITE_ROW) page = sqlite3_column_int(stmt, 0);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return page;
}

void OverwritePage(const std::string& database, int page, int page_size) {
  std::fstream file(database, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(page - 1) * page_size);
  const std::string garbage(page_size, '\xa5');
  file.write(garbage.data(), garbage.size());
}

// A fresh user's pass: a damaged sqlite_sequence page stopped the start with "database disk
// image is malformed" and nothing more. The start names the file and spells out the salvage;
// the test follows it, and the daemon starts on the result with its jobs.
TEST_F(FaultE2eTest, ADamagedSequencePageStopsTheStartSayingHowToRecover) {
  {
    Daemon daemon(state(), socket());
    ASSERT_NO_FATAL_FAILURE(daemon.Start());
    absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(daemon, SmallJob());
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<mpsd::v1::Job> done = rpc::WaitForEnd(daemon, job->id());
    ASSERT_TRUE(done.ok()) << done.status();  // Its artifacts make the start reserve ids.
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(rpc::Submit(daemon, SmallJob()).ok());
    for (int i = 4; i >= 2; --i) rpc::Cancel(daemon, std::to_string(i)).IgnoreError();
  }  // SIGTERM: the WAL is checkpointed into mpsd.db.
  const std::string database = state() + "/mpsd.db";
  int page_size = 0;
  const int page = RootPageOf(database, "sqlite_sequence", &page_size);
  ASSERT_GT(page, 1);
  OverwritePage(database, page, page_size);

  const CommandResult refused = RunMpsd({"--listen", "unix://" + socket(), "--state-dir", state()});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.exit_code, 137) << "mpsd started on a damaged database";
  EXPECT_THAT(refused.err, HasSubstr("the job database " + database + " is damaged"));
  const std::string salvage = "sqlite3 " + database +
                              " .dump | sed 's/^ROLLBACK; -- due to errors$/COMMIT;/' | sqlite3 " +
                              state() + "/mpsd-recovered.db && sqlite3 " + state() +
                              "/mpsd-recovered.db 'PRAGMA user_version = 2'";
  ASSERT_THAT(refused.err, HasSubstr(salvage));

  // What the message says, done.
  const CommandResult recovered = RunCommand({"/bin/sh", "-c", salvage});
  ASSERT_EQ(recovered.exit_code, 0) << recovered.err;
  fs::create_directories(dir_ / "damaged");
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (fs::exists(database + suffix)) {
      fs::rename(database + suffix, fs::path(dir_ / "damaged") / ("mpsd.db" + std::string(suffix)));
    }
  }
  fs::rename(state() + "/mpsd-recovered.db", database);
  Daemon daemon(state(), socket());
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  for (int i = 1; i <= 4; ++i) EXPECT_TRUE(rpc::Get(daemon, std::to_string(i)).ok()) << i;
  absl::StatusOr<mpsd::v1::Job> next = rpc::Submit(daemon, SmallJob());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->id(), "5");
}

// A fresh user's pass: with the jobs table's only page damaged, `mpsctl list` printed "no jobs"
// and exited 0 while `mpsctl get 1` said DATA_LOSS. The list says which jobs it cannot show.
TEST_F(FaultE2eTest, ListingADamagedJobsPageSaysWhichJobsAreMissing) {
  {
    Daemon daemon(state(), socket());
    ASSERT_NO_FATAL_FAILURE(daemon.Start());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(rpc::Submit(daemon, SmallJob()).ok());
    for (int i = 3; i >= 1; --i) rpc::Cancel(daemon, std::to_string(i)).IgnoreError();
  }
  const std::string database = state() + "/mpsd.db";
  int page_size = 0;
  const int page = RootPageOf(database, "jobs", &page_size);
  ASSERT_GT(page, 1);
  OverwritePage(database, page, page_size);

  Daemon daemon(state(), socket());
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  EXPECT_EQ(rpc::Get(daemon, "1").status().code(), absl::StatusCode::kDataLoss);
  const CommandResult list = RunCommand({MpsctlPath(), "--server", daemon.address(), "list"});
  EXPECT_EQ(list.exit_code, 1) << list.out << list.err;
  EXPECT_THAT(list.out, ::testing::Not(HasSubstr("no jobs\n")));
  EXPECT_THAT(list.err, HasSubstr("job(s) 3, 2, 1 cannot be read from the daemon's database"));
}

// A fresh user's pass: the event log dropped a batch of events after 3 failed commits (each
// ~5 s of SQLite's busy timeout while another process held the database). It keeps them and
// retries until the store takes them; meanwhile the daemon is NOT_SERVING and refuses submits.
TEST_F(FaultE2eTest, EventsAreKeptWhileTheDatabaseIsLockedAndStoredAfterwards) {
  Daemon daemon(state(), socket());
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  // Several seconds of steps, each with events.
  absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(daemon, TrainJobRequest(2048, 64, 8, 32, "mlp"));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitUntil([&] {
    absl::StatusOr<mpsd::v1::Job> now = rpc::Get(daemon, job->id());
    return now.ok() && now->state() == mpsd::v1::Job::RUNNING;
  }));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(state().append("/mpsd.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  // Three of the old attempts (5 s busy timeout each, then 0.1 s and 0.2 s apart) and more.
  absl::SleepFor(absl::Seconds(8));
  EXPECT_EQ(Health(daemon), HealthCheckResponse::NOT_SERVING);
  const absl::Status refused = rpc::Submit(daemon, SmallJob()).status();
  EXPECT_FALSE(refused.ok());
  absl::SleepFor(absl::Seconds(10));
  ASSERT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  absl::StatusOr<mpsd::v1::Job> done = rpc::WaitForEnd(daemon, job->id());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), mpsd::v1::Job::SUCCEEDED) << done->message();
  EXPECT_TRUE(
      WaitUntil([&] { return Health(daemon) == HealthCheckResponse::SERVING; }, absl::Seconds(30)));
  // Every event, 1 to the last, from the store (a restart reads only what is stored).
  daemon.Stop(SIGTERM, absl::Seconds(60));
  Daemon again(state(), socket() + ".2");
  ASSERT_NO_FATAL_FAILURE(again.Start());
  const std::vector<mpsd::v1::JobEvent> events = rpc::StreamAll(again, job->id());
  ASSERT_FALSE(events.empty());
  for (size_t i = 0; i < events.size(); ++i) {
    ASSERT_EQ(events[i].seq(), static_cast<int64_t>(i + 1)) << "events were dropped";
  }
  EXPECT_EQ(events.back().seq(), done->last_seq());
  EXPECT_THAT(ReadFile(daemon.log_path()), HasSubstr("they are kept and retried"));
}

}  // namespace
}  // namespace mpsd::testing
