// Durable storage of jobs and their events in SQLite (WAL mode) under the daemon's state dir.
// Jobs and events are stored as serialized protos, with the columns needed to find them.
// The implementation (raw SQLite C API) lives in job_store.cc.
#ifndef MPSD_SERVER_CORE_JOB_STORE_H_
#define MPSD_SERVER_CORE_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Thread-safe: every method may be called from any thread (one connection, serialised by a
// mutex inside, so a long Commit delays readers for its duration).
//
// Errors from SQLite carry SQLite's message and the database path. Their codes: DATA_LOSS for a
// corrupt file, RESOURCE_EXHAUSTED for a full disk, UNAVAILABLE when another process holds the
// database locked for longer than the busy timeout (5 s), INTERNAL otherwise.
//
// Durability: a call that returned OK survives a crash or kill of mpsd. After a power loss or
// OS crash the newest commits may be lost (synchronous=NORMAL in WAL mode), never half-applied.
//
// Job ids are the decimal form of an integer ("1", "2", …); any other string names no job.
// The shell command that copies what can still be read of a damaged database `path` into
// `salvaged` with the sqlite3 command (Debian's package sqlite3): its .dump goes on past a
// damaged page and ends "ROLLBACK; -- due to errors", which sed turns into a COMMIT of what it
// read; the schema version (PRAGMA user_version, which .dump leaves out) is set after. (.recover
// would read more, but Debian 12's sqlite3 lacks the sqlite_dbpage table it needs.)
std::string SalvageCommand(const std::string& path, const std::string& salvaged);

class JobStore {
 public:
  struct Options {
    // The database file, e.g. "<state-dir>/mpsd.db". Created with its schema if missing.
    std::string path;
  };

  // Opens or creates the database, sets WAL mode and synchronous=NORMAL, foreign keys on, and
  // creates or upgrades the schema (versioned by PRAGMA user_version) in one transaction. A
  // database of an older mpsd is upgraded in place and keeps its jobs and events (version 1 ->
  // 2 adds the jobs' name column, filled from then on, and the settings table).
  // Errors, each naming the file: INTERNAL if the file cannot be opened (e.g. its directory is
  // missing); DATA_LOSS if it is not a database or its schema is not ours (tables but no
  // version, or our version without our tables); FAILED_PRECONDITION if it was written by a
  // newer mpsd (a higher schema version), or WAL mode cannot be enabled.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const Options& options);

  virtual ~JobStore() = default;

  // Stores a new job under the next id: "1", "2", … in decimal, never reused, also across
  // restarts. `job.id` is ignored; an unset `created_at` is set to now. Returns the job as
  // stored, with its id set.
  virtual absl::StatusOr<mpsd::v1::Job> InsertJob(mpsd::v1::Job job) = 0;

  // Makes InsertJob hand out ids above `id` from now on (and across restarts), e.g. the highest
  // job id whose artifacts exist, so that a database restored from an older copy never gives a
  // new job the id (and so the artifacts directory) of one it lost. Lower than the ids already
  // used: nothing changes.
  virtual absl::Status ReserveIdsThrough(int64_t id) = 0;

  // In one transaction: replaces the rows of `jobs` (each must exist: NOT_FOUND otherwise,
  // and nothing is written) and appends `events` (ALREADY_EXISTS if a (job_id, seq) is
  // already stored or repeated in `events`, and nothing is written). An event whose job does
  // not exist is NOT_FOUND, one with seq < 1 INVALID_ARGUMENT; nothing is written either way.
  // Meant for batches: hundreds of events per call cost little more than one (see
  // tests/server/job_store_test.cc, CommitThroughput, for measured rates).
  virtual absl::Status Commit(const std::vector<mpsd::v1::Job>& jobs,
                              const std::vector<mpsd::v1::JobEvent>& events) = 0;

  // NOT_FOUND for an unknown id.
  virtual absl::StatusOr<mpsd::v1::Job> GetJob(const std::string& id) const = 0;

  // All jobs, newest (highest id) first.
  virtual absl::StatusOr<std::vector<mpsd::v1::Job>> ListJobs() const = 0;

  // What ListJobsSkippingDamaged found.
  struct JobListing {
    // Every job that could be read, newest (highest id) first.
    std::vector<mpsd::v1::Job> jobs;
    // The ids of jobs whose rows cannot be read (a corrupt page, a blob that is not a Job), each
    // with its DATA_LOSS status, highest id first.
    std::vector<std::pair<std::string, absl::Status>> damaged;
  };

  // ListJobs for a database with damaged pages: when the scan of the whole table meets a
  // corrupt page, reads the jobs one by one (ids up to the highest the table or its sequence
  // can still tell), so that one damaged page costs the jobs stored on it, not all of them.
  // Errors: DATA_LOSS when not even the highest id can be read; the others as ListJobs.
  virtual absl::StatusOr<JobListing> ListJobsSkippingDamaged() const = 0;

  // Events of one job with seq > after_seq, ascending by seq, at most `limit` of them
  // (INVALID_ARGUMENT unless limit >= 1). An unknown job gives an empty list.
  virtual absl::StatusOr<std::vector<mpsd::v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                                     int64_t after_seq,
                                                                     int limit) const = 0;

  // Daemon-wide state kept across restarts (e.g. "queue_paused" -> "1"): the value stored under
  // `key`, or "" when none is. PutSetting replaces it, durably once it returns OK.
  virtual absl::StatusOr<std::string> GetSetting(const std::string& key) const = 0;
  virtual absl::Status PutSetting(const std::string& key, const std::string& value) = 0;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_JOB_STORE_H_
