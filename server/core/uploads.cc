// UploadStore: partial files appended with write(2), hashed as they come; archives unpacked
// with libarchive's reader into a hidden folder that is renamed into place.
#include "server/core/uploads.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/error_cause.h"
#include "api/job_id.h"
#include "api/job_state.h"
#include "api/upload_name.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/time_util.h"

namespace mpsd::server {
namespace fs = std::filesystem;
namespace {

using mpsd::v1::Upload;

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return api::WithInvalidField(absl::InvalidArgumentError(absl::StrCat(field, ": ", message)),
                               field);
}

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

absl::Status CheckSha256(absl::string_view sha256) {
  bool hex = sha256.size() == 64;
  for (char c : sha256) hex = hex && (absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'));
  if (hex) return absl::OkStatus();
  return Invalid("sha256", "expected the lowercase hex SHA-256 (64 digits) of the bytes sent");
}

absl::Status QuotaExceeded(absl::string_view submitter, int64_t used, int64_t more, int64_t quota) {
  return api::WithCause(absl::ResourceExhaustedError(absl::StrCat(
                            "upload quota exceeded: submitter \"", submitter, "\" holds ", used,
                            " bytes of uploads "
                            "(unfinished ones included) and this needs ",
                            more,
                            " more, beyond the daemon's "
                            "upload_quota_bytes ",
                            quota,
                            "; delete uploads (mpsctl uploads rm NAME) or ask the "
                            "operator for a larger quota")),
                        api::ErrorCause::UPLOAD_QUOTA_EXCEEDED);
}

absl::Status Unsafe(absl::string_view name, absl::string_view entry, absl::string_view why) {
  api::ErrorCause cause;
  cause.set_kind(api::ErrorCause::UNSAFE_ARCHIVE_ENTRY);
  cause.set_field(std::string(entry));
  return api::WithCause(absl::InvalidArgumentError(absl::StrCat(
                            "upload \"", name, "\": archive entry \"", absl::CHexEscape(entry),
                            "\" refused: ", why, "; nothing was unpacked")),
                        cause);
}

int64_t SizeOf(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// The whole of `path`, or "" when it cannot be read.
std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return text;
}

// Writes `text` to `path` through a temporary, renamed into place.
absl::Status WriteSmallFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
    if (!out.flush()) return Errno("write", tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return Errno("rename", tmp);
  return absl::OkStatus();
}

absl::Status MakeDir(const std::string& path) {
  std::error_code error;
  fs::create_directories(path, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", error.message()));
  }
  chmod(path.c_str(), 0700);
  return absl::OkStatus();
}

// Regular files under `path` (itself, when it is one).
int64_t FilesUnder(const std::string& path) {
  std::error_code error;
  if (fs::is_regular_file(fs::symlink_status(path, error))) return 1;
  int64_t files = 0;
  for (fs::recursive_directory_iterator it(path, error), end; !error && it != end;
       it.increment(error)) {
    if (it->is_regular_file(error) && !it->is_symlink(error)) ++files;
  }
  return files;
}

std::string RandomSuffix() {
  std::random_device random;
  return absl::StrCat(random(), random());
}

// The upload name of a file under .partial/ ("NAME.SHA256" or "NAME.SHA256.d"); "" for others.
std::string PartialName(std::string file) {
  if (absl::EndsWith(file, ".d")) file.resize(file.size() - 2);
  if (file.size() <= 65 || file[file.size() - 65] != '.') return "";
  return file.substr(0, file.size() - 65);
}

// Removes `path` (a file or a tree) without following links.
void RemoveAll(const std::string& path) {
  std::error_code error;
  fs::remove_all(path, error);
}

// `dir` absolute and lexically normal, then also with its symbolic links resolved when that
// differs; without a trailing '/'. None for "".
std::vector<std::string> DirForms(const std::string& dir) {
  std::vector<std::string> forms;
  auto add = [&forms](const fs::path& form) {
    std::string text = form.string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    if (std::find(forms.begin(), forms.end(), text) == forms.end()) forms.push_back(text);
  };
  std::error_code error;
  if (dir.empty()) return forms;
  const fs::path absolute = fs::absolute(dir, error);
  if (error) return forms;
  add(absolute.lexically_normal());
  const fs::path resolved = fs::weakly_canonical(absolute, error);
  if (!error) add(resolved);
  return forms;
}

// Each string field's value that is an absolute path, with its field path
// ("train_job.dataset.root", "bench_job.models[1]"), in `message` and the messages it holds.
// Maps (labels) hold no paths.
void AbsolutePathsIn(const google::protobuf::Message& message, const std::string& prefix,
                     std::vector<std::pair<std::string, std::string>>& paths) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection& reflection = *message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->is_map()) continue;
    const std::string name = absl::StrCat(prefix, prefix.empty() ? "" : ".", field->name());
    const int n = field->is_repeated() ? reflection.FieldSize(message, field) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string at = field->is_repeated() ? absl::StrCat(name, "[", i, "]") : name;
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        AbsolutePathsIn(field->is_repeated() ? reflection.GetRepeatedMessage(message, field, i)
                                             : reflection.GetMessage(message, field),
                        at, paths);
      } else if (field->type() == FieldDescriptor::TYPE_STRING) {
        std::string value = field->is_repeated() ? reflection.GetRepeatedString(message, field, i)
                                                 : reflection.GetString(message, field);
        if (absl::StartsWith(value, "/")) paths.emplace_back(at, std::move(value));
      }
    }
  }
}

// "upload \"NAME\"" for the key "<submitter>/<name>".
std::string UploadNamed(absl::string_view key) {
  return absl::StrCat("upload \"", key.substr(key.find('/') + 1), "\"");
}

}  // namespace

UploadStore::UploadStore(Options options)
    : options_(std::move(options)), dir_forms_(DirForms(options_.dir)) {}

UploadStore::Pins::Pins(Pins&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), keys_(std::move(other.keys_)) {}

UploadStore::Pins& UploadStore::Pins::operator=(Pins&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    keys_ = std::move(other.keys_);
  }
  return *this;
}

UploadStore::Pins::~Pins() { Release(); }

void UploadStore::Pins::Release() {
  if (store_ != nullptr) store_->Unpin(keys_);
  store_ = nullptr;
  keys_.clear();
}

void UploadStore::Unpin(const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  for (const std::string& key : keys) {
    if (auto it = pinned_.find(key); it != pinned_.end() && --it->second <= 0) pinned_.erase(it);
  }
}

std::string UploadStore::UploadKeyOf(absl::string_view path) const {
  const std::string normal = fs::path(std::string(path)).lexically_normal().string();
  for (const std::string& dir : dir_forms_) {
    if (!absl::StartsWith(normal, dir + "/")) continue;
    // <submitter>/<name>[/...]; hidden names (.partial, .sha256, .trash) are no uploads.
    const std::vector<absl::string_view> parts =
        absl::StrSplit(absl::string_view(normal).substr(dir.size() + 1), absl::MaxSplits('/', 2));
    if (parts.size() < 2 || parts[0].empty() || parts[1].empty() || parts[1][0] == '.') {
      return "";
    }
    return absl::StrCat(parts[0], "/", parts[1]);
  }
  return "";
}

absl::StatusOr<UploadStore::Pins> UploadStore::Pin(const mpsd::v1::SubmitJobRequest& spec,
                                                   absl::string_view reader) {
  std::vector<std::pair<std::string, std::string>> paths;
  AbsolutePathsIn(spec, "", paths);
  // Each upload once, with the first field that names it.
  std::map<std::string, std::string> field_of;
  for (const auto& [field, path] : paths) {
    std::string key = UploadKeyOf(path);
    if (key.empty() || (!reader.empty() && !absl::StartsWith(key, absl::StrCat(reader, "/")))) {
      continue;
    }
    field_of.emplace(std::move(key), field);
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [key, field] : field_of) {
    std::error_code error;
    const bool deleting = deleting_.count(key) != 0;
    if (deleting || !fs::exists(fs::symlink_status(absl::StrCat(options_.dir, "/", key), error))) {
      return api::WithInvalidField(
          absl::FailedPreconditionError(absl::StrCat(
              field, ": ", UploadNamed(key), deleting ? " is being deleted" : " does not exist",
              " (mpsctl uploads lists what there is)")),
          field);
    }
  }
  Pins pins;
  pins.store_ = this;
  for (const auto& entry : field_of) {
    ++pinned_[entry.first];
    pins.keys_.push_back(entry.first);
  }
  return pins;
}

std::vector<std::string> UploadStore::JobsUsing(const std::string& key) const {
  std::vector<std::string> ids;
  if (!options_.unfinished_jobs) return ids;
  for (const mpsd::v1::Job& job : options_.unfinished_jobs()) {
    if (api::IsTerminal(job.state())) continue;
    std::vector<std::pair<std::string, std::string>> paths;
    AbsolutePathsIn(job.spec(), "", paths);
    for (const auto& path : paths) {
      if (UploadKeyOf(path.second) == key) {
        ids.push_back(job.id());
        break;
      }
    }
  }
  std::sort(ids.begin(), ids.end(), [](const std::string& a, const std::string& b) {
    return api::ParseJobId(a).value_or(0) < api::ParseJobId(b).value_or(0);
  });
  return ids;
}

absl::StatusOr<std::string> UploadStore::AreaOf(absl::string_view submitter) const {
  if (submitter.empty() || submitter == "." || submitter == ".." ||
      absl::StrContains(submitter, '/') || submitter.size() > 128 ||
      absl::StrContains(submitter, '\0')) {
    return absl::InvalidArgumentError(
        absl::StrCat("submitter \"", absl::CHexEscape(submitter), "\" cannot have an upload area"));
  }
  return absl::StrCat(options_.dir, "/", submitter);
}

int64_t UploadStore::BytesUnder(const std::string& dir) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(dir, error);
  if (fs::is_regular_file(status)) return SizeOf(dir);
  int64_t bytes = 0;
  for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end;
       it.increment(error)) {
    if (it->is_symlink(error) || !it->is_regular_file(error)) continue;
    const int64_t size = SizeOf(it->path().string());
    if (size > 0) bytes += size;
  }
  return bytes;
}

absl::StatusOr<mpsd::v1::UploadStatus> UploadStore::Status(
    const std::string& submitter, const mpsd::v1::GetUploadStatusRequest& request) {
  if (absl::Status s = api::CheckUploadName("name", request.name()); !s.ok()) return s;
  if (absl::Status s = CheckSha256(request.sha256()); !s.ok()) return s;
  absl::StatusOr<std::string> area = AreaOf(submitter);
  if (!area.ok()) return area.status();
  mpsd::v1::UploadStatus status;
  status.set_quota_bytes(options_.quota_bytes);
  status.set_used_bytes(BytesUnder(*area));
  std::error_code error;
  if (fs::exists(fs::symlink_status(*area + "/" + request.name(), error)) &&
      ReadSmallFile(*area + "/.sha256/" + request.name()) == request.sha256()) {
    status.set_complete(true);
    status.set_offset(request.size_bytes());
    return status;
  }
  const int64_t held =
      SizeOf(absl::StrCat(*area, "/.partial/", request.name(), ".", request.sha256()));
  status.set_offset(held > 0 && held <= request.size_bytes() ? held : 0);
  return status;
}

absl::StatusOr<std::unique_ptr<UploadStore::Writer>> UploadStore::Begin(
    const std::string& submitter, const mpsd::v1::UploadChunk& first) {
  if (absl::Status s = api::CheckUploadName("name", first.name()); !s.ok()) return s;
  if (absl::Status s = CheckSha256(first.sha256()); !s.ok()) return s;
  if (first.size_bytes() < 0) return Invalid("size_bytes", "must be >= 0");
  absl::StatusOr<std::string> area = AreaOf(submitter);
  if (!area.ok()) return area.status();
  std::error_code error;
  if (!first.replace() && fs::exists(fs::symlink_status(*area + "/" + first.name(), error))) {
    return absl::AlreadyExistsError(
        absl::StrCat("upload \"", first.name(), "\" exists; delete it first (mpsctl uploads rm ",
                     first.name(), ") or replace it (mpsctl upload --replace)"));
  }
  const std::string key = absl::StrCat(submitter, "/", first.name());
  // A replace that Finish would refuse (jobs still name the upload), refused before the bytes.
  if (first.replace() && fs::exists(fs::symlink_status(*area + "/" + first.name(), error))) {
    if (absl::Status s = CheckUnused(key); !s.ok()) return s;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!writing_.insert(key).second) {
      return absl::AbortedError(absl::StrCat(
          "upload \"", first.name(), "\" is being sent by another call; try again once it ended"));
    }
  }
  struct Releaser {
    UploadStore* store;
    std::string key;
    ~Releaser() {
      if (store != nullptr) store->Release(key);
    }
  } releaser{this, key};

  const std::string partial_dir = *area + "/.partial";
  if (absl::Status s = MakeDir(options_.dir); !s.ok()) return s;
  if (absl::Status s = MakeDir(partial_dir); !s.ok()) return s;
  if (absl::Status s = MakeDir(*area + "/.sha256"); !s.ok()) return s;
  const std::string partial = absl::StrCat(partial_dir, "/", first.name(), ".", first.sha256());
  // Unfinished bytes of this name with other contents are stale: they count against the quota.
  std::vector<std::string> stale;
  for (fs::directory_iterator it(partial_dir, error), end; !error && it != end;
       it.increment(error)) {
    if (PartialName(it->path().filename().string()) == first.name() &&
        it->path().string() != partial) {
      stale.push_back(it->path().string());
    }
  }
  for (const std::string& path : stale) RemoveAll(path);
  const int64_t held = std::max<int64_t>(SizeOf(partial), 0);
  if (first.offset() != held) {
    return Invalid("offset",
                   absl::StrCat("the daemon holds ", held, " bytes of upload \"", first.name(),
                                "\" with this sha256, so the stream must "
                                "start at offset ",
                                held, " (GetUploadStatus), not ", first.offset()));
  }
  if (held > first.size_bytes()) {
    RemoveAll(partial);
    return Invalid("size_bytes", "fewer than the bytes already received; start again");
  }
  // With replace, the upload being replaced leaves once this one is in: what it would hold then.
  const int64_t used =
      BytesUnder(*area) - (first.replace() ? BytesUnder(*area + "/" + first.name()) : 0);
  const int64_t need = first.size_bytes() - held;
  {
    absl::MutexLock lock(&mu_);
    const int64_t coming = reserved_[submitter];
    if (used + coming + need > options_.quota_bytes) {
      if (coming == 0) reserved_.erase(submitter);
      return QuotaExceeded(submitter, used + coming, need, options_.quota_bytes);
    }
    reserved_[submitter] += need;
  }
  const int fd =
      open(partial.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    Unreserve(submitter, need);
    return Errno("open", partial);
  }
  mpsd::v1::UploadChunk header = first;
  header.clear_data();
  releaser.store = nullptr;  // The Writer releases the name.
  std::unique_ptr<Writer> writer(
      new Writer(this, submitter, std::move(header), *area, partial, fd, held));
  writer->reserved_ = need;
  // The bytes already held, hashed again: the digest covers the whole upload.
  if (held > 0) {
    const int in = open(partial.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) return Errno("read", partial);
    std::vector<char> buffer(1 << 20);
    int64_t left = held;
    while (left > 0) {
      const ssize_t got = read(in, buffer.data(), std::min<int64_t>(left, buffer.size()));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        close(in);
        return Errno("read", partial);
      }
      writer->hasher_.Update(absl::string_view(buffer.data(), static_cast<size_t>(got)));
      left -= got;
    }
    close(in);
  }
  return writer;
}

void UploadStore::Unreserve(const std::string& submitter, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if ((reserved_[submitter] -= bytes) <= 0) reserved_.erase(submitter);
}

void UploadStore::Release(const std::string& key) {
  absl::MutexLock lock(&mu_);
  writing_.erase(key);
}

UploadStore::Writer::Writer(UploadStore* store, std::string submitter, mpsd::v1::UploadChunk header,
                            std::string area, std::string partial, int fd, int64_t received)
    : store_(store),
      submitter_(std::move(submitter)),
      header_(std::move(header)),
      area_(std::move(area)),
      partial_(std::move(partial)),
      fd_(fd),
      received_(received) {}

UploadStore::Writer::~Writer() {
  if (fd_ >= 0) close(fd_);
  store_->Unreserve(submitter_, reserved_);
  store_->Release(absl::StrCat(submitter_, "/", header_.name()));
}

absl::Status UploadStore::Writer::Append(int64_t offset, absl::string_view data) {
  if (offset != received_) {
    return Invalid("offset", absl::StrCat("chunk at byte ", offset, ", expected ", received_));
  }
  if (received_ + static_cast<int64_t>(data.size()) > header_.size_bytes()) {
    return Invalid("size_bytes", absl::StrCat("more bytes than the ", header_.size_bytes(),
                                              " the first chunk declared"));
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t wrote = write(fd_, data.data() + done, data.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return Errno("write", partial_);
    done += static_cast<size_t>(wrote);
  }
  hasher_.Update(data);
  received_ += static_cast<int64_t>(data.size());
  reserved_ -= static_cast<int64_t>(data.size());
  store_->Unreserve(submitter_, static_cast<int64_t>(data.size()));
  return absl::OkStatus();
}

absl::StatusOr<Upload> UploadStore::Writer::Finish() {
  if (received_ != header_.size_bytes()) {
    return Invalid("size_bytes",
                   absl::StrCat("the stream ended after ", received_, " of ", header_.size_bytes(),
                                " bytes; send the rest "
                                "from offset ",
                                received_));
  }
  if (close(fd_) != 0) {
    fd_ = -1;
    return Errno("close", partial_);
  }
  fd_ = -1;
  const std::string sha256 = hasher_.Finish();
  if (sha256 != header_.sha256()) {
    RemoveAll(partial_);
    return absl::DataLossError(absl::StrCat(
        "upload \"", header_.name(), "\": the bytes received have SHA-256 ", sha256, ", not the ",
        header_.sha256(), " announced; they were discarded: send it again"));
  }
  const std::string name = header_.name();
  const std::string final_path = area_ + "/" + name;
  std::error_code error;
  if (!header_.replace() && fs::exists(fs::symlink_status(final_path, error))) {
    return absl::AlreadyExistsError(absl::StrCat("upload \"", name, "\" appeared meanwhile"));
  }
  // Replacing swaps the data under every job that names the upload: refused, as a delete is,
  // while a job that has not ended or a submit in flight names it (the bytes received stay, so
  // the same upload resumes once they ended).
  std::optional<RemovalGuard> removal;
  if (fs::exists(fs::symlink_status(final_path, error))) {
    const std::string key = absl::StrCat(submitter_, "/", name);
    if (absl::Status s = store_->BeginRemoval(key); !s.ok()) return s;
    removal.emplace(store_, key);
  }
  Upload upload;
  std::string ready = partial_;  // What is renamed to the final name.
  if (header_.archive()) {
    ready = partial_ + ".d";
    RemoveAll(ready);
    int64_t others =
        BytesUnder(area_) - SizeOf(partial_) - (header_.replace() ? BytesUnder(final_path) : 0);
    {
      absl::MutexLock lock(&store_->mu_);
      auto coming = store_->reserved_.find(submitter_);
      if (coming != store_->reserved_.end()) others += coming->second;
    }
    int64_t files = 0;
    absl::Status unpacked =
        store_->Unpack(partial_, ready, store_->options_.quota_bytes - others, name, files);
    RemoveAll(partial_);
    if (!unpacked.ok()) {
      RemoveAll(ready);
      return unpacked;
    }
    chmod(ready.c_str(), 0755);
    upload.set_kind("folder");
  } else {
    chmod(ready.c_str(), 0644);
    upload.set_kind("file");
  }
  if (absl::Status s = WriteSmallFile(area_ + "/.sha256/" + name, sha256); !s.ok()) return s;
  // A folder cannot be renamed over another: the old one goes aside first.
  std::string old;
  if (fs::exists(fs::symlink_status(final_path, error)) &&
      (header_.archive() || fs::is_directory(fs::symlink_status(final_path, error)))) {
    if (absl::Status s = MakeDir(area_ + "/.trash"); !s.ok()) return s;
    old = absl::StrCat(area_, "/.trash/", name, ".", RandomSuffix());
    if (rename(final_path.c_str(), old.c_str()) != 0) return Errno("rename", final_path);
  }
  if (rename(ready.c_str(), final_path.c_str()) != 0) return Errno("rename", ready);
  if (!old.empty()) RemoveAll(old);
  upload.set_name(name);
  upload.set_submitter(submitter_);
  upload.set_size_bytes(BytesUnder(final_path));
  upload.set_files(FilesUnder(final_path));
  upload.set_sha256(sha256);
  upload.set_ref(absl::StrCat(api::kUploadPrefix, name));
  *upload.mutable_created() = google::protobuf::util::TimeUtil::GetCurrentTime();
  return upload;
}

absl::Status UploadStore::Unpack(const std::string& archive_path, const std::string& into,
                                 int64_t limit_bytes, const std::string& name,
                                 int64_t& files) const {
  std::unique_ptr<archive, decltype(&archive_read_free)> reader(archive_read_new(),
                                                                &archive_read_free);
  archive_read_support_format_tar(reader.get());
  archive_read_support_format_gnutar(reader.get());
  archive_read_support_filter_gzip(reader.get());
  if (archive_read_open_filename(reader.get(), archive_path.c_str(), 1 << 16) != ARCHIVE_OK) {
    return Invalid("archive", absl::StrCat("upload \"", name, "\" is not a readable tar archive: ",
                                           archive_error_string(reader.get())));
  }
  if (mkdir(into.c_str(), 0700) != 0) return Errno("create", into);
  std::set<std::string> links;  // Entries that are symbolic links.
  int64_t bytes = 0;
  files = 0;
  std::vector<char> zeros;
  for (;;) {
    archive_entry* entry = nullptr;
    const int next = archive_read_next_header(reader.get(), &entry);
    if (next == ARCHIVE_EOF) break;
    if (next != ARCHIVE_OK && next != ARCHIVE_WARN) {
      return Invalid("archive", absl::StrCat("upload \"", name,
                                             "\": not a tar archive, or a "
                                             "damaged one: ",
                                             archive_error_string(reader.get())));
    }
    const char* raw = archive_entry_pathname(entry);
    const std::string path = raw == nullptr ? "" : raw;
    if (++files > options_.max_files) {
      return Unsafe(name, path,
                    absl::StrCat("more than the daemon's upload_max_files (", options_.max_files,
                                 ") entries"));
    }
    if (path.empty() || path[0] == '/') {
      return Unsafe(name, path, "an absolute or empty path; entries must be relative");
    }
    std::vector<std::string> parts;
    for (absl::string_view part : absl::StrSplit(path, '/')) {
      if (part.empty() || part == ".") continue;
      if (part == "..") return Unsafe(name, path, "a \"..\" component leads outside the folder");
      parts.emplace_back(part);
    }
    if (parts.empty()) continue;  // "./": the folder itself.
    // No entry may be written through a symbolic link of the archive.
    std::string prefix;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix = prefix.empty() ? parts[i] : absl::StrCat(prefix, "/", parts[i]);
      if (links.count(prefix) != 0) {
        return Unsafe(
            name, path,
            absl::StrCat("it lies under the symbolic link \"", prefix, "\" of the same archive"));
      }
    }
    const std::string relative = absl::StrJoin(parts, "/");
    const std::string target = absl::StrCat(into, "/", relative);
    if (archive_entry_hardlink(entry) != nullptr) {
      return Unsafe(name, path, "hard links are not unpacked (send the file itself)");
    }
    const mode_t type = archive_entry_filetype(entry);
    std::error_code error;
    if (type == AE_IFDIR) {
      if (fs::exists(fs::symlink_status(target, error)) &&
          !fs::is_directory(fs::symlink_status(target, error))) {
        return Unsafe(name, path, "a folder where the archive already put a file");
      }
      fs::create_directories(target, error);
      if (error) {
        return Unsafe(name, path,
                      "the folder cannot be made (a file of the archive is in its "
                      "path)");
      }
      chmod(target.c_str(), 0755);
      continue;
    }
    fs::create_directories(fs::path(target).parent_path(), error);
    if (error) {
      return Unsafe(name, path,
                    "its folder cannot be made (a file of the archive has that "
                    "path)");
    }
    if (type == AE_IFLNK) {
      const char* link = archive_entry_symlink(entry);
      const std::string to = link == nullptr ? "" : link;
      if (to.empty() || to[0] == '/') {
        return Unsafe(name, path,
                      absl::StrCat("a symbolic link to the absolute path \"", absl::CHexEscape(to),
                                   "\"; links must be "
                                   "relative and stay inside the folder"));
      }
      for (absl::string_view part : absl::StrSplit(to, '/')) {
        if (part == "..") {
          return Unsafe(name, path,
                        absl::StrCat("a symbolic link to \"", absl::CHexEscape(to),
                                     "\", which has a \"..\"; links must stay "
                                     "inside the folder (no \"..\")"));
        }
      }
      if (symlink(to.c_str(), target.c_str()) != 0) {
        if (errno == EEXIST) return Unsafe(name, path, "the archive holds this path twice");
        return Errno("create", target);
      }
      links.insert(relative);
      continue;
    }
    if (type != AE_IFREG) {
      return Unsafe(name, path,
                    "not a regular file, folder or symbolic link (a device, FIFO or "
                    "socket)");
    }
    const int64_t declared = archive_entry_size(entry);
    if (declared > limit_bytes - bytes) {
      return api::WithCause(
          absl::ResourceExhaustedError(absl::StrCat(
              "upload \"", name, "\": archive entry \"", absl::CHexEscape(path), "\" (", declared,
              " bytes) takes the unpacked folder beyond the ", limit_bytes,
              " bytes its "
              "submitter's upload_quota_bytes leaves; nothing was unpacked")),
          api::ErrorCause::UPLOAD_QUOTA_EXCEEDED);
    }
    const int perm = (archive_entry_perm(entry) & 0755) | 0600;
    const int fd = open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, perm);
    if (fd < 0) {
      if (errno == EEXIST) return Unsafe(name, path, "the archive holds this path twice");
      return Errno("create", target);
    }
    struct Closer {
      int fd;
      ~Closer() { close(fd); }
    } closer{fd};
    for (;;) {
      const void* block = nullptr;
      size_t size = 0;
      la_int64_t offset = 0;
      const int got = archive_read_data_block(reader.get(), &block, &size, &offset);
      if (got == ARCHIVE_EOF) break;
      if (got != ARCHIVE_OK && got != ARCHIVE_WARN) {
        return Invalid("archive",
                       absl::StrCat("upload \"", name, "\": entry \"", absl::CHexEscape(path),
                                    "\" is damaged: ", archive_error_string(reader.get())));
      }
      bytes += static_cast<int64_t>(size);
      if (bytes > limit_bytes) {
        return api::WithCause(absl::ResourceExhaustedError(absl::StrCat(
                                  "upload \"", name, "\": unpacking goes beyond the ", limit_bytes,
                                  " bytes its "
                                  "submitter's upload_quota_bytes leaves (at entry \"",
                                  absl::CHexEscape(path), "\"); nothing was unpacked")),
                              api::ErrorCause::UPLOAD_QUOTA_EXCEEDED);
      }
      if (pwrite(fd, block, size, offset) != static_cast<ssize_t>(size)) {
        return Errno("write", target);
      }
    }
    // A sparse file's hole at its end.
    if (ftruncate(fd, declared) != 0) return Errno("write", target);
  }
  return absl::OkStatus();
}

std::vector<std::string> UploadStore::RemoveLeftovers() {
  std::vector<std::string> removed;
  std::error_code error;
  for (fs::directory_iterator area(options_.dir, error), end; !error && area != end;
       area.increment(error)) {
    if (!area->is_directory(error) || area->is_symlink(error)) continue;
    std::error_code inner;
    for (const char* sub : {"/.trash", "/.partial"}) {
      for (fs::directory_iterator it(area->path().string() + sub, inner), none;
           !inner && it != none; it.increment(inner)) {
        const std::string path = it->path().string();
        if (std::string(sub) == "/.trash" || absl::EndsWith(path, ".d")) removed.push_back(path);
      }
    }
  }
  for (const std::string& path : removed) RemoveAll(path);
  return removed;
}

absl::StatusOr<mpsd::v1::ListUploadsResponse> UploadStore::List(const std::string& submitter) {
  std::vector<std::string> submitters;
  std::error_code error;
  if (submitter.empty()) {
    for (fs::directory_iterator it(options_.dir, error), end; !error && it != end;
         it.increment(error)) {
      if (it->is_directory(error) && !it->is_symlink(error)) {
        submitters.push_back(it->path().filename().string());
      }
    }
    std::sort(submitters.begin(), submitters.end());
  } else {
    submitters.push_back(submitter);
  }
  mpsd::v1::ListUploadsResponse response;
  response.set_quota_bytes(options_.quota_bytes);
  for (const std::string& owner : submitters) {
    absl::StatusOr<std::string> area = AreaOf(owner);
    if (!area.ok()) return area.status();
    response.set_used_bytes(response.used_bytes() + BytesUnder(*area));
    std::vector<fs::path> entries;
    for (fs::directory_iterator it(*area, error), end; !error && it != end; it.increment(error)) {
      entries.push_back(it->path());
    }
    for (fs::directory_iterator it(*area + "/.partial", error), end; !error && it != end;
         it.increment(error)) {
      if (it->is_regular_file(error) && !PartialName(it->path().filename().string()).empty()) {
        entries.push_back(it->path());
      }
    }
    std::sort(entries.begin(), entries.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
    for (const fs::path& entry : entries) {
      const std::string file = entry.filename().string();
      if (file.empty() || (file[0] == '.')) continue;
      const bool partial = entry.parent_path().filename() == ".partial";
      Upload* upload = response.add_uploads();
      upload->set_submitter(owner);
      upload->set_size_bytes(BytesUnder(entry.string()));
      struct stat st;
      if (lstat(entry.c_str(), &st) == 0) {
        *upload->mutable_created() =
            google::protobuf::util::TimeUtil::TimeTToTimestamp(st.st_mtime);
      }
      if (partial) {
        upload->set_name(PartialName(file));
        upload->set_sha256(file.substr(upload->name().size() + 1));
        upload->set_kind("partial");
        continue;
      }
      upload->set_name(file);
      upload->set_kind(fs::is_directory(fs::symlink_status(entry, error)) ? "folder" : "file");
      upload->set_files(FilesUnder(entry.string()));
      upload->set_sha256(ReadSmallFile(*area + "/.sha256/" + file));
      upload->set_ref(submitter.empty() ? absl::StrCat(api::kUploadPrefix, "@", owner, "/", file)
                                        : absl::StrCat(api::kUploadPrefix, file));
    }
  }
  return response;
}

absl::Status UploadStore::CheckUnused(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    if (pinned_.count(key) != 0) {
      return absl::AbortedError(absl::StrCat(UploadNamed(key),
                                             " is named by a job being submitted; try again "
                                             "once the submit was answered"));
    }
  }
  if (const std::vector<std::string> users = JobsUsing(key); !users.empty()) {
    constexpr size_t kShown = 20;
    const std::string ids = absl::StrCat(
        absl::StrJoin(users.begin(), users.begin() + std::min(users.size(), kShown), ", "),
        users.size() > kShown ? absl::StrCat(" and ", users.size() - kShown, " more") : "");
    const bool one = users.size() == 1;
    return absl::FailedPreconditionError(absl::StrCat(
        UploadNamed(key), " is used by queued or running job", one ? " " : "s ", ids,
        one ? "; cancel it or wait for it to end" : "; cancel them or wait for them to end"));
  }
  return absl::OkStatus();
}

absl::Status UploadStore::BeginRemoval(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    if (!deleting_.insert(key).second) {
      return absl::AbortedError(
          absl::StrCat(UploadNamed(key), " is being deleted or replaced by another call"));
    }
  }
  // From here on Pin refuses the name; a submit that pinned it before still holds it (refused)
  // or is stored by now, so the jobs CheckUnused reads include it.
  absl::Status unused = CheckUnused(key);
  if (!unused.ok()) EndRemoval(key);
  return unused;
}

void UploadStore::EndRemoval(const std::string& key) {
  absl::MutexLock lock(&mu_);
  deleting_.erase(key);
}

absl::StatusOr<Upload> UploadStore::Delete(const std::string& submitter, const std::string& name) {
  if (absl::Status s = api::CheckUploadName("name", name); !s.ok()) return s;
  absl::StatusOr<std::string> area = AreaOf(submitter);
  if (!area.ok()) return area.status();
  const std::string key = absl::StrCat(submitter, "/", name);
  {
    absl::MutexLock lock(&mu_);
    if (writing_.count(key) != 0) {
      return absl::AbortedError(absl::StrCat("upload \"", name,
                                             "\" is being sent; try again "
                                             "once that call ended"));
    }
  }
  if (absl::Status s = BeginRemoval(key); !s.ok()) return s;
  const RemovalGuard removal(this, key);
  Upload deleted;
  deleted.set_name(name);
  deleted.set_submitter(submitter);
  std::error_code error;
  bool found = false;
  const std::string path = *area + "/" + name;
  if (fs::exists(fs::symlink_status(path, error))) {
    found = true;
    deleted.set_kind(fs::is_directory(fs::symlink_status(path, error)) ? "folder" : "file");
    deleted.set_size_bytes(BytesUnder(path));
    deleted.set_files(FilesUnder(path));
    deleted.set_sha256(ReadSmallFile(*area + "/.sha256/" + name));
    // Out of sight at once, then removed.
    if (absl::Status s = MakeDir(*area + "/.trash"); !s.ok()) return s;
    const std::string aside = absl::StrCat(*area, "/.trash/", name, ".", RandomSuffix());
    if (rename(path.c_str(), aside.c_str()) != 0) return Errno("remove", path);
    RemoveAll(aside);
    fs::remove(*area + "/.sha256/" + name, error);
  }
  std::vector<std::string> partials;
  for (fs::directory_iterator it(*area + "/.partial", error), end; !error && it != end;
       it.increment(error)) {
    if (PartialName(it->path().filename().string()) == name) partials.push_back(it->path());
  }
  for (const std::string& partial : partials) {
    if (!found) {
      deleted.set_kind("partial");
      deleted.set_size_bytes(BytesUnder(partial));
    }
    found = true;
    RemoveAll(partial);
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat("no upload \"", name,
                                            "\" (mpsctl uploads lists "
                                            "them)"));
  }
  return deleted;
}

}  // namespace mpsd::server
