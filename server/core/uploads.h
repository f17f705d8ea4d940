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
// An upload that a job which has not ended (QUEUED or RUNNING) names is not deleted: the job's
// stored spec holds the upload's path, and the job would fail when it starts. A submit and a
// delete of the same upload at once are ordered by Pins (below): either the delete sees the job
// (or the submit in flight) and refuses, or the submit sees the upload gone and fails.
//
// Thread-safe: any number of calls at once; one Writer per (submitter, name) at a time.
#ifndef MPSD_SERVER_CORE_UPLOADS_H_
#define MPSD_SERVER_CORE_UPLOADS_H_

#include <cstdint>
#include <functional>
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
    // The jobs that have not ended (QUEUED and RUNNING), with their specs: Delete refuses an
    // upload that one of them names. Called, never under the store's lock, by Delete. Empty:
    // no job ever blocks a delete.
    std::function<std::vector<mpsd::v1::Job>()> unfinished_jobs;
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

  // The uploads a job being submitted names, held from the moment Pin checked that they exist
  // until the job is stored (or refused): Delete refuses them meanwhile (ABORTED), and once the
  // job is stored Options::unfinished_jobs shows it to Delete. Movable; releases what it holds
  // when destroyed, which must happen before the UploadStore is destroyed.
  class Pins {
   public:
    Pins() = default;
    Pins(Pins&& other) noexcept;
    Pins& operator=(Pins&& other) noexcept;
    ~Pins();

    // "<submitter>/<name>" of each upload held, sorted.
    const std::vector<std::string>& keys() const { return keys_; }

   private:
    friend class UploadStore;
    void Release();

    UploadStore* store_ = nullptr;
    std::vector<std::string> keys_;
  };

  // Pins every upload that a path in `spec` (the request with its upload: references resolved,
  // as it will be stored) lies in: any string field outside a map whose value, made lexically
  // normal, is <dir>/<submitter>/<name> or a path under it. FAILED_PRECONDITION (INVALID_FIELD
  // naming the field, e.g. "train_job.dataset.root") when such an upload is being deleted or no
  // longer exists (deleted after the request named it). `reader` is the submitter whose
  // uploads the job may read, or "" for any (an admin's job): another submitter's upload is then
  // neither pinned nor reported, since the job is refused for naming it (data_roots.h) with the
  // same text whether it exists, and this must not tell either.
  absl::StatusOr<Pins> Pin(const mpsd::v1::SubmitJobRequest& spec, absl::string_view reader);

  // Deletes upload `name` of `submitter` and any unfinished bytes of that name. NOT_FOUND when
  // there is neither. ABORTED while a Writer holds the name, while a submit holds it (Pins) and
  // while another Delete of it runs. FAILED_PRECONDITION, naming the upload and the ids of the
  // jobs, when a job that has not ended (Options::unfinished_jobs) names a path in it; jobs
  // that ended do not count.
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
  void Unpin(const std::vector<std::string>& keys) ABSL_LOCKS_EXCLUDED(mu_);
  // ABORTED while a submit holds the upload `key` (Pins), FAILED_PRECONDITION naming the jobs
  // while unfinished jobs name it (Options::unfinished_jobs), else OK. Marks nothing.
  absl::Status CheckUnused(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Before an upload is deleted or replaced: marks `key` (Pin refuses it from then on), then
  // CheckUnused; ABORTED too while another removal runs. Not OK: the mark is taken back. OK:
  // the caller removes the mark with EndRemoval (RemovalGuard) once done.
  absl::Status BeginRemoval(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  void EndRemoval(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  struct RemovalGuard {
    RemovalGuard(UploadStore* store, std::string key) : store(store), key(std::move(key)) {}
    ~RemovalGuard() { store->EndRemoval(key); }
    RemovalGuard(const RemovalGuard&) = delete;
    RemovalGuard& operator=(const RemovalGuard&) = delete;
    UploadStore* store;
    std::string key;
  };
  // "<submitter>/<name>" of the upload that `path` lies in (see Pin), or "".
  std::string UploadKeyOf(absl::string_view path) const;
  // The ids of the jobs of unfinished_jobs that name a path in the upload `key`, ascending.
  std::vector<std::string> JobsUsing(const std::string& key) const;
  // Takes `bytes` off `submitter`'s reservation (bytes that live Writers have yet to receive).
  void Unreserve(const std::string& submitter, int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Unpack(const std::string& archive, const std::string& into, int64_t limit_bytes,
                      const std::string& name, int64_t& files) const;

  const Options options_;
  // options_.dir made absolute and lexically normal, and the same with its symbolic links
  // resolved (the form data_roots.h's ResolveUploads writes into a spec); one entry when alike.
  const std::vector<std::string> dir_forms_;
  absl::Mutex mu_;
  // "<submitter>/<name>" of each live Writer.
  std::set<std::string> writing_ ABSL_GUARDED_BY(mu_);
  // "<submitter>/<name>" of each upload that submits hold (Pins), with how many hold it.
  std::map<std::string, int> pinned_ ABSL_GUARDED_BY(mu_);
  // "<submitter>/<name>" of each upload a Delete is looking at or removing.
  std::set<std::string> deleting_ ABSL_GUARDED_BY(mu_);
  // Per submitter: bytes its live Writers have declared and not yet received. The quota check
  // counts them with the bytes on disk, so that two uploads at once cannot together overrun it.
  std::map<std::string, int64_t> reserved_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_UPLOADS_H_
