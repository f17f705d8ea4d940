// Tests of server/http/series_cache.cc over a real EventLog on a real SQLite JobStore in a temp
// dir: answers equal a full rebuild after every append, metrics asked for later are complete, and
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
      event.mutable_step()->set_epoch(static_cast<int32_t>((step - 1) / 100 + 1));
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
  absl::StatusOr<SeriesCache::Result> result =
      cache.Query(job.id(),
                  {*FindSeriesMetric("learning_rate"), *FindSeriesMetric("train_loss"),
                   *FindSeriesMetric("loss")},
                  100000);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->series[0].points, Rebuilt(job, "learning_rate", 100000));
  EXPECT_EQ(result->series[0].raw_points, 2850);
  EXPECT_EQ(result->series[1].points, Rebuilt(job, "train_loss", 100000));
  EXPECT_EQ(result->series[1].raw_points, 28);
  EXPECT_EQ(result->series[2].points, Rebuilt(job, "loss", 100000));
}

// Many metrics, each smoothed too, asked for at once of a job the cache already follows: the
// new tracks are filled from the start while the map holding them grows (it moves its elements;
// the dashboard's smoothing change crashed mpsd here when tracks were held by address).
TEST_F(SeriesCacheTest, ManyMetricsAddedAtOnceWithSmoothingAreComplete) {
  SeriesCache cache(log_.get(), {});
  Job job = NewJob();
  Append(job, 400);
  ASSERT_TRUE(cache.Query(job.id(), {*FindSeriesMetric("loss")}, 100000).ok());
  Append(job, 100);
  std::vector<SeriesMetric> metrics;
  for (const std::string& name : SeriesMetricNames()) metrics.push_back(*FindSeriesMetric(name));
  absl::StatusOr<SeriesCache::Result> result = cache.Query(job.id(), metrics, 100000, 0.6);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->series.size(), metrics.size());
  for (size_t i = 0; i < metrics.size(); ++i) {
    const SeriesCache::Series& series = result->series[i];
    const std::vector<SeriesPoint> rebuilt = Rebuilt(job, metrics[i].name.c_str(), 100000);
    EXPECT_EQ(series.points, rebuilt) << metrics[i].name;
    ASSERT_EQ(series.smoothed.size(), rebuilt.size()) << metrics[i].name;
    Ema ema(0.6);
    for (size_t k = 0; k < rebuilt.size(); ++k) {
      EXPECT_NEAR(series.smoothed[k].value, ema.Add(rebuilt[k].value), 1e-9) << metrics[i].name;
    }
  }
}

// A resume: the job reports steps 451.. again after 700 (and epoch 5.. after 7). Every step
// and epoch has one point, the latest attempt's, whether the cache saw the first attempt alone
// before or reads both at once; the smoothing runs over exactly those points.
TEST_F(SeriesCacheTest, AResumedJobHasOnePointPerStepTheLatestAttempts) {
  SeriesCache followed(log_.get(), {});
  Job job = NewJob();
  Append(job, 700);
  const std::vector<SeriesMetric> metrics = {*FindSeriesMetric("loss"),
                                             *FindSeriesMetric("train_loss")};
  ASSERT_TRUE(followed.Query(job.id(), metrics, 100000, 0.6).ok());
  steps_[job.id()] = 450;
  Append(job, 400);
  SeriesCache fresh(log_.get(), {});
  for (SeriesCache* cache : {&followed, &fresh}) {
    absl::StatusOr<SeriesCache::Result> result = cache->Query(job.id(), metrics, 100000, 0.6);
    ASSERT_TRUE(result.ok()) << result.status();
    const SeriesCache::Series& loss = result->series[0];
    EXPECT_EQ(loss.raw_points, 850);
    ASSERT_EQ(loss.points.size(), 850u);
    EXPECT_EQ(loss.points, Rebuilt(job, "loss", 100000));
    for (size_t i = 0; i < loss.points.size(); ++i) EXPECT_EQ(loss.points[i].x, int64_t(i) + 1);
    // The second attempt's values from step 451 (the seqs of the second attempt are later).
    EXPECT_GT(loss.points[450].time_us, loss.points[449].time_us + 200 * 1000000LL);
    std::vector<int64_t> epochs;
    for (const SeriesPoint& p : result->series[1].points) epochs.push_back(p.x);
    EXPECT_EQ(epochs, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
    Ema ema(0.6);
    ASSERT_EQ(loss.smoothed.size(), 850u);
    for (size_t i = 0; i < loss.points.size(); ++i) {
      EXPECT_DOUBLE_EQ(loss.smoothed[i].value, ema.Add(loss.points[i].value)) << i;
    }
    EXPECT_EQ(loss.ema_count, 850);
    EXPECT_DOUBLE_EQ(loss.ema_last, ema.last());
  }
}

// Smoothing over a series thinned for the chart: every smoothed point is the EMA of all points
// up to it, not of the kept ones.
TEST_F(SeriesCacheTest, SmoothingRunsOverEveryPointNotTheThinnedOnes) {
  SeriesCache::Options options;
  options.raw_limit = 1000;  // Reduced beyond: the thinning of long series.
  SeriesCache cache(log_.get(), options);
  Job job = NewJob();
  Append(job, 5000);
  absl::StatusOr<SeriesCache::Result> result =
      cache.Query(job.id(), {*FindSeriesMetric("loss")}, 300, 0.9);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<SeriesPoint> all = Rebuilt(job, "loss", 100000);
  std::map<int64_t, double> smoothed_at;
  Ema ema(0.9);
  for (const SeriesPoint& p : all) smoothed_at[p.x] = ema.Add(p.value);
  const SeriesCache::Series& loss = result->series[0];
  EXPECT_LE(loss.points.size(), 300u);
  EXPECT_LE(loss.smoothed.size(), 300u);
  EXPECT_EQ(loss.smoothed.back().x, 5000);
  for (const SeriesPoint& p : loss.smoothed) EXPECT_NEAR(p.value, smoothed_at[p.x], 1e-9) << p.x;
  // Ema itself is TensorBoard's: debiased, so the first value is the value itself.
  Ema first(0.99);
  EXPECT_DOUBLE_EQ(first.Add(3.0), 3.0);
  EXPECT_NEAR(first.Add(1.0), (0.99 * 0.01 * 3.0 + 0.01 * 1.0) / (1 - 0.99 * 0.99), 1e-12);
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
