// Metric series of one job for charts (GET /api/jobs/{id}/series): the values of one field of
// its step or epoch events, and their downsampling to a bounded number of points that keeps
// every spike: the series is cut into equal runs of points ("buckets") and of each bucket only
// its minimum, its maximum and its last point are kept, plus the series' first point. This is
// the min/max-per-pixel-column reduction that line charts of long series need (the M4 family,
// Jugel et al., "M4: A Visualization-Oriented Time Series Data Aggregation", VLDB 2014, minus
// each bucket's first point); never random sampling, so an outlier always survives.
#ifndef MPSD_SERVER_HTTP_SERIES_H_
#define MPSD_SERVER_HTTP_SERIES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "api/attempts.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// One point of a series.
struct SeriesPoint {
  // The step (step metrics, 1-based, across epochs) or the epoch (epoch metrics, 1-based).
  int64_t x = 0;
  double value = 0;
  // The event's time, microseconds since the Unix epoch (for charts over wall time).
  int64_t time_us = 0;

  bool operator==(const SeriesPoint& other) const {
    return x == other.x && value == other.value && time_us == other.time_us;
  }
};

// Which field of which event a series reads. Plain value.
struct SeriesMetric {
  enum class Source { kStep, kEpoch };
  // As the API names it: "loss", "test_accuracy", ...
  std::string name;
  Source source = Source::kStep;
  // The proto field (of StepMetrics or EpochMetrics) it reads.
  int field_number = 0;
};

// The metric called `name`: a numeric field of StepMetrics ("loss", "accuracy",
// "learning_rate", "samples_per_second", "step_time_ms", "allocated_bytes", "loss_scale",
// "batch_size"), x = step; or of EpochMetrics ("train_loss", "train_accuracy", "test_loss",
// "test_accuracy", "epoch_time_s", "epoch_samples_per_second", "epoch_learning_rate"),
// x = epoch. Epoch events whose evaluation was skipped (evaluated false) give no test_* point.
// INVALID_ARGUMENT naming `metric` and listing the known names otherwise.
absl::StatusOr<SeriesMetric> FindSeriesMetric(absl::string_view name);

// Every metric name FindSeriesMetric knows, step metrics first.
std::vector<std::string> SeriesMetricNames();

// The point `event` gives `metric`, if any (a step event for a step metric, an epoch event for
// an epoch metric, except test_* of an epoch whose evaluation was skipped).
std::optional<SeriesPoint> PointOf(const SeriesMetric& metric, const mpsd::v1::JobEvent& event);

// TensorBoard's scalar smoothing: an exponential moving average debiased like Adam's moment
// estimates, as in tensorboard/components/vz_line_chart2/line-chart.ts (resmoothDataset):
//   last = last * weight + (1 - weight) * value;  n += 1;
//   smoothed = last / (1 - weight^n)
// Non-finite values are returned unsmoothed and do not enter the average (as TensorBoard).
// weight in [0, 1); 0 returns every value as is. Thread-compatible plain value.
class Ema {
 public:
  explicit Ema(double weight) : weight_(weight) {}
  // The smoothed value at `value`, which enters the average.
  double Add(double value);
  double weight() const { return weight_; }
  // The biased running average and how many values entered it: a client continues the average
  // from these with the formula above.
  double last() const { return last_; }
  int64_t count() const { return count_; }

 private:
  double weight_;
  double last_ = 0;
  int64_t count_ = 0;
};

// Collects points of several metrics from a job's events, fed in seq order (heartbeats and
// events of other payloads are skipped). A point whose x is at or below the last point's x of
// its series starts a new attempt (a resume): the points at and above it are dropped first, so
// every x has the latest attempt's value. Thread-compatible.
class SeriesBuilder {
 public:
  explicit SeriesBuilder(std::vector<SeriesMetric> metrics);

  void Add(const mpsd::v1::JobEvent& event);

  const std::vector<SeriesMetric>& metrics() const { return metrics_; }
  // The points of metrics()[i], in the order added.
  const std::vector<SeriesPoint>& points(size_t i) const { return points_[i]; }
  // The highest seq added (0 before any event).
  int64_t through_seq() const { return through_seq_; }

 private:
  std::vector<SeriesMetric> metrics_;
  std::vector<std::vector<SeriesPoint>> points_;
  int64_t through_seq_ = 0;
};

// At most `max_points` (>= 4) points of `points` (any order of x; kept as given): all of them
// when they fit; else the first point, then the series cut into (max_points - 1) / 3 buckets of
// consecutive points (sizes differ by at most one) and from each, in their original order, the
// point holding its minimum value, the one holding its maximum and its last point (once each
// when they coincide; the earliest point among equal minima or maxima). The last point of the
// series is always kept (it is the last bucket's last point). NaN values count as neither
// minimum nor maximum but are kept when last.
std::vector<SeriesPoint> Downsample(const std::vector<SeriesPoint>& points, int max_points);

// Appends to `out`, in their original order, the points of points[begin, end) that hold its
// minimum, its maximum and the last one (each once; NaN values are no extreme). One bucket of
// Downsample.
void AppendBucket(const std::vector<SeriesPoint>& points, size_t begin, size_t end,
                  std::vector<SeriesPoint>* out);

// One metric of one job, built incrementally, that answers Downsample(all points, max_points)
// for any max_points without keeping every point of a long series: up to `raw_limit` points it
// keeps them all; beyond, it keeps the first point and, for each run of `block` consecutive
// points, that run's minimum, maximum and last (AppendBucket), plus the raw points of the run not
// yet complete. Downsampling those reduced points keeps what Downsample keeps of the raw ones
// (first, last, every bucket's minimum and maximum) with bucket edges rounded to whole blocks.
// Thread-compatible.
class MetricSeries {
 public:
  MetricSeries(int raw_limit, int block) : raw_limit_(raw_limit), block_(block) {}

  void Add(const SeriesPoint& point);

  // Points added so far.
  int64_t count() const { return count_; }
  // At most max_points (>= 4) points as described above; every point when count() fits.
  std::vector<SeriesPoint> Downsampled(int max_points) const;
  // Memory held, bytes (approximately).
  size_t bytes() const;

 private:
  const size_t raw_limit_;
  const size_t block_;
  int64_t count_ = 0;
  // Every point, while count_ <= raw_limit_.
  std::vector<SeriesPoint> raw_;
  // Beyond: the first point, the complete blocks' extremes and the current block's points.
  bool reduced_ = false;
  SeriesPoint first_;
  std::vector<SeriesPoint> blocks_;
  std::vector<SeriesPoint> tail_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_SERIES_H_
