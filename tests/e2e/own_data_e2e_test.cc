// An image_folder job through a real mpsd and mpsctl: a job file with a relative root (made
// absolute against the job file's directory), the decode cache under <state_dir>/cache kept
// across jobs, and the class names in the stored summary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::UnorderedElementsAre;

constexpr char kPython[] = MPSD_PIL_PYTHON;

std::vector<std::string> CacheFiles(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool LogSays(const std::vector<mpsd::v1::JobEvent>& events, const std::string& text) {
  for (const mpsd::v1::JobEvent& event : events) {
    if (event.has_log() && absl::StrContains(event.log().text(), text)) return true;
  }
  return false;
}

TEST(OwnDataE2eTest, ImageFolderJobCachesItsDecodeUnderTheStateDir) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with PIL";
  TempDir dir;
  const std::string jobs = dir.str() + "/jobs";
  fs::create_directories(jobs);
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", SourcePath("examples/make_own_data.py"), " ",
                                     jobs, "/colours --train-per-class 8 --val-per-class 4")
                            .c_str()),
            0);
  const std::string job_file = jobs + "/job.yaml";
  WriteFile(job_file,
            "kind: TrainJob\n"
            "model: {name: mlp}\n"
            "dataset:\n"
            "  name: image_folder\n"
            "  root: colours\n"  // relative to the job file
            "  image_folder: {image_size: [12, 12]}\n"
            "batch_size: 8\n"
            "epochs: 4\n"
            "optimizer: {name: adam, learning_rate: 0.003}\n"
            "seed: 1\n"
            "device: cpu\n");
  const std::string state = dir.str() + "/state";
  Daemon daemon(state, dir.str() + "/mpsd.sock");
  daemon.Start();

  std::vector<std::vector<mpsd::v1::JobEvent>> runs;
  for (int run = 0; run < 2; ++run) {
    // From another working directory: only the job file's directory gives the root meaning.
    const CommandResult followed = RunCommand(
        {MpsctlPath(), "--server", daemon.address(), "--json", "submit", job_file, "--follow"});
    ASSERT_EQ(followed.exit_code, 0) << followed.out << followed.err;
    runs.push_back(ParseEventLines(followed.out));
    ASSERT_FALSE(runs.back().empty());
    absl::StatusOr<mpsd::v1::Job> job = rpc::Get(daemon, runs.back()[0].job_id());
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), mpsd::v1::Job::SUCCEEDED);
    EXPECT_THAT(job->summary().class_names(), ElementsAre("blue", "green", "red"));
    EXPECT_EQ(job->summary().data_placement(), "resident");
    EXPECT_GE(job->summary().test_accuracy(), 0.9);
  }
  EXPECT_TRUE(LogSays(runs[0], "train: decoded 24 images in "));
  EXPECT_TRUE(LogSays(runs[0], "; cached in " + state + "/cache/image_folder-"));
  EXPECT_TRUE(LogSays(runs[1], "train: 24 images from the decode cache " + state + "/cache/"));
  EXPECT_TRUE(LogSays(runs[1], "val: 12 images from the decode cache"));
  // One file per split; the name's hash (of the folder's path) orders them, so in any order.
  EXPECT_THAT(CacheFiles(state + "/cache"),
              UnorderedElementsAre(EndsWith("-train.u8"), EndsWith("-val.u8")));
  EXPECT_EQ(fs::status(state + "/cache").permissions() & fs::perms::all, fs::perms::owner_all);
}

// Issue 26: a FIFO named zz.png in train/red/ passed submit and the job then waited in RUNNING
// forever, reading it (the queue behind it waiting too). Scanning opens nothing: the FIFO is
// refused at submit naming it, and with on_bad_image: skip it is left out unopened.
TEST(OwnDataE2eTest, AFifoAmongTheImagesIsRefusedAtSubmitOrSkippedAndNeverOpened) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with PIL";
  TempDir dir;
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", SourcePath("examples/make_own_data.py"), " ",
                                     dir.str(), "/colours --train-per-class 4 --val-per-class 2")
                            .c_str()),
            0);
  const std::string fifo = dir.str() + "/colours/train/red/zz.png";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  daemon.Start();
  const auto job_file = [&](const std::string& extra) {
    const std::string path = dir.str() + "/job.yaml";
    WriteFile(path, absl::StrCat("kind: TrainJob\nmodel: {name: mlp}\ndataset:\n"
                                 "  name: image_folder\n  root: colours\n"
                                 "  image_folder: {image_size: [8, 8]",
                                 extra, "}\nbatch_size: 4\nepochs: 1\ndevice: cpu\n"));
    return path;
  };
  const CommandResult refused = RunCommandWithin(
      {MpsctlPath(), "--server", daemon.address(), "submit", job_file("")}, absl::Seconds(60));
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_THAT(refused.err, ::testing::HasSubstr("train_job.dataset.root: " + fifo +
                                                ": not a regular file (a FIFO)"));

  const CommandResult followed =
      RunCommandWithin({MpsctlPath(), "--server", daemon.address(), "--json", "submit",
                        job_file(", on_bad_image: skip"), "--follow"},
                       absl::Seconds(120));
  ASSERT_EQ(followed.exit_code, 0) << followed.out << followed.err;
  const std::vector<mpsd::v1::JobEvent> events = ParseEventLines(followed.out);
  ASSERT_FALSE(events.empty());
  absl::StatusOr<mpsd::v1::Job> job = rpc::Get(daemon, events[0].job_id());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), mpsd::v1::Job::SUCCEEDED) << job->message();
  EXPECT_TRUE(LogSays(events, fifo + ": not a regular file (a FIFO)"));
  EXPECT_TRUE(fs::is_fifo(fifo));
}

}  // namespace
}  // namespace mpsd::testing
