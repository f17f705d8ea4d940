// Precision names (precision.h).
#include "trainer/precision.h"

#include "absl/strings/str_format.h"

namespace mpsd::trainer {

std::string PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
  }
  return "unknown";
}

std::vector<std::string> PrecisionNames() {
  return {PrecisionName(Precision::kFp32), PrecisionName(Precision::kFp16),
          PrecisionName(Precision::kBf16)};
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view name, const FieldChecks& fields,
                                         absl::string_view field) {
  for (const Precision precision : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
    if (name == PrecisionName(precision)) return precision;
  }
  if (name.empty()) return Precision::kFp32;
  return fields.Error(
      field, absl::StrFormat("unknown precision \"%s\" %s", name, KnownNames(PrecisionNames())));
}

}  // namespace mpsd::trainer
