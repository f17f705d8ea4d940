// `mpsctl upload`, `mpsctl uploads` and `mpsctl uploads rm` (Commands::Upload, ListUploads,
// DeleteUpload): a file is sent as it is; a folder as a GNU tar archive written here with
// libarchive into a temporary file (entries sorted, owner 0, times in whole seconds: the same
// folder gives the same bytes, so a later `mpsctl upload` of it resumes where a broken one
// stopped). The daemon checks the SHA-256 and unpacks the archive (server/core/uploads.h).
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/sha256.h"
#include "api/upload_name.h"
#include "client/commands.h"
#include "client/format.h"
#include "client/reconnect.h"
#include "client/text_table.h"

namespace mpsd::client {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kChunkBytes = 1 << 20;  // UploadChunk.data's limit

// Appends the entries under `dir` (relative names from `prefix`), sorted, to `writer`.
absl::Status AddTree(archive* writer, const fs::path& dir, const std::string& prefix,
                     int64_t& entries) {
  std::vector<fs::path> children;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    children.push_back(it->path());
  }
  if (error)
    return absl::InternalError(absl::StrCat("cannot read ", dir.string(), ": ", error.message()));
  std::sort(children.begin(), children.end());
  std::vector<char> buffer(1 << 16);
  for (const fs::path& child : children) {
    const std::string name = prefix + child.filename().string();
    struct stat st;
    if (lstat(child.c_str(), &st) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot read ", child.string(), ": ", std::strerror(errno)));
    }
    std::unique_ptr<archive_entry, decltype(&archive_entry_free)> entry(archive_entry_new(),
                                                                        &archive_entry_free);
    archive_entry_set_pathname(entry.get(), name.c_str());
    archive_entry_set_mtime(entry.get(), st.st_mtime, 0);
    archive_entry_set_uid(entry.get(), 0);
    archive_entry_set_gid(entry.get(), 0);
    ++entries;
    if (S_ISDIR(st.st_mode)) {
      archive_entry_set_filetype(entry.get(), AE_IFDIR);
      archive_entry_set_perm(entry.get(), 0755);
      archive_write_header(writer, entry.get());
      if (absl::Status s = AddTree(writer, child, name + "/", entries); !s.ok()) return s;
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      std::string target(4096, '\0');
      const ssize_t length = readlink(child.c_str(), target.data(), target.size());
      if (length < 0) {
        return absl::InternalError(absl::StrCat("cannot read the link ", child.string()));
      }
      target.resize(static_cast<size_t>(length));
      archive_entry_set_filetype(entry.get(), AE_IFLNK);
      archive_entry_set_perm(entry.get(), 0777);
      archive_entry_set_symlink(entry.get(), target.c_str());
      archive_write_header(writer, entry.get());
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(child.string(),
                       ": not a regular file, folder or symbolic link; uploads hold no "
                       "devices, FIFOs or sockets"));
    }
    archive_entry_set_filetype(entry.get(), AE_IFREG);
    archive_entry_set_perm(entry.get(), st.st_mode & 0755);
    archive_entry_set_size(entry.get(), st.st_size);
    if (archive_write_header(writer, entry.get()) != ARCHIVE_OK) {
      return absl::InternalError(absl::StrCat(name, ": ", archive_error_string(writer)));
    }
    const int fd = open(child.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot read ", child.string(), ": ", std::strerror(errno)));
    }
    int64_t left = st.st_size;  // The header said this many: a file that grew is cut there.
    while (left > 0) {
      const ssize_t got = read(fd, buffer.data(), std::min<int64_t>(left, buffer.size()));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        close(fd);
        return absl::InternalError(absl::StrCat(child.string(), " shrank while it was read"));
      }
      archive_write_data(writer, buffer.data(), static_cast<size_t>(got));
      left -= got;
    }
    close(fd);
  }
  return absl::OkStatus();
}

// Writes the folder `dir` as a GNU tar archive to `tar_path`; returns its entry count.
absl::StatusOr<int64_t> WriteFolderTar(const std::string& dir, const std::string& tar_path) {
  std::unique_ptr<archive, decltype(&archive_write_free)> writer(archive_write_new(),
                                                                 &archive_write_free);
  archive_write_set_format_gnutar(writer.get());
  archive_write_add_filter_none(writer.get());
  if (archive_write_open_filename(writer.get(), tar_path.c_str()) != ARCHIVE_OK) {
    return absl::InternalError(
        absl::StrCat("cannot write ", tar_path, ": ", archive_error_string(writer.get())));
  }
  int64_t entries = 0;
  if (absl::Status s = AddTree(writer.get(), dir, "", entries); !s.ok()) return s;
  if (archive_write_close(writer.get()) != ARCHIVE_OK) {
    return absl::InternalError(
        absl::StrCat("cannot write ", tar_path, ": ", archive_error_string(writer.get())));
  }
  return entries;
}

// Removes a temporary file when it goes out of scope.
struct TempFile {
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (!path.empty()) unlink(path.c_str());
  }
  std::string path;
};

// What an upload sends: the file itself, or a folder's GNU tar archive in a temporary file.
struct UploadSource {
  bool folder = false;
  std::string path;  // the bytes sent: the file, or tar.path
  int64_t size = 0;  // bytes
  std::string sha256;
  TempFile tar;  // the folder's archive, removed with the source
};

// Fills `source` for `path` (a file, or a folder when `folder`); errors say what failed.
absl::Status PrepareSource(const std::string& path, bool folder, UploadSource& source) {
  source.folder = folder;
  source.path = path;
  if (folder) {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp",
                                       "/mpsctl-upload-XXXXXX");
    const int fd = mkstemp(pattern.data());
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot create a temporary file: ", std::strerror(errno)));
    }
    close(fd);
    source.tar.path = pattern;
    absl::StatusOr<int64_t> entries = WriteFolderTar(path, source.tar.path);
    if (!entries.ok()) return entries.status();
    source.path = source.tar.path;
  }
  std::error_code error;
  source.size = static_cast<int64_t>(fs::file_size(source.path, error));
  absl::StatusOr<std::string> sha256 = api::Sha256OfFile(source.path);
  if (error || !sha256.ok()) return absl::InternalError(absl::StrCat("cannot read ", path));
  source.sha256 = *std::move(sha256);
  return absl::OkStatus();
}

// The name an upload of `path` gets without --name: the file's or folder's own name ("data/" and
// "." name the folder itself).
std::string OwnName(const std::string& path) {
  std::string name = fs::path(path).lexically_normal().filename().string();
  if (name.empty()) {
    std::error_code error;
    name = fs::absolute(path, error).lexically_normal().parent_path().filename().string();
  }
  return name;
}

// "uploaded NAME (KIND, [N files, ]SIZE, sha256 HEX) in S s (R MB/s); jobs name it as REF\n".
std::string UploadedLine(const std::string& name, const v1::Upload& uploaded, bool folder,
                         int64_t sent_bytes, double seconds) {
  return absl::StrCat("uploaded ", name, " (", uploaded.kind(), ", ",
                      folder ? absl::StrCat(uploaded.files(), " files, ") : "",
                      FormatMiB(uploaded.size_bytes()), ", sha256 ", uploaded.sha256(), ") in ",
                      absl::StrFormat("%.2f s (%.1f MB/s)", seconds,
                                      seconds > 0 ? sent_bytes / seconds / 1e6 : 0.0),
                      "; jobs name it as ", uploaded.ref(), "\n");
}

// How one UploadFile call ended.
struct SendResult {
  grpc::Status rpc;
  int64_t sent = 0;      // bytes this call sent
  bool changed = false;  // the file was shorter than its size: it changed while it was sent
  v1::Upload uploaded;   // the daemon's answer, when rpc is OK
};

// Sends `source` under `name` from byte `offset` to its end in one UploadFile call, 1 MiB per
// chunk, the first chunk carrying the upload's name, checksum, size and flags; `on_sent(sent)`
// after each chunk.
SendResult SendFrom(v1::JobService::StubInterface& stub, const UploadSource& source,
                    const std::string& name, bool replace, int64_t offset, bool wait_for_ready,
                    const std::function<void(int64_t)>& on_sent) {
  SendResult result;
  grpc::ClientContext context;
  context.set_wait_for_ready(wait_for_ready);
  std::unique_ptr<grpc::ClientWriterInterface<v1::UploadChunk>> writer =
      stub.UploadFile(&context, &result.uploaded);
  std::ifstream in(source.path, std::ios::binary);
  in.seekg(offset);
  v1::UploadChunk chunk;
  chunk.set_name(name);
  chunk.set_sha256(source.sha256);
  chunk.set_size_bytes(source.size);
  chunk.set_archive(source.folder);
  chunk.set_replace(replace);
  std::string data(static_cast<size_t>(kChunkBytes), '\0');
  bool first = true;
  while (first || offset + result.sent < source.size) {
    const int64_t length = std::min<int64_t>(kChunkBytes, source.size - offset - result.sent);
    data.resize(static_cast<size_t>(length));
    in.read(data.data(), length);
    if (in.gcount() != length) {
      result.changed = true;
      context.TryCancel();
      result.rpc = writer->Finish();
      return result;
    }
    chunk.set_offset(offset + result.sent);
    chunk.set_data(data);
    if (!writer->Write(chunk)) break;  // The daemon ended the call: Finish says why.
    result.sent += length;
    on_sent(result.sent);
    if (first) {
      chunk.clear_name();
      chunk.clear_sha256();
      chunk.clear_size_bytes();
      chunk.clear_archive();
      chunk.clear_replace();
      first = false;
    }
  }
  writer->WritesDone();
  result.rpc = writer->Finish();
  return result;
}

std::string Bytes(int64_t bytes) { return FormatMiB(bytes); }

// The line a terminal sees while an upload runs, redrawn in place ("\r", then "\x1b[K" clears
// what a longer line left): how much of the whole is at the daemon, and the rate of this run.
class ProgressLine {
 public:
  ProgressLine(std::ostream& err, bool enabled, std::string name, int64_t size)
      : err_(err), enabled_(enabled), name_(std::move(name)), size_(size) {}
  ~ProgressLine() { Clear(); }

  // `at_daemon`: bytes the daemon holds (resumed offset + sent); `sent`: sent by this run.
  void Update(int64_t at_daemon, int64_t sent, absl::Time started) {
    const absl::Time now = absl::Now();
    if (!enabled_ || now - last_ < absl::Milliseconds(500)) return;
    last_ = now;
    const double seconds = absl::ToDoubleSeconds(now - started);
    err_ << "\r\x1b[K"
         << "uploading " << name_ << ": " << Bytes(at_daemon) << " of " << Bytes(size_)
         << absl::StrFormat(" (%d%%), %.1f MB/s", size_ > 0 ? at_daemon * 100 / size_ : 100,
                            seconds > 0 ? sent / seconds / 1e6 : 0.0)
         << std::flush;
    drawn_ = true;
  }

  // Removes the line (before any other output).
  void Clear() {
    if (!drawn_) return;
    err_ << "\r\x1b[K" << std::flush;
    drawn_ = false;
  }

 private:
  std::ostream& err_;
  const bool enabled_;
  const std::string name_;
  const int64_t size_;
  absl::Time last_ = absl::InfinitePast();
  bool drawn_ = false;
};

}  // namespace

int Commands::Upload(const std::string& path, const std::string& name_flag, bool replace) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) {
    err_ << "mpsctl: upload: " << path << ": no such file or folder\n";
    return kExitFailed;
  }
  const bool folder = fs::is_directory(status);
  if (!folder && !fs::is_regular_file(status)) {
    err_ << "mpsctl: upload: " << path << ": not a regular file or folder\n";
    return kExitFailed;
  }
  const std::string name = name_flag.empty() ? OwnName(path) : name_flag;
  if (absl::Status s = api::CheckUploadName("name", name); !s.ok()) {
    err_ << "mpsctl: upload: " << s.message() << (name_flag.empty() ? "; give one with --name" : "")
         << "\n";
    return kExitUsage;
  }
  UploadSource source;
  if (absl::Status s = PrepareSource(path, folder, source); !s.ok()) {
    err_ << "mpsctl: upload: " << s.message() << "\n";
    return kExitFailed;
  }
  const absl::Time started = absl::Now();
  ReconnectPolicy reconnect(options_.reconnect_timeout, /*start=*/started);
  int64_t sent_total = 0;
  ProgressLine progress(err_, options_.progress, name, source.size);
  for (int attempt = 0;; ++attempt) {
    v1::GetUploadStatusRequest status_request;
    status_request.set_name(name);
    status_request.set_sha256(source.sha256);
    status_request.set_size_bytes(source.size);
    v1::UploadStatus held;
    auto status_context = UnaryContext();
    status_context->set_wait_for_ready(attempt > 0);
    grpc::Status rpc = stub_->GetUploadStatus(status_context.get(), status_request, &held);
    if (rpc.ok() && held.complete() && !replace) {
      out_ << name << " is already uploaded (sha256 " << source.sha256 << "); jobs name it as "
           << api::kUploadPrefix << name << "\n";
      return kExitOk;
    }
    const int64_t offset = rpc.ok() && !held.complete() ? held.offset() : 0;
    if (rpc.ok() && offset > 0) {
      err_ << "mpsctl: resuming the upload of " << name << " at byte " << offset << " of "
           << source.size << "\n";
    }
    SendResult sent;
    if (rpc.ok()) {
      sent = SendFrom(
          *stub_, source, name, replace, offset, /*wait_for_ready=*/attempt > 0,
          [&](int64_t bytes) { progress.Update(offset + bytes, sent_total + bytes, started); });
      progress.Clear();
      if (sent.changed) {
        err_ << "mpsctl: upload: " << path << " changed while it was sent\n";
        return kExitFailed;
      }
      rpc = sent.rpc;
    }
    sent_total += sent.sent;
    if (sent.sent > 0) reconnect.Progressed();
    if (rpc.ok()) {
      out_ << UploadedLine(name, sent.uploaded, folder, sent_total,
                           absl::ToDoubleSeconds(absl::Now() - started));
      return kExitOk;
    }
    // ABORTED: the daemon still finishes a call of ours that broke (it lets go of the name
    // within moments).
    const bool aborted =
        rpc.error_code() == grpc::StatusCode::ABORTED && absl::Now() - started < absl::Seconds(10);
    if (aborted) {
      absl::SleepFor(absl::Milliseconds(200));
      continue;
    }
    if (!ReconnectPolicy::Broke(rpc) || (attempt == 0 && sent.sent == 0 && offset == 0) ||
        reconnect.OutOfTime()) {
      return RpcFailed(rpc);
    }
    err_ << "mpsctl: the upload of " << name << " broke (" << rpc.error_message()
         << "); resuming\n";
    ReconnectPolicy::Wait(attempt);
  }
}

int Commands::ListUploads(bool all, const std::string& submitter) {
  v1::ListUploadsRequest request;
  request.set_all(all);
  request.set_submitter(submitter);
  v1::ListUploadsResponse response;
  const grpc::Status status = stub_->ListUploads(UnaryContext().get(), request, &response);
  if (!status.ok()) return RpcFailed(status);
  if (options_.json) {
    out_ << ToJsonLine(response) << "\n";
    return kExitOk;
  }
  // Fixed columns (a longer cell pushes the rest of its line along, as printf's would).
  const auto line = [this](absl::string_view name, absl::string_view submitter,
                           absl::string_view kind, absl::string_view size, absl::string_view files,
                           absl::string_view sha256) {
    out_ << PadRight(name, 24) << " " << PadRight(submitter, 12) << " " << PadRight(kind, 8) << " "
         << PadLeft(size, 10) << " " << PadLeft(files, 8) << "  " << sha256 << "\n";
  };
  line("NAME", "SUBMITTER", "KIND", "SIZE", "FILES", "SHA256");
  for (const v1::Upload& upload : response.uploads()) {
    line(upload.name(), upload.submitter(), upload.kind(), Bytes(upload.size_bytes()),
         absl::StrCat(upload.files()), upload.sha256().substr(0, 12));
  }
  out_ << Bytes(response.used_bytes()) << " used of " << Bytes(response.quota_bytes())
       << " (upload_quota_bytes" << (all ? ", per submitter" : "") << ")\n";
  return kExitOk;
}

int Commands::DeleteUpload(const std::string& name, const std::string& submitter) {
  v1::DeleteUploadRequest request;
  request.set_name(name);
  request.set_submitter(submitter);
  v1::Upload deleted;
  const grpc::Status status = stub_->DeleteUpload(UnaryContext().get(), request, &deleted);
  if (!status.ok()) return RpcFailed(status);
  out_ << "deleted upload " << deleted.name() << " of " << deleted.submitter() << " ("
       << deleted.kind() << ", " << Bytes(deleted.size_bytes()) << ")\n";
  return kExitOk;
}

}  // namespace mpsd::client
