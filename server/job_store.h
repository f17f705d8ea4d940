// Durable storage of jobs and their events in SQLite (WAL mode) under the daemon's state dir.
// Jobs and events are stored as serialized protos, with the columns needed to find them.
#ifndef MPSD_SERVER_JOB_STORE_H_
#define MPSD_SERVER_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Thread-safe: every method may be called from any thread (one connection, serialised by a
// mutex inside). Errors from SQLite come back as INTERNAL (or DATA_LOSS for a corrupt file)
// with SQLite's message and the database path.
class JobStore {
 public:
  struct Options {
    // The database file, e.g. "<state-dir>/mpsd.db". Created with its schema if missing.
    std::string path;
  };

  // Opens or creates the database, sets WAL mode and synchronous=NORMAL, creates the schema.
  // Errors: INTERNAL if the file cannot be opened; DATA_LOSS if it is not a database or its
  // schema is not ours.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const Options& options);

  virtual ~JobStore() = default;

  // Stores a new job under the next id: "1", "2", … in decimal, never reused, also across
  // restarts. `job.id` is ignored. Returns the job with its id set.
  virtual absl::StatusOr<mpsd::v1::Job> InsertJob(mpsd::v1::Job job) = 0;

  // In one transaction: replaces the rows of `jobs` (each must exist: NOT_FOUND otherwise,
  // and nothing is written) and appends `events` (ALREADY_EXISTS if a (job_id, seq) is
  // already stored, and nothing is written).
  virtual absl::Status Commit(const std::vector<mpsd::v1::Job>& jobs,
                              const std::vector<mpsd::v1::JobEvent>& events) = 0;

  // NOT_FOUND for an unknown id.
  virtual absl::StatusOr<mpsd::v1::Job> GetJob(const std::string& id) const = 0;

  // All jobs, newest (highest id) first.
  virtual absl::StatusOr<std::vector<mpsd::v1::Job>> ListJobs() const = 0;

  // Events of one job with seq > after_seq, ascending by seq, at most `limit` of them.
  // An unknown job gives an empty list.
  virtual absl::StatusOr<std::vector<mpsd::v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                                     int64_t after_seq,
                                                                     int limit) const = 0;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_JOB_STORE_H_
