// Tests of server/http/series_cache.cc over a real EventLog on a real SQLite JobStore in a temp dir:
// answers equal a full rebuild after every append, metrics asked for later are complete, and
// eviction keeps answers right.
#include "server/http/series_cache.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/event_log.h"
#include "server/core/job_store.h"
#include "tests/common/temp_dir.h"

namespace mpsd::server {
namespace {

using ::mpsd::v1::Job;
using ::mpsd::v1::JobEvent;

class SeriesCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open({dir_ + "/mpsd.db"});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    log_ = std::make_unique<EventLog>(store_.get());
  }
  void TearDown() override {
    log_.reset();
    store_.reset();
  }

  Job NewJob() {
    Job job;
    job.set_kind(Job::TRAIN_JOB);
    return *store_->InsertJob(job);
  }

  // Appends `steps` step events (and an epoch event every 100 steps) after the job's last.
  void Append(Job& job, int steps) {
    std::vector<JobEvent> events;
    for (int i = 0; i < steps; ++i) {
      JobEvent event;
      event.set_job_id(job.id());
      event.set_seq(job.last_seq() + 1);
      event.mutable_time()->set_seconds(1700000000 + event.seq());
      const int64_t step = ++steps_[job.id()];
      if (step % 100 == 0) {
        event.mutable_epoch()->set_epoch(step / 100);
        event.mutable_epoch()->set_train_loss(1.0 / step);
        event.set_seq(job.last_seq() + 1);
        job.set_last_seq(event.seq());
        events.push_back(event);
        event.clear_epoch();
        event.set_seq(job.last_seq() + 1);
      }
      event.mutable_step()->set_step(step);
      event.mutable_step()->set_loss(static_cast<float>((step * 7919) % 1000) / 100.0f);
      event.mutable_step()->set_learning_rate(0.1 / step);
      job.set_last_seq(event.seq());
      events.push_back(event);
    }
    log_->Append(job, std::move(events));
    ASSERT_TRUE(log_->Flush().ok());
  }

  // What a cache-less reading of every event gives.
  std::vector<SeriesPoint> Rebuilt(const Job& job, const char* metric, int max_points) {
    std::vector<SeriesMetric> metrics = {*FindSeriesMetric(metric)};
    SeriesBuilder builder(metrics);
    absl::StatusOr<std::vector<JobEvent>> events = store_->ReadEvents(job.id(), 0, 1000000);
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) return {};
    for (const JobEvent& event : *events) builder.Add(event);
    return Downsample(builder.points(0), max_points);
  }

  const mpsd::testing::TempDir temp_{"series_cache_test"};
  const std::string dir_ = temp_.str();
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<EventLog> log_;
  std::map<std::string, int64_t> steps_;
};

TEST_F(SeriesCacheTest, IncrementalAnswersEqualAFullRebuild) {
  SeriesCache cache(log_.get(), {});
  Job job = NewJob();
  for (int round = 0; round < 4; ++round) {
    Append(job, 700);
    absl::StatusOr<SeriesCache::Result> result =
        cache.Query(job.id(), {*FindSeriesMetric("loss")}, 200);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->through_seq, job.last_seq());
    EXPECT_EQ(result->series[0].raw_points, 700 * (round + 1));
    EXPECT_EQ(result->series[0].points, Rebuilt(job, "loss", 200)) << "round " << round;
  }
  // A metric asked for only now has every point, and the old one still follows.
  Append(job, 50);
  absl::StatusOr<SeriesCache::Result> result = cache.Query(
      job.id(), {*FindSeriesMetric("learning_rate"), *FindSeriesMetric("train_loss"),
                 *FindSeriesMetric("loss")},
      100000);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->series[0].points, Rebuilt(job, "learning_rate", 100000));
  EXPECT_EQ(result->series[0].raw_points, 2850);
  EXPECT_EQ(result->series[1].points, Rebuilt(job, "train_loss", 100000));
  EXPECT_EQ(result->series[1].raw_points, 28);
  EXPECT_EQ(result->series[2].points, Rebuilt(job, "loss", 100000));
}

TEST_F(SeriesCacheTest, EvictionKeepsMemoryBoundedAndAnswersRight) {
  SeriesCache::Options options;
  options.max_bytes = 64 << 10;  // Room for about one job of 1,000 points.
  SeriesCache cache(log_.get(), options);
  std::vector<Job> jobs;
  for (int i = 0; i < 5; ++i) {
    jobs.push_back(NewJob());
    Append(jobs.back(), 1000);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (Job& job : jobs) {
      absl::StatusOr<SeriesCache::Result> result =
          cache.Query(job.id(), {*FindSeriesMetric("loss")}, 500);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(result->series[0].points, Rebuilt(job, "loss", 500));
      EXPECT_LE(cache.bytes(), options.max_bytes + (48 << 10));  // The job just read stays.
    }
  }
  // An unknown job is an empty series, not an error (the handler checks the job first).
  absl::StatusOr<SeriesCache::Result> none = cache.Query("999", {*FindSeriesMetric("loss")}, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->series[0].raw_points, 0);
}

}  // namespace
}  // namespace mpsd::server
