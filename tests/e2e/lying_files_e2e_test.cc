// Files that lie about themselves (issue 26, item 7), through a real mpsd whose config states
// the input limits (`executor: {max_file_bytes, max_unpacked_bytes, max_image_pixels}`): a
// TorchScript model or a tensors file whose storage records are shorter than its pickle claims,
// a TorchScript constant cut short, a few KiB that claim megabytes once inflated, tensor data
// compressed as torch never writes it, a file over the size limit, an IDX header that claims
// 78 MB, a PNG that claims more pixels than allowed. Each is refused (at submit, or as the job's
// failure) naming the field or the file and the rule, nothing is built from it, the executor
// does not crash, and an honest job runs afterwards. Files: tests/e2e/lying_files.py (Debian's
// python3-torch and python3-pil).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/common/files.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using ::mpsd::v1::Job;
using ::testing::HasSubstr;

constexpr char kPython[] = MPSD_TORCHVISION_PYTHON;

class LyingFilesE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch";
    const CommandResult written = RunCommandWithin(
        {kPython, SourcePath("tests/e2e/lying_files.py"), dir_.str()}, absl::Seconds(300));
    ASSERT_EQ(written.exit_code, 0) << written.out << written.err;
    const std::string config = dir_.str() + "/mpsd.yaml";
    WriteFile(config,
              "executor:\n"
              "  max_file_bytes: 1048576\n"
              "  max_unpacked_bytes: 1048576\n"
              "  max_image_pixels: 4096\n");
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start({"--config", config}));
  }
  void TearDown() override {
    if (daemon_ == nullptr) return;
    const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  CommandResult Mpsctl(std::vector<std::string> args) {
    args.insert(args.begin(), {MpsctlPath(), "--server", daemon_->address()});
    return RunCommandWithin(args, absl::Seconds(300));
  }

  std::string JobFile(const std::string& name, const std::string& model,
                      const std::string& dataset) {
    const std::string path = absl::StrCat(dir_.str(), "/", name, ".yaml");
    WriteFile(path, absl::StrCat("kind: TrainJob\n", model, "\n", dataset,
                                 "\nbatch_size: 8\nepochs: 1\nseed: 1\ndevice: cpu\n"));
    return path;
  }
  static std::string TorchScript(const std::string& file) {
    return absl::StrCat("model: {torchscript: ", file, "}");
  }
  static std::string Tensors(const std::string& file) {
    return absl::StrCat("dataset: {name: tensors, root: ", file, "}");
  }

  // What became of `job_file`: the submit's error, or (if it was accepted) the finished job's
  // state name and message.
  std::string Outcome(const std::string& job_file) {
    const CommandResult submitted = Mpsctl({"submit", job_file, "--follow"});
    return absl::StrCat(submitted.out, submitted.err);
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(LyingFilesE2eTest, EachLieIsRefusedNamingTheFileAndTheRuleAndNothingCrashes) {
  const absl::StatusOr<mpsd::v1::DeviceInfo> before = rpc::Device(*daemon_);
  ASSERT_TRUE(before.ok()) << before.status();
  const std::string tensors = Tensors("tensors.pt");
  struct Lie {
    std::string name;
    std::string job_file;
    std::vector<std::string> expected;
  };
  const std::string d = dir_.str() + "/";
  const std::vector<Lie> lies = {
      {"script-cut",
       JobFile("script-cut", TorchScript("script-cut.pt"), tensors),
       {"train_job.model.torchscript: " + d +
        "script-cut.pt: not a TorchScript module mpsd "
        "loads: data.pkl: tensor \"weight\": its storage data/0 holds 8 bytes, but the pickle "
        "says 216 elements of 4 bytes (864 bytes): the file is damaged or was altered"}},
      {"script-constant",
       JobFile("script-constant", TorchScript("script-constant.pt"), tensors),
       {d + "script-constant.pt: not a TorchScript module mpsd loads: constants.pkl: a tensor: "
            "its storage constants/0 holds 4 bytes, but the pickle says 16 elements of 4 bytes",
        "the file is damaged or was altered"}},
      {"script-bomb",
       JobFile("script-bomb", TorchScript("script-bomb.pt"), tensors),
       {d + "script-bomb.pt: not a TorchScript module mpsd loads: its entries unpack to more "
            "than 1048576 bytes (at tinynet/extra/zeros, which claims 2097152 bytes) "
            "(executor.max_unpacked_bytes: 1048576)"}},
      {"tensors-cut",
       JobFile("tensors-cut", "model: {name: mlp}", Tensors("tensors-cut.pt")),
       {"train_job.dataset.root: ", d + "tensors-cut.pt: ",
        "its storage data/0 holds 8 bytes, but the pickle says 6144 elements of 4 bytes",
        "the file is damaged or was altered"}},
      {"tensors-deflated",
       JobFile("tensors-deflated", "model: {name: mlp}", Tensors("tensors-deflated.pt")),
       {d + "tensors-deflated.pt: its tensor data tensors/data/0 is compressed (22012 bytes "
            "claiming 24576), which torch never writes"}},
      {"tensors-big",
       JobFile("tensors-big", "model: {name: mlp}", Tensors("tensors-big.pt")),
       {d + "tensors-big.pt: 1559799 bytes, more than executor.max_file_bytes (1048576)"}},
      {"idx",
       JobFile("idx", "model: {name: mlp}", "dataset: {name: fashion-mnist, root: idx}"),
       {"train-images-idx3-ubyte.gz",
        "dimensions [100000, 28, 28] describe more than 1048576 bytes "
        "(executor.max_unpacked_bytes)"}},
      {"pixels",
       JobFile("pixels", "model: {name: mlp}",
               "dataset: {name: image_folder, root: pixels, image_folder: {image_size: [8, 8]}}"),
       {"big.png",
        "image of 100×100 pixels is larger than the 4096 pixels allowed "
        "(executor.max_image_pixels)"}},
      // User code may not open files: torch.from_file read the daemon's admin token and wrote
      // into its state dir, past data_roots (the adversarial pass of issue 26).
      {"reads-file",
       JobFile("reads-file", TorchScript("reads-file.pt"), tensors),
       {"train_job.model.torchscript: " + d +
        "reads-file.pt: method forward uses "
        "aten::from_file (torch.from_file) opens a file by name, which mpsd does not run"}},
      // Class names travel in every answer about the job: bounded.
      {"long-classes",
       JobFile("long-classes", "model: {name: mlp}", Tensors("long-classes.pt")),
       {d + "long-classes.pt: classes[0]: 300 bytes, more than the 256 a class name may have"}},
  };
  for (const Lie& lie : lies) {
    SCOPED_TRACE(lie.name);
    const std::string outcome = Outcome(lie.job_file);
    for (const std::string& expected : lie.expected) EXPECT_THAT(outcome, HasSubstr(expected));
  }
  // Nothing crashed the warm executor, and an honest job on the same kinds of files trains.
  const absl::StatusOr<mpsd::v1::DeviceInfo> after = rpc::Device(*daemon_);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->executor_restarts(), before->executor_restarts());
  const std::string honest = Outcome(JobFile("honest", TorchScript("tinynet.pt"), tensors));
  EXPECT_THAT(honest, HasSubstr("SUCCEEDED"));
}

// A model's print() and the paths a job names reach the daemon's log escaped: no forged lines,
// no terminal escape codes.
TEST_F(LyingFilesE2eTest, WhatAJobSaysReachesTheLogEscaped) {
  const std::string printed =
      Outcome(JobFile("printer", TorchScript("printer.pt"), Tensors("tensors.pt")));
  EXPECT_THAT(printed, HasSubstr("SUCCEEDED"));
  const std::string forged = dir_.str() + "/x\n[2026-01-01 00:00:00.000] [mpsd] [error] FORGED2";
  Outcome(JobFile("forged", "model: {name: mlp}", Tensors("\"" + forged + "\"")));
  const std::string log = ReadFile(daemon_->log_path());
  EXPECT_THAT(log, HasSubstr("TorchScript print: hello\\n[2026-01-01"));
  EXPECT_THAT(log, HasSubstr("\\x1b[31mred"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("\x1b[31mred")));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("\n[2026-01-01 00:00:00.000] [mpsd] [error] FORGED")));
}

// The limits are the config's: out of range, mpsd --check-config names the key.
TEST(InputLimitsConfigTest, CheckConfigNamesAKeyOutOfRange) {
  TempDir dir;
  const std::string config = dir.str() + "/mpsd.yaml";
  WriteFile(config, "executor:\n  max_unpacked_bytes: 10\n");
  const CommandResult checked =
      RunCommandWithin({MpsdPath(), "--check-config", config}, absl::Seconds(60));
  EXPECT_NE(checked.exit_code, 0);
  EXPECT_THAT(
      checked.out + checked.err,
      HasSubstr("executor.max_unpacked_bytes: must be in [1048576, 1099511627776], got 10"));
}

}  // namespace
}  // namespace mpsd::testing
