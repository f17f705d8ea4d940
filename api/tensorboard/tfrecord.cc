#include "api/tensorboard/tfrecord.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "api/tensorboard/crc32c.h"

namespace mpsd::tensorboard {
namespace {

constexpr size_t kHeaderBytes = 12;  // length + its CRC
constexpr size_t kFooterBytes = 4;   // the data's CRC

// The format is little-endian whatever the host.
void AppendLittleEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t LoadLittleEndian(const char* at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(at[i]);
  return value;
}

absl::Status OpenError(const std::string& path, int error) {
  std::string message = absl::StrCat(path, ": ", std::strerror(error));
  return error == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
}

}  // namespace

std::string FrameTfRecord(absl::string_view data) {
  std::string out;
  out.reserve(kHeaderBytes + data.size() + kFooterBytes);
  AppendLittleEndian(&out, data.size(), 8);
  AppendLittleEndian(&out, MaskCrc(Crc32c(out)), 4);
  out.append(data.data(), data.size());
  AppendLittleEndian(&out, MaskCrc(Crc32c(data)), 4);
  return out;
}

absl::StatusOr<std::unique_ptr<TfRecordWriter>> TfRecordWriter::Create(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return OpenError(path, errno);
  return std::unique_ptr<TfRecordWriter>(new TfRecordWriter(path, file));
}

TfRecordWriter::~TfRecordWriter() { (void)Close(); }

absl::Status TfRecordWriter::Fail(const char* what, int error) {
  std::string message = absl::StrCat(path_, ": ", what, ": ", std::strerror(error));
  status_ = error == ENOSPC || error == EDQUOT ? absl::ResourceExhaustedError(message)
                                               : absl::InternalError(message);
  return status_;
}

absl::Status TfRecordWriter::Write(absl::string_view data) {
  if (!status_.ok()) return status_;
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
  const std::string framed = FrameTfRecord(data);
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size()) {
    return Fail("write", errno);
  }
  bytes_ += static_cast<int64_t>(framed.size());
  return absl::OkStatus();
}

absl::Status TfRecordWriter::Flush() {
  if (!status_.ok() || file_ == nullptr) return status_;
  if (std::fflush(file_) != 0) return Fail("flush", errno);
  return absl::OkStatus();
}

absl::Status TfRecordWriter::Close() {
  if (file_ == nullptr) return status_;
  const bool flushed = std::fflush(file_) == 0;
  const int flush_error = errno;
  const bool closed = std::fclose(file_) == 0;
  const int close_error = errno;
  file_ = nullptr;
  if (!status_.ok()) return status_;
  if (!flushed) return Fail("flush", flush_error);
  if (!closed) return Fail("close", close_error);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadTfRecords(const std::string& path,
                                                       bool allow_partial_tail) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return OpenError(path, errno);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::InternalError(absl::StrCat(path, ": read failed"));
  std::vector<std::string> records;
  size_t offset = 0;
  while (offset < bytes.size()) {
    const size_t left = bytes.size() - offset;
    const char* at = bytes.data() + offset;
    if (left < kHeaderBytes) {
      if (allow_partial_tail) break;
      return absl::DataLossError(absl::StrCat(path, ": record at byte ", offset, " is cut short"));
    }
    const uint64_t length = LoadLittleEndian(at, 8);
    if (UnmaskCrc(static_cast<uint32_t>(LoadLittleEndian(at + 8, 4))) !=
        Crc32c(absl::string_view(at, 8))) {
      return absl::DataLossError(
          absl::StrCat(path, ": record at byte ", offset, ": the length's CRC-32C does not match"));
    }
    if (length > left - kHeaderBytes || left - kHeaderBytes - length < kFooterBytes) {
      if (allow_partial_tail) break;
      return absl::DataLossError(absl::StrCat(path, ": record at byte ", offset, " is cut short"));
    }
    const absl::string_view data(at + kHeaderBytes, length);
    if (UnmaskCrc(static_cast<uint32_t>(LoadLittleEndian(at + kHeaderBytes + length, 4))) !=
        Crc32c(data)) {
      return absl::DataLossError(
          absl::StrCat(path, ": record at byte ", offset, ": the data's CRC-32C does not match"));
    }
    records.emplace_back(data);
    offset += kHeaderBytes + length + kFooterBytes;
  }
  return records;
}

}  // namespace mpsd::tensorboard
