// trainer/pickle_scan.h on pickles built here opcode by opcode, in the shapes torch.save and
// torch.jit.save write them (see the pickletools listings in the comments): honest tensors pass;
// a storage whose record is shorter or longer than it claims, a view past its storage, a storage
// used by another rebuild function, unknown opcodes, deep nesting and truncation are refused with
// the tensor's key and both sizes; archive claims (CheckArchiveClaims) bound what unpacking may
// allocate. Torch-free.
#include "trainer/pickle_scan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mpsd::trainer {
namespace {

using ::testing::HasSubstr;

// A pickle written opcode by opcode (protocol 2, as torch.save writes it).
class Pickle {
 public:
  Pickle() { bytes_ += "\x80\x02"; }
  Pickle& Op(char op) {
    bytes_ += op;
    return *this;
  }
  Pickle& Int(int64_t value) {  // BININT1, BININT or LONG1
    if (value >= 0 && value < 256) {
      bytes_ += 'K';
      bytes_ += static_cast<char>(value);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {
      bytes_ += 'J';
      for (int i = 0; i < 4; ++i) bytes_ += static_cast<char>((value >> (8 * i)) & 0xFF);
    } else {
      bytes_ += '\x8a';
      bytes_ += '\x08';
      for (int i = 0; i < 8; ++i) bytes_ += static_cast<char>((value >> (8 * i)) & 0xFF);
    }
    return *this;
  }
  Pickle& Str(const std::string& text) {  // BINUNICODE
    bytes_ += 'X';
    for (int i = 0; i < 4; ++i) bytes_ += static_cast<char>((text.size() >> (8 * i)) & 0xFF);
    bytes_ += text;
    return *this;
  }
  Pickle& Global(const std::string& module, const std::string& name) {
    bytes_ += 'c' + module + '\n' + name + '\n';
    return *this;
  }
  Pickle& Put(int id) { return Op('q').Op(static_cast<char>(id)); }
  Pickle& Get(int id) { return Op('h').Op(static_cast<char>(id)); }
  // torch.save's tensor: _rebuild_tensor_v2((storage, key, numel), offset, size, stride, False,
  // OrderedDict()), with `sizes` and `strides` as tuples.
  Pickle& Tensor(const std::string& key, int64_t numel, int64_t offset,
                 const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                 const std::string& type = "FloatStorage") {
    Global("torch._utils", "_rebuild_tensor_v2").Op('(');
    Op('(').Str("storage").Global("torch", type).Str(key).Str("cpu").Int(numel).Op('t').Op('Q');
    Int(offset).Op('(');
    for (int64_t s : sizes) Int(s);
    Op('t').Op('(');
    for (int64_t s : strides) Int(s);
    Op('t').Op('\x89').Global("collections", "OrderedDict").Op(')').Op('R').Op('t').Op('R');
    return *this;
  }
  std::string Done() { return bytes_ + '.'; }

 private:
  std::string bytes_;
};

// {"weight": a [2, 3] float tensor over data/0 of 6 elements, "bias": [2] over data/1}.
std::string StateDict(int64_t weight_numel, std::vector<int64_t> weight_sizes = {2, 3}) {
  return Pickle()
      .Op('}')
      .Op('(')
      .Str("weight")
      .Tensor("0", weight_numel, 0, weight_sizes, {3, 1})
      .Str("bias")
      .Tensor("1", 2, 0, {2}, {1})
      .Op('u')
      .Done();
}

const RecordSizes kRecords = {{"0", 24}, {"1", 8}};

TEST(PickleScanTest, HonestTensorsPass) {
  EXPECT_TRUE(CheckPickledTensors(StateDict(6), kRecords, "data/").ok());
}

TEST(PickleScanTest, AStorageClaimingMoreThanItsRecordNamesTheTensorAndBothSizes) {
  const absl::Status s = CheckPickledTensors(StateDict(1000), kRecords, "data/");
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("tensor \"weight\": its storage data/0 holds 24 bytes, but "
                                     "the pickle says 1000 elements of 4 bytes (4000 bytes)"));
}

TEST(PickleScanTest, AStorageClaimingLessThanItsRecordIsRefusedToo) {
  const absl::Status s = CheckPickledTensors(StateDict(2, {2}), kRecords, "data/");
  EXPECT_THAT(s.message(), HasSubstr("holds 24 bytes, but the pickle says 2 elements"));
}

TEST(PickleScanTest, AViewPastItsStorageIsRefused) {
  // 6 elements, but [3, 3] with strides [3, 1] reaches element 8.
  const absl::Status s = CheckPickledTensors(StateDict(6, {3, 3}), kRecords, "data/");
  EXPECT_THAT(s.message(), HasSubstr("tensor \"weight\": offset 0, size [3, 3], stride [3, 1] "
                                     "reaches past the end of its storage data/0 of 6 elements"));
}

TEST(PickleScanTest, AMissingRecordAndAHugeOrNegativeClaimAreRefused) {
  EXPECT_THAT(CheckPickledTensors(StateDict(6), {{"1", 8}}, "data/").message(),
              HasSubstr("its storage data/0 (6 elements of 4 bytes) is missing"));
  EXPECT_THAT(CheckPickledTensors(StateDict(INT64_MAX / 2), kRecords, "data/").message(),
              HasSubstr("a size of 4611686018427387903 elements"));
  EXPECT_THAT(CheckPickledTensors(StateDict(-5), kRecords, "data/").message(),
              HasSubstr("a size of -5 elements"));
}

// torch.jit.save's object state: GLOBAL class, EMPTY_TUPLE, NEWOBJ, then a state dict and BUILD;
// a tensor memoised and reused through BINGET is checked where it is used again.
TEST(PickleScanTest, ScriptObjectsAndMemoisedTensorsAreFollowed) {
  const std::string honest = Pickle()
                                 .Global("__torch__", "Net")
                                 .Op(')')
                                 .Op('\x81')
                                 .Op('}')
                                 .Op('(')
                                 .Str("w")
                                 .Tensor("0", 6, 0, {6}, {1})
                                 .Put(1)
                                 .Str("same")
                                 .Get(1)
                                 .Str("training")
                                 .Op('\x88')
                                 .Op('u')
                                 .Op('b')
                                 .Done();
  EXPECT_TRUE(CheckPickledTensors(honest, kRecords, "data/").ok());
  const std::string lying = Pickle()
                                .Global("__torch__", "Net")
                                .Op(')')
                                .Op('\x81')
                                .Op('}')
                                .Op('(')
                                .Str("w")
                                .Tensor("0", 600, 0, {6}, {1})
                                .Op('u')
                                .Op('b')
                                .Done();
  EXPECT_THAT(CheckPickledTensors(lying, kRecords, "data/").message(),
              HasSubstr("tensor \"w\": its storage data/0 holds 24 bytes, but the pickle says "
                        "600 elements"));
}

// constants.pkl: a tuple of tensors, none under a dict key.
TEST(PickleScanTest, ATensorOutsideADictIsToldAtTheEnd) {
  const std::string constants = Pickle().Tensor("0", 16, 0, {16}, {1}).Put(0).Op('\x85').Done();
  EXPECT_TRUE(CheckPickledTensors(constants, {{"0", 64}}, "constants/").ok());
  EXPECT_THAT(CheckPickledTensors(constants, {{"0", 4}}, "constants/").message(),
              HasSubstr("a tensor: its storage constants/0 holds 4 bytes, but the pickle says 16 "
                        "elements of 4 bytes (64 bytes): the file is damaged or was altered"));
}

TEST(PickleScanTest, AStorageUsedByAnotherRebuildFunctionIsRefused) {
  const std::string quantized = Pickle()
                                    .Global("torch._utils", "_rebuild_qtensor")
                                    .Op('(')
                                    .Op('(')
                                    .Str("storage")
                                    .Global("torch", "QInt8Storage")
                                    .Str("0")
                                    .Str("cpu")
                                    .Int(24)
                                    .Op('t')
                                    .Op('Q')
                                    .Op('t')
                                    .Op('R')
                                    .Done();
  EXPECT_THAT(CheckPickledTensors(quantized, kRecords, "data/").message(),
              HasSubstr("refused: the storage data/0 is used by torch._utils._rebuild_qtensor"));
}

TEST(PickleScanTest, MalformedPicklesAreRefusedNotFollowed) {
  EXPECT_THAT(CheckPickledTensors(std::string("\x80\x02\xff.", 4), {}, "data/").message(),
              HasSubstr("pickle opcode 0xff at byte 2 is not one torch writes"));
  EXPECT_THAT(
      CheckPickledTensors(std::string("\x80\x02X\xff\xff\xff\x7f", 7), {}, "data/").message(),
      HasSubstr("truncated"));
  EXPECT_THAT(CheckPickledTensors("\x80\x02}", {}, "data/").message(), HasSubstr("without STOP"));
  EXPECT_THAT(CheckPickledTensors("\x80\x02u.", {}, "data/").message(), HasSubstr("malformed"));
  EXPECT_THAT(CheckPickledTensors("\x80\x02h\x07.", {}, "data/").message(), HasSubstr("malformed"));
  // A storage id of another form.
  EXPECT_THAT(CheckPickledTensors(Pickle().Str("x").Op('Q').Done(), {}, "data/").message(),
              HasSubstr("a persistent id that is not a storage's"));
}

// A million nested tuples, lists or dicts would make LibTorch free them recursing a million deep
// (a tensors file with such a list crashed the shared executor at submit). Refused, whichever
// way they nest: TUPLE1, APPENDS into the list below, APPEND, SETITEM, BUILD.
TEST(PickleScanTest, DeepNestingIsRefusedWithoutRecursing) {
  const auto nested = [](const std::string& head, const std::string& unit, const std::string& tail,
                         const std::string& close) {
    std::string deep = "\x80\x02" + head;
    for (int i = 0; i < 1'000'000; ++i) deep += unit;
    deep += tail;
    for (int i = 0; i < 1'000'000; ++i) deep += close;
    return deep + ".";
  };
  for (const std::string& deep :
       {std::string("\x80\x02)") + std::string(1'000'000, '\x85') + ".",  // TUPLE1
        nested("", "](", "]", "e"),                                       // APPENDS
        nested("", "]", "]", "a"),                                        // APPEND
        nested("", "}K\x01", "}", "s")}) {                                // SETITEM
    EXPECT_THAT(CheckPickledTensors(deep, {}, "data/").message(),
                HasSubstr("values nested more than 1000 deep"));
  }
  // 1000 levels are fine.
  const std::string ok = "\x80\x02" + std::string(999, ']') + std::string(998, 'a') + ".";
  EXPECT_TRUE(CheckPickledTensors(ok, {}, "data/").ok());
}

ZipEntry Entry(const std::string& name, int method, uint64_t stored, uint64_t size) {
  ZipEntry entry;
  entry.name = name;
  entry.method = method;
  entry.compressed_size = stored;
  entry.uncompressed_size = size;
  return entry;
}

TEST(ArchiveClaimsTest, BoundWhatUnpackingMayAllocate) {
  const std::vector<ZipEntry> honest = {Entry("m/data.pkl", 0, 100, 100),
                                        Entry("m/data/0", 0, 24, 24),
                                        Entry("m/code/m.py", 8, 50, 400)};
  EXPECT_TRUE(CheckArchiveClaims(honest, {"data/"}, 1 << 20).ok());
  EXPECT_THAT(CheckArchiveClaims(honest, {"data/"}, 500).message(),
              HasSubstr("its entries unpack to more than 500 bytes (at m/code/m.py, which claims "
                        "400 bytes)"));
  EXPECT_THAT(
      CheckArchiveClaims({Entry("m/data/0", 8, 10, 1 << 30)}, {"data/"}, 1ull << 40).message(),
      HasSubstr("its tensor data m/data/0 is compressed (10 bytes claiming 1073741824)"));
  EXPECT_THAT(
      CheckArchiveClaims({Entry("m/data/0", 0, 10, 1 << 30)}, {"data/"}, 1ull << 40).message(),
      HasSubstr("is stored uncompressed in 10 bytes but claims 1073741824"));
  // Claims that would overflow a 64-bit sum.
  EXPECT_FALSE(CheckArchiveClaims({Entry("m/a", 8, 1, UINT64_MAX), Entry("m/b", 8, 1, UINT64_MAX)},
                                  {}, 1 << 20)
                   .ok());
}

TEST(ArchiveClaimsTest, RecordSizesUnderAFolder) {
  const std::vector<ZipEntry> index = {Entry("m/data.pkl", 0, 1, 1), Entry("m/data/0", 0, 24, 24),
                                       Entry("m/constants/0", 0, 8, 8)};
  EXPECT_EQ(RecordSizesUnder(index, "data/"), (RecordSizes{{"0", 24}}));
  EXPECT_EQ(RecordSizesUnder(index, "constants/"), (RecordSizes{{"0", 8}}));
}

}  // namespace
}  // namespace mpsd::trainer
