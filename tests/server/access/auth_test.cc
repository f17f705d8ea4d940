// Tests server/access/auth.cc: the tokens file (real files, real modes), token matching, roles and
// the RPC role table.
#include "server/access/auth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/files.h"

namespace mpsd::server {
namespace {
using mpsd::testing::ModeOf;
using mpsd::testing::ReadFile;

using ::testing::HasSubstr;
using ::testing::Not;

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/mpsd-auth-test-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    path_ = dir_ + "/tokens.yaml";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteTokens(const std::string& text, mode_t mode = 0600) {
    std::filesystem::create_directories(dir_);
    std::ofstream(path_) << text;
    chmod(path_.c_str(), mode);
  }

  std::string dir_;
  std::string path_;
};

TEST(RoleTest, NamesRoundTrip) {
  for (Role role : {Role::kViewer, Role::kSubmitter, Role::kAdmin}) {
    absl::StatusOr<Role> parsed = ParseRole(RoleName(role));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, role);
  }
  absl::StatusOr<Role> bad = ParseRole("root");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("viewer, submitter or admin"));
}

TEST(AuthorizeTest, RolesAreOrdered) {
  const Principal viewer{"dash", Role::kViewer};
  const Principal submitter{"ci", Role::kSubmitter};
  const Principal admin{"me", Role::kAdmin};
  EXPECT_TRUE(Authorize(viewer, Role::kViewer, "GetJob").ok());
  EXPECT_TRUE(Authorize(submitter, Role::kViewer, "GetJob").ok());
  EXPECT_TRUE(Authorize(submitter, Role::kSubmitter, "SubmitJob").ok());
  EXPECT_TRUE(Authorize(admin, Role::kSubmitter, "SubmitJob").ok());
  EXPECT_TRUE(Authorize(admin, Role::kAdmin, "X").ok());
  const absl::Status denied = Authorize(viewer, Role::kSubmitter, "SubmitJob");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(), "SubmitJob needs role submitter; token \"dash\" has viewer");
  EXPECT_EQ(Authorize(submitter, Role::kAdmin, "X").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(LocalPrincipal().role, Role::kAdmin);
  EXPECT_EQ(LocalPrincipal().name, "local");
}

TEST(AuthorizeTest, CancelOwnJobsOnly) {
  const Principal ci{"ci", Role::kSubmitter};
  EXPECT_TRUE(CanCancel(ci, "ci", "7").ok());
  const absl::Status other = CanCancel(ci, "alice", "7");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other.message(), HasSubstr("needs role admin"));
  EXPECT_THAT(other.message(), HasSubstr("\"alice\""));
  EXPECT_TRUE(CanCancel(Principal{"root", Role::kAdmin}, "alice", "7").ok());
  EXPECT_EQ(CanCancel(Principal{"ci", Role::kViewer}, "ci", "7").code(),
            absl::StatusCode::kPermissionDenied);
  // Jobs submitted over the unix socket belong to "local": only an admin cancels them remotely.
  EXPECT_EQ(CanCancel(ci, "local", "7").code(), absl::StatusCode::kPermissionDenied);
}

TEST(RequiredRoleTest, EveryRpcOfTheApi) {
  for (const char* method : {"GetJob", "ListJobs", "StreamEvents", "GetDevice", "ListModels",
                             "GetServerStatus", "ListArtifacts", "GetArtifact"}) {
    EXPECT_EQ(RequiredRole(std::string("/mpsd.v1.JobService/") + method), Role::kViewer) << method;
  }
  EXPECT_EQ(RequiredRole("/mpsd.v1.JobService/SubmitJob"), Role::kSubmitter);
  EXPECT_EQ(RequiredRole("/mpsd.v1.JobService/CancelJob"), Role::kSubmitter);
  EXPECT_EQ(RequiredRole("/mpsd.v1.JobService/DeleteArtifacts"), Role::kSubmitter);
  for (const char* method : {"UploadFile", "GetUploadStatus", "ListUploads", "DeleteUpload"}) {
    EXPECT_EQ(RequiredRole(std::string("/mpsd.v1.JobService/") + method), Role::kSubmitter)
        << method;
  }
  EXPECT_EQ(RequiredRole("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            Role::kViewer);
  EXPECT_EQ(RequiredRole("/grpc.health.v1.Health/Check"), Role::kViewer);
  EXPECT_EQ(RequiredRole("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"),
            Role::kViewer);
  // Unknown methods are closed.
  EXPECT_EQ(RequiredRole("/mpsd.v1.JobService/DeleteEverything"), Role::kAdmin);
  EXPECT_EQ(RequiredRole("/mpsd.v1.Executor/Run"), Role::kAdmin);
  EXPECT_EQ(RequiredRole(""), Role::kAdmin);
}

TEST(Sha256Test, KnownDigest) {
  // FIPS 180-2, appendix B.1.
  const std::array<uint8_t, 32> digest = Sha256("abc");
  EXPECT_EQ(digest[0], 0xba);
  EXPECT_EQ(digest[1], 0x78);
  EXPECT_EQ(digest[31], 0xad);
}

TEST(GenerateTokenTest, RandomAndPrefixed) {
  absl::StatusOr<std::string> a = GenerateToken();
  absl::StatusOr<std::string> b = GenerateToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 5u + 64u);
  EXPECT_EQ(a->substr(0, 5), "mpsd_");
  EXPECT_NE(*a, *b);
}

TEST_F(AuthTest, AddAuthenticateListRevoke) {
  absl::StatusOr<std::string> ci = AddToken(path_, "ci", Role::kSubmitter);
  ASSERT_TRUE(ci.ok()) << ci.status();
  absl::StatusOr<std::string> dash = AddToken(path_, "dash", Role::kViewer);
  ASSERT_TRUE(dash.ok()) << dash.status();
  EXPECT_EQ(ModeOf(path_), 0600);
  // Stored hashed, never in clear.
  const std::string text = ReadFile(path_);
  EXPECT_THAT(text, Not(HasSubstr(*ci)));
  EXPECT_THAT(text, Not(HasSubstr(ci->substr(5))));
  EXPECT_THAT(text, HasSubstr("name: ci"));
  EXPECT_THAT(text, HasSubstr("role: submitter"));

  absl::StatusOr<std::unique_ptr<TokenStore>> store = TokenStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Principal> principal = (*store)->Authenticate("Bearer " + *ci);
  ASSERT_TRUE(principal.ok()) << principal.status();
  EXPECT_EQ(principal->name, "ci");
  EXPECT_EQ(principal->role, Role::kSubmitter);
  // A bare token is refused (a fresh user's pass: it was accepted), saying the expected form.
  principal = (*store)->Authenticate(*dash);
  EXPECT_EQ(principal.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(principal.status().message(),
              HasSubstr("expected \"authorization: Bearer <token>\""));
  EXPECT_THAT(principal.status().message(), Not(HasSubstr(dash->substr(5))));
  principal = (*store)->Authenticate("bearer  " + *dash);  // Scheme case-insensitive.
  ASSERT_TRUE(principal.ok()) << principal.status();
  EXPECT_EQ(principal->name, "dash");
  ASSERT_EQ((*store)->Records().size(), 2u);
  EXPECT_EQ((*store)->Records()[1].name, "dash");

  ASSERT_TRUE(RevokeToken(path_, "ci").ok());
  EXPECT_EQ(ModeOf(path_), 0600);
  // The open store sees the revocation without being reopened.
  principal = (*store)->Authenticate("Bearer " + *ci);
  EXPECT_EQ(principal.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(principal.status().message(), "unknown or revoked token");
  EXPECT_TRUE((*store)->Authenticate("Bearer " + *dash).ok());
  EXPECT_EQ(RevokeToken(path_, "ci").code(), absl::StatusCode::kNotFound);
  // A new token added later is seen too.
  absl::StatusOr<std::string> later = AddToken(path_, "later", Role::kAdmin);
  ASSERT_TRUE(later.ok());
  principal = (*store)->Authenticate("Bearer " + *later);
  ASSERT_TRUE(principal.ok()) << principal.status();
  EXPECT_EQ(principal->role, Role::kAdmin);
}

TEST_F(AuthTest, BadBearersAreUnauthenticatedWithoutEchoingThem) {
  ASSERT_TRUE(AddToken(path_, "ci", Role::kSubmitter).ok());
  absl::StatusOr<std::unique_ptr<TokenStore>> store = TokenStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const std::string& bearer :
       {std::string(""), std::string("Bearer "), std::string("Bearer mpsd_0000secret0000"),
        std::string("Basic c2VjcmV0c2VjcmV0"), std::string("mpsd_secret_guess")}) {
    absl::StatusOr<Principal> principal = (*store)->Authenticate(bearer);
    EXPECT_EQ(principal.status().code(), absl::StatusCode::kUnauthenticated) << bearer;
    EXPECT_THAT(principal.status().message(), Not(HasSubstr("secret"))) << bearer;
  }
  EXPECT_THAT((*store)->Authenticate("").status().message(), HasSubstr("missing token"));
}

TEST_F(AuthTest, DuplicateAndBadNamesAreRefused) {
  ASSERT_TRUE(AddToken(path_, "ci", Role::kSubmitter).ok());
  EXPECT_EQ(AddToken(path_, "ci", Role::kViewer).status().code(), absl::StatusCode::kAlreadyExists);
  for (const char* name : {"", "has space", "a/b", "../x"}) {
    absl::StatusOr<std::string> added = AddToken(path_, name, Role::kViewer);
    EXPECT_EQ(added.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(added.status().message(), HasSubstr("token name")) << name;
  }
  EXPECT_EQ(AddToken(path_, std::string(65, 'a'), Role::kViewer).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The unix socket's caller's name: a token of that name would act as it (its jobs, cancels).
  absl::StatusOr<std::string> local = AddToken(path_, "local", Role::kSubmitter);
  EXPECT_EQ(local.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(local.status().message(), HasSubstr("other than \"local\""));
}

TEST_F(AuthTest, GroupOrWorldReadableFileIsRefused) {
  ASSERT_TRUE(AddToken(path_, "ci", Role::kSubmitter).ok());
  for (mode_t mode : {0644, 0640, 0604, 0660, 0602}) {
    chmod(path_.c_str(), mode);
    absl::StatusOr<std::unique_ptr<TokenStore>> store = TokenStore::Open(path_);
    EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << mode;
    EXPECT_THAT(store.status().message(), HasSubstr(path_));
    EXPECT_THAT(store.status().message(), HasSubstr("chmod 600"));
    // Nor is it edited.
    EXPECT_EQ(AddToken(path_, "x", Role::kViewer).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  chmod(path_.c_str(), 0400);
  EXPECT_TRUE(TokenStore::Open(path_).ok());
}

TEST_F(AuthTest, StoreFailsClosedWhenTheFileTurnsBad) {
  absl::StatusOr<std::string> ci = AddToken(path_, "ci", Role::kSubmitter);
  ASSERT_TRUE(ci.ok());
  absl::StatusOr<std::unique_ptr<TokenStore>> store = TokenStore::Open(path_);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Authenticate("Bearer " + *ci).ok());
  chmod(path_.c_str(), 0644);  // Seen although neither size nor mtime changed.
  EXPECT_EQ((*store)->Authenticate("Bearer " + *ci).status().code(),
            absl::StatusCode::kUnauthenticated);
  chmod(path_.c_str(), 0600);
  EXPECT_TRUE((*store)->Authenticate("Bearer " + *ci).ok());
  std::ofstream(path_, std::ios::app) << "- [not, an, entry]\n";
  EXPECT_EQ((*store)->Authenticate("Bearer " + *ci).status().code(),
            absl::StatusCode::kUnauthenticated);
  ASSERT_TRUE(RevokeToken(path_, "ci").code() == absl::StatusCode::kInvalidArgument);
  std::filesystem::remove(path_);
  EXPECT_EQ((*store)->Authenticate("Bearer " + *ci).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(AuthTest, OpenErrorsNameTheFileAndTheEntry) {
  EXPECT_EQ(TokenStore::Open(path_).status().code(), absl::StatusCode::kNotFound);
  const std::string digest(64, 'a');
  struct Case {
    std::string text;
    std::string expected;
  } cases[] = {
      {"name: x\n", "expected a list"},
      {"- [1, 2]\n", "[0]: expected a mapping"},
      {"- {name: x, role: viewer}\n", "[0].sha256: missing"},
      {"- {role: viewer, sha256: " + digest + "}\n", "[0].name: missing"},
      {"- {name: x, role: root, sha256: " + digest + "}\n", "[0].role: unknown role \"root\""},
      {"- {name: x, role: viewer, sha256: abc}\n", "[0].sha256: expected 64 hex digits"},
      {"- {name: x, role: viewer, sha256: " + digest + ", extra: 1}\n", "[0].extra: unknown key"},
      {"- {name: x, role: viewer, sha256: " + digest +
           "}\n- {name: x, role: admin, sha256: " + digest + "}\n",
       "[1].name: \"x\" appears twice"},
      {"- {name: 'a b', role: viewer, sha256: " + digest + "}\n", "[0].name: token name"},
      {"- {name: x\n", "tokens.yaml:"},
  };
  for (const Case& c : cases) {
    WriteTokens(c.text);
    absl::StatusOr<std::unique_ptr<TokenStore>> store = TokenStore::Open(path_);
    EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(store.status().message(), HasSubstr(path_)) << c.text;
    EXPECT_THAT(store.status().message(), HasSubstr(c.expected)) << c.text;
  }
  WriteTokens("");  // No tokens at all is valid (and authenticates nobody).
  absl::StatusOr<std::unique_ptr<TokenStore>> empty = TokenStore::Open(path_);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)->Authenticate("Bearer x").status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(AuthTest, FirstStartCreatesAnAdminToken) {
  const std::string admin_path = dir_ + "/admin.token";
  ASSERT_TRUE(CreateTokensFileWithAdmin(path_, admin_path).ok());
  EXPECT_EQ(ModeOf(path_), 0600);
  EXPECT_EQ(ModeOf(admin_path), 0600);
  std::string token = ReadFile(admin_path);
  ASSERT_FALSE(token.empty());
  ASSERT_EQ(token.back(), '\n');
  token.pop_back();
  EXPECT_THAT(ReadFile(path_), Not(HasSubstr(token)));
  absl::StatusOr<std::unique_ptr<TokenStore>> store = TokenStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Principal> principal = (*store)->Authenticate("Bearer " + token);
  ASSERT_TRUE(principal.ok()) << principal.status();
  EXPECT_EQ(principal->name, "admin");
  EXPECT_EQ(principal->role, Role::kAdmin);
  // Never over an existing file.
  EXPECT_EQ(CreateTokensFileWithAdmin(path_, admin_path).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE((*store)->Authenticate("Bearer " + token).ok());
}

}  // namespace
}  // namespace mpsd::server
