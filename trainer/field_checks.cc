// Field-path errors and range checks (field_checks.h).
#include "trainer/field_checks.h"

#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/error_cause.h"

namespace mpsd::trainer {

std::string FieldChecks::Path(absl::string_view field) const {
  if (field.empty()) return path_;
  return absl::StrCat(path_, ".", field);
}

absl::Status FieldChecks::Error(absl::string_view field, absl::string_view problem) const {
  const std::string path = Path(field);
  return api::WithInvalidField(absl::InvalidArgumentError(absl::StrCat(path, ": ", problem)), path);
}

absl::Status FieldChecks::Positive(absl::string_view field, int64_t value) const {
  if (value > 0) return absl::OkStatus();
  return Error(field, absl::StrFormat("must be > 0, got %d", value));
}

absl::Status FieldChecks::AtLeast(absl::string_view field, int64_t value, int64_t low) const {
  if (value >= low) return absl::OkStatus();
  return Error(field, absl::StrFormat("must be >= %d, got %d", low, value));
}

absl::Status FieldChecks::InRange(absl::string_view field, int64_t value, int64_t low,
                                  int64_t high) const {
  if (value >= low && value <= high) return absl::OkStatus();
  return Error(field, absl::StrFormat("must be in [%d, %d], got %d", low, high, value));
}

absl::StatusOr<int> FieldChecks::PositiveOr(absl::string_view field, bool has_value, int value,
                                            int default_value) const {
  if (!has_value) return default_value;
  if (absl::Status s = Positive(field, value); !s.ok()) return s;
  return value;
}

absl::Status FieldChecks::PositiveFinite(absl::string_view field, double value) const {
  if (!(value > 0)) return Error(field, absl::StrCat("must be > 0, got ", value));
  return Float32(field, value);
}

absl::Status FieldChecks::NonNegativeFinite(absl::string_view field, double value) const {
  if (!(value >= 0)) return Error(field, absl::StrCat("must be >= 0, got ", value));
  return Float32(field, value);
}

absl::Status FieldChecks::Float32(absl::string_view field, double value) const {
  if (!std::isfinite(value)) return Error(field, absl::StrCat("must be finite, got ", value));
  if (std::fabs(value) > kMaxFloat32) {
    return Error(field, absl::StrCat("must be at most ", kMaxFloat32,
                                     " in size (the largest float32: the trainer computes in "
                                     "float32), got ",
                                     value));
  }
  return absl::OkStatus();
}

absl::Status FieldChecks::InRange(absl::string_view field, double value,
                                  const Interval& interval) const {
  const bool above = interval.low_closed ? value >= interval.low : value > interval.low;
  const bool below = interval.high_closed ? value <= interval.high : value < interval.high;
  if (above && below) return absl::OkStatus();
  return Error(field,
               absl::StrCat("must be in ", interval.low_closed ? "[" : "(", interval.low, ", ",
                            interval.high, interval.high_closed ? "]" : ")", ", got ", value));
}

absl::Status FieldChecks::NotFor(absl::string_view field, absl::string_view who,
                                 absl::string_view what) const {
  return Error(field, absl::StrFormat("only %s take%s it, not %s", who,
                                      absl::StrContains(who, " ") ? "" : "s", what));
}

std::string KnownNames(const std::vector<std::string>& names) {
  return absl::StrCat("(known: ", absl::StrJoin(names, ", "), ")");
}

std::string Indexed(absl::string_view field, int index) {
  return absl::StrCat(field, "[", index, "]");
}

}  // namespace mpsd::trainer
