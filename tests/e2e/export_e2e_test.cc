// End-to-end tests of `mpsctl export` and the daemon's live TensorBoard files: a real mpsd trains
// a small Fashion-MNIST job, the real mpsctl exports it, and an independent reader
// (tests/e2e/tensorboard_check.py: its own TFRecord code, crcmod's CRC-32C, Python classes
// generated from the same .proto) checks every step against the events the daemon stored; mpsd's
// reader reads a file that Python wrote.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/tensorboard/tfrecord.h"
#include "google/protobuf/util/json_util.h"
#include "mpsd/tensorboard/event.pb.h"
#include "tests/common/files.h"
#include "tests/common/temp_dir.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::JobEvent;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

// 256 examples at batch 32 over 2 epochs: 16 steps, 2 evaluated epochs.
v1::SubmitJobRequest SmallJob(const std::string& name) {
  v1::SubmitJobRequest request = TrainJobRequest(256, 64, 2, 32, "mlp");
  request.set_name(name);
  return request;
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The stored events as JSON lines (protobuf's mapping), for the Python checker.
std::string JsonLines(const std::vector<JobEvent>& events) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  for (const JobEvent& event : events) {
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(event, &json, options).ok());
    absl::StrAppend(&out, json, "\n");
  }
  return out;
}

// Runs the Python checker on `events_file` against `events` (written to `stored` first);
// returns what it printed (the test fails on a non-zero exit). `write`: where Python writes its
// own file, or "".
CommandResult RunPythonCheck(const std::vector<JobEvent>& events, const std::string& events_file,
                             const std::string& stored, const std::string& write = "") {
  WriteFile(stored, JsonLines(events));
  std::vector<std::string> argv = {MPSD_CRCMOD_PYTHON, SourcePath("tests/e2e/tensorboard_check.py"),
                                   "--proto-root",     SourcePath("proto"),
                                   "--events",         events_file,
                                   "--stored",         stored,
                                   "--hparam",         "batch_size=32.0",
                                   "--hparam",         "model.name=mlp",
                                   "--hparam",         "optimizer.name=adam"};
  if (!write.empty()) argv.insert(argv.end(), {"--write", write});
  CommandResult result = RunCommand(argv);
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  return result;
}

class ExportE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_dir_ = std::make_unique<TempDir>();
    daemon_ =
        std::make_unique<Daemon>(suite_dir_->str() + "/state", suite_dir_->str() + "/mpsd.sock");
    daemon_->Start();
    job_ = rpc_ok::Submit(*daemon_, SmallJob("small run"));
    job_ = rpc_ok::WaitForEnd(*daemon_, job_.id());
    events_ = rpc::StreamAll(*daemon_, job_.id());
  }
  static void TearDownTestSuite() {
    daemon_.reset();
    suite_dir_.reset();
  }
  void SetUp() override {
    ASSERT_GT(daemon_->pid(), 0) << "the suite's mpsd did not start";
    ASSERT_EQ(job_.state(), v1::Job::SUCCEEDED) << job_.message();
  }

  static CommandResult Mpsctl(std::vector<std::string> args) {
    args.insert(args.begin(), {MpsctlPath(), "--server", daemon_->address()});
    return RunCommand(args);
  }

  CommandResult PythonCheck(const std::string& events_file, const std::string& write = "") {
    return RunPythonCheck(events_, events_file, dir_ / "stored.jsonl", write);
  }

  int StepsStored() const {
    return static_cast<int>(std::count_if(events_.begin(), events_.end(),
                                          [](const JobEvent& e) { return e.has_step(); }));
  }

  TempDir dir_;
  inline static std::unique_ptr<TempDir> suite_dir_;
  inline static std::unique_ptr<Daemon> daemon_;
  inline static v1::Job job_;
  inline static std::vector<JobEvent> events_;
};

TEST_F(ExportE2eTest, TensorBoardExportHoldsEveryStoredStepOnceAsAnIndependentReaderSees) {
  ASSERT_EQ(StepsStored(), 16);
  CommandResult exported =
      Mpsctl({"export", job_.id(), "--format", "tensorboard", "-o", dir_ / "tb"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  // The job's name, made safe for a path, is the run's folder.
  const std::vector<std::string> files = FilesIn(dir_ / ("tb/small_run-" + job_.id()));
  ASSERT_THAT(files, SizeIs(1));
  EXPECT_THAT(files[0], ::testing::StartsWith(absl::StrCat("events.out.tfevents.",
                                                           job_.created_at().seconds(), ".")));
  EXPECT_THAT(exported.out, HasSubstr(files[0]));
  CommandResult checked =
      PythonCheck(dir_ / ("tb/small_run-" + job_.id() + "/" + files[0]), dir_ / "py.tfevents");
  EXPECT_THAT(checked.out, HasSubstr("16 steps, 2 epochs"));

  // The reverse: what Python wrote, mpsd's reader reads (CRCs checked) and parses.
  auto records = tensorboard::ReadTfRecords(dir_ / "py.tfevents");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_THAT(*records, SizeIs(2));
  tensorboard::Event first, second;
  ASSERT_TRUE(first.ParseFromString((*records)[0]));
  ASSERT_TRUE(second.ParseFromString((*records)[1]));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  EXPECT_EQ(second.step(), 7);
  ASSERT_EQ(second.summary().value_size(), 2);
  EXPECT_EQ(second.summary().value(0).tag(), "py/value");
  EXPECT_EQ(second.summary().value(0).simple_value(), 0.5f);
  EXPECT_EQ(second.summary().value(1).simple_value(), -3.0f);

  // A second export of the same job replaces the file rather than adding a second run's worth.
  ASSERT_EQ(Mpsctl({"export", job_.id(), "--format", "tensorboard", "-o", dir_ / "tb"}).exit_code,
            0);
  EXPECT_EQ(FilesIn(dir_ / ("tb/small_run-" + job_.id())), files);
}

TEST_F(ExportE2eTest, CsvHasOneRowPerStepAndPerEpochWithTheStoredValues) {
  CommandResult exported = Mpsctl({"export", job_.id(), "--format", "csv", "-o", dir_ / "csv"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_EQ(FilesIn(dir_ / ("csv/small_run-" + job_.id())),
            (std::vector<std::string>{"epochs.csv", "steps.csv"}));
  // -o with a trailing slash: the same folder, its paths printed without "//".
  CommandResult slash =
      Mpsctl({"export", job_.id(), "--format", "csv", "-o", (dir_ / "csv2") + "/"});
  ASSERT_EQ(slash.exit_code, 0) << slash.err;
  EXPECT_THAT(slash.out, HasSubstr(dir_ / ("csv2/small_run-" + job_.id())));
  EXPECT_THAT(slash.out, Not(HasSubstr("//")));
  std::vector<std::string> steps = absl::StrSplit(
      absl::StripSuffix(ReadFile(dir_ / ("csv/small_run-" + job_.id() + "/steps.csv")), "\n"),
      '\n');
  ASSERT_THAT(steps, SizeIs(17));
  const std::vector<std::string> header = absl::StrSplit(steps[0], ',');
  ASSERT_GE(header.size(), 4u);
  EXPECT_EQ(header[0], "step");
  EXPECT_EQ(header[1], "wall_time");
  const auto column = std::find(header.begin(), header.end(), "loss") - header.begin();
  ASSERT_LT(column, static_cast<long>(header.size()));
  int row = 1;
  for (const JobEvent& event : events_) {
    if (!event.has_step()) continue;
    const std::vector<std::string> cells = absl::StrSplit(steps[row++], ',');
    ASSERT_EQ(cells.size(), header.size());
    EXPECT_EQ(cells[0], absl::StrCat(event.step().step()));
    float loss = 0;
    ASSERT_TRUE(absl::SimpleAtof(cells[column], &loss)) << cells[column];
    EXPECT_EQ(loss, event.step().loss()) << "step " << event.step().step();
  }
  const std::string epochs = ReadFile(dir_ / ("csv/small_run-" + job_.id() + "/epochs.csv"));
  EXPECT_THAT(epochs, ::testing::StartsWith("epoch,wall_time,train_loss,"));
  EXPECT_EQ(std::count(epochs.begin(), epochs.end(), '\n'), 3);
}

TEST_F(ExportE2eTest, JsonlHasEveryStoredEventOnce) {
  ASSERT_EQ(Mpsctl({"export", job_.id(), "--format", "jsonl", "-o", dir_ / "j"}).exit_code, 0);
  std::vector<JobEvent> lines =
      ParseEventLines(ReadFile(dir_ / ("j/small_run-" + job_.id() + "/events.jsonl")));
  ASSERT_EQ(lines.size(), events_.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].SerializeAsString(), events_[i].SerializeAsString()) << "event " << i;
  }
}

TEST_F(ExportE2eTest, BadFormatAndUnknownJobFailClearly) {
  CommandResult bad = Mpsctl({"export", job_.id(), "--format", "parquet", "-o", dir_ / "x"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--format"));
  CommandResult unknown = Mpsctl({"export", "999999", "--format", "csv", "-o", dir_ / "x"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("999999"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x"));
}

// A sweep has no metrics of its own: its id exports each trial as a run of its own (it wrote
// only a header row before).
TEST_F(ExportE2eTest, ASweepExportsEachOfItsTrials) {
  v1::SubmitJobRequest request = SmallJob("lr sweep");
  v1::SweepParameter* lr = request.mutable_sweep()->add_grid();
  lr->set_path("optimizer.learning_rate");
  lr->add_values("0.001");
  lr->add_values("0.01");
  v1::Job sweep = rpc_ok::Submit(*daemon_, request);
  ASSERT_EQ(sweep.kind(), v1::Job::SWEEP);
  sweep = rpc_ok::WaitForEnd(*daemon_, sweep.id());
  ASSERT_EQ(sweep.state(), v1::Job::SUCCEEDED) << sweep.message();
  CommandResult exported = Mpsctl({"export", sweep.id(), "--format", "csv", "-o", dir_ / "s"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  ASSERT_EQ(sweep.trial_job_ids_size(), 2);
  const std::vector<std::string> trials = {"lr_sweep_0-" + sweep.trial_job_ids(0),
                                           "lr_sweep_1-" + sweep.trial_job_ids(1)};
  EXPECT_EQ(FilesIn(dir_ / "s"), trials);
  for (const std::string& trial : trials) {
    const std::string steps = ReadFile(dir_ / absl::StrCat("s/", trial, "/steps.csv"));
    EXPECT_EQ(std::count(steps.begin(), steps.end(), '\n'), 17) << trial;  // header + 16 steps
  }
}

// The daemon's live files: a job with `tensorboard: true` on a daemon with --tensorboard-dir gets
// one file in its artifacts and one in that directory, written while it trains (read before
// the job ends), and once it ended both hold every stored step exactly once.
TEST(LiveTensorBoardE2eTest, TheDaemonWritesTheFileWhileTheJobTrains) {
  TempDir dir;
  Daemon daemon(dir / "state", dir / "mpsd.sock");
  daemon.Start({"--tensorboard-dir", dir / "tb"});
  v1::SubmitJobRequest request = TrainJobRequest(320, 64, 40, 32, "mlp");
  request.set_name("live");
  request.mutable_train_job()->set_tensorboard(true);
  const v1::Job job = rpc_ok::Submit(daemon, request);
  const std::string run_dir = dir / ("tb/live-" + job.id());
  // While it runs: the file is there and holds steps (the daemon flushes at every epoch).
  int64_t steps_seen = 0;
  ASSERT_TRUE(WaitUntil([&] {
    const std::vector<std::string> files = FilesIn(run_dir);
    if (files.size() != 1) return false;
    auto records = tensorboard::ReadTfRecords(run_dir + "/" + files[0], true);
    if (!records.ok()) return false;
    for (const std::string& record : *records) {
      tensorboard::Event event;
      if (event.ParseFromString(record) && event.step() > steps_seen) steps_seen = event.step();
    }
    return steps_seen >= 10;
  }));
  EXPECT_EQ(rpc_ok::Get(daemon, job.id()).state(), v1::Job::RUNNING);
  // A running job exports what is stored so far.
  CommandResult running = RunCommand({MpsctlPath(), "--server", daemon.address(), "export",
                                      job.id(), "--format", "csv", "-o", dir / "running"});
  EXPECT_EQ(running.exit_code, 0) << running.err;
  const std::string steps_csv = ReadFile(dir / ("running/live-" + job.id() + "/steps.csv"));
  EXPECT_GE(std::count(steps_csv.begin(), steps_csv.end(), '\n'), 11) << steps_csv;
  ASSERT_TRUE(rpc::Cancel(daemon, job.id()).ok());
  const v1::Job ended = rpc_ok::WaitForEnd(daemon, job.id());
  EXPECT_EQ(ended.state(), v1::Job::CANCELLED);
  const std::vector<JobEvent> events = rpc::StreamAll(daemon, job.id());

  const std::vector<std::string> files = FilesIn(run_dir);
  ASSERT_THAT(files, SizeIs(1));
  CommandResult checked = RunPythonCheck(events, run_dir + "/" + files[0], dir / "stored.jsonl");
  EXPECT_THAT(checked.out, HasSubstr(" steps, "));
  // The artifact copy is the same file.
  const std::string artifact_dir = dir / ("state/artifacts/" + job.id() + "/tensorboard");
  EXPECT_EQ(FilesIn(artifact_dir), files);
  EXPECT_TRUE(ReadFile(artifact_dir + "/" + files[0]) == ReadFile(run_dir + "/" + files[0]))
      << "the artifact and the tensorboard_dir file differ";
  CommandResult artifacts =
      RunCommand({MpsctlPath(), "--server", daemon.address(), "artifacts", job.id()});
  EXPECT_THAT(artifacts.out, HasSubstr("tensorboard/" + files[0]));
}

// A sweep with `tensorboard: true`: one run per trial, none for the sweep itself (it trains
// nothing; its run held only hyperparameters).
TEST(LiveTensorBoardE2eTest, ASweepWritesOneRunPerTrialAndNoneForItself) {
  TempDir dir;
  Daemon daemon(dir / "state", dir / "mpsd.sock");
  daemon.Start({"--tensorboard-dir", dir / "tb"});
  v1::SubmitJobRequest request = TrainJobRequest(128, 64, 1, 32, "mlp");
  request.set_name("lr");
  request.mutable_train_job()->set_tensorboard(true);
  v1::SweepParameter* lr = request.mutable_sweep()->add_grid();
  lr->set_path("optimizer.learning_rate");
  lr->add_values("0.001");
  lr->add_values("0.01");
  const v1::Job sweep = rpc_ok::WaitForEnd(daemon, rpc_ok::Submit(daemon, request).id());
  ASSERT_EQ(sweep.state(), v1::Job::SUCCEEDED) << sweep.message();
  EXPECT_THAT(FilesIn(dir / "tb"),
              ElementsAre("lr_0-" + sweep.trial_job_ids(0), "lr_1-" + sweep.trial_job_ids(1)));
  EXPECT_FALSE(std::filesystem::exists(dir / ("state/artifacts/" + sweep.id() + "/tensorboard")));
}

// A job that resumes after the daemon was killed: the restarted daemon rewrites the live file
// from the stored events (one file, one HParams session), and once it ended the live file and an
// export both hold each step once, the latest attempt's value (the checker folds the stored
// events the same way, independently).
TEST(LiveTensorBoardE2eTest, AJobResumedAfterADaemonKillHasEachStepOnce) {
  TempDir dir;
  auto daemon = std::make_unique<Daemon>(dir / "state", dir / "mpsd.sock");
  daemon->Start({"--tensorboard-dir", dir / "tb"});
  v1::SubmitJobRequest request = TrainJobRequest(512, 64, 6, 64);
  request.set_name("resumed");
  request.mutable_train_job()->mutable_model()->set_name("mlp");
  request.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  request.mutable_train_job()->set_restart_policy("resume");
  request.mutable_train_job()->set_batch_size(32);
  const v1::Job job = rpc_ok::Submit(*daemon, request);
  ASSERT_TRUE(WaitUntil([&] {
    const v1::Job now = rpc_ok::Get(*daemon, job.id());
    return now.has_last_checkpoint() && now.last_step().step() > now.last_checkpoint().step();
  }));
  daemon->Stop(SIGKILL, absl::Seconds(60));
  daemon->Start({"--tensorboard-dir", dir / "tb"});
  const v1::Job ended = rpc_ok::WaitForEnd(*daemon, job.id());
  ASSERT_EQ(ended.state(), v1::Job::SUCCEEDED) << ended.message();
  EXPECT_GT(ended.summary().resumed_at_step(), 0);
  const std::vector<JobEvent> events = rpc::StreamAll(*daemon, job.id());
  std::set<int64_t> distinct;
  int64_t stored_steps = 0;
  for (const JobEvent& e : events) {
    if (!e.has_step()) continue;
    ++stored_steps;
    distinct.insert(e.step().step());
  }
  // Usually the killed run stored steps past its checkpoint, which the resumed run repeats.
  RecordProperty("repeated_steps", static_cast<int>(stored_steps - distinct.size()));
  std::printf("stored %lld step events for %zu steps\n", static_cast<long long>(stored_steps),
              distinct.size());

  const std::string run_dir = dir / ("tb/resumed-" + job.id());
  const std::vector<std::string> files = FilesIn(run_dir);
  ASSERT_THAT(files, SizeIs(1));
  CommandResult live = RunPythonCheck(events, run_dir + "/" + files[0], dir / "stored.jsonl");
  EXPECT_THAT(live.out, HasSubstr(absl::StrCat(" ", 6 * 512 / 32, " steps, 6 epochs")));
  CommandResult exported = RunCommand({MpsctlPath(), "--server", daemon->address(), "export",
                                       job.id(), "--format", "tensorboard", "-o", dir / "out"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const std::vector<std::string> out = FilesIn(dir / ("out/resumed-" + job.id()));
  ASSERT_THAT(out, SizeIs(1));
  RunPythonCheck(events, dir / ("out/resumed-" + job.id() + "/" + out[0]), dir / "stored2.jsonl");
}

}  // namespace
}  // namespace mpsd::testing
