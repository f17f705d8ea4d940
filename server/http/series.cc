// Series of step and epoch metrics, and their min/max/last downsampling.
#include "server/http/series.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/time_util.h"

namespace mpsd::server {
namespace {

using google::protobuf::FieldDescriptor;
using mpsd::v1::EpochMetrics;
using mpsd::v1::JobEvent;
using mpsd::v1::StepMetrics;

struct KnownMetric {
  const char* name;
  SeriesMetric::Source source;
  int field_number;
};

constexpr KnownMetric kKnownMetrics[] = {
    {"loss", SeriesMetric::Source::kStep, StepMetrics::kLossFieldNumber},
    {"accuracy", SeriesMetric::Source::kStep, StepMetrics::kAccuracyFieldNumber},
    {"learning_rate", SeriesMetric::Source::kStep, StepMetrics::kLearningRateFieldNumber},
    {"samples_per_second", SeriesMetric::Source::kStep, StepMetrics::kSamplesPerSecondFieldNumber},
    {"step_time_ms", SeriesMetric::Source::kStep, StepMetrics::kStepTimeMsFieldNumber},
    {"allocated_bytes", SeriesMetric::Source::kStep, StepMetrics::kAllocatedBytesFieldNumber},
    {"loss_scale", SeriesMetric::Source::kStep, StepMetrics::kLossScaleFieldNumber},
    {"batch_size", SeriesMetric::Source::kStep, StepMetrics::kBatchSizeFieldNumber},
    {"train_loss", SeriesMetric::Source::kEpoch, EpochMetrics::kTrainLossFieldNumber},
    {"train_accuracy", SeriesMetric::Source::kEpoch, EpochMetrics::kTrainAccuracyFieldNumber},
    {"test_loss", SeriesMetric::Source::kEpoch, EpochMetrics::kTestLossFieldNumber},
    {"test_accuracy", SeriesMetric::Source::kEpoch, EpochMetrics::kTestAccuracyFieldNumber},
    {"val_loss", SeriesMetric::Source::kEpoch, EpochMetrics::kValLossFieldNumber},
    {"val_accuracy", SeriesMetric::Source::kEpoch, EpochMetrics::kValAccuracyFieldNumber},
    {"epoch_time_s", SeriesMetric::Source::kEpoch, EpochMetrics::kEpochTimeSFieldNumber},
    {"epoch_samples_per_second", SeriesMetric::Source::kEpoch,
     EpochMetrics::kSamplesPerSecondFieldNumber},
    {"epoch_learning_rate", SeriesMetric::Source::kEpoch, EpochMetrics::kLearningRateFieldNumber},
};

// The numeric field `field_number` of `message`, as a double.
double ReadNumber(const google::protobuf::Message& message, int field_number) {
  const FieldDescriptor* field = message.GetDescriptor()->FindFieldByNumber(field_number);
  const google::protobuf::Reflection* reflection = message.GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_FLOAT:
      return reflection->GetFloat(message, field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return reflection->GetDouble(message, field);
    case FieldDescriptor::CPPTYPE_INT32:
      return reflection->GetInt32(message, field);
    case FieldDescriptor::CPPTYPE_INT64:
      return static_cast<double>(reflection->GetInt64(message, field));
    default:
      return 0;  // kKnownMetrics names numeric fields only.
  }
}

bool IsTestMetric(int field_number) {
  return field_number == EpochMetrics::kTestLossFieldNumber ||
         field_number == EpochMetrics::kTestAccuracyFieldNumber;
}

// Index of the minimum and of the maximum of points[begin, end), NaNs skipped; `end` when
// every value is NaN. The earliest index wins ties.
std::pair<size_t, size_t> MinMaxIndex(const std::vector<SeriesPoint>& points, size_t begin,
                                      size_t end) {
  size_t min_i = end, max_i = end;
  for (size_t i = begin; i < end; ++i) {
    const double v = points[i].value;
    if (std::isnan(v)) continue;
    if (min_i == end || v < points[min_i].value) min_i = i;
    if (max_i == end || v > points[max_i].value) max_i = i;
  }
  return {min_i, max_i};
}

}  // namespace

absl::StatusOr<SeriesMetric> FindSeriesMetric(absl::string_view name) {
  for (const KnownMetric& known : kKnownMetrics) {
    if (name == known.name) return SeriesMetric{known.name, known.source, known.field_number};
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "metric: unknown metric \"", name, "\"; known: ", absl::StrJoin(SeriesMetricNames(), ", ")));
}

std::vector<std::string> SeriesMetricNames() {
  std::vector<std::string> names;
  for (const KnownMetric& known : kKnownMetrics) names.emplace_back(known.name);
  return names;
}

SeriesBuilder::SeriesBuilder(std::vector<SeriesMetric> metrics)
    : metrics_(std::move(metrics)), points_(metrics_.size()) {}

std::optional<SeriesPoint> PointOf(const SeriesMetric& metric, const JobEvent& event) {
  const int64_t time_us = google::protobuf::util::TimeUtil::TimestampToMicroseconds(event.time());
  if (metric.source == SeriesMetric::Source::kStep) {
    if (!event.has_step()) return std::nullopt;
    return SeriesPoint{event.step().step(), ReadNumber(event.step(), metric.field_number), time_us};
  }
  if (!event.has_epoch()) return std::nullopt;
  if (IsTestMetric(metric.field_number) && !event.epoch().evaluated()) return std::nullopt;
  // val_*: proto3 optional, unset when the epoch measured no validation.
  const FieldDescriptor* field = EpochMetrics::descriptor()->FindFieldByNumber(metric.field_number);
  if (field->has_presence() && !event.epoch().GetReflection()->HasField(event.epoch(), field)) {
    return std::nullopt;
  }
  return SeriesPoint{event.epoch().epoch(), ReadNumber(event.epoch(), metric.field_number),
                     time_us};
}

void SeriesBuilder::Add(const JobEvent& event) {
  if (event.seq() > through_seq_) through_seq_ = event.seq();
  if (!event.has_step() && !event.has_epoch()) return;
  for (size_t i = 0; i < metrics_.size(); ++i) {
    if (std::optional<SeriesPoint> point = PointOf(metrics_[i], event)) {
      std::vector<SeriesPoint>& points = points_[i];
      while (!points.empty() && points.back().x >= point->x) points.pop_back();  // A resume.
      points.push_back(*point);
    }
  }
}

double Ema::Add(double value) {
  if (!std::isfinite(value)) return value;
  last_ = last_ * weight_ + (1 - weight_) * value;
  ++count_;
  if (weight_ == 0) return value;
  return last_ / (1 - std::pow(weight_, static_cast<double>(count_)));
}

void AppendBucket(const std::vector<SeriesPoint>& points, size_t begin, size_t end,
                  std::vector<SeriesPoint>* out) {
  if (begin >= end) return;
  auto [min_i, max_i] = MinMaxIndex(points, begin, end);
  size_t picks[3] = {min_i, max_i, end - 1};
  std::sort(picks, picks + 3);
  size_t previous = end;  // None yet.
  for (size_t i : picks) {
    if (i == end || i == previous) continue;  // All-NaN bucket, or one point kept twice.
    out->push_back(points[i]);
    previous = i;
  }
}

std::vector<SeriesPoint> Downsample(const std::vector<SeriesPoint>& points, int max_points) {
  max_points = std::max(max_points, 4);
  if (points.size() <= static_cast<size_t>(max_points)) return points;
  // The first point on its own; the rest in buckets of 3 kept points each.
  const size_t rest = points.size() - 1;
  const size_t buckets = static_cast<size_t>(max_points - 1) / 3;
  std::vector<SeriesPoint> kept;
  kept.reserve(1 + 3 * buckets);
  kept.push_back(points[0]);
  for (size_t b = 0; b < buckets; ++b) {
    AppendBucket(points, 1 + rest * b / buckets, 1 + rest * (b + 1) / buckets, &kept);
  }
  return kept;
}

void MetricSeries::Add(const SeriesPoint& point) {
  ++count_;
  if (!reduced_) {
    raw_.push_back(point);
    if (raw_.size() <= raw_limit_) return;
    // Too long to keep whole: the first point, then whole blocks reduced, the rest as tail.
    reduced_ = true;
    first_ = raw_[0];
    size_t begin = 1;
    for (; begin + block_ <= raw_.size(); begin += block_) {
      AppendBucket(raw_, begin, begin + block_, &blocks_);
    }
    tail_.assign(raw_.begin() + static_cast<std::ptrdiff_t>(begin), raw_.end());
    std::vector<SeriesPoint>().swap(raw_);
    return;
  }
  tail_.push_back(point);
  if (tail_.size() < block_) return;
  AppendBucket(tail_, 0, tail_.size(), &blocks_);
  tail_.clear();
}

std::vector<SeriesPoint> MetricSeries::Downsampled(int max_points) const {
  if (!reduced_) return Downsample(raw_, max_points);
  std::vector<SeriesPoint> points;
  points.reserve(1 + blocks_.size() + 3);
  points.push_back(first_);
  points.insert(points.end(), blocks_.begin(), blocks_.end());
  AppendBucket(tail_, 0, tail_.size(), &points);
  return Downsample(points, max_points);
}

size_t MetricSeries::bytes() const {
  return sizeof(*this) +
         sizeof(SeriesPoint) * (raw_.capacity() + blocks_.capacity() + tail_.capacity());
}

}  // namespace mpsd::server
