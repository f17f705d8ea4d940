// Tests for trainer/idx.cc: round trips of raw and gzip IDX files written here, the real
// Fashion-MNIST files when installed, and one test per way a file can be wrong.
#include "trainer/idx.h"
#include "trainer/input_limits.h"

#include <sys/stat.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace mpsd::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

using Bytes = std::vector<uint8_t>;

// An IDX file of unsigned bytes: magic 00 00 08 ndim, big-endian dims, then data.
Bytes MakeIdx(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes Iota(size_t n, uint8_t start = 0) {
  Bytes out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(start + i * 7);
  return out;
}

void WriteRaw(const std::string& path, const Bytes& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(file.good()) << path;
}

// mode "wb" starts a file; "ab" appends a second gzip member.
void WriteGz(const std::string& path, const Bytes& bytes, const char* mode = "wb") {
  gzFile file = gzopen(path.c_str(), mode);
  ASSERT_NE(file, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(file), Z_OK);
}

Bytes ReadRaw(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// The code, and that the message names the file and says what is wrong.
void ExpectError(const absl::Status& status, absl::StatusCode code,
                 std::initializer_list<std::string> fragments) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& fragment : fragments) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(fragment));
  }
}

class IdxTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  const mpsd::testing::TempDir temp_{"idx_test"};
  const std::string dir_ = temp_.str();
};

// ---- Good files ---------------------------------------------------------------------------

TEST_F(IdxTest, RawRoundTrip) {
  const Bytes data = Iota(5 * 3 * 4);
  WriteRaw(Path("a-idx3-ubyte"), MakeIdx({5, 3, 4}, data));
  absl::StatusOr<IdxArray> array = ReadIdxFile(Path("a-idx3-ubyte"));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(5, 3, 4));
  EXPECT_EQ(array->data, data);
}

TEST_F(IdxTest, GzRoundTrip) {
  const Bytes data = Iota(7 * 2 * 3 * 2);
  WriteGz(Path("a.gz"), MakeIdx({7, 2, 3, 2}, data));
  absl::StatusOr<IdxArray> array = ReadIdxFile(Path("a.gz"));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(7, 2, 3, 2));
  EXPECT_EQ(array->data, data);
}

TEST_F(IdxTest, OneDimensionalRoundTrip) {
  const Bytes labels = {9, 0, 0, 3, 255};
  WriteRaw(Path("l"), MakeIdx({5}, labels));
  WriteGz(Path("l.gz"), MakeIdx({5}, labels));
  for (const char* name : {"l", "l.gz"}) {
    absl::StatusOr<IdxArray> array = ReadIdxFile(Path(name));
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_THAT(array->dims, ElementsAre(5));
    EXPECT_EQ(array->data, labels);
  }
}

// A large body crosses zlib's input chunks and the reader's allocation steps.
TEST_F(IdxTest, LargeGzRoundTrip) {
  Bytes data(3000 * 100 * 100);
  uint32_t state = 12345;
  for (uint8_t& b : data) b = static_cast<uint8_t>((state = state * 1103515245 + 12345) >> 24);
  WriteGz(Path("big.gz"), MakeIdx({3000, 100, 100}, data));
  absl::StatusOr<IdxArray> array = ReadIdxFile(Path("big.gz"));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_THAT(array->dims, ElementsAre(3000, 100, 100));
  EXPECT_TRUE(array->data == data);
}

// gzip(1) reads concatenated members as one stream; so do we.
TEST_F(IdxTest, MultiMemberGz) {
  const Bytes file = MakeIdx({4, 2}, Iota(8));
  WriteGz(Path("m.gz"), Bytes(file.begin(), file.begin() + 10));
  WriteGz(Path("m.gz"), Bytes(file.begin() + 10, file.end()), "ab");
  absl::StatusOr<IdxArray> array = ReadIdxFile(Path("m.gz"));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->data, Iota(8));
}

TEST_F(IdxTest, MaxItems) {
  const Bytes data = Iota(5 * 3 * 4);
  WriteRaw(Path("a"), MakeIdx({5, 3, 4}, data));
  WriteGz(Path("a.gz"), MakeIdx({5, 3, 4}, data));
  for (const char* name : {"a", "a.gz"}) {
    absl::StatusOr<IdxArray> two = ReadIdxFile(Path(name), 2);
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_THAT(two->dims, ElementsAre(2, 3, 4));
    EXPECT_EQ(two->data, Bytes(data.begin(), data.begin() + 24));
    for (int64_t all : {0, 5, 6, 1000}) {
      absl::StatusOr<IdxArray> array = ReadIdxFile(Path(name), all);
      ASSERT_TRUE(array.ok()) << array.status();
      EXPECT_THAT(array->dims, ElementsAre(5, 3, 4)) << "max_items " << all;
      EXPECT_EQ(array->data, data);
    }
  }
}

// A subset decodes only what it needs: a .gz cut off well after the subset still reads.
TEST_F(IdxTest, MaxItemsDoesNotDecodeTheRest) {
  Bytes data(2000 * 1000);
  uint32_t state = 1;
  for (uint8_t& b : data) b = static_cast<uint8_t>((state = state * 1103515245 + 12345) >> 24);
  WriteGz(Path("cut.gz"), MakeIdx({2000, 1000}, data));
  Bytes gz = ReadRaw(Path("cut.gz"));
  gz.resize(gz.size() / 2);
  WriteRaw(Path("cut.gz"), gz);

  absl::StatusOr<IdxArray> head = ReadIdxFile(Path("cut.gz"), 10);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->data, Bytes(data.begin(), data.begin() + 10 * 1000));
  ExpectError(ReadIdxFile(Path("cut.gz")).status(), absl::StatusCode::kDataLoss,
              {Path("cut.gz"), "gzip data ends early (the .gz file is truncated)"});
}

TEST_F(IdxTest, NegativeMaxItemsIsInvalid) {
  WriteRaw(Path("a"), MakeIdx({1}, {0}));
  ExpectError(ReadIdxFile(Path("a"), -1).status(), absl::StatusCode::kInvalidArgument,
              {Path("a"), "max_items is -1"});
}

// A FIFO (or a device) named as an IDX file is refused without being opened: open() on a FIFO
// blocks until a writer comes, and that held a job's executor forever.
TEST_F(IdxTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(mkfifo(Path("train-images-idx3-ubyte").c_str(), 0600), 0);
  ExpectError(FindIdxFile(Path(""), "train-images-idx3-ubyte").status(),
              absl::StatusCode::kFailedPrecondition,
              {Path("train-images-idx3-ubyte"), "not a regular file"});
  ExpectError(ReadIdxFile(Path("train-images-idx3-ubyte")).status(),
              absl::StatusCode::kFailedPrecondition,
              {Path("train-images-idx3-ubyte"), "not a regular file"});
  ExpectError(ReadIdxFile("/dev/zero").status(), absl::StatusCode::kFailedPrecondition,
              {"/dev/zero", "not a regular file"});
}

// ---- The real Fashion-MNIST -----------------------------------------------------------------

class FashionMnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kFashionMnistDir)) {
      GTEST_SKIP() << kFashionMnistDir << " is not installed";
    }
  }
};

TEST_F(FashionMnistTest, TrainSplit) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<IdxSplit> split = ReadIdxSplit(kFashionMnistDir, "train", 0, 10);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->images.dims, ElementsAre(60000, 28, 28));
  EXPECT_EQ(split->images.data.size(), 60000u * 28 * 28);
  EXPECT_THAT(split->labels.dims, ElementsAre(60000));
  ASSERT_EQ(split->labels.data.size(), 60000u);
  // First labels of the training set: ankle boot, T-shirt, T-shirt, dress.
  EXPECT_THAT(Bytes(split->labels.data.begin(), split->labels.data.begin() + 4),
              ElementsAre(9, 0, 0, 3));
  RecordProperty("train_split_read_ms", static_cast<int>(seconds * 1000));
  std::cout << "[   INFO   ] train split (47 MB images, gzip) read in " << seconds * 1000
            << " ms\n";
}

TEST_F(FashionMnistTest, TestSplit) {
  absl::StatusOr<IdxSplit> split = ReadIdxSplit(kFashionMnistDir, "t10k", 0, 10);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->images.dims, ElementsAre(10000, 28, 28));
  EXPECT_THAT(split->labels.dims, ElementsAre(10000));
  EXPECT_EQ(split->labels.data[0], 9);
}

TEST_F(FashionMnistTest, Limit) {
  absl::StatusOr<IdxSplit> full = ReadIdxSplit(kFashionMnistDir, "train", 0, 10);
  absl::StatusOr<IdxSplit> head = ReadIdxSplit(kFashionMnistDir, "train", 100, 10);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_THAT(head->images.dims, ElementsAre(100, 28, 28));
  EXPECT_THAT(head->labels.dims, ElementsAre(100));
  EXPECT_TRUE(
      std::equal(head->images.data.begin(), head->images.data.end(), full->images.data.begin()));
  EXPECT_TRUE(
      std::equal(head->labels.data.begin(), head->labels.data.end(), full->labels.data.begin()));

  absl::StatusOr<IdxArray> labels = ReadIdxFile(
      std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz", /*max_items=*/20000);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_THAT(labels->dims, ElementsAre(10000));
}

// ---- Bad files --------------------------------------------------------------------------

TEST_F(IdxTest, MissingFile) {
  ExpectError(ReadIdxFile(Path("nope-idx1-ubyte")).status(), absl::StatusCode::kNotFound,
              {Path("nope-idx1-ubyte"), "no such file"});
}

TEST_F(IdxTest, Directory) {
  ExpectError(ReadIdxFile(dir_).status(), absl::StatusCode::kFailedPrecondition,
              {dir_, "not a regular file"});
}

TEST_F(IdxTest, OneByteShort) {
  Bytes file = MakeIdx({5, 3, 4}, Iota(60));
  file.pop_back();
  WriteRaw(Path("short"), file);
  WriteGz(Path("short.gz"), file);
  for (const char* name : {"short", "short.gz"}) {
    ExpectError(ReadIdxFile(Path(name)).status(), absl::StatusCode::kDataLoss,
                {Path(name), "expected 60 bytes of data after the 16-byte header, got 59"});
  }
}

TEST_F(IdxTest, TrailingBytes) {
  Bytes file = MakeIdx({5, 3, 4}, Iota(60));
  file.insert(file.end(), {1, 2, 3});
  WriteRaw(Path("long"), file);
  WriteGz(Path("long.gz"), file);
  for (const char* name : {"long", "long.gz"}) {
    ExpectError(ReadIdxFile(Path(name)).status(), absl::StatusCode::kDataLoss,
                {Path(name), "3 bytes beyond the data",
                 "expected 60 bytes of data after the 16-byte header, got 63"});
  }
}

// A small .gz whose data is followed by 64 MiB of zeros (compressed ~1000:1): refused once a
// MiB of them was counted, not inflated whole.
TEST_F(IdxTest, TrailingZerosOfAGzipAreNotInflatedWhole) {
  Bytes file = MakeIdx({5, 3, 4}, Iota(60));
  file.resize(file.size() + (size_t{64} << 20), 0);
  WriteGz(Path("bomb.gz"), file);
  ASSERT_LT(std::filesystem::file_size(Path("bomb.gz")), size_t{1} << 20);
  ExpectError(ReadIdxFile(Path("bomb.gz")).status(), absl::StatusCode::kDataLoss,
              {Path("bomb.gz"), "bytes beyond the data (counting stopped there)",
               "expected 60 bytes of data after the 16-byte header"});
}

TEST_F(IdxTest, TenByteFile) {
  Bytes file = MakeIdx({5, 3, 4}, {});
  file.resize(10);
  WriteRaw(Path("ten"), file);
  ExpectError(ReadIdxFile(Path("ten")).status(), absl::StatusCode::kDataLoss,
              {Path("ten"),
               "file is 10 bytes, too short for an IDX header of 3 dimensions "
               "(16 bytes)"});
  WriteGz(Path("ten.gz"), file);
  ExpectError(ReadIdxFile(Path("ten.gz")).status(), absl::StatusCode::kDataLoss,
              {Path("ten.gz"),
               "file decompresses to 10 bytes, too short for an IDX header of 3 "
               "dimensions (16 bytes)"});
}

TEST_F(IdxTest, ShorterThanMagic) {
  WriteRaw(Path("two"), {0, 0});
  ExpectError(ReadIdxFile(Path("two")).status(), absl::StatusCode::kDataLoss,
              {Path("two"), "file is 2 bytes, too short for an IDX header"});
}

TEST_F(IdxTest, GzNotNamedGz) {
  WriteGz(Path("train-images-idx3-ubyte"), MakeIdx({1, 1, 1}, {7}));
  ExpectError(ReadIdxFile(Path("train-images-idx3-ubyte")).status(), absl::StatusCode::kDataLoss,
              {Path("train-images-idx3-ubyte"),
               "looks gzip-compressed (starts with 1f 8b) but is not named .gz"});
}

TEST_F(IdxTest, RawNamedGz) {
  WriteRaw(Path("raw.gz"), MakeIdx({1, 1, 1}, {7}));
  ExpectError(ReadIdxFile(Path("raw.gz")).status(), absl::StatusCode::kDataLoss,
              {Path("raw.gz"),
               "is named .gz but is not gzip-compressed (expected it to start with "
               "1f 8b)"});
  WriteRaw(Path("empty.gz"), {});
  ExpectError(ReadIdxFile(Path("empty.gz")).status(), absl::StatusCode::kDataLoss,
              {Path("empty.gz"), "is named .gz but is empty"});
}

TEST_F(IdxTest, ByteSwappedMagic) {
  Bytes file = MakeIdx({2, 2, 2}, Iota(8));
  std::swap(file[0], file[3]);
  std::swap(file[1], file[2]);
  WriteRaw(Path("swapped"), file);
  ExpectError(ReadIdxFile(Path("swapped")).status(), absl::StatusCode::kDataLoss,
              {Path("swapped"), "magic looks byte-swapped (little-endian", "expected 00 00 08 NN"});
}

TEST_F(IdxTest, BadMagic) {
  WriteRaw(Path("zip"), {0x50, 0x4b, 0x03, 0x04, 0, 0, 0, 0});
  ExpectError(ReadIdxFile(Path("zip")).status(), absl::StatusCode::kDataLoss,
              {Path("zip"), "bad magic, expected 00 00 08 NN"});
  // The file's bytes are not in the message (it may be a file the caller cannot read).
  EXPECT_EQ(std::string(ReadIdxFile(Path("zip")).status().message()).find("50 4b"),
            std::string::npos);
}

TEST_F(IdxTest, WrongType) {
  WriteRaw(Path("float"), MakeIdx({1}, {0, 0, 0, 0}, /*type=*/0x0D));
  ExpectError(ReadIdxFile(Path("float")).status(), absl::StatusCode::kDataLoss,
              {Path("float"),
               "data type 0x0D (float) is not supported, expected 0x08 unsigned "
               "byte"});
}

TEST_F(IdxTest, BadDimensionCount) {
  WriteRaw(Path("zero"), MakeIdx({}, {}));
  ExpectError(ReadIdxFile(Path("zero")).status(), absl::StatusCode::kDataLoss,
              {Path("zero"), "header says 0 dimensions, expected 1 to 4"});
  WriteRaw(Path("five"), MakeIdx({1, 1, 1, 1, 1}, {0}));
  ExpectError(ReadIdxFile(Path("five")).status(), absl::StatusCode::kDataLoss,
              {Path("five"), "header says 5 dimensions, expected 1 to 4"});
}

TEST_F(IdxTest, ZeroDimension) {
  WriteRaw(Path("empty"), MakeIdx({10, 0, 28}, {}));
  ExpectError(ReadIdxFile(Path("empty")).status(), absl::StatusCode::kDataLoss,
              {Path("empty"), "dimension 1 of [10, 0, 28] is 0"});
}

TEST_F(IdxTest, AbsurdSize) {
  WriteRaw(Path("huge"), MakeIdx({0xFFFFFFFF, 0xFFFFFFFF, 28}, {}));
  WriteGz(Path("huge.gz"), MakeIdx({0xFFFFFFFF, 0xFFFFFFFF, 28}, {}));
  for (const char* name : {"huge", "huge.gz"}) {
    ExpectError(ReadIdxFile(Path(name)).status(), absl::StatusCode::kDataLoss,
                {Path(name),
                 "dimensions [4294967295, 4294967295, 28] describe more than "
                 "17179869184 bytes (executor.max_unpacked_bytes)"});
  }
}

// The bound is the executor's input limit (the config's executor.max_unpacked_bytes): a header
// within the default but over a configured 1 MiB is refused before anything is allocated.
TEST_F(IdxTest, TheBoundIsTheConfiguredMaxUnpackedBytes) {
  WriteGz(Path("big.gz"), MakeIdx({2000, 28, 28}, Iota(10)));
  api::InputLimits limits;
  limits.max_unpacked_bytes = int64_t{1} << 20;
  SetInputLimits(limits);
  const absl::Status status = ReadIdxFile(Path("big.gz")).status();
  SetInputLimits(api::InputLimits());
  ExpectError(status, absl::StatusCode::kDataLoss,
              {Path("big.gz"),
               "dimensions [2000, 28, 28] describe more than 1048576 bytes "
               "(executor.max_unpacked_bytes)"});
}

// A gz header may claim far more than the stream holds; that is a short body, not an allocation
// of the claimed size.
TEST_F(IdxTest, GzClaimsMoreThanItHolds) {
  WriteGz(Path("liar.gz"), MakeIdx({1000, 1000, 1000}, Iota(10)));
  ExpectError(ReadIdxFile(Path("liar.gz")).status(), absl::StatusCode::kDataLoss,
              {Path("liar.gz"),
               "expected 1000000000 bytes of data after the 16-byte header, "
               "got 10"});
}

TEST_F(IdxTest, CorruptGz) {
  WriteGz(Path("crc.gz"), MakeIdx({5, 3, 4}, Iota(60)));
  Bytes gz = ReadRaw(Path("crc.gz"));
  gz[gz.size() - 8] ^= 0xFF;  // the CRC-32 of the trailer
  WriteRaw(Path("crc.gz"), gz);
  ExpectError(ReadIdxFile(Path("crc.gz")).status(), absl::StatusCode::kDataLoss,
              {Path("crc.gz"), "corrupt gzip data (zlib: incorrect data check)"});
}

TEST_F(IdxTest, GarbageAfterGz) {
  WriteGz(Path("tail.gz"), MakeIdx({5, 3, 4}, Iota(60)));
  Bytes gz = ReadRaw(Path("tail.gz"));
  gz.insert(gz.end(), {'j', 'u', 'n', 'k'});
  WriteRaw(Path("tail.gz"), gz);
  ExpectError(ReadIdxFile(Path("tail.gz")).status(), absl::StatusCode::kDataLoss,
              {Path("tail.gz"), "unexpected bytes after the end of the gzip data"});
}

TEST_F(IdxTest, TruncatedGz) {
  WriteGz(Path("cut.gz"), MakeIdx({5, 3, 4}, Iota(60)));
  Bytes gz = ReadRaw(Path("cut.gz"));
  gz.resize(gz.size() - 4);  // loses the length of the trailer
  WriteRaw(Path("cut.gz"), gz);
  ExpectError(ReadIdxFile(Path("cut.gz")).status(), absl::StatusCode::kDataLoss,
              {Path("cut.gz"), "gzip data ends early (the .gz file is truncated)"});
}

// ---- FindIdxFile and ReadIdxSplit -------------------------------------------------------------

TEST_F(IdxTest, FindIdxFilePrefersRawThenGz) {
  ExpectError(FindIdxFile(dir_, "x-idx1-ubyte").status(), absl::StatusCode::kNotFound,
              {Path("x-idx1-ubyte"), Path("x-idx1-ubyte.gz")});
  WriteGz(Path("x-idx1-ubyte.gz"), MakeIdx({1}, {0}));
  EXPECT_EQ(FindIdxFile(dir_, "x-idx1-ubyte").value(), Path("x-idx1-ubyte.gz"));
  EXPECT_EQ(FindIdxFile(dir_ + "/", "x-idx1-ubyte").value(), Path("x-idx1-ubyte.gz"));
  WriteRaw(Path("x-idx1-ubyte"), MakeIdx({1}, {0}));
  EXPECT_EQ(FindIdxFile(dir_, "x-idx1-ubyte").value(), Path("x-idx1-ubyte"));
}

TEST_F(IdxTest, FindIdxFileMissingDirectory) {
  ExpectError(FindIdxFile(Path("no-dir"), "x").status(), absl::StatusCode::kNotFound,
              {Path("no-dir") + "/x", "not a directory"});
}

TEST_F(IdxTest, SplitReadsRawAndGz) {
  WriteRaw(Path("s-images-idx3-ubyte"), MakeIdx({3, 2, 2}, Iota(12)));
  WriteGz(Path("s-labels-idx1-ubyte.gz"), MakeIdx({3}, {2, 0, 1}));
  absl::StatusOr<IdxSplit> split = ReadIdxSplit(dir_, "s", 0, 3);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->images.dims, ElementsAre(3, 2, 2));
  EXPECT_EQ(split->images.data, Iota(12));
  EXPECT_THAT(split->labels.data, ElementsAre(2, 0, 1));

  absl::StatusOr<IdxSplit> head = ReadIdxSplit(dir_, "s", 2, 3);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_THAT(head->images.dims, ElementsAre(2, 2, 2));
  EXPECT_THAT(head->labels.data, ElementsAre(2, 0));
}

TEST_F(IdxTest, SplitMissingLabels) {
  WriteRaw(Path("s-images-idx3-ubyte"), MakeIdx({3, 2, 2}, Iota(12)));
  ExpectError(ReadIdxSplit(dir_, "s", 0, 10).status(), absl::StatusCode::kNotFound,
              {Path("s-labels-idx1-ubyte"), Path("s-labels-idx1-ubyte.gz")});
}

TEST_F(IdxTest, SplitCountMismatch) {
  WriteRaw(Path("s-images-idx3-ubyte"), MakeIdx({3, 2, 2}, Iota(12)));
  WriteRaw(Path("s-labels-idx1-ubyte"), MakeIdx({2}, {0, 1}));
  // Compared on the headers, so a limit that both files satisfy does not hide it.
  for (int64_t limit : {0, 1}) {
    ExpectError(ReadIdxSplit(dir_, "s", limit, 10).status(), absl::StatusCode::kDataLoss,
                {"3 images in " + Path("s-images-idx3-ubyte") + " but 2 labels in " +
                 Path("s-labels-idx1-ubyte")});
  }
}

TEST_F(IdxTest, SplitLabelOutOfRange) {
  WriteRaw(Path("s-images-idx3-ubyte"), MakeIdx({3, 2, 2}, Iota(12)));
  WriteRaw(Path("s-labels-idx1-ubyte"), MakeIdx({3}, {9, 10, 0}));
  ExpectError(ReadIdxSplit(dir_, "s", 0, 10).status(), absl::StatusCode::kDataLoss,
              {"label 10 at index 1 in " + Path("s-labels-idx1-ubyte") + ", expected < 10"});
  // Only the labels kept are checked.
  EXPECT_TRUE(ReadIdxSplit(dir_, "s", 1, 10).ok());
}

TEST_F(IdxTest, SplitWrongRanks) {
  WriteRaw(Path("s-images-idx3-ubyte"), MakeIdx({3, 4}, Iota(12)));
  WriteRaw(Path("s-labels-idx1-ubyte"), MakeIdx({3}, {0, 1, 2}));
  ExpectError(ReadIdxSplit(dir_, "s", 0, 10).status(), absl::StatusCode::kDataLoss,
              {Path("s-images-idx3-ubyte"), "has 2 dimensions [3, 4], expected 3"});
  WriteRaw(Path("s-images-idx3-ubyte"), MakeIdx({3, 2, 2}, Iota(12)));
  WriteRaw(Path("s-labels-idx1-ubyte"), MakeIdx({3, 1}, {0, 1, 2}));
  ExpectError(ReadIdxSplit(dir_, "s", 0, 10).status(), absl::StatusCode::kDataLoss,
              {Path("s-labels-idx1-ubyte"), "has 2 dimensions [3, 1], expected 1"});
}

TEST_F(IdxTest, SplitBadArguments) {
  ExpectError(ReadIdxSplit(dir_, "s", -1, 10).status(), absl::StatusCode::kInvalidArgument,
              {"limit is -1"});
  ExpectError(ReadIdxSplit(dir_, "s", 0, 0).status(), absl::StatusCode::kInvalidArgument,
              {"num_classes is 0"});
}

}  // namespace
}  // namespace mpsd::trainer
