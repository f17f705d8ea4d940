// `mpsctl predict`'s output (predictions.h).
#include "client/predictions.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/format.h"
#include "client/text_table.h"

namespace mpsd::client {
namespace {

using Row = std::vector<std::string>;

std::string Probability(double p) { return absl::StrFormat("%.4f", p); }

std::string NameAt(const v1::Prediction& p, int i) {
  return i < p.class_names_size() && !p.class_names(i).empty() ? p.class_names(i) : "-";
}

// The rows of one prediction, without the input column.
std::vector<Row> RowsOf(const v1::Prediction& p, absl::string_view task) {
  std::vector<Row> rows;
  if (task == "regression") {
    for (int d = 0; d < p.values_size(); ++d) {
      rows.push_back({absl::StrCat(d), absl::StrFormat("%.6g", p.values(d))});
    }
  } else if (task == "multilabel") {
    for (int k = 0; k < p.probabilities_size(); ++k) {
      rows.push_back({absl::StrCat(k), NameAt(p, k), Probability(p.probabilities(k)),
                      p.probabilities(k) > 0.5 ? "yes" : "no"});
    }
  } else {
    for (int r = 0; r < p.classes_size(); ++r) {
      rows.push_back({absl::StrCat(r + 1), absl::StrCat(p.classes(r)), NameAt(p, r),
                      r < p.probabilities_size() ? Probability(p.probabilities(r)) : "-"});
    }
  }
  return rows;
}

Row Header(absl::string_view task) {
  if (task == "regression") return {"input", "output", "value"};
  if (task == "multilabel") return {"input", "label", "name", "probability", "predicted"};
  return {"input", "rank", "class", "name", "probability"};
}

std::string CsvField(const std::string& text) {
  if (!absl::StrContains(text, ',') && !absl::StrContains(text, '"') &&
      !absl::StrContains(text, '\n')) {
    return text;
  }
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\"", "\"\""}}), "\"");
}

std::string Csv(const std::vector<v1::Prediction>& predictions, absl::string_view task) {
  std::string out = absl::StrCat(absl::StrJoin(Header(task), ","), "\n");
  for (const v1::Prediction& p : predictions) {
    for (Row& row : RowsOf(p, task)) {
      row.insert(row.begin(), p.input());
      std::vector<std::string> fields;
      for (const std::string& field : row) fields.push_back(CsvField(field));
      absl::StrAppend(&out, absl::StrJoin(fields, ","), "\n");
    }
  }
  return out;
}

// Columns padded to their widest cell; numbers right-aligned, text left.
std::string Table(const std::vector<v1::Prediction>& predictions, absl::string_view task) {
  TextTable table;
  for (const std::string& column : Header(task)) {
    table.header.push_back(absl::AsciiStrToUpper(column));
  }
  for (const v1::Prediction& p : predictions) {
    bool first = true;
    for (Row& row : RowsOf(p, task)) {
      row.insert(row.begin(), first ? p.input() : "");
      first = false;
      table.rows.push_back(std::move(row));
    }
  }
  AlignOptions align;
  for (const std::string& column : Header(task)) {
    align.right_aligned.push_back(column != "input" && column != "name" && column != "predicted");
  }
  align.trim_line_ends = true;
  return RenderAligned(table, align);
}

}  // namespace

std::string FormatPredictionLine(const v1::Prediction& p) {
  std::vector<std::string> parts;
  if (p.values_size() > 0) {
    std::vector<std::string> values;
    for (const double v : p.values()) values.push_back(absl::StrFormat("%.6g", v));
    parts.push_back(absl::StrCat("values ", absl::StrJoin(values, ", ")));
  } else if (p.classes_size() == p.probabilities_size()) {  // classification: the top k
    for (int r = 0; r < p.classes_size(); ++r) {
      const std::string name = NameAt(p, r);
      parts.push_back(absl::StrCat(p.classes(r), name == "-" ? "" : absl::StrCat(" ", name), " ",
                                   Probability(p.probabilities(r))));
    }
  } else {  // multilabel: every label's probability
    for (int k = 0; k < p.probabilities_size(); ++k) {
      parts.push_back(absl::StrCat("label ", k, " ", Probability(p.probabilities(k))));
    }
  }
  return absl::StrCat("prediction ", p.input(), ": ", absl::StrJoin(parts, ", "));
}

absl::StatusOr<PredictionFormat> ParsePredictionFormat(absl::string_view name) {
  if (name == "table") return PredictionFormat::kTable;
  if (name == "csv") return PredictionFormat::kCsv;
  if (name == "json") return PredictionFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--format: unknown \"", name, "\" (expected table, csv or json)"));
}

std::string FormatPredictions(const std::vector<v1::Prediction>& predictions,
                              absl::string_view task, PredictionFormat format) {
  switch (format) {
    case PredictionFormat::kCsv:
      return Csv(predictions, task);
    case PredictionFormat::kJson: {
      std::string out;
      for (const v1::Prediction& p : predictions) absl::StrAppend(&out, ToJsonLine(p), "\n");
      return out;
    }
    case PredictionFormat::kTable:
      break;
  }
  return Table(predictions, task);
}

}  // namespace mpsd::client
