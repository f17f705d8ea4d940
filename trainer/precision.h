// The numeric precision of a TrainJob's forward passes: its names and their parsing. Whether a
// device can run one is LibTorch's to say (compat::AutocastUnsupportedReason, the one check for
// TrainJob and BenchJob alike). Torch-free.
#ifndef MPSD_TRAINER_PRECISION_H_
#define MPSD_TRAINER_PRECISION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/field_checks.h"

namespace mpsd::trainer {

// fp16 and bf16 run the forward passes under autocast (the weights, gradients and optimizer
// state stay float32); fp16 also scales the loss (GradScaler).
enum class Precision { kFp32, kFp16, kBf16 };

// "fp32", "fp16", "bf16".
std::string PrecisionName(Precision precision);

// Every name, in that order.
std::vector<std::string> PrecisionNames();

// "" (fp32) or one of PrecisionNames(). INVALID_ARGUMENT from `fields` on `field` for another
// name: "train_job.precision: unknown precision \"fp8\" (known: fp32, fp16, bf16)".
absl::StatusOr<Precision> ParsePrecision(absl::string_view name, const FieldChecks& fields,
                                         absl::string_view field);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_PRECISION_H_
