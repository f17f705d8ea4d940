// UploadStore's hold on uploads that jobs name: Delete against the jobs that have not ended, and
// Pin (a submit in flight) against Delete, in both orders, on real files in a temporary folder.
#include "server/core/uploads.h"

#include <filesystem>
#include <string>
#include <vector>

#include "api/error_cause.h"
#include "api/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace mpsd::server {
namespace {

namespace fs = std::filesystem;
using mpsd::v1::Job;
using ::testing::HasSubstr;
using ::testing::Not;

class UploadUsersTest : public ::testing::Test {
 protected:
  // A store whose unfinished_jobs are jobs_ (and, first, whatever during_delete_ does).
  UploadStore& Store(const std::string& dir) {
    UploadStore::Options options;
    options.dir = dir;
    options.unfinished_jobs = [this] {
      if (during_delete_) during_delete_();
      std::vector<Job> unfinished;
      for (const Job& job : jobs_) {
        if (job.state() == Job::QUEUED || job.state() == Job::RUNNING) unfinished.push_back(job);
      }
      return unfinished;
    };
    store_ = std::make_unique<UploadStore>(options);
    return *store_;
  }

  // Uploads `data` as `name` of `submitter`.
  void Upload(const std::string& submitter, const std::string& name, const std::string& data) {
    mpsd::v1::UploadChunk first;
    first.set_name(name);
    api::Sha256Hasher hasher;
    hasher.Update(data);
    first.set_sha256(hasher.Finish());
    first.set_size_bytes(static_cast<int64_t>(data.size()));
    absl::StatusOr<std::unique_ptr<UploadStore::Writer>> writer = store_->Begin(submitter, first);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Append(0, data).ok());
    absl::StatusOr<mpsd::v1::Upload> done = (*writer)->Finish();
    ASSERT_TRUE(done.ok()) << done.status();
  }

  // A TrainJob whose dataset.root is `root`, as stored: id and state.
  static Job TrainJob(const std::string& id, Job::State state, const std::string& root) {
    Job job;
    job.set_id(id);
    job.set_state(state);
    job.mutable_spec()->mutable_train_job()->mutable_dataset()->set_root(root);
    return job;
  }

  testing::TempDir dir_{"uploads"};
  std::vector<Job> jobs_;
  std::function<void()> during_delete_;
  std::unique_ptr<UploadStore> store_;
};

TEST_F(UploadUsersTest, DeleteRefusesWhileUnfinishedJobsNameAPathInIt) {
  UploadStore& store = Store(dir_ / "uploads");
  ASSERT_NO_FATAL_FAILURE(Upload("alice", "ds", "dataset bytes"));
  ASSERT_NO_FATAL_FAILURE(Upload("alice", "ds2", "other bytes"));
  const std::string ds = dir_ / "uploads/alice/ds";
  jobs_ = {
      TrainJob("12", Job::QUEUED, ds + "/train"), TrainJob("9", Job::RUNNING, ds),
      TrainJob("3", Job::SUCCEEDED, ds),         // ended: does not count
      TrainJob("4", Job::QUEUED, ds + "2"),      // another upload, "ds2", whose name starts alike
      TrainJob("5", Job::QUEUED, "/elsewhere"),  // no upload
  };
  // Any field that holds a path counts, also one in a repeated field.
  Job bench;
  bench.set_id("20");
  bench.set_state(Job::QUEUED);
  bench.mutable_spec()->mutable_bench_job()->add_models("resnet18");
  bench.mutable_spec()->mutable_bench_job()->add_models(dir_ / "uploads/alice/./ds/model.pt");
  jobs_.push_back(bench);

  absl::StatusOr<mpsd::v1::Upload> refused = store.Delete("alice", "ds");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "upload \"ds\" is used by queued or running jobs 9, 12, 20; cancel them or wait for "
            "them to end");
  EXPECT_TRUE(fs::exists(ds));
  // Another submitter's upload of the same name is another upload.
  ASSERT_NO_FATAL_FAILURE(Upload("bob", "ds", "bob's bytes"));
  EXPECT_TRUE(store.Delete("bob", "ds").ok());

  jobs_[0].set_state(Job::CANCELLED);
  jobs_[1].set_state(Job::SUCCEEDED);
  refused = store.Delete("alice", "ds");
  EXPECT_EQ(refused.status().message(),
            "upload \"ds\" is used by queued or running job 20; cancel it or wait for it to end");
  jobs_.pop_back();
  absl::StatusOr<mpsd::v1::Upload> deleted = store.Delete("alice", "ds");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->name(), "ds");
  EXPECT_FALSE(fs::exists(ds));
  // ds2 is still named by job 4.
  EXPECT_EQ(store.Delete("alice", "ds2").status().code(), absl::StatusCode::kFailedPrecondition);
}

// The daemon's specs hold the path with the state dir's links resolved (DataRoots); the store
// may have been given the linked path.
TEST_F(UploadUsersTest, ASpecNamesTheUploadThroughTheResolvedStateDir) {
  fs::create_directories(dir_ / "real");
  fs::create_directory_symlink(dir_ / "real", dir_ / "link");
  UploadStore& store = Store(dir_ / "link/uploads");
  ASSERT_NO_FATAL_FAILURE(Upload("alice", "ds", "dataset bytes"));
  jobs_ = {TrainJob("7", Job::QUEUED, fs::canonical(dir_ / "real").string() + "/uploads/alice/ds")};
  EXPECT_THAT(store.Delete("alice", "ds").status().message(), HasSubstr("running job 7;"));
}

// A submit that holds the upload (between resolving upload:NAME and the job being stored) makes
// a Delete at that moment wait its turn; once released, the stored job is what refuses it.
TEST_F(UploadUsersTest, PinnedUploadsAreNotDeleted) {
  UploadStore& store = Store(dir_ / "uploads");
  ASSERT_NO_FATAL_FAILURE(Upload("alice", "ds", "dataset bytes"));
  mpsd::v1::SubmitJobRequest spec = TrainJob("", Job::QUEUED, dir_ / "uploads/alice/ds").spec();
  spec.mutable_train_job()->mutable_model()->set_torchscript(dir_ / "uploads/alice/ds/m.pt");
  spec.mutable_labels()->insert({"note", dir_ / "uploads/alice/other"});  // a map: no path
  absl::StatusOr<UploadStore::Pins> pins = store.Pin(spec, "alice");
  ASSERT_TRUE(pins.ok()) << pins.status();
  EXPECT_THAT(pins->keys(), ::testing::ElementsAre("alice/ds"));
  absl::StatusOr<mpsd::v1::Upload> refused = store.Delete("alice", "ds");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(refused.status().message(), HasSubstr("named by a job being submitted"));
  // Moved, still held; released with its last holder.
  UploadStore::Pins moved = *std::move(pins);
  EXPECT_EQ(store.Delete("alice", "ds").status().code(), absl::StatusCode::kAborted);
  jobs_ = {TrainJob("1", Job::QUEUED, dir_ / "uploads/alice/ds")};  // the submit stored it
  moved = UploadStore::Pins();
  EXPECT_EQ(store.Delete("alice", "ds").status().code(), absl::StatusCode::kFailedPrecondition);
  jobs_.clear();
  EXPECT_TRUE(store.Delete("alice", "ds").ok());
}

// A submit that resolved upload:NAME while the upload was being deleted fails, naming the
// field, instead of queueing a job whose data is gone; one after the delete likewise.
TEST_F(UploadUsersTest, ASubmitDuringOrAfterTheDeleteFails) {
  UploadStore& store = Store(dir_ / "uploads");
  ASSERT_NO_FATAL_FAILURE(Upload("alice", "ds", "dataset bytes"));
  const mpsd::v1::SubmitJobRequest spec =
      TrainJob("", Job::QUEUED, dir_ / "uploads/alice/ds/train").spec();
  absl::Status during;
  during_delete_ = [&] { during = store.Pin(spec, "alice").status(); };
  ASSERT_TRUE(store.Delete("alice", "ds").ok());
  EXPECT_EQ(during.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(api::InvalidFieldOf(during), "train_job.dataset.root");
  EXPECT_THAT(during.message(),
              HasSubstr("train_job.dataset.root: upload \"ds\" is being deleted"));
  during_delete_ = nullptr;

  absl::Status after = store.Pin(spec, "alice").status();
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(after.message(), HasSubstr("upload \"ds\" does not exist"));
  // A delete that was refused leaves the upload to be named again.
  ASSERT_NO_FATAL_FAILURE(Upload("alice", "ds", "dataset bytes"));
  jobs_ = {TrainJob("2", Job::RUNNING, dir_ / "uploads/alice/ds")};
  EXPECT_FALSE(store.Delete("alice", "ds").ok());
  EXPECT_TRUE(store.Pin(spec, "alice").ok());
  // Specs without uploads hold nothing.
  mpsd::v1::SubmitJobRequest plain = TrainJob("", Job::QUEUED, "/usr/share/datasets").spec();
  absl::StatusOr<UploadStore::Pins> none = store.Pin(plain, "alice");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->keys().empty());
}

// A job may name another submitter's upload only as an admin's ("" reads any). Anyone else's is
// refused later with the same text whether the upload exists, so Pin neither holds it nor says
// it is gone.
TEST_F(UploadUsersTest, AnotherSubmittersUploadIsPinnedOnlyForAnAdmin) {
  UploadStore& store = Store(dir_ / "uploads");
  ASSERT_NO_FATAL_FAILURE(Upload("alice", "ds", "dataset bytes"));
  mpsd::v1::SubmitJobRequest spec = TrainJob("", Job::QUEUED, dir_ / "uploads/alice/ds").spec();
  absl::StatusOr<UploadStore::Pins> bobs = store.Pin(spec, "bob");
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  EXPECT_TRUE(bobs->keys().empty());
  spec.mutable_train_job()->mutable_dataset()->set_root(dir_ / "uploads/alice/none");
  EXPECT_TRUE(store.Pin(spec, "bob").ok());
  EXPECT_EQ(store.Pin(spec, "").status().code(), absl::StatusCode::kFailedPrecondition);
  spec.mutable_train_job()->mutable_dataset()->set_root(dir_ / "uploads/alice/ds");
  absl::StatusOr<UploadStore::Pins> admins = store.Pin(spec, "");
  ASSERT_TRUE(admins.ok()) << admins.status();
  EXPECT_THAT(admins->keys(), ::testing::ElementsAre("alice/ds"));
  EXPECT_EQ(store.Delete("alice", "ds").status().code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace mpsd::server
