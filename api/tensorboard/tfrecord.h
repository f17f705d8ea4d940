// TFRecord files, the framing of TensorBoard's event files: each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   data | uint32 masked CRC-32C of data
// (tensorflow/core/lib/io/record_writer.h; tensorboard/summary/writer/record_writer.py).
#ifndef MPSD_API_TENSORBOARD_TFRECORD_H_
#define MPSD_API_TENSORBOARD_TFRECORD_H_

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::tensorboard {

// One record framed as above.
std::string FrameTfRecord(absl::string_view data);

// Appends records to one file. Not thread-safe: one owner calls it. Records are buffered by
// stdio; Flush() hands them to the kernel (readers see them), Close() flushes and closes.
// Errors name the file (a full disk is RESOURCE_EXHAUSTED, anything else INTERNAL); after an
// error the writer keeps failing.
class TfRecordWriter {
 public:
  // Creates `path` (truncating an existing file), mode 0644 less the umask. INTERNAL (or
  // NOT_FOUND for a missing directory) naming the path when it cannot.
  static absl::StatusOr<std::unique_ptr<TfRecordWriter>> Create(const std::string& path);
  ~TfRecordWriter();  // closes, dropping any error
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  absl::Status Write(absl::string_view data);
  absl::Status Flush();
  absl::Status Close();
  const std::string& path() const { return path_; }
  // Bytes written (framing included).
  int64_t bytes() const { return bytes_; }

 private:
  TfRecordWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status Fail(const char* what, int error);

  const std::string path_;
  std::FILE* file_;
  int64_t bytes_ = 0;
  absl::Status status_;
};

// Every record of `path`, in order. DATA_LOSS naming the file and the byte offset for a bad
// length or data CRC or a record cut short (a file being written may end in a partial record:
// pass allow_partial_tail to stop before it instead); NOT_FOUND / INTERNAL when it cannot be
// read.
absl::StatusOr<std::vector<std::string>> ReadTfRecords(const std::string& path,
                                                       bool allow_partial_tail = false);

}  // namespace mpsd::tensorboard

#endif  // MPSD_API_TENSORBOARD_TFRECORD_H_
