// Tests for trainer/cifar.cc on CIFAR-10 binary files the tests write themselves.
#include "trainer/cifar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"
#include "tests/trainer/cifar_files.h"

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;
using ::mpsd::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::MakeRecords;
using ::testing::Not;
using testing::WriteBytes;
using testing::WriteCifarRoot;

TEST(CifarTest, FileNamesAreTheBinaryVersions) {
  EXPECT_THAT(CifarFileNames(CifarSplitKind::kTrain),
              ::testing::ElementsAre("data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                     "data_batch_4.bin", "data_batch_5.bin"));
  EXPECT_THAT(CifarFileNames(CifarSplitKind::kTest), ::testing::ElementsAre("test_batch.bin"));
}

TEST(CifarTest, ReadsBothSplitsBackExactly) {
  TempDir dir("cifar_test_good");
  WriteCifarRoot(dir.path(), /*per_train_file=*/3, /*test=*/4);
  ASSERT_TRUE(CheckCifarFiles(dir.str()).ok());

  absl::StatusOr<CifarRecords> train = ReadCifarSplit(dir.str(), CifarSplitKind::kTrain, 0);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->count, 15);
  EXPECT_EQ(train->bytes, MakeRecords(0, 15));
  EXPECT_EQ(train->label(11), 1);
  EXPECT_EQ(train->image(11)[0], MakeRecords(11, 1)[1]);

  absl::StatusOr<CifarRecords> test = ReadCifarSplit(dir.str(), CifarSplitKind::kTest, 0);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->count, 4);
  EXPECT_EQ(test->bytes, MakeRecords(1000000, 4));
}

TEST(CifarTest, LimitKeepsTheFirstRecordsAcrossFilesAndReadsNoFurther) {
  TempDir dir("cifar_test_limit");
  WriteCifarRoot(dir.path(), /*per_train_file=*/3, /*test=*/4);
  // A bad label in the last file: a limit that stops before it never reads it.
  std::vector<uint8_t> last = MakeRecords(12, 3);
  last[0] = 10;
  WriteBytes(dir.path() / "data_batch_5.bin", last);

  absl::StatusOr<CifarRecords> some = ReadCifarSplit(dir.str(), CifarSplitKind::kTrain, 7);
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->count, 7);
  EXPECT_EQ(some->bytes, MakeRecords(0, 7));

  absl::StatusOr<CifarRecords> beyond = ReadCifarSplit(dir.str(), CifarSplitKind::kTest, 100);
  ASSERT_TRUE(beyond.ok()) << beyond.status();
  EXPECT_EQ(beyond->count, 4);

  absl::StatusOr<CifarRecords> all = ReadCifarSplit(dir.str(), CifarSplitKind::kTrain, 0);
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(all.status().message()), HasSubstr("data_batch_5.bin: label 10"));
}

TEST(CifarTest, LabelOutOfRangeNamesFileRecordAndOffset) {
  TempDir dir("cifar_test_label");
  WriteCifarRoot(dir.path(), /*per_train_file=*/3, /*test=*/4);
  std::vector<uint8_t> bytes = MakeRecords(3, 3);
  bytes[2 * 3073] = 12;
  WriteBytes(dir.path() / "data_batch_2.bin", bytes);
  // Only sizes are checked without reading.
  EXPECT_TRUE(CheckCifarFiles(dir.str()).ok());
  absl::StatusOr<CifarRecords> train = ReadCifarSplit(dir.str(), CifarSplitKind::kTrain, 0);
  EXPECT_EQ(train.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(train.status().message(),
            (dir.path() / "data_batch_2.bin").string() +
                ": label 12 at record 2 (byte offset 6146), expected 0 to 9");
}

TEST(CifarTest, SizeNotAMultipleOfTheRecordNamesTheFile) {
  TempDir dir("cifar_test_size");
  WriteCifarRoot(dir.path(), /*per_train_file=*/3, /*test=*/4);
  std::vector<uint8_t> bytes = MakeRecords(1000000, 2);
  bytes.resize(bytes.size() + 5);
  WriteBytes(dir.path() / "test_batch.bin", bytes);
  for (const absl::Status& status :
       {CheckCifarFiles(dir.str()), ReadCifarSplit(dir.str(), CifarSplitKind::kTest, 1).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(status.message(), (dir.path() / "test_batch.bin").string() +
                                    ": 6151 bytes is not a multiple of the 3073-byte CIFAR-10 "
                                    "record (1 label byte, 3072 pixel bytes)");
  }
}

TEST(CifarTest, RecordsOf3074BytesLookLikeCifar100) {
  TempDir dir("cifar_test_cifar100");
  WriteCifarRoot(dir.path(), /*per_train_file=*/3, /*test=*/4);
  WriteBytes(dir.path() / "data_batch_1.bin", std::vector<uint8_t>(3 * 3074, 1));
  const absl::Status status = CheckCifarFiles(dir.str());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr((dir.path() / "data_batch_1.bin").string() + ": 9222 bytes"),
                    HasSubstr("looks like CIFAR-100's binary format (2 label bytes")));
  // A plain bad size does not mention CIFAR-100.
  WriteBytes(dir.path() / "data_batch_1.bin", std::vector<uint8_t>(3075, 1));
  EXPECT_THAT(std::string(CheckCifarFiles(dir.str()).message()), Not(HasSubstr("CIFAR-100")));
}

TEST(CifarTest, MissingBatchFileIsNamed) {
  TempDir dir("cifar_test_missing");
  WriteCifarRoot(dir.path(), /*per_train_file=*/3, /*test=*/4);
  fs::remove(dir.path() / "data_batch_3.bin");
  const absl::Status status = CheckCifarFiles(dir.str());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr((dir.path() / "data_batch_3.bin").string() + ": no such file"),
                    HasSubstr("data_batch_1.bin … data_batch_5.bin and test_batch.bin")));
  EXPECT_EQ(ReadCifarSplit(dir.str(), CifarSplitKind::kTrain, 1).status(), status);
  // The test split does not need the training files.
  EXPECT_TRUE(ReadCifarSplit(dir.str(), CifarSplitKind::kTest, 0).ok());

  WriteBytes(dir.path() / "data_batch_3.bin", MakeRecords(6, 3));
  fs::remove(dir.path() / "test_batch.bin");
  EXPECT_THAT(std::string(CheckCifarFiles(dir.str()).message()),
              HasSubstr((dir.path() / "test_batch.bin").string() + ": no such file"));
}

TEST(CifarTest, EmptyFileDirectoryAndBadRootAreRejected) {
  TempDir dir("cifar_test_odd");
  WriteCifarRoot(dir.path(), /*per_train_file=*/3, /*test=*/4);
  WriteBytes(dir.path() / "data_batch_4.bin", {});
  absl::Status status = CheckCifarFiles(dir.str());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("data_batch_4.bin: is empty"));

  fs::remove(dir.path() / "data_batch_4.bin");
  fs::create_directory(dir.path() / "data_batch_4.bin");
  EXPECT_EQ(CheckCifarFiles(dir.str()).code(), absl::StatusCode::kFailedPrecondition);

  status = CheckCifarFiles((dir.path() / "nonexistent").string());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("nonexistent does not exist"));
  status = CheckCifarFiles((dir.path() / "test_batch.bin").string());
  EXPECT_THAT(std::string(status.message()), HasSubstr("test_batch.bin is not a directory"));
  EXPECT_EQ(ReadCifarSplit(dir.str(), CifarSplitKind::kTest, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mpsd::trainer
