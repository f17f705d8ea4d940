// How `mpsctl predict` shows a PredictJob's predictions: a table for people, CSV and JSON lines
// for programs. Pure functions; thread-safe.
#ifndef MPSD_CLIENT_PREDICTIONS_H_
#define MPSD_CLIENT_PREDICTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::client {

enum class PredictionFormat { kTable, kCsv, kJson };

// "table", "csv", "json" (as `mpsctl predict --format` takes them); INVALID_ARGUMENT otherwise.
absl::StatusOr<PredictionFormat> ParsePredictionFormat(absl::string_view name);

// The predictions of one job of `task` ("classification", "multilabel", "regression"), each
// line ending in '\n':
//  - kTable: classification one line per input and rank: input (on its first rank only),
//    class index, class name ("-" when unknown), probability (4 decimals); multilabel one line
//    per input and label with its probability and "yes" above 0.5; regression one line per
//    input and output with its value.
//  - kCsv: a header, then the same rows with the input on every row (RFC 4180 quoting):
//    "input,rank,class,name,probability", "input,label,name,probability,predicted",
//    "input,output,value".
//  - kJson: one object per input, protobuf's JSON mapping of Prediction with proto field names.
std::string FormatPredictions(const std::vector<mpsd::v1::Prediction>& predictions,
                              absl::string_view task, PredictionFormat format);

// One `prediction` event as a line of a job's log (mpsctl logs), without '\n':
// "prediction /d/a.png: 9 Ankle boot 0.9712, 7 Sneaker 0.0200" (classes with their names and
// probabilities, or every label's probability), "prediction x.pt[0]: values 1.5, -0.25".
std::string FormatPredictionLine(const mpsd::v1::Prediction& prediction);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_PREDICTIONS_H_
