// Tests for api/job_id.h: what reads as a job id, and which row id a canonical id names.
#include "api/job_id.h"

#include <gtest/gtest.h>

namespace mpsd::api {
namespace {

TEST(JobIdTest, DigitsReadAsJobId) {
  EXPECT_TRUE(IsJobId("1"));
  EXPECT_TRUE(IsJobId("17"));
  EXPECT_TRUE(IsJobId("007"));  // resume_from "007" names a job, not a file
}

TEST(JobIdTest, AnythingElseIsNotAJobId) {
  EXPECT_FALSE(IsJobId(""));
  EXPECT_FALSE(IsJobId("12a"));
  EXPECT_FALSE(IsJobId("-1"));
  EXPECT_FALSE(IsJobId(" 1"));
  EXPECT_FALSE(IsJobId("runs/12/checkpoint.pt"));
}

TEST(JobIdTest, ParsesCanonicalIds) {
  EXPECT_EQ(ParseJobId("1"), 1);
  EXPECT_EQ(ParseJobId("42"), 42);
  EXPECT_EQ(ParseJobId("9223372036854775807"), INT64_MAX);
}

TEST(JobIdTest, RejectsNonCanonicalIds) {
  EXPECT_EQ(ParseJobId(""), std::nullopt);
  EXPECT_EQ(ParseJobId("0"), std::nullopt);
  EXPECT_EQ(ParseJobId("01"), std::nullopt);
  EXPECT_EQ(ParseJobId("+1"), std::nullopt);
  EXPECT_EQ(ParseJobId("-1"), std::nullopt);
  EXPECT_EQ(ParseJobId("x"), std::nullopt);
  EXPECT_EQ(ParseJobId("9223372036854775808"), std::nullopt);   // INT64_MAX + 1
  EXPECT_EQ(ParseJobId("12345678901234567890"), std::nullopt);  // 20 digits
}

}  // namespace
}  // namespace mpsd::api
