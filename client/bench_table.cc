// BenchJob tables: the seeds' layout for people, CSV and JSON with every field for programs.
#include "client/bench_table.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "api/json_text.h"
#include "client/format.h"
#include "client/text_table.h"

namespace mpsd::client {
namespace {

using google::protobuf::FieldDescriptor;
using v1::BenchRow;

// What a table line stands for: the row's fields other than the device.
using LineKey = std::tuple<std::string, int, std::string, std::string, std::string>;

LineKey KeyOf(const BenchRow& row) {
  return {row.model(), row.batch_size(), row.mode(), row.precision(), row.memory_format()};
}

std::string Cell(const BenchRow& row) {
  switch (row.status()) {
    case BenchRow::OK:
      return absl::StrFormat("%.2f", row.median_ms());
    case BenchRow::OUT_OF_MEMORY:
      return "OOM";
    case BenchRow::UNSUPPORTED:
      return "n/a";
    default:
      return "error";
  }
}

// Columns the table shows besides devices and speedups.
struct KeyColumns {
  bool mode = false;
  bool precision = false;
  bool memory_format = false;
};

KeyColumns VaryingColumns(const std::vector<BenchRow>& rows) {
  KeyColumns shown;
  for (const BenchRow& row : rows) {
    shown.mode |= row.mode() != rows[0].mode();
    shown.precision |= row.precision() != rows[0].precision();
    shown.memory_format |= row.memory_format() != rows[0].memory_format();
  }
  return shown;
}

// The table as cells: the header first. `numeric[c]`: column c is right-aligned.
struct Grid {
  std::vector<std::vector<std::string>> cells;
  std::vector<bool> numeric;
};

Grid BuildGrid(const std::vector<BenchRow>& rows) {
  std::vector<std::string> devices;
  std::vector<LineKey> keys;
  std::map<LineKey, std::map<std::string, const BenchRow*>> by_key;
  for (const BenchRow& row : rows) {
    if (std::find(devices.begin(), devices.end(), row.device()) == devices.end()) {
      devices.push_back(row.device());
    }
    const LineKey key = KeyOf(row);
    if (by_key.find(key) == by_key.end()) keys.push_back(key);
    by_key[key][row.device()] = &row;
  }
  std::vector<std::string> accelerators;
  for (const std::string& device : devices) {
    if (device != "cpu") accelerators.push_back(device);
  }
  const KeyColumns shown = VaryingColumns(rows);

  Grid grid;
  std::vector<std::string> header = {"model", "batch"};
  grid.numeric = {false, true};
  for (const auto& [flag, name] :
       {std::pair{shown.mode, "mode"}, std::pair{shown.precision, "precision"},
        std::pair{shown.memory_format, "memory format"}}) {
    if (!flag) continue;
    header.push_back(name);
    grid.numeric.push_back(false);
  }
  for (const std::string& device : devices) {
    header.push_back(absl::StrCat(device, " (ms)"));
    grid.numeric.push_back(true);
  }
  const bool has_cpu = accelerators.size() < devices.size();
  if (has_cpu) {
    for (const std::string& device : accelerators) {
      header.push_back(accelerators.size() == 1 ? "speedup" : absl::StrCat("speedup ", device));
      grid.numeric.push_back(true);
    }
  }
  grid.cells.push_back(std::move(header));

  for (const LineKey& key : keys) {
    const auto& cells = by_key[key];
    std::vector<std::string> line = {std::get<0>(key), absl::StrCat(std::get<1>(key))};
    if (shown.mode) line.push_back(std::get<2>(key));
    if (shown.precision) line.push_back(std::get<3>(key));
    if (shown.memory_format) line.push_back(std::get<4>(key));
    for (const std::string& device : devices) {
      const auto it = cells.find(device);
      line.push_back(it == cells.end() ? "-" : Cell(*it->second));
    }
    if (has_cpu) {
      for (const std::string& device : accelerators) {
        const auto it = cells.find(device);
        const bool known = it != cells.end() && it->second->speedup_vs_cpu() > 0;
        line.push_back(known ? absl::StrFormat("%.2fx", it->second->speedup_vs_cpu()) : "-");
      }
    }
    grid.cells.push_back(std::move(line));
  }
  return grid;
}

std::string Notes(const std::vector<BenchRow>& rows) {
  std::string out;
  for (const BenchRow& row : rows) {
    if (row.status() == BenchRow::OK) continue;
    absl::StrAppend(&out, "note: ", FormatBenchRowLine(row), "\n");
  }
  return out;
}

std::string AlignedTable(const Grid& grid) {
  TextTable table;
  table.header = grid.cells[0];
  table.rows.assign(grid.cells.begin() + 1, grid.cells.end());
  AlignOptions align;
  align.right_aligned = grid.numeric;
  align.trim_line_ends = true;
  return RenderAligned(table, align);
}

std::string MarkdownTable(const Grid& grid) {
  std::string out;
  auto add_line = [&out](const std::vector<std::string>& cells) {
    absl::StrAppend(&out, "| ", absl::StrJoin(cells, " | "), " |\n");
  };
  add_line(grid.cells[0]);
  std::vector<std::string> rule;
  for (const bool numeric : grid.numeric) rule.push_back(numeric ? "---:" : "---");
  add_line(rule);
  for (size_t i = 1; i < grid.cells.size(); ++i) add_line(grid.cells[i]);
  return out;
}

// A field's value as text: enums by name, doubles in the shortest form that reads back the same.
std::string FieldText(const BenchRow& row, const FieldDescriptor& field) {
  const auto& r = *row.GetReflection();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return r.GetString(row, &field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return std::string(r.GetEnum(row, &field)->name());
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(r.GetInt32(row, &field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(r.GetInt64(row, &field));
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      const double value = r.GetDouble(row, &field);
      if (!std::isfinite(value)) return "";
      for (int digits = 15;; ++digits) {
        std::string text = absl::StrFormat("%.*g", digits, value);
        if (digits == 17 || std::strtod(text.c_str(), nullptr) == value) return text;
      }
    }
    default:  // BenchRow has no other types
      return "";
  }
}

std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\"", "\"\""}}), "\"");
}

std::string Csv(const std::vector<BenchRow>& rows) {
  const google::protobuf::Descriptor& descriptor = *BenchRow::descriptor();
  std::vector<std::string> header;
  for (int i = 0; i < descriptor.field_count(); ++i) {
    header.push_back(std::string(descriptor.field(i)->name()));
  }
  std::string out = absl::StrCat(absl::StrJoin(header, ","), "\n");
  for (const BenchRow& row : rows) {
    std::vector<std::string> fields;
    for (int i = 0; i < descriptor.field_count(); ++i) {
      fields.push_back(CsvField(FieldText(row, *descriptor.field(i))));
    }
    absl::StrAppend(&out, absl::StrJoin(fields, ","), "\n");
  }
  return out;
}

std::string Json(const std::vector<BenchRow>& rows) {
  if (rows.empty()) return "[]\n";
  const google::protobuf::Descriptor& descriptor = *BenchRow::descriptor();
  std::vector<std::string> objects;
  for (const BenchRow& row : rows) {
    std::vector<std::string> members;
    for (int i = 0; i < descriptor.field_count(); ++i) {
      const FieldDescriptor& field = *descriptor.field(i);
      std::string value = FieldText(row, field);
      const bool text = field.cpp_type() == FieldDescriptor::CPPTYPE_STRING ||
                        field.cpp_type() == FieldDescriptor::CPPTYPE_ENUM;
      if (text) {
        value = api::JsonString(value);
      } else if (value.empty()) {
        value = "null";  // a non-finite double
      }
      members.push_back(absl::StrCat(api::JsonString(std::string(field.name())), ":", value));
    }
    objects.push_back(absl::StrCat("{", absl::StrJoin(members, ","), "}"));
  }
  return absl::StrCat("[\n", absl::StrJoin(objects, ",\n"), "\n]\n");
}

}  // namespace

absl::StatusOr<BenchFormat> ParseBenchFormat(absl::string_view name) {
  if (name == "table") return BenchFormat::kTable;
  if (name == "markdown") return BenchFormat::kMarkdown;
  if (name == "csv") return BenchFormat::kCsv;
  if (name == "json") return BenchFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--format: unknown \"", name, "\" (expected table, markdown, csv or json)"));
}

std::string FormatBenchRows(const std::vector<BenchRow>& rows, BenchFormat format) {
  switch (format) {
    case BenchFormat::kCsv:
      return Csv(rows);
    case BenchFormat::kJson:
      return Json(rows);
    case BenchFormat::kTable:
      return rows.empty() ? "no rows\n" : AlignedTable(BuildGrid(rows)) + Notes(rows);
    case BenchFormat::kMarkdown:
      return rows.empty() ? "no rows\n" : MarkdownTable(BuildGrid(rows)) + Notes(rows);
  }
  return "";
}

std::string FormatBenchRowLine(const BenchRow& row) {
  std::string out = absl::StrFormat("%s batch %d on %s, %s %s", row.model(), row.batch_size(),
                                    row.device(), row.mode(), row.precision());
  if (!row.memory_format().empty() && row.memory_format() != "contiguous") {
    absl::StrAppend(&out, " ", row.memory_format());
  }
  if (row.status() != BenchRow::OK) {
    absl::StrAppend(&out, ": ", BenchRow::Status_Name(row.status()));
    // LibTorch's messages may span lines; the first says what happened.
    const std::string first_line = row.message().substr(0, row.message().find('\n'));
    if (!first_line.empty()) absl::StrAppend(&out, ": ", first_line);
    return out;
  }
  absl::StrAppendFormat(&out, ": median %.2f ms (p10 %.2f, p90 %.2f), %s", row.median_ms(),
                        row.p10_ms(), row.p90_ms(), FormatRate(row.samples_per_second()));
  if (row.speedup_vs_cpu() > 0) absl::StrAppendFormat(&out, ", %.2fx cpu", row.speedup_vs_cpu());
  return out;
}

std::string FormatBenchRowCounts(const v1::JobSummary& summary) {
  std::map<int, int> counts;
  for (const BenchRow& row : summary.bench_rows()) ++counts[row.status()];
  const int total = summary.bench_rows_size();
  const std::string rows = absl::StrCat(total, total == 1 ? " row" : " rows");
  if (counts[BenchRow::OK] == total) return absl::StrCat(rows, " (all OK)");
  std::vector<std::string> parts;
  for (const auto& [status, count] : counts) {
    if (count > 0) {
      const auto name = BenchRow::Status_Name(static_cast<BenchRow::Status>(status));
      parts.push_back(absl::StrCat(count, " ", name));
    }
  }
  return absl::StrCat(rows, " (", absl::StrJoin(parts, ", "), ")");
}

}  // namespace mpsd::client
