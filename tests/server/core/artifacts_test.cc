// Artifacts: listing, hashing and name checks on real files in a temporary directory.
#include "server/core/artifacts.h"

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "api/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ArtifactsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("artifacts_test_" + std::to_string(getpid()));
    fs::remove_all(root_);
    job_ = root_ / "artifacts" / "7";
    fs::create_directories(job_ / "sub");
    Write(job_ / "model.pt", "model bytes");
    Write(job_ / "checkpoint-epoch-2.pt", "");
    Write(job_ / "sub" / "notes.txt", "abc");
    Write(job_ / "model.pt.tmp", "half written");
    // A single-node distributed job's c10d FileStore (api::kRendezvousFileName): no artifact.
    Write(job_ / ".rendezvous", "store");
    Write(root_ / "secret.db", "secret");
    fs::create_symlink(root_ / "secret.db", job_ / "link.pt");
  }
  void TearDown() override { fs::remove_all(root_); }

  static void Write(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }

  fs::path root_, job_;
};

TEST_F(ArtifactsTest, ListsRegularFilesWithSizeKindAndSha256) {
  absl::StatusOr<std::vector<mpsd::v1::Artifact>> list = ListArtifacts(job_.string());
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].name(), "checkpoint-epoch-2.pt");
  EXPECT_EQ((*list)[0].kind(), "checkpoint");
  EXPECT_EQ((*list)[0].size_bytes(), 0);
  // SHA-256 of the empty string and of "abc" (FIPS 180-2's test vector).
  EXPECT_EQ((*list)[0].sha256(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ((*list)[1].name(), "model.pt");
  EXPECT_EQ((*list)[1].kind(), "model");
  EXPECT_EQ((*list)[1].size_bytes(), 11);
  EXPECT_EQ((*list)[2].name(), "sub/notes.txt");
  EXPECT_EQ((*list)[2].kind(), "other");
  Write(job_ / "model.json", "{}");
  absl::StatusOr<std::vector<mpsd::v1::Artifact>> with_json = ListArtifacts(job_.string());
  ASSERT_TRUE(with_json.ok());
  EXPECT_EQ((*with_json)[1].name(), "model.json");  // sorted by name
  EXPECT_EQ((*with_json)[1].kind(), "model");
  EXPECT_EQ((*list)[2].sha256(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(ArtifactsTest, AMissingDirectoryHasNoArtifacts) {
  absl::StatusOr<std::vector<mpsd::v1::Artifact>> list =
      ListArtifacts((root_ / "artifacts" / "8").string());
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

TEST_F(ArtifactsTest, ResolvesPlainNamesInsideTheJob) {
  absl::StatusOr<std::string> model = ResolveArtifact(job_.string(), "model.pt");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*model, fs::canonical(job_ / "model.pt").string());
  absl::StatusOr<std::string> nested = ResolveArtifact(job_.string(), "sub/notes.txt");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(ResolveArtifact(job_.string(), "missing.pt").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ResolveArtifact(job_.string(), "sub").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ArtifactsTest, RefusesNamesThatLeaveTheJob) {
  fs::create_directory_symlink(root_, job_ / "sub" / "up");
  for (const std::string name : {"", "/etc/passwd", "../../secret.db", "sub/../../../secret.db",
                                 "..", "link.pt", "sub/up/secret.db"}) {
    absl::StatusOr<std::string> resolved = ResolveArtifact(job_.string(), name);
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(resolved.status().message(), HasSubstr("name")) << name;
  }
}

TEST_F(ArtifactsTest, Sha256OfAnUnreadableFileNamesIt) {
  absl::StatusOr<std::string> sha = api::Sha256OfFile((root_ / "nope").string());
  EXPECT_EQ(sha.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(sha.status().message(), HasSubstr("nope"));
}

}  // namespace
}  // namespace mpsd::server
