// How mpsctl shows a BenchJob's rows: the seeds' table (models and batch sizes as rows, devices
// as columns with the median time per batch, speedup last) as text or Markdown, and every field
// of every row as CSV or JSON. Pure functions of their arguments (no I/O), thread-safe.
#ifndef MPSD_CLIENT_BENCH_TABLE_H_
#define MPSD_CLIENT_BENCH_TABLE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::client {

enum class BenchFormat { kTable, kMarkdown, kCsv, kJson };

// "table", "markdown", "csv", "json" (as `mpsctl bench --format` takes them). INVALID_ARGUMENT
// naming the choices for anything else.
absl::StatusOr<BenchFormat> ParseBenchFormat(absl::string_view name);

// The rows of one BenchJob, each line ending in '\n'.
//
// kTable and kMarkdown: one line per model × batch size (× mode, precision and memory format,
// each shown as a column only when the rows have more than one of it), in the rows' order; one
// column per device in the order the devices first appear, holding the median milliseconds per
// batch ("12.34"), or "OOM", "n/a" (UNSUPPORTED), "error", "-" (no row); then one speedup column
// per non-cpu device ("8.02x": the cpu's median over that device's; headed "speedup" when there
// is one such device). Text columns are padded to line up, numbers right-aligned. Below the
// table, one "note:" line per row that is not OK, with its message. "no rows\n" when empty.
//
// kCsv: a header of BenchRow's field names in proto order, then one line per row with every
// field (status by name; strings quoted when they hold a comma, quote or line break, RFC 4180).
//
// kJson: a JSON array with one object per row, one row per line, every field present under its
// proto name (status by name, numbers as JSON numbers); BenchRow's JSON mapping parses each.
std::string FormatBenchRows(const std::vector<v1::BenchRow>& rows, BenchFormat format);

// One row as `submit --follow` prints it when it arrives, without a newline:
//   "resnet50 batch 32 on cpu, inference fp32: median 412.30 ms (p10 405.12, p90 420.01),
//    78 samples/s"  (one line; non-cpu rows add ", 8.02x cpu")
//   "resnet50 batch 128 on cuda:0, inference fp32: OUT_OF_MEMORY: <message>"
// A memory format other than contiguous is named after the precision.
std::string FormatBenchRowLine(const v1::BenchRow& row);

// "4 rows (3 OK, 1 OUT_OF_MEMORY)" for a summary's bench_rows; "4 rows (all OK)".
std::string FormatBenchRowCounts(const v1::JobSummary& summary);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_BENCH_TABLE_H_
