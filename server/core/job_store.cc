// JobStore on the raw SQLite C API: one connection in WAL mode, cached prepared statements, one
// transaction per write call. Schema and the mapping of SQLite errors to absl codes live here.
#include "server/core/job_store.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/job_id.h"

namespace mpsd::server {
namespace {

using ::mpsd::v1::Job;
using ::mpsd::v1::JobEvent;

// PRAGMA user_version of the schema this code writes. A newer file is refused, not guessed at.
constexpr int kSchemaVersion = 2;

// How long a statement waits for a lock held by another connection (e.g. the sqlite3 shell or a
// backup) before failing with SQLITE_BUSY.
constexpr int kBusyTimeoutMs = 5000;

}  // namespace

std::string SalvageCommand(const std::string& path, const std::string& salvaged) {
  return absl::StrCat("sqlite3 ", path, " .dump | sed 's/^ROLLBACK; -- due to errors$/COMMIT;/' | ",
                      "sqlite3 ", salvaged, " && sqlite3 ", salvaged,
                      " 'PRAGMA user_version = ", kSchemaVersion, "'");
}

namespace {

// Migration i takes a database from user_version i to i + 1; each runs inside the transaction
// that also bumps user_version, so a crash never leaves half a migration.
constexpr const char* kMigrations[kSchemaVersion] = {
    // 0 -> 1. AUTOINCREMENT so that ids are never reused, even after the newest job is deleted.
    // kind, state and created_at mirror the blob so that queries can filter and sort on them.
    R"sql(
      CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind INTEGER NOT NULL,
        state INTEGER NOT NULL,
        created_at INTEGER NOT NULL,  -- unix microseconds
        job BLOB NOT NULL             -- serialized mpsd.v1.Job
      );
      CREATE TABLE events (
        job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        event BLOB NOT NULL,          -- serialized mpsd.v1.JobEvent
        PRIMARY KEY (job_id, seq)
      ) WITHOUT ROWID;
    )sql",
    // 1 -> 2. name mirrors the blob's spec.name (ListJobs filters on it); rows stored before
    // have no name. settings holds daemon-wide state that survives restarts (the queue's
    // pause).
    R"sql(
      ALTER TABLE jobs ADD COLUMN name TEXT NOT NULL DEFAULT '';
      CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
      ) WITHOUT ROWID;
    )sql",
};

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// ENOSPC, EDQUOT and EFBIG (RLIMIT_FSIZE) under SQLite's I/O errors: the disk is full too.
bool OutOfSpace(int system_errno) {
  return system_errno == ENOSPC || system_errno == EDQUOT || system_errno == EFBIG;
}

absl::StatusCode CodeForSqlite(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "<what>: <SQLite's message> (SQLite error <rc>, database <path>)". The message comes from the
// connection when there is one: it is more specific than sqlite3_errstr (e.g. the column of a
// failed constraint).
// The errno behind SQLite's last I/O error: sqlite3_system_errno is errno when SQLite looked,
// often overwritten by then, so the files' own records are asked too (the database's, and the
// WAL's, where a commit writes).
int LastIoErrno(sqlite3* db) {
  const int system_errno = sqlite3_system_errno(db);
  if (OutOfSpace(system_errno)) return system_errno;
  int file_errno = 0;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_LAST_ERRNO, &file_errno) == SQLITE_OK &&
      OutOfSpace(file_errno)) {
    return file_errno;
  }
  sqlite3_file* journal = nullptr;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &journal) == SQLITE_OK &&
      journal != nullptr && journal->pMethods != nullptr &&
      journal->pMethods->xFileControl(journal, SQLITE_FCNTL_LAST_ERRNO, &file_errno) == SQLITE_OK &&
      OutOfSpace(file_errno)) {
    return file_errno;
  }
  return system_errno;
}

absl::Status SqliteError(sqlite3* db, int rc, absl::string_view path, absl::string_view what) {
  const char* message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const int system_errno = db != nullptr && (rc & 0xff) == SQLITE_IOERR ? LastIoErrno(db) : 0;
  if ((rc & 0xff) == SQLITE_FULL || ((rc & 0xff) == SQLITE_IOERR && OutOfSpace(system_errno))) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": ", message,
        system_errno != 0 ? absl::StrCat(" (", strerror(system_errno), ")") : "",
        ": the file system holding ", path,
        " is full or a file size limit was reached; nothing was written by this call (SQLite "
        "error ",
        rc, ")"));
  }
  return absl::Status(CodeForSqlite(rc), absl::StrCat(what, ": ", message, " (SQLite error ", rc,
                                                      ", database ", path, ")"));
}

int64_t CreatedAtMicros(const Job& job) {
  return job.created_at().seconds() * 1000000 + job.created_at().nanos() / 1000;
}

// Resets a cached statement when it leaves scope, so that a SELECT never keeps its read snapshot
// open (which would hold back WAL checkpoints) and the next use starts clean.
class ScopedReset {
 public:
  explicit ScopedReset(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ScopedReset(const ScopedReset&) = delete;
  ScopedReset& operator=(const ScopedReset&) = delete;
  ~ScopedReset() { sqlite3_reset(stmt_); }

 private:
  sqlite3_stmt* stmt_;
};

class SqliteJobStore final : public JobStore {
 public:
  SqliteJobStore(std::string path, DbPtr db) : path_(std::move(path)), db_(std::move(db)) {}

  // Prepares the cached statements; the schema must already be in place.
  absl::Status PrepareStatements() ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<Job> InsertJob(Job job) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ReserveIdsThrough(int64_t id) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Commit(const std::vector<Job>& jobs, const std::vector<JobEvent>& events) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<Job> GetJob(const std::string& id) const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::vector<Job>> ListJobs() const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<JobListing> ListJobsSkippingDamaged() const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::vector<JobEvent>> ReadEvents(const std::string& job_id, int64_t after_seq,
                                                   int limit) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::string> GetSetting(const std::string& key) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status PutSetting(const std::string& key, const std::string& value) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // BEGIN IMMEDIATE on construction (Begin()), ROLLBACK on destruction unless Commit() succeeded.
  // IMMEDIATE takes the write lock up front, so a transaction never fails half-way with BUSY.
  class Transaction;

  absl::Status Error(int rc, absl::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return SqliteError(db_.get(), rc, path_, what);
  }
  absl::Status Prepare(const char* sql, StmtPtr* stmt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a statement that returns no rows (BEGIN, COMMIT, ROLLBACK) and resets it.
  absl::Status StepDone(sqlite3_stmt* stmt, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Binds `message`, serialized into scratch_, as a blob parameter.
  absl::Status BindProto(sqlite3_stmt* stmt, int index, const google::protobuf::Message& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UpdateJob(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AppendEvent(const JobEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The highest job id that max(id) or sqlite_sequence can still tell; DATA_LOSS if neither.
  absl::StatusOr<int64_t> HighestId() const ABSL_LOCKS_EXCLUDED(mu_);
  // Parses the current row of a `SELECT id, job` statement.
  absl::StatusOr<Job> ParseJobRow(sqlite3_stmt* stmt) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string path_;

  mutable absl::Mutex mu_;
  // Guarded by mu_. The connection is opened with SQLITE_OPEN_NOMUTEX: mu_ is its only lock.
  // Declared before the statements so that it is closed after they are finalized.
  DbPtr db_ ABSL_GUARDED_BY(mu_);
  StmtPtr begin_ ABSL_GUARDED_BY(mu_);
  StmtPtr commit_ ABSL_GUARDED_BY(mu_);
  StmtPtr rollback_ ABSL_GUARDED_BY(mu_);
  StmtPtr insert_job_ ABSL_GUARDED_BY(mu_);
  StmtPtr set_job_blob_ ABSL_GUARDED_BY(mu_);
  StmtPtr update_job_ ABSL_GUARDED_BY(mu_);
  StmtPtr insert_event_ ABSL_GUARDED_BY(mu_);
  StmtPtr get_job_ ABSL_GUARDED_BY(mu_);
  StmtPtr list_jobs_ ABSL_GUARDED_BY(mu_);
  StmtPtr read_events_ ABSL_GUARDED_BY(mu_);
  StmtPtr get_setting_ ABSL_GUARDED_BY(mu_);
  StmtPtr put_setting_ ABSL_GUARDED_BY(mu_);
  // Reused serialization buffer: blobs are bound SQLITE_STATIC from it, so it must outlive each
  // step, and reusing it saves an allocation per event.
  std::string scratch_ ABSL_GUARDED_BY(mu_);
};

class SqliteJobStore::Transaction {
 public:
  explicit Transaction(SqliteJobStore& store) ABSL_EXCLUSIVE_LOCKS_REQUIRED(store.mu_)
      : store_(store) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  ~Transaction() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // SQLite may already have rolled back on its own (e.g. SQLITE_FULL); autocommit tells.
    if (open_ && !sqlite3_get_autocommit(store_.db_.get())) {
      sqlite3_step(store_.rollback_.get());
      sqlite3_reset(store_.rollback_.get());
    }
  }

  absl::Status Begin() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::Status status = store_.StepDone(store_.begin_.get(), "BEGIN IMMEDIATE");
    open_ = status.ok();
    return status;
  }

  absl::Status Commit() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::Status status = store_.StepDone(store_.commit_.get(), "COMMIT");
    if (status.ok()) open_ = false;
    return status;
  }

 private:
  SqliteJobStore& store_;
  bool open_ = false;
};

absl::Status SqliteJobStore::Prepare(const char* sql, StmtPtr* stmt) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v3(db_.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  stmt->reset(raw);
  if ((rc & 0xff) == SQLITE_ERROR) {
    // "no such table" and the like: the file claims our schema version but lacks our tables.
    return absl::DataLossError(absl::StrCat(
        "database ", path_, " does not have the expected schema: ", sqlite3_errmsg(db_.get()),
        " in \"", sql, "\""));
  }
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("preparing \"", sql, "\""));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::PrepareStatements() {
  absl::MutexLock lock(&mu_);
  const std::pair<const char*, StmtPtr*> statements[] = {
      {"BEGIN IMMEDIATE", &begin_},
      {"COMMIT", &commit_},
      {"ROLLBACK", &rollback_},
      {"INSERT INTO jobs (kind, state, created_at, job, name) VALUES (?1, ?2, ?3, ?4, ?5)",
       &insert_job_},
      {"UPDATE jobs SET job = ?2 WHERE id = ?1", &set_job_blob_},
      {"UPDATE jobs SET kind = ?2, state = ?3, created_at = ?4, job = ?5, name = ?6 WHERE id = ?1",
       &update_job_},
      {"SELECT value FROM settings WHERE key = ?1", &get_setting_},
      {"INSERT INTO settings (key, value) VALUES (?1, ?2) "
       "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
       &put_setting_},
      {"INSERT INTO events (job_id, seq, event) VALUES (?1, ?2, ?3)", &insert_event_},
      {"SELECT id, job FROM jobs WHERE id = ?1", &get_job_},
      {"SELECT id, job FROM jobs ORDER BY id DESC", &list_jobs_},
      {"SELECT event FROM events WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
       &read_events_},
  };
  for (const auto& [sql, stmt] : statements) {
    absl::Status status = Prepare(sql, stmt);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::StepDone(sqlite3_stmt* stmt, absl::string_view what) {
  ScopedReset reset(stmt);
  int rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) return Error(rc, what);
  return absl::OkStatus();
}

absl::Status SqliteJobStore::BindProto(sqlite3_stmt* stmt, int index,
                                       const google::protobuf::Message& message) {
  if (!message.SerializeToString(&scratch_)) {
    return absl::InternalError(
        absl::StrCat("cannot serialize ", message.GetTypeName(), " for database ", path_));
  }
  int rc = sqlite3_bind_blob64(stmt, index, scratch_.data(), scratch_.size(), SQLITE_STATIC);
  if (rc != SQLITE_OK) return Error(rc, "binding a blob");
  return absl::OkStatus();
}

absl::StatusOr<Job> SqliteJobStore::ParseJobRow(sqlite3_stmt* stmt) const {
  Job job;
  const void* data = sqlite3_column_blob(stmt, 1);
  int size = sqlite3_column_bytes(stmt, 1);
  if (!job.ParseFromArray(data, size)) {
    return absl::DataLossError(absl::StrCat("database ", path_, ": the stored job ",
                                            sqlite3_column_int64(stmt, 0),
                                            " is not a valid mpsd.v1.Job"));
  }
  return job;
}

absl::StatusOr<Job> SqliteJobStore::InsertJob(Job job) {
  if (!job.has_created_at()) {
    const int64_t now = absl::ToUnixMicros(absl::Now());
    job.mutable_created_at()->set_seconds(now / 1000000);
    job.mutable_created_at()->set_nanos(static_cast<int32_t>(now % 1000000) * 1000);
  }
  job.clear_id();

  absl::MutexLock lock(&mu_);
  Transaction txn(*this);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  // The id is the row id SQLite picks, so the blob is written once without it and once with it,
  // both inside this transaction.
  sqlite3_stmt* insert = insert_job_.get();
  {
    ScopedReset reset(insert);
    sqlite3_bind_int(insert, 1, job.kind());
    sqlite3_bind_int(insert, 2, job.state());
    sqlite3_bind_int64(insert, 3, CreatedAtMicros(job));
    if (absl::Status s = BindProto(insert, 4, job); !s.ok()) return s;
    sqlite3_bind_text(insert, 5, job.spec().name().data(),
                      static_cast<int>(job.spec().name().size()), SQLITE_STATIC);
    int rc = sqlite3_step(insert);
    if (rc != SQLITE_DONE) return Error(rc, "inserting a job");
  }
  const int64_t row_id = sqlite3_last_insert_rowid(db_.get());
  job.set_id(absl::StrCat(row_id));
  sqlite3_stmt* set_blob = set_job_blob_.get();
  {
    ScopedReset reset(set_blob);
    sqlite3_bind_int64(set_blob, 1, row_id);
    if (absl::Status s = BindProto(set_blob, 2, job); !s.ok()) return s;
    int rc = sqlite3_step(set_blob);
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("storing job ", row_id));
  }
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  return job;
}

absl::Status SqliteJobStore::ReserveIdsThrough(int64_t id) {
  if (id <= 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  Transaction txn(*this);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  // AUTOINCREMENT continues above max(sqlite_sequence.seq, max(rowid)); the row for "jobs"
  // exists only once a job was inserted.
  const std::string sql =
      absl::StrCat("UPDATE sqlite_sequence SET seq = max(seq, ", id,
                   ") WHERE name = 'jobs';"
                   "INSERT INTO sqlite_sequence (name, seq) SELECT 'jobs', ",
                   id, " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'jobs');");
  char* message = nullptr;
  const int rc = sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, &message);
  sqlite3_free(message);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("reserving job ids through ", id));
  return txn.Commit();
}

absl::Status SqliteJobStore::UpdateJob(const Job& job) {
  const std::optional<int64_t> row_id = api::ParseJobId(job.id());
  if (!row_id.has_value()) {
    return absl::NotFoundError(absl::StrCat("no job \"", job.id(), "\""));
  }
  sqlite3_stmt* update = update_job_.get();
  ScopedReset reset(update);
  sqlite3_bind_int64(update, 1, *row_id);
  sqlite3_bind_int(update, 2, job.kind());
  sqlite3_bind_int(update, 3, job.state());
  sqlite3_bind_int64(update, 4, CreatedAtMicros(job));
  if (absl::Status s = BindProto(update, 5, job); !s.ok()) return s;
  sqlite3_bind_text(update, 6, job.spec().name().data(), static_cast<int>(job.spec().name().size()),
                    SQLITE_STATIC);
  int rc = sqlite3_step(update);
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("updating job ", job.id()));
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("no job ", job.id()));
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::AppendEvent(const JobEvent& event) {
  const std::optional<int64_t> row_id = api::ParseJobId(event.job_id());
  if (!row_id.has_value()) {
    return absl::NotFoundError(absl::StrCat("event for unknown job \"", event.job_id(), "\""));
  }
  if (event.seq() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("event of job ", event.job_id(), " has seq ", event.seq(), "; must be >= 1"));
  }
  sqlite3_stmt* insert = insert_event_.get();
  ScopedReset reset(insert);
  sqlite3_bind_int64(insert, 1, *row_id);
  sqlite3_bind_int64(insert, 2, event.seq());
  if (absl::Status s = BindProto(insert, 3, event); !s.ok()) return s;
  int rc = sqlite3_step(insert);
  if (rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
    return absl::AlreadyExistsError(
        absl::StrCat("event ", event.seq(), " of job ", event.job_id(), " is already stored"));
  }
  if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
    return absl::NotFoundError(absl::StrCat("event for unknown job ", event.job_id()));
  }
  if (rc != SQLITE_DONE) {
    return Error(rc, absl::StrCat("storing event ", event.seq(), " of job ", event.job_id()));
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::Commit(const std::vector<Job>& jobs,
                                    const std::vector<JobEvent>& events) {
  if (jobs.empty() && events.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  Transaction txn(*this);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  for (const Job& job : jobs) {
    if (absl::Status s = UpdateJob(job); !s.ok()) return s;
  }
  for (const JobEvent& event : events) {
    if (absl::Status s = AppendEvent(event); !s.ok()) return s;
  }
  return txn.Commit();
}

absl::StatusOr<Job> SqliteJobStore::GetJob(const std::string& id) const {
  const std::optional<int64_t> row_id = api::ParseJobId(id);
  if (!row_id.has_value()) return absl::NotFoundError(absl::StrCat("no job \"", id, "\""));
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* select = get_job_.get();
  ScopedReset reset(select);
  sqlite3_bind_int64(select, 1, *row_id);
  int rc = sqlite3_step(select);
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no job ", id));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("reading job ", id));
  return ParseJobRow(select);
}

absl::StatusOr<std::vector<Job>> SqliteJobStore::ListJobs() const {
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* select = list_jobs_.get();
  ScopedReset reset(select);
  std::vector<Job> jobs;
  int rc;
  while ((rc = sqlite3_step(select)) == SQLITE_ROW) {
    absl::StatusOr<Job> job = ParseJobRow(select);
    if (!job.ok()) return job.status();
    jobs.push_back(*std::move(job));
  }
  if (rc != SQLITE_DONE) return Error(rc, "listing jobs");
  return jobs;
}

absl::StatusOr<int64_t> SqliteJobStore::HighestId() const {
  absl::MutexLock lock(&mu_);
  int64_t highest = -1;
  absl::Status last_error;
  for (const char* sql :
       {"SELECT max(id) FROM jobs", "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'"}) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_.get(), sql, -1, &raw, nullptr);
    StmtPtr stmt(raw);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_ROW) {
      highest = std::max<int64_t>(highest, sqlite3_column_int64(stmt.get(), 0));
    } else if (rc != SQLITE_DONE) {
      last_error = Error(rc, absl::StrCat("running \"", sql, "\""));
    }
  }
  if (highest < 0) {
    return absl::DataLossError(absl::StrCat(
        "database ", path_, ": cannot tell how many jobs it holds: ", last_error.message()));
  }
  return highest;
}

absl::StatusOr<JobStore::JobListing> SqliteJobStore::ListJobsSkippingDamaged() const {
  JobListing listing;
  absl::StatusOr<std::vector<Job>> all = ListJobs();
  if (all.ok()) {
    listing.jobs = *std::move(all);
    return listing;
  }
  if (all.status().code() != absl::StatusCode::kDataLoss) return all.status();
  absl::StatusOr<int64_t> highest = HighestId();
  if (!highest.ok()) return highest.status();
  for (int64_t id = *highest; id >= 1; --id) {
    const std::string key = absl::StrCat(id);
    absl::StatusOr<Job> job = GetJob(key);
    if (job.ok()) {
      listing.jobs.push_back(*std::move(job));
    } else if (job.status().code() == absl::StatusCode::kDataLoss) {
      listing.damaged.emplace_back(key, job.status());
    } else if (job.status().code() != absl::StatusCode::kNotFound) {
      return job.status();
    }
  }
  return listing;
}

absl::StatusOr<std::vector<JobEvent>> SqliteJobStore::ReadEvents(const std::string& job_id,
                                                                 int64_t after_seq,
                                                                 int limit) const {
  if (limit < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadEvents limit is ", limit, "; must be >= 1"));
  }
  const std::optional<int64_t> row_id = api::ParseJobId(job_id);
  if (!row_id.has_value()) return std::vector<JobEvent>();
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* select = read_events_.get();
  ScopedReset reset(select);
  sqlite3_bind_int64(select, 1, *row_id);
  sqlite3_bind_int64(select, 2, after_seq);
  sqlite3_bind_int(select, 3, limit);
  std::vector<JobEvent> events;
  int rc;
  while ((rc = sqlite3_step(select)) == SQLITE_ROW) {
    JobEvent& event = events.emplace_back();
    if (!event.ParseFromArray(sqlite3_column_blob(select, 0), sqlite3_column_bytes(select, 0))) {
      return absl::DataLossError(absl::StrCat("database ", path_, ": a stored event of job ",
                                              job_id, " is not a valid mpsd.v1.JobEvent"));
    }
  }
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("reading events of job ", job_id));
  return events;
}

absl::StatusOr<std::string> SqliteJobStore::GetSetting(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* select = get_setting_.get();
  ScopedReset reset(select);
  sqlite3_bind_text(select, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
  const int rc = sqlite3_step(select);
  if (rc == SQLITE_DONE) return std::string();
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("reading setting ", key));
  const unsigned char* text = sqlite3_column_text(select, 0);
  return std::string(text != nullptr ? reinterpret_cast<const char*>(text) : "");
}

absl::Status SqliteJobStore::PutSetting(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* upsert = put_setting_.get();
  ScopedReset reset(upsert);
  sqlite3_bind_text(upsert, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
  sqlite3_bind_text(upsert, 2, value.data(), static_cast<int>(value.size()), SQLITE_STATIC);
  const int rc = sqlite3_step(upsert);
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("storing setting ", key));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Opening: connection settings, schema version check, migrations.

absl::Status Exec(sqlite3* db, const std::string& path, const char* sql) {
  char* message = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &message);
  sqlite3_free(message);  // sqlite3_errmsg(db) holds the same text.
  if (rc != SQLITE_OK) return SqliteError(db, rc, path, absl::StrCat("running \"", sql, "\""));
  return absl::OkStatus();
}

// Runs a statement that returns one row and gives its first column as text.
absl::StatusOr<std::string> QueryText(sqlite3* db, const std::string& path, const char* sql) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  StmtPtr stmt(raw);
  if (rc != SQLITE_OK) return SqliteError(db, rc, path, absl::StrCat("preparing \"", sql, "\""));
  rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_ROW) return SqliteError(db, rc, path, absl::StrCat("running \"", sql, "\""));
  const unsigned char* text = sqlite3_column_text(stmt.get(), 0);
  return std::string(text != nullptr ? reinterpret_cast<const char*>(text) : "");
}

absl::StatusOr<int> UserVersion(sqlite3* db, const std::string& path) {
  absl::StatusOr<std::string> text = QueryText(db, path, "PRAGMA user_version");
  if (!text.ok()) return text.status();
  int version = 0;
  if (!absl::SimpleAtoi(*text, &version)) {
    return absl::InternalError(
        absl::StrCat("database ", path, ": PRAGMA user_version returned \"", *text, "\""));
  }
  return version;
}

absl::Status CheckNotNewer(int version, const std::string& path) {
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", path, " has schema version ", version, " but this mpsd knows versions up to ",
        kSchemaVersion, "; it was written by a newer mpsd. Run that mpsd, or move the file away"));
  }
  return absl::OkStatus();
}

// Brings the schema to kSchemaVersion in one transaction. A version-0 file must be empty: one
// with tables in it belongs to some other program.
absl::Status Migrate(sqlite3* db, const std::string& path) {
  if (absl::Status s = Exec(db, path, "BEGIN IMMEDIATE"); !s.ok()) return s;
  absl::Status status = [&]() -> absl::Status {
    // Read again under the write lock: another process may have migrated in the meantime.
    absl::StatusOr<int> version = UserVersion(db, path);
    if (!version.ok()) return version.status();
    if (absl::Status s = CheckNotNewer(*version, path); !s.ok()) return s;
    if (*version == 0) {
      absl::StatusOr<std::string> tables =
          QueryText(db, path, "SELECT count(*) FROM sqlite_schema");
      if (!tables.ok()) return tables.status();
      if (*tables != "0") {
        return absl::DataLossError(
            absl::StrCat("database ", path,
                         " has tables but no mpsd schema version: it is not an mpsd job "
                         "store"));
      }
    }
    if (*version > 0 && *version < kSchemaVersion) {
      absl::StatusOr<std::string> jobs = QueryText(
          db, path, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'jobs'");
      if (!jobs.ok()) return jobs.status();
      if (*jobs != "1") {
        return absl::DataLossError(
            absl::StrCat("database ", path, " has mpsd schema version ", *version,
                         " but does not have the expected schema: no table jobs"));
      }
    }
    for (int v = *version; v < kSchemaVersion; ++v) {
      if (absl::Status s = Exec(db, path, kMigrations[v]); !s.ok()) return s;
    }
    if (*version != kSchemaVersion) {
      const std::string set_version = absl::StrCat("PRAGMA user_version = ", kSchemaVersion);
      if (absl::Status s = Exec(db, path, set_version.c_str()); !s.ok()) return s;
    }
    return Exec(db, path, "COMMIT");
  }();
  if (!status.ok() && !sqlite3_get_autocommit(db)) Exec(db, path, "ROLLBACK").IgnoreError();
  return status;
}

absl::Status Configure(sqlite3* db, const std::string& path) {
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (absl::Status s = Exec(db, path, "PRAGMA foreign_keys = ON"); !s.ok()) return s;
  // The first read of the file: a file that is not a database fails here with DATA_LOSS, and a
  // newer schema is refused before anything is written (WAL mode is a write to the header).
  absl::StatusOr<int> version = UserVersion(db, path);
  if (!version.ok()) return version.status();
  if (absl::Status s = CheckNotNewer(*version, path); !s.ok()) return s;

  absl::StatusOr<std::string> mode = QueryText(db, path, "PRAGMA journal_mode = WAL");
  if (!mode.ok()) return mode.status();
  if (absl::AsciiStrToLower(*mode) != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", path, ": cannot use WAL mode (journal_mode stays \"", *mode,
                     "\"); the state dir must be on a local file system"));
  }
  // In WAL mode NORMAL syncs only at checkpoints: a commit survives a crash of mpsd, and may be
  // lost (never corrupted) on power loss.
  return Exec(db, path, "PRAGMA synchronous = NORMAL");
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const Options& options) {
  const std::string& path = options.path;
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr db(raw);
  if (rc != SQLITE_OK) {
    // CANTOPEN and friends: a missing directory, no permission. Not the file's content.
    return absl::InternalError(absl::StrCat(
        "cannot open database ", path, ": ",
        raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc), " (SQLite error ", rc, ")"));
  }
  if (absl::Status s = Configure(db.get(), path); !s.ok()) return s;
  if (absl::Status s = Migrate(db.get(), path); !s.ok()) return s;
  auto store = std::make_unique<SqliteJobStore>(path, std::move(db));
  if (absl::Status s = store->PrepareStatements(); !s.ok()) return s;
  return store;
}

}  // namespace mpsd::server
