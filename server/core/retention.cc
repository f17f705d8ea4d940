// Retention: a walk of the artifacts folder, the policy as a pure plan, deletion file by file.
#include "server/core/retention.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/job_id.h"
#include "api/job_state.h"
#include "google/protobuf/util/time_util.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace fs = std::filesystem;
namespace {

using mpsd::v1::DeleteArtifactsResponse;
using mpsd::v1::Job;
using Deleted = DeleteArtifactsResponse::Deleted;

constexpr absl::Duration kMeasureEvery = absl::Seconds(10);

// A file's identity: hard links (checkpoint-latest.pt is one of checkpoint-epoch-N.pt) are one
// file on disk and count once.
using FileId = std::pair<dev_t, ino_t>;

ArtifactUsage MeasureFolder(const fs::path& dir, std::set<FileId>& seen) {
  ArtifactUsage usage;
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(dir, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    struct stat info;
    if (lstat(it->path().c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    ++usage.files;
    if (seen.insert({info.st_dev, info.st_ino}).second) usage.bytes += info.st_size;
  }
  return usage;
}

absl::Time FinishedAt(const Job& job) {
  if (!job.has_finished_at()) return absl::InfinitePast();
  return absl::FromUnixMicros(
      google::protobuf::util::TimeUtil::TimestampToMicroseconds(job.finished_at()));
}

std::string Describe(const Job& job) {
  return absl::StrCat("job ", job.id(), " is ", Job::State_Name(job.state()));
}

}  // namespace

std::map<std::string, ArtifactUsage> MeasureArtifacts(const std::string& artifacts_dir) {
  std::map<std::string, ArtifactUsage> usage;
  std::set<FileId> seen;
  std::error_code error;
  for (auto it = fs::directory_iterator(artifacts_dir, error);
       !error && it != fs::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!api::IsJobId(name) || it->is_symlink(error) || !it->is_directory(error)) continue;
    usage[name] = MeasureFolder(it->path(), seen);
  }
  return usage;
}

std::string ResumedJobId(const std::string& resume_from, const std::string& artifacts_dir) {
  if (resume_from.empty() || artifacts_dir.empty()) return "";
  if (api::IsJobId(resume_from)) return resume_from;
  std::error_code error;
  const fs::path path = fs::weakly_canonical(resume_from, error);
  if (error) return "";
  const fs::path root = fs::weakly_canonical(artifacts_dir, error);
  if (error) return "";
  const fs::path relative = path.lexically_relative(root);
  if (relative.empty() || *relative.begin() == "..") return "";
  const std::string first = relative.begin()->string();
  return api::IsJobId(first) ? first : "";
}

std::map<std::string, std::string> NeededArtifacts(const std::vector<Job>& jobs,
                                                   const std::string& artifacts_dir) {
  std::map<std::string, std::string> needed;
  for (const Job& job : jobs) {
    if (api::IsTerminal(job.state())) continue;
    needed.emplace(job.id(), Describe(job));
    const std::string resumed = ResumedJobId(job.spec().train_job().resume_from(), artifacts_dir);
    if (!resumed.empty()) {
      needed.emplace(resumed, absl::StrCat("job ", job.id(), " (", Job::State_Name(job.state()),
                                           ") resumes from it"));
    }
    for (const std::string& after : job.spec().after()) {
      needed.emplace(after, absl::StrCat("job ", job.id(), " (", Job::State_Name(job.state()),
                                         ") waits for it"));
    }
    // An EvalJob's or PredictJob's model that is a job id runs that job's trained model.
    for (const std::string& model :
         {job.spec().eval_job().model(), job.spec().predict_job().model()}) {
      if (!api::IsJobId(model)) continue;
      needed.emplace(model, absl::StrCat("job ", job.id(), " (", Job::State_Name(job.state()),
                                         ") runs its model"));
    }
    // A BenchJob's models entry that is a job id times that job's trained model.
    for (const std::string& model : job.spec().bench_job().models()) {
      if (!api::IsJobId(model)) continue;
      needed.emplace(model, absl::StrCat("job ", job.id(), " (", Job::State_Name(job.state()),
                                         ") benchmarks its model"));
    }
  }
  return needed;
}

std::vector<Deleted> PlanRetention(const RetentionPolicy& policy, const std::vector<Job>& jobs,
                                   const std::map<std::string, ArtifactUsage>& usage,
                                   const std::map<std::string, std::string>& needed,
                                   absl::Time now) {
  std::vector<Deleted> plan;
  if (!policy.enabled()) return plan;
  // Finished jobs with artifacts that may go, newest first (ties: the higher id first).
  std::vector<const Job*> candidates;
  int64_t total = 0;
  for (const auto& [id, use] : usage) total += use.bytes;
  for (const Job& job : jobs) {
    auto use = usage.find(job.id());
    if (!api::IsTerminal(job.state()) || use == usage.end() || use->second.files == 0 ||
        needed.count(job.id()) > 0) {
      continue;
    }
    candidates.push_back(&job);
  }
  std::sort(candidates.begin(), candidates.end(), [](const Job* a, const Job* b) {
    const absl::Time ta = FinishedAt(*a), tb = FinishedAt(*b);
    if (ta != tb) return ta > tb;
    return api::ParseJobId(a->id()).value_or(0) > api::ParseJobId(b->id()).value_or(0);
  });
  std::vector<std::string> reasons(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (policy.keep_last_jobs > 0 && i >= static_cast<size_t>(policy.keep_last_jobs)) {
      reasons[i] = absl::StrCat("beyond the ", policy.keep_last_jobs, " most recent jobs");
    } else if (policy.max_age_days > 0 &&
               FinishedAt(*candidates[i]) < now - absl::Hours(24 * policy.max_age_days)) {
      reasons[i] = absl::StrCat("finished more than ", policy.max_age_days, " days ago");
    }
    if (!reasons[i].empty()) total -= usage.at(candidates[i]->id()).bytes;
  }
  // Over the byte budget: the oldest that are still kept go first.
  for (size_t i = candidates.size(); i-- > 0 && policy.max_bytes > 0 && total > policy.max_bytes;) {
    if (!reasons[i].empty()) continue;
    reasons[i] = absl::StrCat("over max_bytes ", policy.max_bytes);
    total -= usage.at(candidates[i]->id()).bytes;
  }
  for (size_t i = candidates.size(); i-- > 0;) {
    if (reasons[i].empty()) continue;
    Deleted deleted;
    deleted.set_job_id(candidates[i]->id());
    deleted.set_bytes(usage.at(candidates[i]->id()).bytes);
    deleted.set_files(usage.at(candidates[i]->id()).files);
    deleted.set_reason(reasons[i]);
    plan.push_back(std::move(deleted));
  }
  return plan;
}

absl::StatusOr<ArtifactUsage> DeleteJobArtifacts(const std::string& artifacts_dir,
                                                 const std::string& job_id) {
  ArtifactUsage deleted;
  const fs::path dir = fs::path(artifacts_dir) / job_id;
  std::error_code error;
  if (fs::is_symlink(dir, error) || !fs::is_directory(dir, error)) return deleted;
  // Children first: collect, then remove deepest paths first.
  std::vector<fs::directory_entry> entries;
  for (auto it = fs::recursive_directory_iterator(dir, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    entries.push_back(*it);
  }
  if (error) {
    return absl::InternalError(absl::StrCat(dir.string(), ": ", error.message()));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.path().native().size() > b.path().native().size();
  });
  for (const fs::directory_entry& entry : entries) {
    std::error_code e;
    struct stat info;
    const bool is_file = lstat(entry.path().c_str(), &info) == 0 && S_ISREG(info.st_mode);
    // Removing one of several hard links frees nothing; the last one frees the file.
    const int64_t size = is_file && info.st_nlink == 1 ? info.st_size : 0;
    if (!fs::remove(entry.path(), e) || e) {
      return absl::InternalError(
          absl::StrCat(entry.path().string(), ": cannot remove: ", e ? e.message() : "not there"));
    }
    if (is_file) {
      deleted.bytes += size;
      ++deleted.files;
    }
  }
  return deleted;
}

ArtifactRetention::ArtifactRetention(std::string artifacts_dir, RetentionPolicy policy)
    : artifacts_dir_(std::move(artifacts_dir)), policy_(policy) {}

ArtifactRetention::~ArtifactRetention() {
  {
    absl::MutexLock lock(&wake_mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ArtifactRetention::Start(std::function<std::vector<Job>()> jobs) {
  if (!policy_.enabled() || thread_.joinable()) return;
  {
    absl::MutexLock lock(&wake_mu_);
    pending_ = true;  // once at start
  }
  thread_ = std::thread([this, jobs = std::move(jobs)]() { Loop(jobs); });
}

void ArtifactRetention::JobEnded() {
  absl::MutexLock lock(&wake_mu_);
  pending_ = true;
}

void ArtifactRetention::Loop(std::function<std::vector<Job>()> jobs) {
  while (true) {
    {
      absl::MutexLock lock(&wake_mu_);
      auto wake = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) { return pending_ || stopping_; };
      wake_mu_.Await(absl::Condition(&wake));
      if (stopping_) return;
      pending_ = false;
    }
    absl::StatusOr<DeleteArtifactsResponse> applied = Apply(jobs(), absl::Now(), false);
    if (!applied.ok()) {
      spdlog::warn("artifacts_retention: {}", std::string(applied.status().message()));
    }
    // At most once a second, however fast jobs end; a stop still ends the wait at once.
    absl::MutexLock lock(&wake_mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) { return stopping_; };
    wake_mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Seconds(1));
  }
}

absl::StatusOr<DeleteArtifactsResponse> ArtifactRetention::Delete(
    const std::vector<std::string>& job_ids, const std::vector<Job>& jobs, bool dry_run) {
  const std::map<std::string, std::string> needed = NeededArtifacts(jobs, artifacts_dir_);
  absl::MutexLock lock(&mu_);
  const std::map<std::string, ArtifactUsage> usage = MeasureArtifacts(artifacts_dir_);
  // Each job once; a sweep stands for its trials (the sweep itself has no artifacts).
  std::vector<std::string> ids;
  std::map<std::string, std::string> reasons;  // id -> why, for each id in `ids`
  for (const std::string& id : job_ids) {
    auto job = std::find_if(jobs.begin(), jobs.end(), [&](const Job& j) { return j.id() == id; });
    if (job == jobs.end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
    if (auto why = needed.find(id); why != needed.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, "'s artifacts must stay: ", why->second));
    }
    if (job->kind() == Job::SWEEP) {
      for (const std::string& trial : job->trial_job_ids()) {
        if (reasons.emplace(trial, absl::StrCat("a trial of sweep ", id)).second) {
          ids.push_back(trial);
        }
      }
    } else if (reasons.emplace(id, "requested").second) {
      ids.push_back(id);
    }
  }
  std::vector<Deleted> plan;
  for (const std::string& id : ids) {
    if (auto why = needed.find(id); why != needed.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, "'s artifacts must stay: ", why->second));
    }
    Deleted deleted;
    deleted.set_job_id(id);
    if (auto use = usage.find(id); use != usage.end()) {
      deleted.set_bytes(use->second.bytes);
      deleted.set_files(use->second.files);
    }
    deleted.set_reason(reasons.at(id));
    plan.push_back(std::move(deleted));
  }
  return DeleteLocked(std::move(plan), dry_run);
}

absl::StatusOr<DeleteArtifactsResponse> ArtifactRetention::Apply(const std::vector<Job>& jobs,
                                                                 absl::Time now, bool dry_run) {
  if (!policy_.enabled()) {
    return absl::FailedPreconditionError(
        "this daemon has no artifacts_retention policy (keep_last_jobs, max_age_days or "
        "max_bytes in its config)");
  }
  const std::map<std::string, std::string> needed = NeededArtifacts(jobs, artifacts_dir_);
  absl::MutexLock lock(&mu_);
  std::vector<Deleted> plan =
      PlanRetention(policy_, jobs, MeasureArtifacts(artifacts_dir_), needed, now);
  return DeleteLocked(std::move(plan), dry_run);
}

absl::StatusOr<DeleteArtifactsResponse> ArtifactRetention::DeleteLocked(std::vector<Deleted> plan,
                                                                        bool dry_run) {
  DeleteArtifactsResponse response;
  for (Deleted& deleted : plan) {
    if (!dry_run && deleted.files() > 0) {
      absl::StatusOr<ArtifactUsage> removed = DeleteJobArtifacts(artifacts_dir_, deleted.job_id());
      if (!removed.ok()) {
        spdlog::warn("artifacts of job {}: {}", deleted.job_id(),
                     std::string(removed.status().message()));
        continue;
      }
      deleted.set_bytes(removed->bytes);
      deleted.set_files(removed->files);
      deleted_bytes_ += removed->bytes;
      measured_at_ = absl::InfinitePast();
      spdlog::info("deleted the artifacts of job {} ({} file{}, {} bytes freed): {}",
                   deleted.job_id(), removed->files, removed->files == 1 ? "" : "s", removed->bytes,
                   deleted.reason());
    }
    response.set_freed_bytes(response.freed_bytes() + deleted.bytes());
    *response.add_deleted() = std::move(deleted);
  }
  int64_t total = 0;
  for (const auto& [id, use] : MeasureArtifacts(artifacts_dir_)) total += use.bytes;
  measured_bytes_ = total;
  measured_at_ = absl::Now();
  response.set_artifacts_bytes(total);
  return response;
}

int64_t ArtifactRetention::ArtifactsBytes() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now - measured_at_ >= kMeasureEvery) {
    int64_t total = 0;
    for (const auto& [id, use] : MeasureArtifacts(artifacts_dir_)) total += use.bytes;
    measured_bytes_ = total;
    measured_at_ = now;
  }
  return measured_bytes_;
}

int64_t ArtifactRetention::DeletedBytes() const {
  absl::MutexLock lock(&mu_);
  return deleted_bytes_;
}

}  // namespace mpsd::server
