// api::Sha256OfFile on real files: FIPS 180-2's test vectors, a file larger than one read, and
// the one error contract (INTERNAL naming the file) for files that cannot be read.
#include "api/sha256.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace mpsd::api {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

TEST(Sha256OfFileTest, MatchesTheStandardsVectors) {
  mpsd::testing::TempDir dir;
  EXPECT_EQ(*Sha256OfFile(Write(dir.path() / "empty", "")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(*Sha256OfFile(Write(dir.path() / "abc", "abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // One million 'a's: several 64 KiB reads.
  EXPECT_EQ(*Sha256OfFile(Write(dir.path() / "million", std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256OfFileTest, AMissingFileOrADirectoryIsInternalNamingIt) {
  mpsd::testing::TempDir dir;
  for (const std::string& path : {(dir.path() / "nope").string(), dir.path().string()}) {
    absl::StatusOr<std::string> sha = Sha256OfFile(path);
    EXPECT_EQ(sha.status().code(), absl::StatusCode::kInternal) << path;
    EXPECT_THAT(sha.status().message(), HasSubstr("cannot read " + path)) << path;
  }
}

TEST(Sha256HasherTest, PiecesGiveTheWholesDigestAndFinishStartsAgain) {
  Sha256Hasher hasher;
  const std::string million(1000000, 'a');
  for (size_t at = 0; at < million.size(); at += 333333) hasher.Update(million.substr(at, 333333));
  EXPECT_EQ(hasher.Finish(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  hasher.Update("abc");
  EXPECT_EQ(hasher.Finish(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hasher.Finish(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace mpsd::api
