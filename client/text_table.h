// mpsctl's one table renderer: a header and rows of text cells as aligned columns (measured in
// terminal columns, so CJK and emoji line up), GitHub markdown, CSV or JSON. Every table and
// padded label of mpsctl goes through it. Pure functions, thread-safe.
#ifndef MPSD_CLIENT_TEXT_TABLE_H_
#define MPSD_CLIENT_TEXT_TABLE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::client {

// A header and rows of cells, all text ("-" for nothing). Plain value.
struct TextTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  // For JSON: each column's key (snake_case); empty (or short): the header's, lower-cased with
  // every run of other characters than [a-z0-9.] made one '_' ("SAMPLES/S" → "samples_s").
  std::vector<std::string> keys;
  // For JSON: the columns whose cells stay strings even when they read as numbers (job ids).
  std::vector<bool> text_columns;
};

// The terminal columns UTF-8 `text` takes, as glibc's wcwidth says under a UTF-8 LC_CTYPE
// (whatever the process's locale is): ASCII 1 each (control characters too, as before),
// East Asian wide characters and emoji 2, combining marks, variation selectors and zero-width
// joiners 0; a byte that is not valid UTF-8, and a code point wcwidth does not know, 1. Where
// the system has no UTF-8 locale, each code point counts 1.
size_t DisplayWidth(absl::string_view text);

// `text` followed (PadRight) or preceded (PadLeft) by spaces up to `width` terminal columns;
// as it is when it is already that wide or wider (printf's "%-*s" and "%*s", in columns).
std::string PadRight(absl::string_view text, size_t width);
std::string PadLeft(absl::string_view text, size_t width);

// How RenderAligned lays a table out.
struct AlignOptions {
  // Columns whose cells are right-aligned (numbers); a column past the end is left-aligned.
  std::vector<bool> right_aligned;
  // Drop trailing ASCII whitespace from every line (an empty last cell leaves no gap behind).
  bool trim_line_ends = false;
};

// The header, then each row, one line each ending in '\n': every cell padded with spaces to its
// column's widest cell (header included, in DisplayWidth columns) on the right, or on the left
// for a right-aligned column; columns separated by two spaces; a left-aligned cell that ends its
// line is not padded.
std::string RenderAligned(const TextTable& table, const AlignOptions& options = {});

// "table" (RenderAligned, every column left-aligned), "markdown" (a GitHub table, '|' in a
// cell escaped), "csv" (RFC 4180 quoting) or "json" (an array with one object per row, one row
// per line, keys as TextTable.keys in column order; cells that read as numbers are JSON numbers
// unless their column is a text column, "-" is null). INVALID_ARGUMENT naming --format
// otherwise.
absl::StatusOr<std::string> RenderTable(const TextTable& table, absl::string_view format);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_TEXT_TABLE_H_
