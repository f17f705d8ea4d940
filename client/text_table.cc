// The table renderer (text_table.h): display widths, aligned columns, markdown, CSV, JSON.
#include "client/text_table.h"

#include <locale.h>
#include <wchar.h>

#include <algorithm>
#include <cmath>
#include <cwchar>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "api/json_text.h"
#include "client/format.h"

namespace mpsd::client {
namespace {

// A UTF-8 LC_CTYPE for mbrtowc and wcwidth, made once and never freed; (locale_t)0 where the
// system has none. Used through uselocale, so the process's own locale stays as it is.
locale_t Utf8Locale() {
  static const locale_t utf8 = [] {
    for (const char* name : {"C.UTF-8", "C.utf8", "en_US.UTF-8", "UTF-8"}) {
      if (const locale_t made = newlocale(LC_CTYPE_MASK, name, static_cast<locale_t>(0))) {
        return made;
      }
    }
    return static_cast<locale_t>(0);
  }();
  return utf8;
}

// The width of each code point, without a locale: 1 (UTF-8 continuation bytes count 0).
size_t CodePoints(absl::string_view text) {
  size_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return count;
}

// Switches this thread to `locale` while alive.
class ThreadLocale {
 public:
  explicit ThreadLocale(locale_t locale) : previous_(uselocale(locale)) {}
  ~ThreadLocale() { uselocale(previous_); }
  ThreadLocale(const ThreadLocale&) = delete;
  ThreadLocale& operator=(const ThreadLocale&) = delete;

 private:
  const locale_t previous_;
};

std::string Padding(absl::string_view text, size_t width) {
  const size_t shown = DisplayWidth(text);
  return std::string(shown < width ? width - shown : 0, ' ');
}

std::string RenderMarkdown(const TextTable& table) {
  auto line = [](const std::vector<std::string>& row) {
    std::vector<std::string> cells;
    for (const std::string& cell : row) cells.push_back(absl::StrReplaceAll(cell, {{"|", "\\|"}}));
    return absl::StrCat("| ", absl::StrJoin(cells, " | "), " |\n");
  };
  std::string out = line(table.header);
  absl::StrAppend(&out, "|",
                  absl::StrJoin(std::vector<std::string>(table.header.size(), "---"), "|"), "|\n");
  for (const auto& row : table.rows) absl::StrAppend(&out, line(row));
  return out;
}

std::string CsvCell(const std::string& cell) {
  if (cell.find_first_of(",\"\n") == std::string::npos) return cell;
  return absl::StrCat("\"", absl::StrReplaceAll(cell, {{"\"", "\"\""}}), "\"");
}

std::string RenderCsv(const TextTable& table) {
  std::string out;
  auto line = [&out](const std::vector<std::string>& row) {
    std::vector<std::string> cells;
    for (const std::string& cell : row) cells.push_back(CsvCell(cell));
    absl::StrAppend(&out, absl::StrJoin(cells, ","), "\n");
  };
  line(table.header);
  for (const auto& row : table.rows) line(row);
  return out;
}

// JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool IsJsonNumber(absl::string_view text) {
  size_t i = 0;
  const auto digits = [&]() {
    const size_t start = i;
    while (i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) ++i;
    return i - start;
  };
  if (i < text.size() && text[i] == '-') ++i;
  const size_t first = i;
  const size_t whole = digits();
  if (whole == 0 || (whole > 1 && text[first] == '0')) return false;
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == text.size();
}

std::string JsonKey(const TextTable& table, size_t column) {
  if (column < table.keys.size() && !table.keys[column].empty()) return table.keys[column];
  std::string key;
  for (const char c : table.header[column]) {
    const char lower = absl::ascii_tolower(static_cast<unsigned char>(c));
    if (absl::ascii_isalnum(static_cast<unsigned char>(lower)) || lower == '.') {
      key.push_back(lower);
    } else if (!key.empty() && key.back() != '_') {
      key.push_back('_');
    }
  }
  while (!key.empty() && key.back() == '_') key.pop_back();
  return key;
}

// One cell as a JSON value: null, a number, or a string.
std::string JsonValue(const std::string& cell, bool text) {
  double number = 0;
  if (cell == "-") return "null";
  if (!text && absl::SimpleAtod(cell, &number) && std::isfinite(number) &&
      !absl::StrContains(cell, " ")) {
    // A cell as written ("0.001", "1e-05"), unless JSON would not take it (".5", "+1", "5.").
    return IsJsonNumber(cell) ? cell : ExactNumber(number);
  }
  return api::JsonString(cell);
}

std::string RenderJson(const TextTable& table) {
  if (table.rows.empty()) return "[]\n";
  std::vector<std::string> objects;
  for (const auto& row : table.rows) {
    std::vector<std::string> members;
    for (size_t c = 0; c < row.size() && c < table.header.size(); ++c) {
      const bool text = c < table.text_columns.size() && table.text_columns[c];
      members.push_back(
          absl::StrCat(api::JsonString(JsonKey(table, c)), ":", JsonValue(row[c], text)));
    }
    objects.push_back(absl::StrCat("{", absl::StrJoin(members, ","), "}"));
  }
  return absl::StrCat("[", absl::StrJoin(objects, ",\n"), "]\n");
}

}  // namespace

size_t DisplayWidth(absl::string_view text) {
  const bool ascii = std::all_of(text.begin(), text.end(),
                                 [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (ascii) return text.size();
  const locale_t utf8 = Utf8Locale();
  if (utf8 == static_cast<locale_t>(0)) return CodePoints(text);
  const ThreadLocale in_utf8(utf8);
  size_t width = 0;
  std::mbstate_t state{};
  for (size_t i = 0; i < text.size();) {
    wchar_t wide = 0;
    const size_t length = std::mbrtowc(&wide, text.data() + i, text.size() - i, &state);
    if (length == 0 || length > text.size() - i) {  // NUL, invalid (-1) or cut short (-2)
      state = std::mbstate_t{};
      width += 1;
      i += 1;
      continue;
    }
    const int columns = static_cast<unsigned char>(text[i]) < 0x80 ? 1 : wcwidth(wide);
    width += columns < 0 ? 1 : static_cast<size_t>(columns);
    i += length;
  }
  return width;
}

std::string PadRight(absl::string_view text, size_t width) {
  return absl::StrCat(text, Padding(text, width));
}

std::string PadLeft(absl::string_view text, size_t width) {
  return absl::StrCat(Padding(text, width), text);
}

std::string RenderAligned(const TextTable& table, const AlignOptions& options) {
  std::vector<const std::vector<std::string>*> lines = {&table.header};
  for (const auto& row : table.rows) lines.push_back(&row);
  std::vector<size_t> widths;
  for (const auto* line : lines) {
    if (widths.size() < line->size()) widths.resize(line->size(), 0);
    for (size_t c = 0; c < line->size(); ++c) {
      widths[c] = std::max(widths[c], DisplayWidth((*line)[c]));
    }
  }
  std::string out;
  for (const auto* line : lines) {
    std::string text;
    for (size_t c = 0; c < line->size(); ++c) {
      const std::string& cell = (*line)[c];
      if (c > 0) text.append("  ");
      const bool right = c < options.right_aligned.size() && options.right_aligned[c];
      const bool last = c + 1 == line->size();
      absl::StrAppend(&text, right  ? PadLeft(cell, widths[c])
                             : last ? cell
                                    : PadRight(cell, widths[c]));
    }
    if (options.trim_line_ends) text.erase(absl::StripTrailingAsciiWhitespace(text).size());
    absl::StrAppend(&out, text, "\n");
  }
  return out;
}

absl::StatusOr<std::string> RenderTable(const TextTable& table, absl::string_view format) {
  if (format == "table") return RenderAligned(table);
  if (format == "markdown") return RenderMarkdown(table);
  if (format == "csv") return RenderCsv(table);
  if (format == "json") return RenderJson(table);
  return absl::InvalidArgumentError(
      absl::StrCat("--format: unknown \"", format, "\" (expected table, markdown, csv or json)"));
}

}  // namespace mpsd::client
