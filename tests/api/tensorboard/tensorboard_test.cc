// api/tensorboard: CRC-32C against published check values, TFRecord framing and its checks, a
// job's events folded per step (resumes included), and an event file read back record by record.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "api/tensorboard/crc32c.h"
#include "api/tensorboard/event_file.h"
#include "api/tensorboard/job_history.h"
#include "api/tensorboard/tfrecord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpsd/tensorboard/event.pb.h"
#include "tests/common/files.h"
#include "tests/common/temp_dir.h"

namespace mpsd::tensorboard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Crc32cTest, MatchesPublishedCheckValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  // RFC 3720 (iSCSI), B.4: 32 bytes of zeros; 32 bytes of 0xFF.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, MaskRoundTripsAndMatchesTensorFlow) {
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) EXPECT_EQ(UnmaskCrc(MaskCrc(crc)), crc);
  EXPECT_EQ(MaskCrc(0), 0xA282EAD8u);
}

TEST(TfRecordTest, WritesFramesThatReadBack) {
  mpsd::testing::TempDir dir;
  auto writer = TfRecordWriter::Create(dir / "r");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Write("first").ok());
  ASSERT_TRUE((*writer)->Write("").ok());
  ASSERT_TRUE((*writer)->Write(std::string(70000, 'x')).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ((*writer)->bytes(), 3 * 16 + 5 + 70000);
  auto records = ReadTfRecords(dir / "r");
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_THAT(*records, ElementsAre("first", "", std::string(70000, 'x')));
  // The framing is byte-exact: length 5 little-endian, then the masked CRCs.
  const std::string bytes = mpsd::testing::ReadFile(dir / "r");
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x05\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(bytes.substr(0, 21), FrameTfRecord("first"));
}

TEST(TfRecordTest, AFlippedBitOrACutRecordIsDataLossNamingTheFileAndOffset) {
  mpsd::testing::TempDir dir;
  const std::string good = FrameTfRecord("abc") + FrameTfRecord("defgh");
  std::string flipped = good;
  flipped[19 + 12] ^= 1;  // the second record's data
  std::ofstream(dir / "flipped", std::ios::binary) << flipped;
  auto read = ReadTfRecords(dir / "flipped");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr(dir / "flipped"));
  EXPECT_THAT(read.status().message(), HasSubstr("byte 19"));

  std::ofstream(dir / "cut", std::ios::binary) << good.substr(0, good.size() - 2);
  EXPECT_EQ(ReadTfRecords(dir / "cut").status().code(), absl::StatusCode::kDataLoss);
  auto partial = ReadTfRecords(dir / "cut", /*allow_partial_tail=*/true);
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_THAT(*partial, ElementsAre("abc"));
  EXPECT_EQ(ReadTfRecords(dir / "missing").status().code(), absl::StatusCode::kNotFound);
}

v1::JobEvent StepEvent(int64_t step, int32_t epoch, float loss) {
  v1::JobEvent event;
  event.mutable_time()->set_seconds(1000 + step);
  event.mutable_step()->set_step(step);
  event.mutable_step()->set_epoch(epoch);
  event.mutable_step()->set_loss(loss);
  return event;
}

v1::JobEvent EpochEvent(int32_t epoch, double test_accuracy) {
  v1::JobEvent event;
  event.mutable_epoch()->set_epoch(epoch);
  event.mutable_epoch()->set_evaluated(true);
  event.mutable_epoch()->set_test_accuracy(test_accuracy);
  return event;
}

TEST(JobHistoryTest, AResumedAttemptReplacesTheStepsFromItsFirstStepOn) {
  JobHistory history;
  for (int step = 1; step <= 4; ++step) EXPECT_FALSE(history.Add(StepEvent(step, 1, 1.0f)));
  history.Add(EpochEvent(1, 0.5));
  for (int step = 5; step <= 7; ++step) history.Add(StepEvent(step, 2, 2.0f));
  // Resumed from the checkpoint at the end of epoch 1: steps 5.. again, and only to 6.
  EXPECT_TRUE(history.Add(StepEvent(5, 2, 3.0f)));
  history.Add(StepEvent(6, 2, 3.0f));
  ASSERT_EQ(history.steps().size(), 6u);
  EXPECT_EQ(history.steps().at(4).metrics.loss(), 1.0f);
  EXPECT_EQ(history.steps().at(5).metrics.loss(), 3.0f);
  EXPECT_EQ(history.steps().count(7), 0u);
  ASSERT_EQ(history.epochs().size(), 1u);
  EXPECT_EQ(history.epochs().at(1).step, 4);
}

TEST(JobHistoryTest, HParamsFlattenTheSpecAndTheResolvedSettings) {
  v1::SubmitJobRequest spec;
  spec.mutable_train_job()->set_batch_size(32);
  spec.mutable_train_job()->mutable_model()->set_name("mlp");
  spec.mutable_train_job()->mutable_optimizer()->add_betas(0.9);
  spec.mutable_train_job()->mutable_optimizer()->add_betas(0.99);
  spec.mutable_train_job()->set_drop_last(true);
  (*spec.mutable_labels())["team"] = "a";
  v1::JobSummary summary;
  summary.set_optimizer("adamw");
  auto hparams = HParamsOf(spec, &summary);
  EXPECT_EQ(hparams.at("batch_size").number_value(), 32);
  EXPECT_EQ(hparams.at("model.name").string_value(), "mlp");
  EXPECT_EQ(hparams.at("optimizer.betas").string_value(), "0.9,0.99");
  EXPECT_TRUE(hparams.at("drop_last").bool_value());
  EXPECT_EQ(hparams.at("labels.team").string_value(), "a");
  EXPECT_EQ(hparams.at("optimizer.name").string_value(), "adamw");
  EXPECT_EQ(hparams.count("epochs"), 0u);  // unset: not a hyperparameter of this job
}

// The user's metrics (TrainJob.metrics) get tags of their own, whatever their names end in; the
// built-in figures the map repeats are written once.
TEST(JobHistoryTest, TheUsersMetricsAreScalarsOfTheirOwn) {
  mpsd::v1::EpochMetrics epoch;
  epoch.set_epoch(1);
  epoch.set_val_loss(0.5);
  epoch.set_val_accuracy(0.75);
  auto& m = *epoch.mutable_metrics();
  m["train_loss"] = 0.25;
  m["train_accuracy"] = 0.5;
  m["val_loss"] = 0.5;
  m["val_accuracy"] = 0.75;
  m["val_top2_accuracy"] = 0.875;
  m["val_focal_loss"] = 0.125;
  std::map<std::string, int> tags;
  for (const TaggedValue& value : EpochScalars(epoch)) ++tags[value.tag];
  EXPECT_EQ(tags["epoch/val_top2_accuracy"], 1);
  EXPECT_EQ(tags["epoch/val_focal_loss"], 1);
  EXPECT_EQ(tags["epoch/val_accuracy"], 1);
  EXPECT_EQ(tags["epoch/train_loss"], 1);
  mpsd::v1::JobSummary summary;
  (*summary.mutable_metrics())["test_top2_accuracy"] = 0.875;
  (*summary.mutable_metrics())["test_accuracy"] = 0.75;
  summary.set_test_accuracy(0.75);
  tags.clear();
  for (const TaggedValue& value : SummaryScalars(summary)) ++tags[value.tag];
  EXPECT_EQ(tags["final/test_top2_accuracy"], 1);
  EXPECT_EQ(tags["final/test_accuracy"], 1);
}

TEST(JobHistoryTest, RunNamesStayInsideTheDirectory) {
  v1::Job job;
  job.set_id("12");
  EXPECT_EQ(RunName(job, false), "12");
  EXPECT_EQ(RunName(job, true), "12");
  job.mutable_spec()->set_name("lr sweep/0");
  EXPECT_EQ(RunName(job, false), "lr_sweep_0");
  EXPECT_EQ(RunName(job, true), "lr_sweep_0-12");
  job.mutable_spec()->set_name("..");
  EXPECT_EQ(RunName(job, false), "_");
  job.mutable_spec()->set_name("../../etc");
  EXPECT_EQ(RunName(job, false), ".._.._etc");
}

TEST(EventFileTest, WritesFileVersionScalarsAndHParamsRecords) {
  mpsd::testing::TempDir dir;
  JobHistory history;
  for (int step = 1; step <= 3; ++step) history.Add(StepEvent(step, 1, 0.25f * step));
  history.Add(EpochEvent(1, 0.75));
  v1::JobEvent done;
  done.mutable_state()->set_state(v1::Job::SUCCEEDED);
  history.Add(done);
  auto writer = EventFileWriter::Create(dir / "run", 1234.5, "host1");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(WriteHistory(history, {}, writer->get()).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ((*writer)->path(), dir / "run/events.out.tfevents.1234.host1");

  auto records = ReadTfRecords((*writer)->path());
  ASSERT_TRUE(records.ok()) << records.status();
  std::vector<std::string> seen;
  for (const std::string& record : *records) {
    Event event;
    ASSERT_TRUE(event.ParseFromString(record));
    if (event.has_file_version()) seen.push_back(event.file_version());
    for (const Summary::Value& value : event.summary().value()) {
      if (value.tag() == "train/loss" || value.tag() == "epoch/test_accuracy") {
        seen.push_back(absl::StrCat(value.tag(), "@", event.step(), "=", value.simple_value()));
      } else if (value.has_metadata()) {
        seen.push_back(
            absl::StrCat(value.tag(), " ", value.metadata().plugin_data().plugin_name()));
      }
    }
  }
  EXPECT_THAT(seen,
              ElementsAre("brain.Event:2", "_hparams_/session_start_info hparams",
                          "train/loss@1=0.25", "train/loss@2=0.5", "train/loss@3=0.75",
                          "epoch/test_accuracy@3=0.75", "_hparams_/session_end_info hparams"));
}

}  // namespace
}  // namespace mpsd::tensorboard
