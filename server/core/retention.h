// Bounded disk use: which finished jobs' artifacts (<state_dir>/artifacts/<job_id>/) may go, by
// request (DeleteArtifacts, `mpsctl rm`) or by the daemon's retention policy (`artifacts_retention`
// in its config: keep the N most recent jobs' artifacts, those of jobs finished within D days, at
// most B bytes in all), and deleting them. A job's record and events stay; only its files go.
#ifndef MPSD_SERVER_CORE_RETENTION_H_
#define MPSD_SERVER_CORE_RETENTION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// The config's `artifacts_retention:` mapping. Every limit 0 = none; all 0 (the default) = no
// policy: nothing is deleted unless asked for.
struct RetentionPolicy {
  // Keep the artifacts of the N most recently finished jobs (by finished_at) that have any.
  int keep_last_jobs = 0;
  // Delete the artifacts of jobs that finished more than this many days ago.
  double max_age_days = 0;
  // Delete the oldest finished jobs' artifacts until all artifacts fit in this many bytes.
  int64_t max_bytes = 0;

  bool enabled() const { return keep_last_jobs > 0 || max_age_days > 0 || max_bytes > 0; }
};

// Bytes and regular files under one job's artifact folder; a file with several hard links
// (checkpoint-latest.pt and checkpoint-epoch-N.pt) counts its bytes once.
struct ArtifactUsage {
  int64_t bytes = 0;
  int32_t files = 0;
};

// Usage per job id of every job folder under `artifacts_dir` (folders whose names are job ids;
// symbolic links are neither followed nor counted). An absent folder: none.
std::map<std::string, ArtifactUsage> MeasureArtifacts(const std::string& artifacts_dir);

// The job whose artifacts a train_job.resume_from reads: the job id itself, or the <id> of a
// path inside <artifacts_dir>/<id>/ (links and ".." resolved); "" for anything else.
std::string ResumedJobId(const std::string& resume_from, const std::string& artifacts_dir);

// Job id -> why its artifacts must stay: every unfinished job ("job N is RUNNING"), and every job
// that an unfinished job names in train_job.resume_from, after or bench_job.models ("job M
// resumes from it").
std::map<std::string, std::string> NeededArtifacts(const std::vector<mpsd::v1::Job>& jobs,
                                                   const std::string& artifacts_dir);

// The deletions `policy` asks for, oldest finished job first: among finished jobs with
// artifacts that are not needed (NeededArtifacts), those beyond the keep_last_jobs most recent,
// then those finished before now - max_age_days, then the oldest remaining until the total of
// `usage` fits max_bytes (needed jobs' bytes count towards the total but are never chosen).
// Pure: reads and deletes nothing.
std::vector<mpsd::v1::DeleteArtifactsResponse::Deleted> PlanRetention(
    const RetentionPolicy& policy, const std::vector<mpsd::v1::Job>& jobs,
    const std::map<std::string, ArtifactUsage>& usage,
    const std::map<std::string, std::string>& needed, absl::Time now);

// Deletes everything inside <artifacts_dir>/<job_id>/ (links themselves, never what they point
// to) and keeps the folder: its presence tells a daemon started over a lost database that the
// id was used (server/core/state_dir.h: HighestArtifactJobId). Returns what was deleted;
// INTERNAL naming the file that could not be removed (what went before it stays deleted).
absl::StatusOr<ArtifactUsage> DeleteJobArtifacts(const std::string& artifacts_dir,
                                                 const std::string& job_id);

// Serialises deletions and keeps the figures ServerStatus and /metrics report; with a policy,
// applies it on a thread of its own at Start and after every JobEnded. Thread-safe; a deletion
// holds the object's lock while it removes files (other callers wait).
class ArtifactRetention {
 public:
  ArtifactRetention(std::string artifacts_dir, RetentionPolicy policy);
  // Stops the thread.
  ~ArtifactRetention();
  ArtifactRetention(const ArtifactRetention&) = delete;
  ArtifactRetention& operator=(const ArtifactRetention&) = delete;

  // With a policy: starts the thread, which applies it now and after each JobEnded (at most
  // once a second), over the jobs `jobs` returns (the scheduler's; called on that thread,
  // never under this object's lock). Without a policy: does nothing.
  void Start(std::function<std::vector<mpsd::v1::Job>()> jobs);
  // A job finished: the policy runs again soon. Quick; callable under other locks (the
  // scheduler's event hook).
  void JobEnded();

  const RetentionPolicy& policy() const { return policy_; }

  // Deletes the artifacts of `job_ids` (each must be finished and not needed by `jobs`, the
  // scheduler's jobs now; nothing is deleted if one is refused): FAILED_PRECONDITION naming the
  // job and why it must stay, NOT_FOUND for an id not in `jobs`. Each job once however often it
  // is named; a sweep stands for its trials. Bytes count each file once (hard links: one file),
  // and a deletion frees only files whose last link it removes.
  absl::StatusOr<mpsd::v1::DeleteArtifactsResponse> Delete(const std::vector<std::string>& job_ids,
                                                           const std::vector<mpsd::v1::Job>& jobs,
                                                           bool dry_run);
  // Applies the policy over `jobs` at `now` (FAILED_PRECONDITION when there is none). Files that
  // cannot be removed are logged and skipped.
  absl::StatusOr<mpsd::v1::DeleteArtifactsResponse> Apply(const std::vector<mpsd::v1::Job>& jobs,
                                                          absl::Time now, bool dry_run);

  // Bytes under the artifacts folder, measured again when the last figure is older than 10 s or
  // a deletion happened since.
  int64_t ArtifactsBytes();
  // Bytes deleted since this object was made.
  int64_t DeletedBytes() const;

 private:
  absl::StatusOr<mpsd::v1::DeleteArtifactsResponse> DeleteLocked(
      std::vector<mpsd::v1::DeleteArtifactsResponse::Deleted> plan, bool dry_run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void Loop(std::function<std::vector<mpsd::v1::Job>()> jobs);

  const std::string artifacts_dir_;
  const RetentionPolicy policy_;
  // The thread's wake-ups, apart from mu_ so that JobEnded never waits for a deletion.
  absl::Mutex wake_mu_;
  bool pending_ ABSL_GUARDED_BY(wake_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::thread thread_;
  mutable absl::Mutex mu_;
  int64_t deleted_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t measured_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time measured_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_RETENTION_H_
