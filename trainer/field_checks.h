// Range checks on the fields of a job spec, each error naming the field's path, e.g.
// INVALID_ARGUMENT "train_job.optimizer.learning_rate: must be > 0, got -1". Shared by the
// TrainJob, BenchJob and dataset validation so that every field reads the same way. Torch-free.
#ifndef MPSD_TRAINER_FIELD_CHECKS_H_
#define MPSD_TRAINER_FIELD_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {

// The largest float32 (FLT_MAX, about 3.4e38): the bound of every float hyperparameter.
inline constexpr double kMaxFloat32 = 3.4028234663852886e38;

// An interval of doubles, each end closed or open; shown as "[0, 1)".
struct Interval {
  double low = 0;
  bool low_closed = true;
  double high = 1;
  bool high_closed = false;
};

// The checks for the fields of one message of a spec, at `path` ("train_job",
// "train_job.dataset", "bench_job"). Every method returns OK or INVALID_ARGUMENT whose message
// is "<path>.<field>: <problem>". Immutable, so any thread may use one.
class FieldChecks {
 public:
  explicit FieldChecks(std::string path) : path_(std::move(path)) {}

  // The checks of the sub-message `name` ("optimizer" → "train_job.optimizer").
  FieldChecks Sub(absl::string_view name) const { return FieldChecks(Path(name)); }

  // "<path>.<field>"; "<path>" when `field` is empty (a problem of the message as a whole).
  std::string Path(absl::string_view field) const;

  absl::Status Error(absl::string_view field, absl::string_view problem) const;

  // Integers: "must be > 0, got 0", "must be >= 1, got 0", "must be in [1, 4096], got 0".
  absl::Status Positive(absl::string_view field, int64_t value) const;
  absl::Status AtLeast(absl::string_view field, int64_t value, int64_t low) const;
  absl::Status InRange(absl::string_view field, int64_t value, int64_t low, int64_t high) const;

  // `value` when set (has_value) and > 0; `default_value` when unset.
  absl::StatusOr<int> PositiveOr(absl::string_view field, bool has_value, int value,
                                 int default_value) const;

  // Doubles: > 0 and finite; >= 0 and finite; inside `interval` (a NaN is never inside).
  // "Finite" includes representable as a float32 (|value| <= kMaxFloat32; see Float32).
  absl::Status PositiveFinite(absl::string_view field, double value) const;
  absl::Status NonNegativeFinite(absl::string_view field, double value) const;
  // Finite and at most kMaxFloat32 in size: the value becomes a float32 scalar where it is used
  // (LibTorch refuses 1e300 there with "value cannot be converted to type float without
  // overflow", at run time and naming no field).
  absl::Status Float32(absl::string_view field, double value) const;
  absl::Status InRange(absl::string_view field, double value, const Interval& interval) const;

  // A field set for a setting that does not use it: "only sgd takes it, not adam",
  // "only adam and adamw take it, not sgd".
  absl::Status NotFor(absl::string_view field, absl::string_view who, absl::string_view what) const;

 private:
  std::string path_;
};

// "(known: a, b, c)", for an unknown name.
std::string KnownNames(const std::vector<std::string>& names);

// "models[2]", the path of a repeated field's element.
std::string Indexed(absl::string_view field, int index);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_FIELD_CHECKS_H_
