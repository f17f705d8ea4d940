// Uploads: files and folders that submitters send to the daemon (UploadFile) for their jobs to
// read as `upload:NAME`. Each submitter has an area <dir>/<submitter>/ (dir is
// <state_dir>/uploads):
//   <area>/NAME                    a finished upload, a file or a folder (what jobs read)
//   <area>/.partial/NAME.SHA256    the bytes received so far of an unfinished upload
//   <area>/.partial/NAME.SHA256.d/ an archive being unpacked
//   <area>/.sha256/NAME            the SHA-256 of the bytes that were sent for NAME
// An upload appears under NAME only once its bytes' SHA-256 matched (and its archive was
// unpacked), by rename: a job never sees half of one. Each area, unfinished uploads included,
// stays within the quota (checked at the start of an upload with its declared size, counting
// what other uploads of the same submitter have yet to send, and while an archive is unpacked;
// the archive's own bytes are not counted while it is unpacked, since they go once it is).
//
// Archives are tar (ustar, pax, GNU; optionally gzip-compressed), read with libarchive and
// unpacked by this code, entry by entry, refusing: absolute paths, ".." components, entries
// under a symbolic link, symbolic links that are absolute or have a ".." (so that every link
// stays inside the folder whatever other links it passes), hard links, devices, FIFOs and
// sockets, duplicate entries, more than max_files entries, and more bytes than the quota
// leaves (tar bombs: sizes are checked from the headers before anything is written, and again
// as bytes are written).
//
// Thread-safe: any number of calls at once; one Writer per (submitter, name) at a time.
#ifndef MPSD_SERVER_CORE_UPLOADS_H_
#define MPSD_SERVER_CORE_UPLOADS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "api/sha256.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Largest UploadChunk.data, bytes.
inline constexpr int64_t kUploadChunkBytes = 1 << 20;

class UploadStore {
 public:
  struct Options {
    // <state_dir>/uploads; created (mode 0700) when the first upload starts.
    std::string dir;
    // Bytes each submitter's area may hold, unfinished uploads included. > 0.
    int64_t quota_bytes = int64_t{20} << 30;
    // Entries (files, folders, links) an archive may hold. > 0.
    int64_t max_files = 100000;
  };

  explicit UploadStore(Options options);

  // One upload being received: Append the chunks in order, then Finish. Destroying it without
  // Finish (a broken connection) keeps the bytes received for a later resume. Not thread-safe
  // (one stream's reactor owns it).
  class Writer {
   public:
    ~Writer();
    // `offset` must be the bytes received so far; INVALID_ARGUMENT (INVALID_FIELD "offset")
    // otherwise or beyond size_bytes. INTERNAL when the disk write fails.
    absl::Status Append(int64_t offset, absl::string_view data);
    // Checks the size and SHA-256, unpacks an archive and puts the upload in place.
    // INVALID_ARGUMENT (INVALID_FIELD "size_bytes") when fewer bytes arrived than declared (they
    // are kept for a resume); DATA_LOSS when the SHA-256 differs (they are deleted); the
    // archive's errors (see the header comment: INVALID_ARGUMENT with UNSAFE_ARCHIVE_ENTRY,
    // RESOURCE_EXHAUSTED with UPLOAD_QUOTA_EXCEEDED; the archive is deleted); ALREADY_EXISTS
    // when NAME appeared meanwhile and replace is not set. Slow for a large upload (hashing
    // and unpacking run on the caller's thread).
    absl::StatusOr<mpsd::v1::Upload> Finish();

   private:
    friend class UploadStore;
    Writer(UploadStore* store, std::string submitter, mpsd::v1::UploadChunk header,
           std::string area, std::string partial, int fd, int64_t received);

    UploadStore* const store_;
    const std::string submitter_;
    const mpsd::v1::UploadChunk header_;  // The first chunk without its data.
    const std::string area_;
    const std::string partial_;
    int fd_;
    int64_t received_;
    // Bytes still to come, counted against the quota (UploadStore::reserved_).
    int64_t reserved_ = 0;
    api::Sha256Hasher hasher_;
  };

  // Starts (or resumes) the upload `first` describes (UploadChunk's first message; its data is
  // not written here: Append it). Checks the name, sha256, size and offset (INVALID_ARGUMENT with
  // INVALID_FIELD), that NAME does not exist unless replace (ALREADY_EXISTS), that no other
  // Writer holds NAME (ABORTED), the quota (RESOURCE_EXHAUSTED, UPLOAD_QUOTA_EXCEEDED); removes
  // unfinished bytes of NAME with another sha256. Reads the bytes already held to hash them.
  absl::StatusOr<std::unique_ptr<Writer>> Begin(const std::string& submitter,
                                                const mpsd::v1::UploadChunk& first);

  // GetUploadStatus for `submitter`. INVALID_ARGUMENT for a bad name or sha256.
  absl::StatusOr<mpsd::v1::UploadStatus> Status(const std::string& submitter,
                                                const mpsd::v1::GetUploadStatusRequest& request);

  // The uploads of `submitter`, or of every submitter when it is empty, by submitter then name;
  // used_bytes and quota_bytes of `submitter` (or of all areas together).
  absl::StatusOr<mpsd::v1::ListUploadsResponse> List(const std::string& submitter);

  // Deletes upload `name` of `submitter` and any unfinished bytes of that name. NOT_FOUND when
  // there is neither. ABORTED while a Writer holds the name.
  absl::StatusOr<mpsd::v1::Upload> Delete(const std::string& submitter, const std::string& name);

  // Removes what a daemon that stopped mid-way left: archives half unpacked (.partial/*.d) and
  // uploads half deleted or replaced (.trash/). Unfinished uploads' bytes stay (resumable).
  // Call at start, before any Writer exists. Returns the paths removed.
  std::vector<std::string> RemoveLeftovers();

  // <dir>/<submitter>: where `submitter`'s uploads are. INVALID_ARGUMENT for a submitter name
  // that cannot name a directory (empty, "." or "..", a '/', more than 128 characters).
  absl::StatusOr<std::string> AreaOf(absl::string_view submitter) const;

  // Bytes of the regular files under `dir` (symbolic links not followed); 0 for none.
  static int64_t BytesUnder(const std::string& dir);

  const std::string& dir() const { return options_.dir; }
  int64_t quota_bytes() const { return options_.quota_bytes; }

 private:
  void Release(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes `bytes` off `submitter`'s reservation (bytes that live Writers have yet to receive).
  void Unreserve(const std::string& submitter, int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Unpack(const std::string& archive, const std::string& into, int64_t limit_bytes,
                      const std::string& name, int64_t& files) const;

  const Options options_;
  absl::Mutex mu_;
  // "<submitter>/<name>" of each live Writer.
  std::set<std::string> writing_ ABSL_GUARDED_BY(mu_);
  // Per submitter: bytes its live Writers have declared and not yet received. The quota check
  // counts them with the bytes on disk, so that two uploads at once cannot together overrun it.
  std::map<std::string, int64_t> reserved_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_UPLOADS_H_
