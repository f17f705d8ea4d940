// api/upload_name.h: which upload names and upload: references are accepted, and the field the
// errors name.
#include "api/upload_name.h"

#include "api/error_cause.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpsd::api {
namespace {

TEST(UploadNameTest, NamesAreOneSafeFileName) {
  for (const char* good : {"ds", "mnist-small", "model_v2.pt", "A.b-c_9"}) {
    EXPECT_TRUE(CheckUploadName("name", good).ok()) << good;
  }
  for (const std::string& bad :
       {std::string(""), std::string("."), std::string(".."), std::string(".hidden"),
        std::string("a/b"), std::string("a b"), std::string("x\0y", 3), std::string(129, 'a')}) {
    absl::Status status = CheckUploadName("name", bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(InvalidFieldOf(status), "name") << bad;
  }
}

TEST(UploadNameTest, ReferencesSplitIntoOwnerNameAndPath) {
  absl::StatusOr<UploadRef> ref = ParseUploadRef("f", "upload:ds");
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->owner, "");
  EXPECT_EQ(ref->name, "ds");
  EXPECT_EQ(ref->path, "");
  ref = ParseUploadRef("f", "upload:@alice/models/./sub//model.pt");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->owner, "alice");
  EXPECT_EQ(ref->name, "models");
  EXPECT_EQ(ref->path, "sub/model.pt");
  for (const char* bad : {"upload:", "upload:../x", "upload:ds/../../etc", "upload:@alice",
                          "upload:@/ds", "upload:@../ds", "upload:/abs"}) {
    absl::StatusOr<UploadRef> parsed = ParseUploadRef("train_job.dataset.root", bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(InvalidFieldOf(parsed.status()), "train_job.dataset.root") << bad;
  }
  EXPECT_TRUE(IsUploadRef("upload:x"));
  EXPECT_FALSE(IsUploadRef("/data/upload:x"));
}

}  // namespace
}  // namespace mpsd::api
