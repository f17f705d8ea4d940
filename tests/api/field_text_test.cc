// Tests for api/field_text.h: every case of tests/common/field_text_cases.tsv, the table the
// Python client's test (tests/client/field_text_test.py) runs too.
#include "api/field_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::api {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::MessageFactory;

struct Case {
  int line = 0;
  std::string message, field, text, expected;
};

std::vector<Case> ReadCases() {
  std::ifstream in(std::string(MPSD_SOURCE_DIR) + "/tests/common/field_text_cases.tsv");
  EXPECT_TRUE(in.good()) << "tests/common/field_text_cases.tsv";
  std::vector<Case> cases;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> columns = absl::StrSplit(line, '\t');
    EXPECT_EQ(columns.size(), 4u) << "line " << number << ": " << line;
    if (columns.size() != 4) continue;
    for (std::string& column : columns) {
      if (column == "<empty>") column.clear();
    }
    cases.push_back({number, columns[0], columns[1], columns[2], columns[3]});
  }
  return cases;
}

// The value as the table writes it (element 0 of a repeated field).
std::string ReadBack(const Message& message, const FieldDescriptor& field) {
  const auto& r = *message.GetReflection();
  const FieldDescriptor* f = &field;
  const bool repeated = field.is_repeated();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL: {
      const bool v = repeated ? r.GetRepeatedBool(message, f, 0) : r.GetBool(message, f);
      return v ? "true" : "false";
    }
    case FieldDescriptor::CPPTYPE_INT32:
      return std::to_string(repeated ? r.GetRepeatedInt32(message, f, 0) : r.GetInt32(message, f));
    case FieldDescriptor::CPPTYPE_INT64:
      return std::to_string(repeated ? r.GetRepeatedInt64(message, f, 0) : r.GetInt64(message, f));
    case FieldDescriptor::CPPTYPE_UINT32:
      return std::to_string(repeated ? r.GetRepeatedUInt32(message, f, 0)
                                     : r.GetUInt32(message, f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return std::to_string(repeated ? r.GetRepeatedUInt64(message, f, 0)
                                     : r.GetUInt64(message, f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      double v = 0;
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
        v = repeated ? r.GetRepeatedDouble(message, f, 0) : r.GetDouble(message, f);
      } else {
        v = repeated ? r.GetRepeatedFloat(message, f, 0) : r.GetFloat(message, f);
      }
      if (std::isnan(v)) return "nan";
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
      return std::to_string(v);
    }
    case FieldDescriptor::CPPTYPE_ENUM:
      return (repeated ? r.GetRepeatedEnum(message, f, 0) : r.GetEnum(message, f))->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return repeated ? r.GetRepeatedString(message, f, 0) : r.GetString(message, f);
    default:
      return "?";
  }
}

// Numbers compare as numbers (1000 and 1000.000000 are the same value).
bool SameValue(const std::string& got, const std::string& expected) {
  if (got == expected) return true;
  double a = 0, b = 0;
  return absl::SimpleAtod(got, &a) && absl::SimpleAtod(expected, &b) && a == b;
}

TEST(FieldTextTest, EveryCaseOfTheSharedTable) {
  // The descriptors are linked in: mpsd.proto's and descriptor.proto's.
  mpsd::v1::SubmitJobRequest link_mpsd;
  google::protobuf::FieldDescriptorProto link_descriptor;
  const std::vector<Case> cases = ReadCases();
  ASSERT_GE(cases.size(), 40u);
  for (const Case& c : cases) {
    SCOPED_TRACE("field_text_cases.tsv:" + std::to_string(c.line) + " " + c.message + "." +
                 c.field + " \"" + c.text + "\"");
    const Descriptor* type = DescriptorPool::generated_pool()->FindMessageTypeByName(c.message);
    ASSERT_NE(type, nullptr);
    const FieldDescriptor* field = type->FindFieldByName(c.field);
    ASSERT_NE(field, nullptr);
    std::unique_ptr<Message> message(
        MessageFactory::generated_factory()->GetPrototype(type)->New());
    const absl::Status set = SetFieldFromText(*message, *field, c.text);
    if (c.expected == "error") {
      EXPECT_EQ(set.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_FALSE(set.message().empty());
      continue;
    }
    ASSERT_TRUE(set.ok()) << set;
    EXPECT_TRUE(SameValue(ReadBack(*message, *field), c.expected))
        << "got " << ReadBack(*message, *field) << ", expected " << c.expected;
  }
}

TEST(FieldTextTest, ErrorsSayWhatWasExpected) {
  mpsd::v1::TrainJob job;
  const Descriptor& d = *job.GetDescriptor();
  EXPECT_EQ(SetFieldFromText(job, *d.FindFieldByName("epochs"), "three").message(),
            "expected an integer, got \"three\"");
  EXPECT_EQ(SetFieldFromText(job, *d.FindFieldByName("epochs"), "2147483648").message(),
            "2147483648 is out of range for int32 (-2147483648 to 2147483647)");
  EXPECT_EQ(SetFieldFromText(job, *d.FindFieldByName("drop_last"), "y").message(),
            "expected true or false, got \"y\"");
  EXPECT_THAT(std::string(SetFieldFromText(job, *d.FindFieldByName("optimizer"), "x").message()),
              ::testing::StartsWith("expected a map with fields name, learning_rate"));
}

TEST(FieldTextTest, ClosestNameFindsTyposAndAbbreviations) {
  const std::vector<std::string> names = {"limit_train", "limit_test", "learning_rate",
                                          "val_accuracy", "val_loss"};
  EXPECT_EQ(ClosestName("limt_train", names), "limit_train");
  EXPECT_EQ(ClosestName("Learning_Rat", names), "learning_rate");
  EXPECT_EQ(ClosestName("val_acc", names), "val_accuracy");  // the one it begins
  EXPECT_EQ(ClosestName("limit", names), std::nullopt);      // begins two
  EXPECT_EQ(ClosestName("lr", names), std::nullopt);
  EXPECT_EQ(ClosestName("momentum", names), std::nullopt);
}

}  // namespace
}  // namespace mpsd::api
