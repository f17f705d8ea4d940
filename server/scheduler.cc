// Scheduler: one priority queue, one executor thread, every state change and metric an event.
#include "server/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/failure_reason.h"
#include "api/job_id.h"
#include "api/job_state.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;

// Microsecond resolution: protobuf 3.21's TimeUtil::GetCurrentTime() has whole seconds.
google::protobuf::Timestamp Now() {
  return google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(absl::Now()));
}

Job::Kind KindOf(const mpsd::v1::SubmitJobRequest& request) {
  switch (request.spec_case()) {
    case mpsd::v1::SubmitJobRequest::kTrainJob:
      return Job::TRAIN_JOB;
    case mpsd::v1::SubmitJobRequest::kBenchJob:
      return Job::BENCH_JOB;
    default:
      return Job::KIND_UNSPECIFIED;
  }
}

// Job ids are decimal row ids ("1", "2", …); 0 for anything else.
int64_t NumericId(const std::string& id) { return api::ParseJobId(id).value_or(0); }

// restart_policy: resume. A job that asks for it and wrote a checkpoint continues from its newest
// checkpoint when mpsd stopped while it ran (Job.last_checkpoint, kept from its `checkpoint`
// events; the server never opens the file).
bool ResumesAfterRestart(const Job& job) {
  return job.spec().train_job().restart_policy() == "resume" &&
         !job.last_checkpoint().path().empty();
}

std::string ResumeMessage(const Job& job, absl::string_view why) {
  return absl::StrCat(why, "; resumes from checkpoint ", job.last_checkpoint().path(),
                      " at epoch ", job.last_checkpoint().epoch(), " (step ",
                      job.last_checkpoint().step(), ")");
}

absl::Status CheckRequest(const mpsd::v1::SubmitJobRequest& request) {
  if (request.spec_case() == mpsd::v1::SubmitJobRequest::SPEC_NOT_SET) {
    return absl::InvalidArgumentError("spec: set train_job or bench_job");
  }
  if (request.request_id().size() > Scheduler::kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_id: at most ", Scheduler::kMaxRequestIdBytes, " bytes, got ",
                     request.request_id().size()));
  }
  return absl::OkStatus();
}

}  // namespace

Scheduler::Scheduler(const Options& options, JobStore* store, mpsd::api::Executor* executor)
    : options_(options), store_(store), executor_(executor), event_log_(store) {}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const Options& options,
                                                             JobStore* store,
                                                             mpsd::api::Executor* executor) {
  std::unique_ptr<Scheduler> scheduler(new Scheduler(options, store, executor));
  if (absl::Status status = scheduler->Recover(); !status.ok()) return status;
  scheduler->executor_thread_ = std::thread([s = scheduler.get()] { s->ExecutorLoop(); });
  return scheduler;
}

Scheduler::~Scheduler() { Shutdown(); }

absl::Status Scheduler::Recover() {
  absl::StatusOr<JobStore::JobListing> stored = store_->ListJobsSkippingDamaged();
  if (!stored.ok()) return stored.status();
  std::vector<Job> jobs = std::move(stored->jobs);
  std::reverse(jobs.begin(), jobs.end());  // Oldest first: the queue keeps its order.
  absl::MutexLock lock(&mu_);
  for (const auto& [id, status] : stored->damaged) {
    spdlog::error("job {} cannot be read from the database; it is reported as DATA_LOSS: {}", id,
                  std::string(status.message()));
    damaged_.emplace(id, absl::DataLossError(absl::StrCat(
                             "job ", id, " is damaged in the database and cannot be read (",
                             status.message(), "); the other jobs are not affected")));
  }
  for (Job& job : jobs) {
    event_log_.SetCommittedSeq(job.id(), job.last_seq());
    const std::string id = job.id();
    Job& kept = jobs_[id];
    kept = std::move(job);
    if (!kept.spec().request_id().empty()) request_ids_[kept.spec().request_id()] = kept.id();
    if (kept.state() == Job::QUEUED) {
      // Killed between storing the job and its first event: that event comes now.
      if (kept.last_seq() == 0) SetState(kept, Job::QUEUED, Job::FAILURE_REASON_UNSPECIFIED, "");
      InsertInQueue(kept);
    } else if (kept.state() == Job::RUNNING && ResumesAfterRestart(kept)) {
      spdlog::warn("job {} was running when mpsd stopped; queued again to resume from {}",
                   kept.id(), kept.last_checkpoint().path());
      kept.set_resumed_from_job_id(kept.id());
      SetState(kept, Job::QUEUED, Job::FAILURE_REASON_UNSPECIFIED,
               ResumeMessage(kept, "mpsd stopped while the job ran"));
      InsertInQueue(kept);
    } else if (kept.state() == Job::RUNNING) {
      spdlog::warn("job {} was running when mpsd stopped; marking it INTERRUPTED", kept.id());
      kept.set_message(absl::StrCat("interrupted: mpsd stopped while the job ran (last step ",
                                    kept.last_step().step(), ")"));
      SetState(kept, Job::INTERRUPTED, Job::FAILURE_REASON_UNSPECIFIED, kept.message());
    }
  }
  if (!queue_.empty()) spdlog::info("{} queued job(s) restored", queue_.size());
  return absl::OkStatus();
}

absl::StatusOr<Job> Scheduler::Submit(const mpsd::v1::SubmitJobRequest& request,
                                      const std::string& submitted_by) {
  if (absl::Status valid = CheckRequest(request); !valid.ok()) return valid;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<const Job*> earlier = EarlierSubmit(request);
    if (!earlier.ok()) return earlier.status();
    if (*earlier != nullptr) return **earlier;
    if (!refuse_submits_.ok()) return refuse_submits_;
  }
  // Validation reads the file system: not under mu_.
  if (absl::Status valid = executor_->Validate(request); !valid.ok()) return valid;
  absl::StatusOr<Job> job = SubmitValidated(request, submitted_by);
  // The caller hears of the job once its QUEUED event is stored, too; not under mu_.
  if (job.ok()) event_log_.Flush();
  return job;
}

absl::StatusOr<Job> Scheduler::SubmitValidated(const mpsd::v1::SubmitJobRequest& request,
                                               const std::string& submitted_by) {
  absl::MutexLock lock(&mu_);
  // A concurrent Submit with the same request_id may have won the race meanwhile.
  absl::StatusOr<const Job*> earlier = EarlierSubmit(request);
  if (!earlier.ok()) return earlier.status();
  if (*earlier != nullptr) return **earlier;
  if (shutting_down_) return absl::UnavailableError("mpsd is shutting down");
  if (!refuse_submits_.ok()) return refuse_submits_;
  if (static_cast<int>(queue_.size()) >= options_.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat("queue full (", options_.max_queued, ")"));
  }
  return Enqueue(request, submitted_by);
}

void Scheduler::RefuseSubmits(absl::Status why) {
  absl::MutexLock lock(&mu_);
  refuse_submits_ = std::move(why);
}

absl::StatusOr<const Job*> Scheduler::EarlierSubmit(
    const mpsd::v1::SubmitJobRequest& request) const {
  if (request.request_id().empty()) return nullptr;
  auto id = request_ids_.find(request.request_id());
  if (id == request_ids_.end()) return nullptr;
  const Job& job = jobs_.at(id->second);
  if (!google::protobuf::util::MessageDifferencer::Equals(job.spec(), request)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "request_id: \"", request.request_id(), "\" was already used for job ", job.id(),
        " with a different request; use a new request_id for a new job"));
  }
  return &job;
}

absl::StatusOr<Job> Scheduler::Enqueue(const mpsd::v1::SubmitJobRequest& request,
                                       const std::string& submitted_by) {
  Job job;
  job.set_submitted_by(submitted_by);
  job.set_kind(KindOf(request));
  job.set_state(Job::QUEUED);
  *job.mutable_created_at() = Now();
  *job.mutable_spec() = request;
  if (api::IsJobId(request.train_job().resume_from())) {
    job.set_resumed_from_job_id(request.train_job().resume_from());
  }
  absl::StatusOr<Job> inserted = store_->InsertJob(std::move(job));
  if (!inserted.ok()) return inserted.status();
  const std::string id = inserted->id();
  Job& stored = jobs_[id];
  stored = *std::move(inserted);
  JobEvent queued;
  queued.mutable_state()->set_state(Job::QUEUED);
  Publish(stored, std::move(queued));
  if (!request.request_id().empty()) request_ids_[request.request_id()] = id;
  InsertInQueue(stored);
  spdlog::info("job {} queued by {}, priority {} ({} in queue)", id, submitted_by,
               request.priority(), queue_.size());
  return stored;
}

void Scheduler::InsertInQueue(const Job& job) {
  const int32_t priority = job.spec().priority();
  auto behind = std::find_if(queue_.begin(), queue_.end(), [&](const std::string& id) {
    return jobs_.at(id).spec().priority() < priority;
  });
  queue_.insert(behind, job.id());
}

absl::Status Scheduler::UnknownJob(const std::string& job_id) const {
  auto damaged = damaged_.find(job_id);
  if (damaged != damaged_.end()) return damaged->second;
  return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
}

namespace {

// INVALID_ARGUMENT for what cannot name a job at all ("", "abc", "01"), so that a client tells a
// malformed id from one that names no job (NOT_FOUND).
absl::Status CheckJobId(const std::string& job_id) {
  if (api::ParseJobId(job_id).has_value()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "job_id: \"", job_id, "\" is not a job id (job ids are decimal numbers: \"1\", \"2\", ...)"));
}

}  // namespace

absl::StatusOr<Job> Scheduler::Get(const std::string& job_id) const {
  if (absl::Status s = CheckJobId(job_id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return UnknownJob(job_id);
  return it->second;
}

std::vector<Job> Scheduler::List(const JobQuery& query) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<int64_t, const Job*>> selected;
  for (const auto& [id, job] : jobs_) {
    const int64_t n = NumericId(id);
    if ((query.before_id == 0 || n < query.before_id) && query.Matches(job)) {
      selected.emplace_back(n, &job);
    }
  }
  auto newer_first = [](const auto& a, const auto& b) { return a.first > b.first; };
  const size_t limit = static_cast<size_t>(std::max(query.limit, 0));
  if (selected.size() > limit) {
    std::nth_element(selected.begin(), selected.begin() + limit, selected.end(), newer_first);
    selected.resize(limit);
  }
  std::sort(selected.begin(), selected.end(), newer_first);
  std::vector<Job> jobs;
  jobs.reserve(selected.size());
  for (const auto& [n, job] : selected) jobs.push_back(*job);
  return jobs;
}

absl::StatusOr<Job> Scheduler::Cancel(const std::string& job_id) {
  absl::StatusOr<Job> job = RequestCancel(job_id);
  // A cancel that answered CANCELLED is stored: the job never runs, even after a crash.
  if (job.ok() && job->state() == Job::CANCELLED) event_log_.Flush();
  return job;
}

absl::StatusOr<Job> Scheduler::RequestCancel(const std::string& job_id) {
  if (absl::Status s = CheckJobId(job_id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return UnknownJob(job_id);
  Job& job = it->second;
  if (api::IsTerminal(job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " already finished (", Job::State_Name(job.state()), ")"));
  }
  if (job.state() == Job::QUEUED) {
    auto queued = std::find(queue_.begin(), queue_.end(), job_id);
    if (queued != queue_.end()) queue_.erase(queued);
    *job.mutable_finished_at() = Now();
    SetState(job, Job::CANCELLED, Job::FAILURE_REASON_UNSPECIFIED, "cancelled while queued");
  } else if (running_job_ == job_id) {
    stop_as_ = Job::CANCELLED;
    cancel_running_.Cancel();
    spdlog::info("job {}: cancel requested; stopping at the next step", job_id);
  }
  return job;
}

mpsd::v1::DeviceInfo Scheduler::GetDevice() const {
  mpsd::v1::DeviceInfo info = executor_->GetDevice();
  absl::MutexLock lock(&mu_);
  info.set_jobs_run(jobs_run_);
  return info;
}

absl::StatusOr<mpsd::v1::ListModelsResponse> Scheduler::ListModels(
    const mpsd::v1::ListModelsRequest& request) const {
  return executor_->ListModels(request);
}

mpsd::v1::Heartbeat Scheduler::HeartbeatOf(const std::string& job_id) const {
  mpsd::v1::Heartbeat heartbeat;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return heartbeat;
  heartbeat.set_state(it->second.state());
  if (it->second.state() == Job::QUEUED) {
    auto place = std::find(queue_.begin(), queue_.end(), job_id);
    if (place != queue_.end()) {
      heartbeat.set_queue_position(static_cast<int32_t>(place - queue_.begin()) + 1);
    }
  }
  return heartbeat;
}

Scheduler::QueueStats Scheduler::GetQueueStats() const {
  absl::MutexLock lock(&mu_);
  QueueStats stats;
  stats.queued_jobs = static_cast<int>(queue_.size());
  stats.running_job_id = running_job_;
  stats.jobs_total = static_cast<int64_t>(jobs_.size());
  return stats;
}

std::map<std::pair<Job::State, Job::Kind>, int64_t> Scheduler::CountJobs() const {
  absl::MutexLock lock(&mu_);
  std::map<std::pair<Job::State, Job::Kind>, int64_t> counts;
  for (const auto& [id, job] : jobs_) ++counts[{job.state(), job.kind()}];
  return counts;
}

void Scheduler::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      shutting_down_ = true;
      if (!running_job_.empty()) {
        stop_as_ = Job::INTERRUPTED;
        cancel_running_.Cancel();
      }
    }
  }
  if (executor_thread_.joinable()) executor_thread_.join();
  event_log_.Flush();
}

void Scheduler::ExecutorLoop() {
  for (;;) {
    std::string job_id;
    mpsd::v1::SubmitJobRequest spec;
    std::string resume_checkpoint;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return shutting_down_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (shutting_down_) return;
      job_id = queue_.front();
      queue_.pop_front();
      running_job_ = job_id;
      cancel_running_.Reset();
      // RUNNING in the same critical section that took it off the queue: a cancel in between
      // would find a QUEUED job that is in no queue.
      Job& job = jobs_[job_id];
      *job.mutable_started_at() = Now();
      SetState(job, Job::RUNNING, Job::FAILURE_REASON_UNSPECIFIED, "");
      spec = job.spec();
      // Only a job queued again by restart_policy: resume has a checkpoint before it runs.
      resume_checkpoint = job.last_checkpoint().path();
    }
    RunJob(job_id, spec, resume_checkpoint);
  }
}

void Scheduler::RunJob(const std::string& job_id, const mpsd::v1::SubmitJobRequest& spec,
                       const std::string& resume_checkpoint) {
  spdlog::info("job {} running", job_id);
  auto sink = [this, &job_id](JobEvent event) {
    absl::MutexLock lock(&mu_);
    Publish(jobs_[job_id], std::move(event));
  };
  mpsd::api::JobContext context;
  context.job_id = job_id;
  context.resume_checkpoint = resume_checkpoint;
  const absl::Status status = executor_->Run(context, spec, sink, cancel_running_);

  absl::MutexLock lock(&mu_);
  Job& job = jobs_[job_id];
  *job.mutable_finished_at() = Now();
  ++jobs_run_;
  running_job_.clear();
  if (status.ok()) {
    SetState(job, Job::SUCCEEDED, Job::FAILURE_REASON_UNSPECIFIED, "");
  } else if (status.code() == absl::StatusCode::kCancelled && stop_as_.load() == Job::INTERRUPTED &&
             ResumesAfterRestart(job)) {
    // Stays queued in the store: the next start runs it again from its checkpoint.
    SetState(job, Job::QUEUED, Job::FAILURE_REASON_UNSPECIFIED,
             ResumeMessage(job, "mpsd shut down while the job ran"));
  } else if (status.code() == absl::StatusCode::kCancelled) {
    const Job::State state = stop_as_.load();
    std::string message =
        state == Job::CANCELLED ? "cancelled by request" : "interrupted: mpsd shut down";
    // The executor ignored the cancel and was killed (ExecutorSupervisor::Run): say so, and
    // that a new executor replaced it.
    if (absl::StartsWith(status.message(), "cancel not honoured")) {
      absl::StrAppend(&message, "; ", status.message());
    }
    SetState(job, state, Job::FAILURE_REASON_UNSPECIFIED, message);
  } else {
    SetState(job, Job::FAILED, api::FailureReasonOf(status), std::string(status.message()));
  }
  spdlog::info("job {} {}{}{}", job_id, Job::State_Name(job.state()),
               job.message().empty() ? "" : ": ", job.message());
}

void Scheduler::SetState(Job& job, Job::State state, Job::FailureReason reason,
                         const std::string& message) {
  job.set_state(state);
  job.set_failure_reason(reason);
  job.set_message(message);
  JobEvent event;
  mpsd::v1::StateChange* change = event.mutable_state();
  change->set_state(state);
  change->set_failure_reason(reason);
  change->set_message(message);
  Publish(job, std::move(event));
}

void Scheduler::Publish(Job& job, JobEvent event) {
  event.set_job_id(job.id());
  event.set_seq(job.last_seq() + 1);
  *event.mutable_time() = Now();
  job.set_last_seq(event.seq());
  switch (event.payload_case()) {
    case JobEvent::kStep:
      *job.mutable_last_step() = event.step();
      break;
    case JobEvent::kEpoch:
      *job.mutable_last_epoch() = event.epoch();
      break;
    case JobEvent::kSummary:
      *job.mutable_summary() = event.summary();
      break;
    case JobEvent::kCheckpoint:
      *job.mutable_last_checkpoint() = event.checkpoint();
      break;
    default:
      break;
  }
  if (options_.on_event) options_.on_event(job, event);
  std::vector<JobEvent> events;
  events.push_back(std::move(event));
  event_log_.Append(job, std::move(events));
}

}  // namespace mpsd::server
