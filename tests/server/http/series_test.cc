// Tests of server/http/series.cc: metric lookup, series from events, and the min/max/last
// downsampling against a brute-force reference on series with planted spikes.
#include "server/http/series.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpsd::server {
namespace {

using ::mpsd::v1::JobEvent;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

}  // namespace

void PrintTo(const SeriesPoint& p, std::ostream* os) {
  *os << "{x " << p.x << ", value " << p.value << ", time_us " << p.time_us << "}";
}

namespace {

std::vector<SeriesPoint> Noise(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(1.0, 2.0);
  std::vector<SeriesPoint> points;
  for (int i = 0; i < n; ++i) points.push_back({i + 1, uniform(rng), 1000 * (i + 1)});
  return points;
}

// Bucket b of the reference cut: points [1 + rest*b/buckets, 1 + rest*(b+1)/buckets).
struct Bucket {
  size_t begin, end;
};
std::vector<Bucket> ReferenceBuckets(size_t n, int max_points) {
  const size_t buckets = (max_points - 1) / 3;
  std::vector<Bucket> out;
  for (size_t b = 0; b < buckets; ++b) {
    out.push_back({1 + (n - 1) * b / buckets, 1 + (n - 1) * (b + 1) / buckets});
  }
  return out;
}

TEST(DownsampleTest, KeepsEverythingThatFits) {
  std::vector<SeriesPoint> points = Noise(2000, 1);
  EXPECT_EQ(Downsample(points, 2000), points);
  EXPECT_EQ(Downsample({}, 100), std::vector<SeriesPoint>{});
}

TEST(DownsampleTest, PlantedSpikesSurviveAndEveryBucketKeepsItsMinMaxAndLast) {
  const int n = 100000, max_points = 2000;
  std::vector<SeriesPoint> points = Noise(n, 2);
  // Upward and downward spikes, one in the middle of a bucket, one at a bucket's first point,
  // and two in the same bucket.
  const std::vector<std::pair<size_t, double>> spikes = {
      {31337, 1e6}, {50001, -1e6}, {77777, 55.0}, {77778, -55.0}};
  for (auto [i, v] : spikes) points[i].value = v;

  const std::vector<SeriesPoint> kept = Downsample(points, max_points);
  ASSERT_LE(kept.size(), static_cast<size_t>(max_points));
  EXPECT_EQ(kept.front(), points.front());
  EXPECT_EQ(kept.back(), points.back());
  for (auto [i, v] : spikes) {
    EXPECT_THAT(kept, ::testing::Contains(points[i])) << "spike at " << i << " lost";
  }
  // Order is preserved (x strictly increasing here, as the input).
  for (size_t i = 1; i < kept.size(); ++i) ASSERT_LT(kept[i - 1].x, kept[i].x);

  // Against a brute-force reference: each bucket's min, max and last are among the kept
  // points, and nothing else from that bucket is.
  size_t k = 1;
  for (const Bucket& bucket : ReferenceBuckets(n, max_points)) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (size_t i = bucket.begin; i < bucket.end; ++i) {
      lo = std::min(lo, points[i].value);
      hi = std::max(hi, points[i].value);
    }
    double kept_lo = std::numeric_limits<double>::infinity(), kept_hi = -kept_lo;
    size_t count = 0;
    while (k < kept.size() && kept[k].x <= points[bucket.end - 1].x) {
      kept_lo = std::min(kept_lo, kept[k].value);
      kept_hi = std::max(kept_hi, kept[k].value);
      ++count;
      ++k;
    }
    ASSERT_GE(count, 1u);
    ASSERT_LE(count, 3u);
    EXPECT_EQ(kept_lo, lo) << "bucket at " << bucket.begin;
    EXPECT_EQ(kept_hi, hi) << "bucket at " << bucket.begin;
    EXPECT_EQ(kept[k - 1], points[bucket.end - 1]) << "bucket at " << bucket.begin;
  }
  EXPECT_EQ(k, kept.size());
}

TEST(DownsampleTest, ConstantSeriesKeepsOnePointPerBucketAndNanIsNoExtreme) {
  std::vector<SeriesPoint> points(1000, SeriesPoint{0, 3.0, 0});
  for (size_t i = 0; i < points.size(); ++i) points[i].x = static_cast<int64_t>(i);
  points[500].value = std::nan("");
  const std::vector<SeriesPoint> kept = Downsample(points, 31);  // 10 buckets.
  // Constant buckets keep min (= first) and last; the NaN stays only if it were a last point.
  for (const SeriesPoint& p : kept) EXPECT_EQ(p.value, 3.0);
  EXPECT_LE(kept.size(), 31u);
  EXPECT_EQ(kept.back().x, 999);
}

TEST(DownsampleTest, TooSmallMaxPointsIsRaisedToFour) {
  const std::vector<SeriesPoint> kept = Downsample(Noise(100, 3), 1);
  EXPECT_LE(kept.size(), 4u);
  EXPECT_EQ(kept.front().x, 1);
  EXPECT_EQ(kept.back().x, 100);
}

JobEvent StepEvent(int64_t seq, int64_t step, float loss, double lr) {
  JobEvent event;
  event.set_seq(seq);
  event.mutable_time()->set_seconds(1700000000 + seq);
  event.mutable_step()->set_step(step);
  event.mutable_step()->set_loss(loss);
  event.mutable_step()->set_learning_rate(lr);
  return event;
}

TEST(SeriesBuilderTest, ReadsStepAndEpochFieldsAndSkipsUnevaluatedTests) {
  std::vector<SeriesMetric> metrics;
  for (const char* name : {"loss", "learning_rate", "test_accuracy", "train_loss"}) {
    absl::StatusOr<SeriesMetric> metric = FindSeriesMetric(name);
    ASSERT_TRUE(metric.ok()) << metric.status();
    metrics.push_back(*metric);
  }
  SeriesBuilder builder(metrics);
  JobEvent log;
  log.set_seq(1);
  log.mutable_log()->set_text("hello");
  builder.Add(log);
  builder.Add(StepEvent(2, 1, 2.5f, 0.1));
  builder.Add(StepEvent(3, 2, 1.5f, 0.05));
  JobEvent epoch;
  epoch.set_seq(4);
  epoch.mutable_epoch()->set_epoch(1);
  epoch.mutable_epoch()->set_train_loss(2.0);
  epoch.mutable_epoch()->set_evaluated(false);
  builder.Add(epoch);
  epoch.set_seq(5);
  epoch.mutable_time()->set_seconds(1700000005);
  epoch.mutable_epoch()->set_epoch(2);
  epoch.mutable_epoch()->set_train_loss(1.0);
  epoch.mutable_epoch()->set_test_accuracy(0.75);
  epoch.mutable_epoch()->set_evaluated(true);
  builder.Add(epoch);

  EXPECT_EQ(builder.through_seq(), 5);
  EXPECT_THAT(builder.points(0), ElementsAre(SeriesPoint{1, 2.5, 1700000002000000},
                                             SeriesPoint{2, 1.5, 1700000003000000}));
  EXPECT_EQ(builder.points(1)[1].value, 0.05);
  EXPECT_THAT(builder.points(2), ElementsAre(SeriesPoint{2, 0.75, 1700000005000000}));
  ASSERT_EQ(builder.points(3).size(), 2u);
  EXPECT_EQ(builder.points(3)[0].value, 2.0);
}

// Issue 27: val_loss is a series of the epochs that measured it (proto3 optional): an epoch
// without validation adds no point, not a 0.
TEST(SeriesBuilderTest, ValidationSeriesSkipsEpochsThatMeasuredNone) {
  absl::StatusOr<SeriesMetric> metric = FindSeriesMetric("val_loss");
  ASSERT_TRUE(metric.ok()) << metric.status();
  SeriesBuilder builder({*metric});
  JobEvent epoch;
  epoch.set_seq(1);
  epoch.mutable_epoch()->set_epoch(1);
  builder.Add(epoch);
  epoch.set_seq(2);
  epoch.mutable_epoch()->set_epoch(2);
  epoch.mutable_epoch()->set_val_loss(0.5);
  builder.Add(epoch);
  ASSERT_EQ(builder.points(0).size(), 1u);
  EXPECT_EQ(builder.points(0)[0].x, 2);
  EXPECT_EQ(builder.points(0)[0].value, 0.5);
}

TEST(MetricSeriesTest, WholeUpToTheRawLimitThenReducedWithTheSameExtremes) {
  const std::vector<SeriesPoint> points = [] {
    std::vector<SeriesPoint> p = Noise(300000, 4);
    p[123457].value = 1e6;          // Past the raw limit: inside a reduced block.
    p[64 * 2000 + 1].value = -1e6;  // A block's first point.
    p[299998].value = 77.0;         // In the incomplete last block.
    return p;
  }();
  MetricSeries series(/*raw_limit=*/100000, /*block=*/64);
  for (size_t i = 0; i < points.size(); ++i) {
    series.Add(points[i]);
    if (i + 1 == 5000) {  // Under the limit: exactly what Downsample keeps.
      std::vector<SeriesPoint> prefix(points.begin(), points.begin() + 5000);
      EXPECT_EQ(series.Downsampled(2000), Downsample(prefix, 2000));
      EXPECT_EQ(series.Downsampled(100000), prefix);
    }
  }
  EXPECT_EQ(series.count(), 300000);
  const std::vector<SeriesPoint> kept = series.Downsampled(2000);
  ASSERT_LE(kept.size(), 2000u);
  EXPECT_EQ(kept.front(), points.front());
  EXPECT_EQ(kept.back(), points.back());
  for (size_t i : {123457u, 64u * 2000 + 1, 299998u}) {
    EXPECT_THAT(kept, ::testing::Contains(points[i])) << "spike at " << i << " lost";
  }
  for (size_t i = 1; i < kept.size(); ++i) ASSERT_LT(kept[i - 1].x, kept[i].x);
  // Reduced, it holds ~3 points per block, not 300,000.
  EXPECT_LT(series.bytes(), sizeof(SeriesPoint) * 300000 / 10);
  EXPECT_LE(series.Downsampled(100000).size(), 1 + 3 * (300000 / 64) + 3);
}

TEST(SeriesMetricTest, UnknownNameIsNamedWithTheKnownOnes) {
  absl::StatusOr<SeriesMetric> metric = FindSeriesMetric("los");
  ASSERT_FALSE(metric.ok());
  EXPECT_EQ(metric.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(metric.status().message(), HasSubstr("metric: unknown metric \"los\""));
  EXPECT_THAT(metric.status().message(), HasSubstr("loss, accuracy"));
}

}  // namespace
}  // namespace mpsd::server
