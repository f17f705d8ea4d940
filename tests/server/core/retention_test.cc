// Retention: the policy's plan over jobs with real artifact folders, deletion that keeps the
// folder and never follows a link, and the needed jobs that no rule may touch.
#include "server/core/retention.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

namespace fs = std::filesystem;
using mpsd::v1::Job;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

const absl::Time kNow = absl::FromUnixSeconds(1800000000);

RetentionPolicy Policy(int keep_last_jobs, double max_age_days, int64_t max_bytes) {
  RetentionPolicy policy;
  policy.keep_last_jobs = keep_last_jobs;
  policy.max_age_days = max_age_days;
  policy.max_bytes = max_bytes;
  return policy;
}

class RetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("retention_test_" + std::to_string(getpid()));
    fs::remove_all(root_);
    artifacts_ = (root_ / "artifacts").string();
    fs::create_directories(artifacts_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A finished job `days_ago` days before kNow with `bytes` of model.pt.
  Job& Finished(const std::string& id, double days_ago, int bytes) {
    Job& job = jobs_.emplace_back();
    job.set_id(id);
    job.set_state(Job::SUCCEEDED);
    *job.mutable_finished_at() = google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
        absl::ToUnixMicros(kNow - absl::Hours(24 * days_ago)));
    fs::create_directories(fs::path(artifacts_) / id);
    std::ofstream(fs::path(artifacts_) / id / "model.pt") << std::string(bytes, 'x');
    return job;
  }

  std::vector<std::pair<std::string, std::string>> Plan(const RetentionPolicy& policy) {
    std::vector<std::pair<std::string, std::string>> plan;
    for (const auto& d : PlanRetention(policy, jobs_, MeasureArtifacts(artifacts_),
                                       NeededArtifacts(jobs_, artifacts_), kNow)) {
      plan.emplace_back(d.job_id(), d.reason());
    }
    return plan;
  }

  fs::path root_;
  std::string artifacts_;
  std::vector<Job> jobs_;
};

TEST_F(RetentionTest, NoPolicyDeletesNothing) {
  Finished("1", 400, 10);
  EXPECT_TRUE(Plan(RetentionPolicy{}).empty());
}

TEST_F(RetentionTest, KeepLastAgeAndBytesOldestFirst) {
  Finished("1", 40, 100);
  Finished("2", 20, 100);
  Finished("3", 2, 100);
  Finished("4", 1, 100);
  Finished("5", 0.5, 100);
  EXPECT_THAT(Plan(Policy(3, 0, 0)), ElementsAre(Pair("1", "beyond the 3 most recent jobs"),
                                                 Pair("2", "beyond the 3 most recent jobs")));
  EXPECT_THAT(Plan(Policy(0, 30, 0)), ElementsAre(Pair("1", "finished more than 30 days ago")));
  // 500 bytes against a budget of 250: the three oldest go.
  EXPECT_THAT(Plan(Policy(0, 0, 250)),
              ElementsAre(Pair("1", "over max_bytes 250"), Pair("2", "over max_bytes 250"),
                          Pair("3", "over max_bytes 250")));
  // Rules combine: age takes 1, the budget then only 2.
  EXPECT_THAT(Plan(Policy(0, 30, 300)), ElementsAre(Pair("1", "finished more than 30 days ago"),
                                                    Pair("2", "over max_bytes 300")));
}

TEST_F(RetentionTest, NeededJobsAndUnfinishedJobsStay) {
  Finished("1", 40, 100);
  Finished("2", 40, 100);
  Finished("3", 40, 100);
  Job& running = Finished("4", 40, 100);
  running.set_state(Job::RUNNING);
  running.clear_finished_at();
  Job& queued = jobs_.emplace_back();
  queued.set_id("5");
  queued.set_state(Job::QUEUED);
  queued.mutable_spec()->mutable_train_job()->set_resume_from(
      (fs::path(artifacts_) / "1" / "checkpoint-epoch-1.pt").string());
  queued.mutable_spec()->add_after("2");
  Job& bench = jobs_.emplace_back();
  bench.set_id("6");
  bench.set_state(Job::QUEUED);
  bench.mutable_spec()->mutable_bench_job()->add_models("3");
  bench.mutable_spec()->mutable_bench_job()->add_models("resnet18");
  const auto needed = NeededArtifacts(jobs_, artifacts_);
  EXPECT_THAT(needed.at("1"), HasSubstr("job 5 (QUEUED) resumes from it"));
  EXPECT_THAT(needed.at("2"), HasSubstr("job 5 (QUEUED) waits for it"));
  EXPECT_THAT(needed.at("4"), HasSubstr("job 4 is RUNNING"));
  EXPECT_THAT(needed.at("3"), HasSubstr("job 6 (QUEUED) benchmarks its model"));
  EXPECT_TRUE(Plan(Policy(0, 0, 1)).empty());
  jobs_.pop_back();  // without the bench job, job 3 may go
  EXPECT_THAT(Plan(Policy(0, 0, 1)), ElementsAre(Pair("3", "over max_bytes 1")));
  // An EvalJob or a PredictJob of job 3's model, queued, keeps it too.
  for (const bool predict : {false, true}) {
    Job& uses = jobs_.emplace_back();
    uses.set_id("7");
    uses.set_state(Job::QUEUED);
    if (predict) {
      uses.mutable_spec()->mutable_predict_job()->set_model("3");
    } else {
      uses.mutable_spec()->mutable_eval_job()->set_model("3");
    }
    EXPECT_THAT(NeededArtifacts(jobs_, artifacts_).at("3"),
                HasSubstr("job 7 (QUEUED) runs its model"));
    EXPECT_TRUE(Plan(Policy(0, 0, 1)).empty());
    jobs_.pop_back();
  }

  ArtifactRetention retention(artifacts_, {});
  absl::StatusOr<mpsd::v1::DeleteArtifactsResponse> refused =
      retention.Delete({"3", "1"}, jobs_, /*dry_run=*/false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("job 1's artifacts must stay: job 5"));
  EXPECT_TRUE(fs::exists(fs::path(artifacts_) / "3" / "model.pt")) << "nothing deleted";
  EXPECT_EQ(retention.Delete({"9"}, jobs_, false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(retention.Apply(jobs_, kNow, false).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RetentionTest, DeleteKeepsTheFolderAndNeverFollowsALink) {
  Finished("1", 1, 1000);
  fs::create_directories(fs::path(artifacts_) / "1" / "tensorboard");
  std::ofstream(fs::path(artifacts_) / "1" / "tensorboard" / "events.out") << "abc";
  std::ofstream(root_ / "precious") << "keep me";
  fs::create_symlink(root_ / "precious", fs::path(artifacts_) / "1" / "link.pt");
  // checkpoint-latest.pt is a hard link: one file on disk, counted once.
  fs::create_hard_link(fs::path(artifacts_) / "1" / "model.pt",
                       fs::path(artifacts_) / "1" / "checkpoint-latest.pt");
  ArtifactRetention retention(artifacts_, {});
  EXPECT_EQ(retention.ArtifactsBytes(), 1003);

  // Named twice, or through its sweep: once.
  Job& sweep = jobs_.emplace_back();
  sweep.set_id("9");
  sweep.set_kind(Job::SWEEP);
  sweep.set_state(Job::SUCCEEDED);
  sweep.add_trial_job_ids("1");
  absl::StatusOr<mpsd::v1::DeleteArtifactsResponse> dry =
      retention.Delete({"1", "1", "9"}, jobs_, true);
  ASSERT_TRUE(dry.ok()) << dry.status();
  ASSERT_EQ(dry->deleted_size(), 1);
  EXPECT_EQ(dry->freed_bytes(), 1003);
  absl::StatusOr<mpsd::v1::DeleteArtifactsResponse> by_sweep = retention.Delete({"9"}, jobs_, true);
  ASSERT_TRUE(by_sweep.ok()) << by_sweep.status();
  ASSERT_EQ(by_sweep->deleted_size(), 1);
  EXPECT_EQ(by_sweep->deleted(0).job_id(), "1");
  EXPECT_EQ(by_sweep->deleted(0).reason(), "a trial of sweep 9");
  EXPECT_TRUE(fs::exists(fs::path(artifacts_) / "1" / "model.pt")) << "a dry run deletes nothing";

  absl::StatusOr<mpsd::v1::DeleteArtifactsResponse> done = retention.Delete({"1"}, jobs_, false);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->deleted_size(), 1);
  EXPECT_EQ(done->deleted(0).files(), 3);
  EXPECT_EQ(done->freed_bytes(), 1003);
  EXPECT_EQ(done->artifacts_bytes(), 0);
  EXPECT_TRUE(fs::is_directory(fs::path(artifacts_) / "1"));
  EXPECT_TRUE(fs::is_empty(fs::path(artifacts_) / "1"));
  EXPECT_TRUE(fs::exists(root_ / "precious"));
  EXPECT_EQ(retention.DeletedBytes(), 1003);
  EXPECT_EQ(retention.ArtifactsBytes(), 0);
}

TEST_F(RetentionTest, ResumedJobIdNamesTheJobOfAPathInsideItsFolder) {
  EXPECT_EQ(ResumedJobId("12", artifacts_), "12");
  EXPECT_EQ(ResumedJobId(artifacts_ + "/7/checkpoint-epoch-1.pt", artifacts_), "7");
  EXPECT_EQ(ResumedJobId(artifacts_ + "/7/../8/model.pt", artifacts_), "8");
  EXPECT_EQ(ResumedJobId("/elsewhere/7/model.pt", artifacts_), "");
  EXPECT_EQ(ResumedJobId("", artifacts_), "");
}

}  // namespace
}  // namespace mpsd::server
