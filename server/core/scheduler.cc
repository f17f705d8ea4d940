// Scheduler: one priority queue, one executor thread, every state change and metric an event.
#include "server/core/scheduler.h"

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/effective_spec.h"
#include "api/error_cause.h"
#include "api/failure_reason.h"
#include "api/job_id.h"
#include "api/job_state.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "server/core/sweep.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;

// An INFO line of a job's log.
JobEvent LogNote(std::string text) {
  JobEvent note;
  note.mutable_log()->set_level(mpsd::v1::LogLine::INFO);
  note.mutable_log()->set_text(std::move(text));
  return note;
}

// Why the trials offered (`ids`, the lead first) were not fused, from PlanFusion's answer: a
// trial that cannot join named by its job id (its TRIAL_NOT_FUSABLE cause: index and reason),
// else the executor's own message.
std::string NotFusedReason(const absl::Status& status, const std::vector<std::string>& ids) {
  const std::optional<api::ErrorCause> cause = api::CauseOf(status);
  if (!cause.has_value() || cause->kind() != api::ErrorCause::TRIAL_NOT_FUSABLE ||
      cause->trial() < 0 || cause->trial() >= static_cast<int>(ids.size())) {
    return std::string(status.message());
  }
  return absl::StrCat("job ", ids[static_cast<size_t>(cause->trial())], cause->reason());
}

// Why a trial of sweep `sweep_id` runs alone although its sweep fuses (`fusion`): fuse off, or
// no other of its trials queued (the others ran before it, in groups of at most fuse: K).
JobEvent RunsAloneNote(const std::string& sweep_id, const SweepFusion& fusion) {
  std::string why = "sweep.fuse is off";
  if (fusion.max_trials > 1) {
    // Not why the others went before it: they may have run in groups of sweep.fuse, or alone
    // for a reason of their own (each one's log says which).
    why = "no other of its trials is still queued (the others have started or ended)";
  }
  return LogNote(
      absl::StrCat("not trained fused with other trials of sweep ", sweep_id, ": ", why));
}

// Microsecond resolution: protobuf 3.21's TimeUtil::GetCurrentTime() has whole seconds.
google::protobuf::Timestamp Now() {
  return google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(absl::Now()));
}

Job::Kind KindOf(const mpsd::v1::SubmitJobRequest& request) {
  if (request.has_sweep()) return Job::SWEEP;
  switch (request.spec_case()) {
    case mpsd::v1::SubmitJobRequest::kTrainJob:
      return Job::TRAIN_JOB;
    case mpsd::v1::SubmitJobRequest::kBenchJob:
      return Job::BENCH_JOB;
    case mpsd::v1::SubmitJobRequest::kEvalJob:
      return Job::EVAL_JOB;
    case mpsd::v1::SubmitJobRequest::kPredictJob:
      return Job::PREDICT_JOB;
    default:
      return Job::KIND_UNSPECIFIED;
  }
}

// Job ids are decimal row ids ("1", "2", …); 0 for anything else.
int64_t NumericId(const std::string& id) { return api::ParseJobId(id).value_or(0); }

// The epochs a TrainJob trains (its effective TrainJob.epochs).
int TrialEpochs(const Job& job) { return api::EffectiveSpecOf(job).train_job().epochs(); }

// restart_policy: resume. A job that asks for it and wrote a checkpoint continues from its newest
// checkpoint when mpsd stopped while it ran (Job.last_checkpoint, kept from its `checkpoint`
// events; the server never opens the file).
bool ResumesAfterRestart(const Job& job) {
  return job.spec().train_job().restart_policy() == "resume" &&
         !job.last_checkpoint().path().empty();
}

// A sweep's TrainJob trial that mpsd stopped while it ran, without a checkpoint to resume from,
// trains again from its start: its seed makes it the same run, and the sweep is not left with a
// hole where one of its configurations was.
bool RestartsTrialAfterRestart(const Job& job) {
  return job.has_trial() && job.spec().has_train_job() && !ResumesAfterRestart(job);
}

// A trial queued again to start over: the aborted run's step and epoch are not its newest.
void QueueTrialFromItsStart(Job& job) {
  job.clear_last_step();
  job.clear_last_epoch();
  job.clear_finished_at();
}

constexpr char kTrialStartsOver[] =
    "; a sweep's trial without a checkpoint to resume from trains again from its start";

std::string ResumeMessage(const Job& job, absl::string_view why) {
  return absl::StrCat(why, "; resumes from checkpoint ", job.last_checkpoint().path(), " at epoch ",
                      job.last_checkpoint().epoch(), " (step ", job.last_checkpoint().step(), ")");
}

// A job queued again by restart_policy: resume whose checkpoint the executor refused (a file
// truncated or removed meanwhile): the executor's error names train_job.resume_from, which the
// user never set. Says what failed, which file, and that the job ends here.
std::string AutoResumeFailure(const std::string& checkpoint, const absl::Status& status) {
  const std::string problem = absl::StrReplaceAll(
      status.message(), {{"train_job.resume_from: ", ""}, {"resume_from: ", ""}});
  return absl::StrCat("the automatic resume (restart_policy: resume) from checkpoint ", checkpoint,
                      " failed: ", problem,
                      ". The job is FAILED and is not resumed again; submit it again to "
                      "start afresh, or with resume_from naming an earlier checkpoint file of it");
}

// A name or label value: at most kMaxNameBytes, no control characters.
absl::Status CheckText(absl::string_view field, const std::string& text) {
  if (text.size() > Scheduler::kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", Scheduler::kMaxNameBytes, " bytes, got ", text.size()));
  }
  for (char c : text) {
    if (absl::ascii_iscntrl(c)) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": control characters not allowed"));
    }
  }
  // Unicode's invisible controls (as UTF-8, which gRPC's proto3 strings are): C1 controls
  // U+0080-U+009F, the bidirectional marks and overrides U+061C, U+200E, U+200F,
  // U+202A-U+202E, U+2066-U+2069, and the invisible spaces U+200B (zero width), U+2060 (word
  // joiner) and U+FEFF (zero-width no-break), which would make a name shown in a table or the
  // dashboard read as another one. The zero-width (non-)joiners U+200C/U+200D stay: scripts and
  // emoji sequences need them.
  const auto byte = [&text](size_t i) { return static_cast<unsigned char>(text[i]); };
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    const bool c1 = byte(i) == 0xC2 && byte(i + 1) >= 0x80 && byte(i + 1) <= 0x9F;
    const bool alm = byte(i) == 0xD8 && byte(i + 1) == 0x9C;
    bool bidi = false;
    if (i + 2 < text.size() && byte(i) == 0xE2) {
      const unsigned char b1 = byte(i + 1), b2 = byte(i + 2);
      bidi =
          (b1 == 0x80 && (b2 == 0x8B || b2 == 0x8E || b2 == 0x8F || (b2 >= 0xAA && b2 <= 0xAE))) ||
          (b1 == 0x81 && (b2 == 0xA0 || (b2 >= 0xA6 && b2 <= 0xA9)));
    }
    const bool bom =
        i + 2 < text.size() && byte(i) == 0xEF && byte(i + 1) == 0xBB && byte(i + 2) == 0xBF;
    if (c1 || alm || bidi || bom) {
      return absl::InvalidArgumentError(
          absl::StrCat(field,
                       ": invisible characters (bidirectional marks or overrides, zero-width "
                       "spaces, C1 controls) not allowed"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLabels(const mpsd::v1::SubmitJobRequest& request) {
  if (request.labels_size() > Scheduler::kMaxLabels) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels: at most ", Scheduler::kMaxLabels, ", got ", request.labels_size()));
  }
  for (const auto& [key, value] : request.labels()) {
    const bool key_ok =
        !key.empty() && key.size() <= 63 && std::all_of(key.begin(), key.end(), [](char c) {
          return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-' || c == '/';
        });
    if (!key_ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("labels: key \"", absl::CEscape(key),
                       "\" must be 1 to 63 characters of A-Z, a-z, 0-9, _, ., -, /"));
    }
    if (absl::Status s = CheckText(absl::StrCat("labels.", key), value); !s.ok()) return s;
  }
  // A trial's label "sweep" is its sweep's id, set by mpsd (EnqueueSweep): set by hand it
  // would make a job pass for a trial, and a sweep's own would be overwritten.
  if (request.labels().contains(Scheduler::kSweepLabel)) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels.", Scheduler::kSweepLabel,
                     ": reserved: mpsd sets it to the sweep's id on each "
                     "of a sweep's trials; use another key"));
  }
  return absl::OkStatus();
}

// Every repeated field of `message` and its sub-messages holds at most kMaxRepeatedValues
// (kMaxAfter for `after`, kMaxSweepValues for a sweep parameter's values and choices); maps
// (labels) are checked by CheckLabels. INVALID_ARGUMENT naming the field: "bench_job.batch_sizes:
// at most 64 values, got 100000". `path` is the message's field path ("" at the top).
absl::Status CheckRepeatedSizes(const google::protobuf::Message& message, const std::string& path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    const std::string name = path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    if (field->is_map()) continue;
    if (!field->is_repeated()) {
      if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
      if (absl::Status s = CheckRepeatedSizes(reflection->GetMessage(message, field), name);
          !s.ok()) {
        return s;
      }
      continue;
    }
    const int size = reflection->FieldSize(message, field);
    int limit = Scheduler::kMaxRepeatedValues;
    if (name == "after") limit = Scheduler::kMaxAfter;
    if (field->name() == "values" || field->name() == "choice") {
      if (absl::StartsWith(path, "sweep.")) limit = Scheduler::kMaxSweepValues;
    }
    if (size > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": at most ", limit, " values, got ", size));
    }
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    for (int i = 0; i < size; ++i) {
      if (absl::Status s = CheckRepeatedSizes(reflection->GetRepeatedMessage(message, field, i),
                                              absl::StrCat(name, "[", i, "]"));
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRequest(const mpsd::v1::SubmitJobRequest& request) {
  if (request.spec_case() == mpsd::v1::SubmitJobRequest::SPEC_NOT_SET) {
    return absl::InvalidArgumentError("spec: set train_job, bench_job, eval_job or predict_job");
  }
  if (request.request_id().size() > Scheduler::kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("request_id: at most ",
                                                   Scheduler::kMaxRequestIdBytes, " bytes, got ",
                                                   request.request_id().size()));
  }
  if (absl::Status s = CheckText("name", request.name()); !s.ok()) return s;
  if (absl::Status s = CheckLabels(request); !s.ok()) return s;
  if (request.after_size() > Scheduler::kMaxAfter) {
    return absl::InvalidArgumentError(
        absl::StrCat("after: at most ", Scheduler::kMaxAfter, " jobs, got ", request.after_size()));
  }
  if (absl::Status s = CheckRepeatedSizes(request, ""); !s.ok()) return s;
  for (int i = 0; i < request.after_size(); ++i) {
    if (!api::IsJobId(request.after(i))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "after[", i, "]: \"", absl::CEscape(request.after(i)), "\" is not a job id"));
    }
  }
  return absl::OkStatus();
}

// The spec the executor validates: without resume_from when it names a dependency that has
// not written its checkpoint yet.
mpsd::v1::SubmitJobRequest ForValidation(const mpsd::v1::SubmitJobRequest& request,
                                         bool resumes_from_dependency) {
  mpsd::v1::SubmitJobRequest copy = request;
  copy.clear_sweep();
  if (resumes_from_dependency) copy.mutable_train_job()->clear_resume_from();
  return copy;
}

// A trial's validation error: "sweep trial 1 (of trials 0 to 3; optimizer.learning_rate=-1):
// <field: why>". Trials are numbered from 0, as mpsctl sweep's TRIAL column numbers them.
absl::Status TrialError(const SweepTrialRequest& trial, size_t count, const absl::Status& status) {
  return absl::Status(
      status.code(),
      absl::StrCat("sweep trial ", trial.trial.index(), " (of trials 0 to ", count - 1, "; ",
                   DescribeTrial(trial.trial), "): ", status.message()));
}

}  // namespace

Scheduler::Scheduler(const Options& options, JobStore* store, mpsd::api::Executor* executor)
    : options_(options),
      store_(store),
      executor_(executor),
      event_log_(store, options.on_storage_error) {}

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
  const std::vector<StoredEpoch> history = ReadStoppingHistory(jobs);
  absl::MutexLock lock(&mu_);
  for (const auto& [id, status] : stored->damaged) {
    spdlog::error("job {} cannot be read from the database; it is reported as DATA_LOSS: {}", id,
                  std::string(status.message()));
    damaged_.emplace(id, absl::DataLossError(absl::StrCat(
                             "job ", id, " is damaged in the database and cannot be read (",
                             status.message(), "); the other jobs are not affected")));
  }
  // Every job first, then the fix-ups in submission order: a job that ends now (INTERRUPTED)
  // cancels the jobs waiting for it, which must be known by then.
  std::vector<std::string> ids;
  ids.reserve(jobs.size());
  for (Job& job : jobs) {
    event_log_.SetCommittedSeq(job.id(), job.last_seq());
    ids.push_back(job.id());
    if (!job.spec().request_id().empty()) {
      request_ids_[RequestKey(job.submitted_by(), job.spec().request_id())] = job.id();
    }
    jobs_[job.id()] = std::move(job);
  }
  absl::StatusOr<std::string> paused = store_->GetSetting("queue_paused");
  if (!paused.ok()) return paused.status();
  paused_ = *paused == "1";
  const absl::flat_hash_map<std::string, std::string> stopped = ReplayStoppingHistory(history);
  for (const std::string& id : ids) {
    Job& kept = jobs_.at(id);
    if (kept.kind() == Job::SWEEP) {  // never queued itself: SettleRecovered settles it
      if (kept.state() == Job::QUEUED && kept.last_seq() == 0) {
        SetState(kept, Job::QUEUED, Job::FAILURE_REASON_UNSPECIFIED, "");
      }
      continue;
    }
    if (auto rule = stopped.find(id); rule != stopped.end() && !api::IsTerminal(kept.state())) {
      // Its sweep's rule stopped it before mpsd stopped, and it had not ended yet.
      spdlog::warn("job {} was stopped by its sweep's scheduler before mpsd stopped: {}", id,
                   rule->second);
      *kept.mutable_finished_at() = Now();
      SetState(kept, Job::CANCELLED, Job::EARLY_STOPPED,
               absl::StrCat(rule->second, "; mpsd stopped before the trial ended"));
      continue;
    }
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
    } else if (kept.state() == Job::RUNNING && RestartsTrialAfterRestart(kept)) {
      spdlog::warn(
          "job {} (a trial of sweep {}) was running when mpsd stopped; queued again to "
          "train from its start",
          kept.id(), kept.trial().sweep_id());
      QueueTrialFromItsStart(kept);
      SetState(kept, Job::QUEUED, Job::FAILURE_REASON_UNSPECIFIED,
               absl::StrCat("queued again: mpsd stopped while the trial ran", kTrialStartsOver));
      InsertInQueue(kept);
    } else if (kept.state() == Job::RUNNING) {
      spdlog::warn("job {} was running when mpsd stopped; marking it INTERRUPTED", kept.id());
      kept.set_message(absl::StrCat("interrupted: mpsd stopped while the job ran (last step ",
                                    kept.last_step().step(), ")"));
      SetState(kept, Job::INTERRUPTED, Job::FAILURE_REASON_UNSPECIFIED, kept.message());
    }
  }
  SettleRecovered();
  if (!queue_.empty()) spdlog::info("{} queued job(s) restored", queue_.size());
  if (paused_) spdlog::warn("the queue is paused (mpsctl resume lets queued jobs run)");
  return absl::OkStatus();
}

void Scheduler::SettleRecovered() {
  // A sweep's trial list, from the trials themselves: a daemon killed while it queued a sweep
  // stored the trials before the list.
  absl::flat_hash_map<std::string, std::vector<std::pair<int32_t, std::string>>> trials;
  for (const auto& [id, job] : jobs_) {
    if (job.has_trial()) trials[job.trial().sweep_id()].emplace_back(job.trial().index(), id);
  }
  for (auto& [sweep_id, list] : trials) {
    auto parent = jobs_.find(sweep_id);
    if (parent == jobs_.end()) continue;
    std::sort(list.begin(), list.end());
    if (parent->second.trial_job_ids_size() == static_cast<int>(list.size())) continue;
    parent->second.clear_trial_job_ids();
    for (const auto& entry : list) parent->second.add_trial_job_ids(entry.second);
    event_log_.Append(parent->second, {});
  }
  // Killed after a dependency ended but before its dependents were cancelled.
  const std::vector<std::string> queued(queue_.begin(), queue_.end());
  for (const std::string& id : queued) {
    const Job& job = jobs_.at(id);
    if (job.state() != Job::QUEUED) continue;
    if (const Job* failed = FailedDependency(job)) CancelForDependency(id, *failed);
  }
  for (const auto& [sweep_id, list] : trials) UpdateSweep(sweep_id);
}

std::vector<Scheduler::StoredEpoch> Scheduler::ReadStoppingHistory(
    const std::vector<Job>& jobs) const {
  absl::flat_hash_set<std::string> sweeps;
  for (const Job& job : jobs) {
    if (job.kind() == Job::SWEEP && !api::IsTerminal(job.state()) &&
        job.spec().sweep().has_scheduler()) {
      sweeps.insert(job.id());
    }
  }
  std::vector<StoredEpoch> history;
  for (const Job& job : jobs) {
    if (!job.has_trial() || !sweeps.contains(job.trial().sweep_id())) continue;
    std::vector<StoredEpoch> epochs;
    absl::Status read;
    for (int64_t after = 0;;) {
      absl::StatusOr<std::vector<JobEvent>> page = event_log_.Read(job.id(), after, 1000);
      if (!page.ok()) read = page.status();
      if (!page.ok() || page->empty()) break;
      for (const JobEvent& event : *page) {
        after = event.seq();
        if (!event.has_epoch()) continue;
        epochs.push_back(
            StoredEpoch{google::protobuf::util::TimeUtil::TimestampToMicroseconds(event.time()),
                        NumericId(job.id()), event.seq(), event.epoch()});
      }
    }
    if (!read.ok()) {
      spdlog::warn(
          "job {}: its epochs cannot be read ({}); sweep {}'s scheduler goes on without them",
          job.id(), std::string(read.message()), job.trial().sweep_id());
      continue;
    }
    history.insert(history.end(), epochs.begin(), epochs.end());
  }
  std::sort(history.begin(), history.end(), [](const StoredEpoch& a, const StoredEpoch& b) {
    return std::tie(a.time_us, a.job_id, a.seq) < std::tie(b.time_us, b.job_id, b.seq);
  });
  return history;
}

absl::flat_hash_map<std::string, std::string> Scheduler::ReplayStoppingHistory(
    const std::vector<StoredEpoch>& history) {
  absl::flat_hash_map<std::string, int> max_epochs;
  for (const auto& [id, job] : jobs_) {
    if (!job.has_trial()) continue;
    int& most = max_epochs[job.trial().sweep_id()];
    most = std::max({most, 1, TrialEpochs(job)});
  }
  for (const auto& [id, job] : jobs_) {
    if (job.kind() != Job::SWEEP || api::IsTerminal(job.state())) continue;
    auto most = max_epochs.find(id);
    AddStopper(job, most == max_epochs.end() ? 1 : most->second);
  }
  absl::flat_hash_map<std::string, std::string> stopped;
  // As they were decided: a fused run's trials at one epoch boundary (published one after
  // another, so next to each other in `history`) together.
  for (size_t i = 0; i < history.size();) {
    const std::string id = absl::StrCat(history[i].job_id);
    auto job = jobs_.find(id);
    auto stopper =
        job == jobs_.end() ? stoppers_.end() : stoppers_.find(job->second.trial().sweep_id());
    if (stopper == stoppers_.end()) {
      ++i;
      continue;
    }
    const std::string& lead = job->second.trial().fused_lead();
    std::vector<SweepStopper::TrialEpoch> together = {
        {id, TrialEpochs(job->second), history[i].epoch}};
    absl::flat_hash_set<std::string> trials = {id};
    for (++i; !lead.empty() && i < history.size(); ++i) {
      const std::string next_id = absl::StrCat(history[i].job_id);
      auto next = jobs_.find(next_id);
      if (next == jobs_.end() || next->second.trial().fused_lead() != lead ||
          history[i].epoch.epoch() != together.front().epoch.epoch() ||
          !trials.insert(next_id).second) {
        break;
      }
      together.push_back({next_id, TrialEpochs(next->second), history[i].epoch});
    }
    const std::vector<StopDecision> decisions = stopper->second->ObserveTogether(together);
    for (size_t k = 0; k < together.size(); ++k) {
      // The first stop is the one made.
      if (decisions[k].stop) stopped.emplace(together[k].trial, decisions[k].reason);
    }
  }
  return stopped;
}

void Scheduler::AddStopper(const Job& sweep, int max_epochs) {
  if (!sweep.spec().sweep().has_scheduler()) return;
  absl::StatusOr<std::optional<TrialStoppingConfig>> config =
      ReadTrialStopping(sweep.spec().sweep(), max_epochs);
  if (!config.ok() || !config->has_value()) {  // checked at submit: a stored spec that changed
    spdlog::warn("sweep {}: its scheduler does not apply ({}); no trial is stopped early",
                 sweep.id(), config.ok() ? "" : std::string(config.status().message()));
    return;
  }
  auto stopper = std::make_unique<SweepStopper>(**config);
  spdlog::info("sweep {}: trials are stopped early by {}", sweep.id(), stopper->Describe());
  stoppers_[sweep.id()] = std::move(stopper);
}

void Scheduler::PublishRunEvent(const std::string& job_id, JobEvent event) {
  const bool epoch = event.has_epoch();
  Job& job = jobs_[job_id];
  Publish(job, std::move(event));
  if (epoch) ObserveTrialEpoch(job);
}

void Scheduler::ObserveTrialEpoch(Job& trial) {
  if (!trial.has_trial()) return;
  if (auto fused = fused_epochs_.find(trial.id()); fused != fused_epochs_.end()) {
    FusedEpochs& run = *fused->second;
    // A second epoch of a trial before the rest reached its first: decided as far as they came.
    if (run.Waits(trial.id())) DecideFusedEpochs(run, /*now=*/true);
    run.waiting.push_back({trial.id(), TrialEpochs(trial), trial.last_epoch()});
    DecideFusedEpochs(run, /*now=*/false);
    return;
  }
  auto stopper = stoppers_.find(trial.trial().sweep_id());
  if (stopper == stoppers_.end()) return;
  ApplyStop(trial, stopper->second->Observe(trial.id(), TrialEpochs(trial), trial.last_epoch()));
}

void Scheduler::DecideFusedEpochs(FusedEpochs& run, bool now) {
  if (run.waiting.empty()) return;
  if (!now) {
    for (const std::string& id : run.running) {
      if (!run.Waits(id)) return;
    }
  }
  std::vector<SweepStopper::TrialEpoch> together;
  together.swap(run.waiting);
  auto stopper = stoppers_.find(run.sweep_id);
  if (stopper == stoppers_.end()) return;
  const std::vector<StopDecision> decisions = stopper->second->ObserveTogether(together);
  for (size_t i = 0; i < together.size(); ++i) ApplyStop(jobs_[together[i].trial], decisions[i]);
}

void Scheduler::ApplyStop(Job& trial, const StopDecision& decision) {
  auto running = running_.find(trial.id());
  // A trial already asked to stop (a user's cancel, a shutdown) ends as that asked.
  if (!decision.stop || running == running_.end() || running->second->cancel.cancelled() ||
      early_stops_.contains(trial.id())) {
    return;
  }
  early_stops_[trial.id()] = decision.reason;
  Publish(trial, LogNote(absl::StrCat("early stopped by the scheduler of sweep ",
                                      trial.trial().sweep_id(), ": ", decision.reason,
                                      "; the trial stops at its next step and ends "
                                      "CANCELLED (EARLY_STOPPED)")));
  StopRunning(trial.id(), Job::CANCELLED);
  spdlog::info("job {}: {}", trial.id(), decision.reason);
}

absl::StatusOr<Job> Scheduler::Submit(const mpsd::v1::SubmitJobRequest& request,
                                      const std::string& submitted_by,
                                      const SubmitCheck& may_submit) {
  if (may_submit) {
    if (absl::Status allowed = may_submit(request); !allowed.ok()) return allowed;
  }
  if (absl::Status valid = CheckRequest(request); !valid.ok()) return valid;
  bool resumes_from_dependency = false;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<const Job*> earlier = EarlierSubmit(request, submitted_by);
    if (!earlier.ok()) return earlier.status();
    if (*earlier != nullptr) return **earlier;
    if (!refuse_submits_.ok()) return refuse_submits_;
    if (absl::Status s = CheckAfter(request); !s.ok()) return s;
    if (absl::Status s = CheckModelJob(request); !s.ok()) return s;
    resumes_from_dependency = ResumesFromDependency(request);
  }
  // Validation reads the file system: not under mu_.
  std::vector<mpsd::v1::SubmitJobRequest> trials;
  std::vector<mpsd::v1::SweepTrial> info;
  if (request.has_sweep()) {
    absl::StatusOr<std::vector<SweepTrialRequest>> expanded = ExpandSweep(request);
    if (!expanded.ok()) return expanded.status();
    // A sweep may set paths per trial (dataset.root, resume_from): each trial is asked about.
    for (const SweepTrialRequest& trial : *expanded) {
      if (!may_submit) break;
      if (absl::Status allowed = may_submit(trial.request); !allowed.ok()) return allowed;
    }
    for (SweepTrialRequest& trial : *expanded) {
      mpsd::v1::SubmitJobRequest check = ForValidation(trial.request, resumes_from_dependency);
      // The executor says whether the trial reports the metric the scheduler stops it by.
      if (request.sweep().has_scheduler()) {
        *check.mutable_sweep()->mutable_scheduler() = request.sweep().scheduler();
      }
      if (absl::Status valid = executor_->Validate(check); !valid.ok()) {
        return TrialError(trial, expanded->size(), valid);
      }
      trials.push_back(std::move(trial.request));
      info.push_back(std::move(trial.trial));
    }
  } else if (absl::Status valid =
                 executor_->Validate(ForValidation(request, resumes_from_dependency));
             !valid.ok()) {
    return valid;
  }
  if (absl::Status storage = CheckStorage(); !storage.ok()) return storage;
  // Events that cannot be stored now would leave a new job without its QUEUED event.
  if (absl::Status storing = event_log_.StorageError(); !storing.ok()) return storing;
  bool created = false;
  absl::StatusOr<Job> job = SubmitValidated(request, trials, info, submitted_by, &created);
  if (!job.ok() || !created) return job;
  // The caller hears of the job once its QUEUED event is stored, too; not under mu_. The
  // state dir may have been moved away while the job was stored: then its record is in the
  // moved database, and nothing here may run it or tell the client it was accepted.
  absl::Status stored = event_log_.Flush();
  if (stored.ok()) stored = CheckStorage();
  if (!stored.ok()) {
    WithdrawSubmit(*job, stored);
    return stored;
  }
  return job;
}

absl::Status Scheduler::CheckStorage() const {
  if (!options_.check_storage) return absl::OkStatus();
  return options_.check_storage();
}

void Scheduler::WithdrawSubmit(const Job& job, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> ids(job.trial_job_ids().begin(), job.trial_job_ids().end());
    ids.push_back(job.id());
    const std::string message = absl::StrCat("not accepted: ", why.message());
    for (const std::string& id : ids) {
      auto it = jobs_.find(id);
      if (it == jobs_.end() || it->second.kind() == Job::SWEEP) continue;
      if (it->second.state() == Job::QUEUED) {
        CancelQueued(it->second, Job::FAILURE_REASON_UNSPECIFIED, message);
      } else {  // Started before the executor's own check failed.
        StopRunning(id, Job::CANCELLED);
      }
    }
    if (job.kind() == Job::SWEEP) UpdateSweep(job.id());
    spdlog::error(
        "job {} was stored but cannot be acknowledged; it is CANCELLED and its submit "
        "refused: {}",
        job.id(), std::string(why.message()));
  }
  event_log_.Flush().IgnoreError();  // the submit already failed
}

absl::StatusOr<Job> Scheduler::SubmitValidated(
    const mpsd::v1::SubmitJobRequest& request,
    const std::vector<mpsd::v1::SubmitJobRequest>& trials,
    const std::vector<mpsd::v1::SweepTrial>& info, const std::string& submitted_by, bool* created) {
  absl::MutexLock lock(&mu_);
  *created = false;
  // A concurrent Submit with the same request_id may have won the race meanwhile.
  absl::StatusOr<const Job*> earlier = EarlierSubmit(request, submitted_by);
  if (!earlier.ok()) return earlier.status();
  if (*earlier != nullptr) return **earlier;
  if (shutting_down_) return absl::UnavailableError("shutting down");
  if (!refuse_submits_.ok()) return refuse_submits_;
  const size_t adding = request.has_sweep() ? trials.size() : 1;
  if (queue_.size() + adding > static_cast<size_t>(options_.max_queued)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "queue full (", options_.max_queued, ")",
        request.has_sweep()
            ? absl::StrCat(": the sweep has ", trials.size(), " trials, ", queue_.size(), " queued")
            : ""));
  }
  *created = true;
  if (request.has_sweep()) return EnqueueSweep(request, trials, info, submitted_by);
  return Enqueue(request, submitted_by);
}

absl::Status Scheduler::CheckAfter(const mpsd::v1::SubmitJobRequest& request) const {
  for (int i = 0; i < request.after_size(); ++i) {
    const std::string& id = request.after(i);
    if (jobs_.contains(id)) continue;
    if (auto damaged = damaged_.find(id); damaged != damaged_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("after[", i, "]: ", damaged->second.message()));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("after[", i, "]: no job ", id,
                     " (a job can wait only for jobs submitted before it, "
                     "which also keeps dependencies from forming a cycle)"));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::CheckModelJob(const mpsd::v1::SubmitJobRequest& request) const {
  const bool predict = request.has_predict_job();
  const std::string& id = predict ? request.predict_job().model() : request.eval_job().model();
  if ((!request.has_eval_job() && !predict) || !api::IsJobId(id)) return absl::OkStatus();
  const std::string field = predict ? "predict_job.model" : "eval_job.model";
  const auto refuse = [&field](const std::string& why) {
    return api::WithInvalidField(absl::InvalidArgumentError(absl::StrCat(field, ": ", why)), field);
  };
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return refuse(absl::StrCat("no job ", id));
  const Job& job = it->second;
  if (job.kind() != Job::TRAIN_JOB) {
    return refuse(absl::StrCat("job ", id, " is not a TrainJob (kind ", Job::Kind_Name(job.kind()),
                               "): only a TrainJob leaves a model"));
  }
  if (job.state() != Job::SUCCEEDED) {
    return refuse(absl::StrCat("job ", id, " is ", Job::State_Name(job.state()),
                               ": the model of a TrainJob that SUCCEEDED is needed (its "
                               "finished model.pt)"));
  }
  return absl::OkStatus();
}

bool Scheduler::ResumesFromDependency(const mpsd::v1::SubmitJobRequest& request) const {
  const std::string& from = request.train_job().resume_from();
  if (!api::IsJobId(from)) return false;
  if (std::find(request.after().begin(), request.after().end(), from) == request.after().end()) {
    return false;
  }
  auto it = jobs_.find(from);
  return it != jobs_.end() && !api::IsTerminal(it->second.state());
}

void Scheduler::RefuseSubmits(absl::Status why) {
  absl::MutexLock lock(&mu_);
  refuse_submits_ = std::move(why);
}

std::string Scheduler::RequestKey(const std::string& submitted_by, const std::string& request_id) {
  // Rows of an mpsd older than submitted_by were all submitted over the unix socket.
  return absl::StrCat(submitted_by.empty() ? "local" : submitted_by, "\n", request_id);
}

absl::StatusOr<const Job*> Scheduler::EarlierSubmit(const mpsd::v1::SubmitJobRequest& request,
                                                    const std::string& submitted_by) const {
  if (request.request_id().empty()) return nullptr;
  auto id = request_ids_.find(RequestKey(submitted_by, request.request_id()));
  if (id == request_ids_.end()) return nullptr;
  const Job& job = jobs_.at(id->second);
  if (!google::protobuf::util::MessageDifferencer::Equals(job.spec(), request)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id: \"", request.request_id(), "\" was already used for job ",
                     job.id(), " with a different request; use a new request_id for a new job"));
  }
  return &job;
}

absl::StatusOr<Job> Scheduler::Enqueue(const mpsd::v1::SubmitJobRequest& request,
                                       const std::string& submitted_by,
                                       const mpsd::v1::SweepTrial* trial, bool check_dependencies) {
  Job job;
  job.set_submitted_by(submitted_by);
  job.set_kind(KindOf(request));
  job.set_state(Job::QUEUED);
  *job.mutable_created_at() = Now();
  *job.mutable_spec() = request;
  *job.mutable_effective_spec() = api::EffectiveSpec(request);
  job.set_priority(request.priority());
  if (trial != nullptr) *job.mutable_trial() = *trial;
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
  if (!request.request_id().empty()) {
    request_ids_[RequestKey(submitted_by, request.request_id())] = id;
  }
  InsertInQueue(stored);
  spdlog::info("job {} queued by {}, priority {} ({} in queue)", id, submitted_by,
               request.priority(), queue_.size());
  if (check_dependencies) {
    if (const Job* failed = FailedDependency(stored)) CancelForDependency(id, *failed);
  }
  return jobs_.at(id);
}

absl::StatusOr<Job> Scheduler::EnqueueSweep(const mpsd::v1::SubmitJobRequest& request,
                                            const std::vector<mpsd::v1::SubmitJobRequest>& trials,
                                            const std::vector<mpsd::v1::SweepTrial>& info,
                                            const std::string& submitted_by) {
  Job parent;
  parent.set_submitted_by(submitted_by);
  parent.set_kind(Job::SWEEP);
  parent.set_state(Job::QUEUED);
  *parent.mutable_created_at() = Now();
  *parent.mutable_spec() = request;
  parent.set_priority(request.priority());
  absl::StatusOr<Job> inserted = store_->InsertJob(std::move(parent));
  if (!inserted.ok()) return inserted.status();
  const std::string sweep_id = inserted->id();
  jobs_[sweep_id] = *std::move(inserted);
  JobEvent queued;
  queued.mutable_state()->set_state(Job::QUEUED);
  Publish(jobs_.at(sweep_id), std::move(queued));
  if (!request.request_id().empty()) {
    request_ids_[RequestKey(submitted_by, request.request_id())] = sweep_id;
  }
  std::vector<std::string> trial_ids;
  for (size_t i = 0; i < trials.size(); ++i) {
    mpsd::v1::SubmitJobRequest trial_request = trials[i];
    (*trial_request.mutable_labels())[kSweepLabel] = sweep_id;
    mpsd::v1::SweepTrial trial = info[i];
    trial.set_sweep_id(sweep_id);
    absl::StatusOr<Job> job =
        Enqueue(trial_request, submitted_by, &trial, /*check_dependencies=*/false);
    if (!job.ok()) return job.status();
    trial_ids.push_back(job->id());
  }
  Job& stored = jobs_.at(sweep_id);  // jobs_ grew: no reference from before is valid
  for (const std::string& id : trial_ids) stored.add_trial_job_ids(id);
  event_log_.Append(stored, {});
  int max_epochs = 1;
  for (const std::string& id : trial_ids) {
    max_epochs = std::max(max_epochs, TrialEpochs(jobs_.at(id)));
  }
  AddStopper(stored, max_epochs);
  spdlog::info("sweep {} queued by {}: {} trials (jobs {} to {})", sweep_id, submitted_by,
               trial_ids.size(), trial_ids.front(), trial_ids.back());
  for (const std::string& id : trial_ids) {
    const Job& job = jobs_.at(id);
    if (job.state() != Job::QUEUED) continue;
    if (const Job* failed = FailedDependency(job)) CancelForDependency(id, *failed);
  }
  return jobs_.at(sweep_id);
}

int32_t Scheduler::PriorityOf(const Job& job) {
  return job.has_priority() ? job.priority() : job.spec().priority();
}

void Scheduler::InsertInQueue(const Job& job) {
  const int32_t priority = PriorityOf(job);
  auto behind = std::find_if(queue_.begin(), queue_.end(),
                             [&](const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                               return PriorityOf(jobs_.at(id)) < priority;
                             });
  queue_.insert(behind, job.id());
}

const Job* Scheduler::FailedDependency(const Job& job) const {
  for (const std::string& id : job.spec().after()) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;  // damaged rows: CheckAfter refused them at submit
    const Job::State state = it->second.state();
    if (api::IsTerminal(state) && state != Job::SUCCEEDED) return &it->second;
  }
  return nullptr;
}

std::deque<std::string>::const_iterator Scheduler::NextReady() const {
  return std::find_if(queue_.begin(), queue_.end(),
                      [this](const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                        return DependenciesSucceeded(jobs_.at(id));
                      });
}

bool Scheduler::DependenciesSucceeded(const Job& job) const {
  for (const std::string& dependency : job.spec().after()) {
    auto it = jobs_.find(dependency);
    if (it != jobs_.end() && it->second.state() != Job::SUCCEEDED) return false;
  }
  return true;
}

void Scheduler::CancelQueued(Job& job, Job::FailureReason reason, const std::string& message) {
  auto queued = std::find(queue_.begin(), queue_.end(), job.id());
  if (queued != queue_.end()) queue_.erase(queued);
  *job.mutable_finished_at() = Now();
  SetState(job, Job::CANCELLED, reason, message);
}

void Scheduler::CancelForDependency(const std::string& job_id, const Job& dependency) {
  Job& job = jobs_.at(job_id);
  if (job.state() != Job::QUEUED) return;
  // Copied: ending this job may end others and change `dependency`'s sweep.
  const std::string message = absl::StrCat(
      "dependency job ", dependency.id(), " ended ", Job::State_Name(dependency.state()),
      dependency.message().empty() ? "" : absl::StrCat(": ", dependency.message()));
  const Job dependency_copy = dependency;
  spdlog::info("job {} CANCELLED: {}", job_id, message);
  if (job.kind() != Job::SWEEP) {
    CancelQueued(job, Job::DEPENDENCY_FAILED, message);
    return;
  }
  *job.mutable_finished_at() = Now();
  SetState(job, Job::CANCELLED, Job::DEPENDENCY_FAILED, message);
  const std::vector<std::string> trials(job.trial_job_ids().begin(), job.trial_job_ids().end());
  for (const std::string& id : trials) CancelForDependency(id, dependency_copy);
}

void Scheduler::AfterStateChange(const Job& job) {
  if (job.has_trial()) UpdateSweep(job.trial().sweep_id());
  // However a sweep ended (its trials, a cancel, a failed dependency): its rule is done.
  if (job.kind() == Job::SWEEP && api::IsTerminal(job.state())) stoppers_.erase(job.id());
  if (!api::IsTerminal(job.state()) || job.state() == Job::SUCCEEDED) return;
  std::vector<std::string> waiting;
  for (const auto& [id, other] : jobs_) {
    if (other.state() != Job::QUEUED) continue;
    if (std::find(other.spec().after().begin(), other.spec().after().end(), job.id()) !=
        other.spec().after().end()) {
      waiting.push_back(id);
    }
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const std::string& a, const std::string& b) { return NumericId(a) < NumericId(b); });
  const Job ended = job;  // `job` may be a sweep that the cancels below change
  for (const std::string& id : waiting) CancelForDependency(id, ended);
}

void Scheduler::UpdateSweep(const std::string& sweep_id) {
  auto it = jobs_.find(sweep_id);
  if (it == jobs_.end() || api::IsTerminal(it->second.state())) return;
  Job& sweep = it->second;
  int ended = 0, succeeded = 0, failed = 0, running = 0, early_stopped = 0;
  std::string first_failure;
  Job::FailureReason first_reason = Job::INTERNAL;
  for (const std::string& id : sweep.trial_job_ids()) {
    auto trial = jobs_.find(id);
    if (trial == jobs_.end()) continue;
    const Job& t = trial->second;
    if (t.state() == Job::RUNNING) ++running;
    if (!api::IsTerminal(t.state())) continue;
    ++ended;
    if (t.state() == Job::SUCCEEDED) ++succeeded;
    if (t.state() == Job::CANCELLED && t.failure_reason() == Job::EARLY_STOPPED) ++early_stopped;
    if (t.state() == Job::FAILED && failed++ == 0) {
      first_failure = absl::StrCat("; first: job ", id, ": ", t.message());
      if (t.failure_reason() != Job::FAILURE_REASON_UNSPECIFIED) first_reason = t.failure_reason();
    }
  }
  const int total = sweep.trial_job_ids_size();
  if (total > 0 && ended == total) {
    *sweep.mutable_finished_at() = Now();
    // Trials the sweep's scheduler stopped early are the rule doing its job, not a failure.
    if (succeeded == total) {
      SetState(
          sweep, Job::SUCCEEDED, Job::FAILURE_REASON_UNSPECIFIED,
          total == 1 ? "its 1 trial succeeded" : absl::StrCat("all ", total, " trials succeeded"));
    } else if (succeeded + early_stopped == total) {
      SetState(sweep, Job::SUCCEEDED, Job::FAILURE_REASON_UNSPECIFIED,
               absl::StrCat(succeeded, " of ", total, " trials succeeded; ", early_stopped,
                            early_stopped == 1 ? " was" : " were",
                            " stopped early by the sweep's scheduler"));
    } else if (failed > 0) {
      // The first failed trial's reason (a trial that diverged makes a DIVERGED sweep, not an
      // INTERNAL one).
      SetState(sweep, Job::FAILED, first_reason,
               absl::StrCat(failed, " of ", total, " trials failed", first_failure));
    } else {
      SetState(sweep, Job::CANCELLED, Job::FAILURE_REASON_UNSPECIFIED,
               absl::StrCat(total - succeeded - early_stopped, " of ", total,
                            " trials did not finish (cancelled or interrupted)"));
    }
  } else if (sweep.state() == Job::QUEUED && running > 0) {
    if (!sweep.has_started_at()) *sweep.mutable_started_at() = Now();
    SetState(sweep, Job::RUNNING, Job::FAILURE_REASON_UNSPECIFIED, "");
  } else if (sweep.state() == Job::RUNNING && running == 0 && paused_) {
    // What is true while the queue is held: none of its trials runs.
    SetState(sweep, Job::QUEUED, Job::FAILURE_REASON_UNSPECIFIED,
             absl::StrCat("queue paused: ", ended, " of ", total,
                          " trials ended, the others "
                          "wait (mpsctl resume)"));
  }
}

void Scheduler::UpdateSweeps() {
  std::vector<std::string> sweeps;
  for (const auto& [id, job] : jobs_) {
    if (job.kind() == Job::SWEEP && !api::IsTerminal(job.state())) sweeps.push_back(id);
  }
  for (const std::string& id : sweeps) UpdateSweep(id);
}

absl::Status Scheduler::UnknownJob(const std::string& job_id) const {
  auto damaged = damaged_.find(job_id);
  if (damaged != damaged_.end()) return damaged->second;
  return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
}

namespace {

// INVALID_ARGUMENT for what cannot name a job at all ("", "abc", "01"), so that a client tells a
// malformed id from one that names no job (NOT_FOUND).
// `text` for an error message: escaped, and cut after 64 bytes ("…" and its length then
// follow). An 8 KB id echoed whole made the answer's trailing metadata exceed gRPC's limit
// (RESOURCE_EXHAUSTED "received initial metadata size exceeds limit").
std::string Shown(const std::string& text) {
  constexpr size_t kShownBytes = 64;
  if (text.size() <= kShownBytes) return absl::StrCat("\"", absl::CEscape(text), "\"");
  return absl::StrCat("\"", absl::CEscape(text.substr(0, kShownBytes)), "\"… (", text.size(),
                      " bytes)");
}

absl::Status CheckJobId(const std::string& job_id) {
  if (api::ParseJobId(job_id).has_value()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("job_id: ", Shown(job_id),
                   " is not a job id (job ids are decimal numbers: \"1\", \"2\", ...)"));
}

}  // namespace

absl::StatusOr<Job> Scheduler::Get(const std::string& job_id) const {
  if (absl::Status s = CheckJobId(job_id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return UnknownJob(job_id);
  return it->second;
}

std::vector<std::string> Scheduler::DamagedJobIds() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, status] : damaged_) ids.push_back(id);
  std::sort(ids.begin(), ids.end(), [](const std::string& a, const std::string& b) {
    return api::ParseJobId(a).value_or(0) > api::ParseJobId(b).value_or(0);
  });
  return ids;
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
  // A failed commit is kept and retried (EventLog); the cancel stands either way.
  if (job.ok() && job->state() == Job::CANCELLED) event_log_.Flush().IgnoreError();
  return job;
}

absl::StatusOr<Job> Scheduler::RequestCancel(const std::string& job_id) {
  if (absl::Status s = CheckJobId(job_id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return UnknownJob(job_id);
  Job& job = it->second;
  if (api::IsTerminal(job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " already finished (", Job::State_Name(job.state()), ")"));
  }
  if (job.kind() == Job::SWEEP) {
    const std::vector<std::string> trials(job.trial_job_ids().begin(), job.trial_job_ids().end());
    for (const std::string& id : trials) {
      Job& trial = jobs_.at(id);
      if (trial.state() == Job::QUEUED) {
        CancelQueued(trial, Job::FAILURE_REASON_UNSPECIFIED,
                     absl::StrCat("cancelled with its sweep ", job_id, " while queued"));
      } else if (StopRunning(id, Job::CANCELLED)) {
        spdlog::info("job {}: cancel of sweep {} requested; stopping at the next step", id, job_id);
      }
    }
    UpdateSweep(job_id);
    return jobs_.at(job_id);
  }
  if (job.state() == Job::QUEUED) {
    CancelQueued(job, Job::FAILURE_REASON_UNSPECIFIED, "cancelled while queued");
  } else if (StopRunning(job_id, Job::CANCELLED)) {
    spdlog::info("job {}: cancel requested; stopping at the next step", job_id);
  }
  return job;
}

absl::Status Scheduler::Pause() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = store_->PutSetting("queue_paused", "1"); !s.ok()) return s;
  if (!paused_) spdlog::info("queue paused: queued jobs wait (mpsctl resume)");
  paused_ = true;
  UpdateSweeps();
  return absl::OkStatus();
}

absl::Status Scheduler::Resume() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = store_->PutSetting("queue_paused", "0"); !s.ok()) return s;
  if (paused_) spdlog::info("queue resumed");
  paused_ = false;
  return absl::OkStatus();
}

absl::StatusOr<Job> Scheduler::Move(const std::string& job_id, int32_t priority) {
  absl::StatusOr<Job> moved = [&]() -> absl::StatusOr<Job> {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return UnknownJob(job_id);
    std::vector<std::string> ids;
    if (it->second.kind() == Job::SWEEP) {
      for (const std::string& id : it->second.trial_job_ids()) {
        if (jobs_.at(id).state() == Job::QUEUED) ids.push_back(id);
      }
    } else if (it->second.state() == Job::QUEUED) {
      ids.push_back(job_id);
    }
    if (ids.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is ", Job::State_Name(it->second.state()),
                       it->second.kind() == Job::SWEEP ? " with no queued trial" : "",
                       "; only a queued job can be moved"));
    }
    if (it->second.kind() == Job::SWEEP) {
      it->second.set_priority(priority);
      event_log_.Append(it->second, {});
    }
    for (const std::string& id : ids) {
      Job& job = jobs_.at(id);
      queue_.erase(std::find(queue_.begin(), queue_.end(), id));
      job.set_priority(priority);
      InsertInQueue(job);
      event_log_.Append(job, {});
    }
    spdlog::info("job {} moved to priority {}", job_id, priority);
    return jobs_.at(job_id);
  }();
  if (moved.ok()) event_log_.Flush().IgnoreError();  // kept and retried if it fails
  return moved;
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
  stats.paused = paused_;
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
      std::vector<std::string> running;
      for (const auto& [id, flag] : running_) running.push_back(id);
      for (const std::string& id : running) StopRunning(id, Job::INTERRUPTED);
    }
  }
  if (executor_thread_.joinable()) executor_thread_.join();
  event_log_.Flush().IgnoreError();  // kept and retried if it fails
}

absl::Duration Scheduler::EarlierRunTime(const std::string& job_id) const {
  absl::Duration total;
  std::optional<absl::Time> running_since;
  // A run ends with its last event: a daemon killed outright says QUEUED only when it starts
  // again, and the time between is nobody's run.
  absl::Time last_seen;
  int64_t after = 0;
  for (;;) {
    absl::StatusOr<std::vector<JobEvent>> page = event_log_.Read(job_id, after, 1000);
    if (!page.ok() || page->empty()) break;
    for (const JobEvent& event : *page) {
      after = event.seq();
      const absl::Time at = absl::FromUnixMicros(
          google::protobuf::util::TimeUtil::TimestampToMicroseconds(event.time()));
      if (!event.has_state()) {
        last_seen = at;
        continue;
      }
      if (running_since.has_value()) total += std::max(last_seen, *running_since) - *running_since;
      running_since.reset();
      if (event.state().state() == Job::RUNNING) running_since = last_seen = at;
    }
  }
  // The RUNNING event of this run is the last one read: it is not an earlier run.
  return total;
}

bool Scheduler::CanStartJob() const {
  return !paused_ && refuse_submits_.ok() && NextReady() != queue_.end();
}

void Scheduler::ExecutorLoop() {
  for (;;) {
    std::string job_id;
    mpsd::v1::SubmitJobRequest spec;
    std::string resume_checkpoint;
    std::string submitted_by;
    // Trials of the same sweep that may run fused with this one, with their specs.
    std::vector<std::string> candidates;
    std::vector<mpsd::v1::SubmitJobRequest> specs;
    SweepFusion fusion;
    {
      absl::MutexLock lock(&mu_);
      // Queued jobs that wait for unfinished dependencies are passed over; when every queued
      // job waits, the jobs it waits for are running or queued ahead (a failed dependency
      // cancels its dependents at once), so the wait ends when they do.
      // While the state dir is lost (refuse_submits_), queued jobs wait for a daemon that
      // has it: run here, they would write their artifacts where their records are not.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return shutting_down_ || CanStartJob();
      };
      mu_.Await(absl::Condition(&ready));
      if (shutting_down_) return;
    }
    // Not under mu_: a failed check calls RefuseSubmits, and the loop waits again.
    if (absl::Status storage = CheckStorage(); !storage.ok()) {
      RefuseSubmits(storage);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_) return;
      if (!CanStartJob()) continue;
      auto next = NextReady();
      job_id = *next;
      queue_.erase(next);
      running_job_ = job_id;
      // RUNNING in the same critical section that took it off the queue: a cancel in between
      // would find a QUEUED job that is in no queue.
      Job& job = jobs_[job_id];
      StartRunning(job);
      spec = job.spec();
      submitted_by = job.submitted_by();
      // Only a job queued again by restart_policy: resume has a checkpoint before it runs.
      resume_checkpoint = job.last_checkpoint().path();
      if (job.has_trial() && resume_checkpoint.empty() && spec.has_train_job()) {
        auto sweep = jobs_.find(job.trial().sweep_id());
        if (sweep != jobs_.end()) {
          // Checked at submit; a stored sweep that no longer reads runs unfused.
          fusion = ReadSweepFusion(sweep->second.spec().sweep()).value_or(SweepFusion{1, false});
          candidates = FusionCandidates(job, fusion.max_trials);
          specs.push_back(spec);
          for (const std::string& id : candidates) specs.push_back(jobs_.at(id).spec());
          // A trial that runs alone says why: no silence where a reader expects fusion.
          if (candidates.empty()) Publish(job, RunsAloneNote(job.trial().sweep_id(), fusion));
        }
      }
    }
    if (candidates.empty()) {
      RunJob(job_id, submitted_by, spec, resume_checkpoint);
      continue;
    }
    // Not under mu_: the executor answers over its socket.
    const absl::StatusOr<std::vector<int>> planned =
        executor_->PlanFusion(specs, fusion.max_trials);
    std::vector<std::string> group = {job_id};
    std::vector<mpsd::v1::SubmitJobRequest> group_specs = {spec};
    {
      absl::MutexLock lock(&mu_);
      Job& lead = jobs_[job_id];
      if (!planned.ok()) {
        std::vector<std::string> offered = {job_id};
        offered.insert(offered.end(), candidates.begin(), candidates.end());
        Publish(lead, LogNote(absl::StrCat("not trained fused with other trials of sweep ",
                                           lead.trial().sweep_id(), ": ",
                                           NotFusedReason(planned.status(), offered))));
      } else {
        // The planned trials that are still queued (one may have been cancelled meanwhile):
        // each was fusable with the lead on its own, so any of them still are.
        for (const int index : *planned) {
          if (index < 1 || index > static_cast<int>(candidates.size())) continue;  // the lead
          const std::string& id = candidates[static_cast<size_t>(index) - 1];
          auto queued = std::find(queue_.begin(), queue_.end(), id);
          if (queued == queue_.end()) continue;
          queue_.erase(queued);
          StartRunning(jobs_[id]);
          group.push_back(id);
          group_specs.push_back(specs[static_cast<size_t>(index)]);
        }
        if (group.size() > 1) {
          auto run = std::make_shared<FusedEpochs>();
          run->sweep_id = lead.trial().sweep_id();
          for (const std::string& id : group) {
            jobs_[id].mutable_trial()->set_fused_lead(job_id);  // stored with the note below
            if (stoppers_.contains(run->sweep_id)) {
              run->running.insert(id);
              fused_epochs_[id] = run;
            }
          }
          const std::string text =
              absl::StrCat("trained fused with ", group.size() - 1, " other trial(s) of sweep ",
                           lead.trial().sweep_id(), ": jobs ", absl::StrJoin(group, ", "),
                           fusion.shared_data_order ? " (data_order: shared)" : "");
          for (const std::string& id : group) Publish(jobs_[id], LogNote(text));
          spdlog::info("jobs {}: {}", absl::StrJoin(group, ", "), text);
        }
      }
    }
    if (group.size() == 1) {
      RunJob(job_id, submitted_by, spec, resume_checkpoint);
    } else {
      RunFusedJobs(group, submitted_by, group_specs, fusion.shared_data_order);
    }
  }
}

void Scheduler::StartRunning(Job& job) {
  // A job resumed after a restart keeps the time it first started.
  if (!job.has_started_at()) *job.mutable_started_at() = Now();
  running_[job.id()] = std::make_unique<Running>();
  SetState(job, Job::RUNNING, Job::FAILURE_REASON_UNSPECIFIED, "");
}

bool Scheduler::StopRunning(const std::string& job_id, Job::State as) {
  auto it = running_.find(job_id);
  if (it == running_.end()) return false;
  it->second->stop_as = as;
  it->second->cancel.Cancel();
  return true;
}

std::vector<std::string> Scheduler::FusionCandidates(const Job& lead, int max_trials) const {
  std::vector<std::string> candidates;
  for (const std::string& id : queue_) {
    if (static_cast<int>(candidates.size()) + 1 >= max_trials) break;
    const Job& job = jobs_.at(id);
    if (!job.has_trial() || job.trial().sweep_id() != lead.trial().sweep_id()) continue;
    if (!job.last_checkpoint().path().empty()) continue;  // resumes alone
    if (DependenciesSucceeded(job)) candidates.push_back(id);
  }
  return candidates;
}

void Scheduler::RunJob(const std::string& job_id, const std::string& submitted_by,
                       const mpsd::v1::SubmitJobRequest& spec,
                       const std::string& resume_checkpoint) {
  spdlog::info("job {} running", job_id);
  // The executor's summary of a resumed job counts from the resume: add the runs before it.
  // They are read from the store, where the event log writes in batches: until the restart's
  // QUEUED is committed, the first run has no end and would count nothing (seen 1 in 4 runs).
  if (!resume_checkpoint.empty()) event_log_.Flush().IgnoreError();  // failing: counted as read
  const absl::Duration earlier =
      resume_checkpoint.empty() ? absl::ZeroDuration() : EarlierRunTime(job_id);
  auto sink = [this, &job_id, earlier](JobEvent event) {
    if (event.has_summary() && earlier > absl::ZeroDuration()) {
      mpsd::v1::JobSummary& summary = *event.mutable_summary();
      summary.set_total_time_s(summary.total_time_s() + absl::ToDoubleSeconds(earlier));
    }
    absl::MutexLock lock(&mu_);
    PublishRunEvent(job_id, std::move(event));
  };
  mpsd::api::JobContext context;
  context.job_id = job_id;
  context.resume_checkpoint = resume_checkpoint;
  const Running* running;
  {
    absl::MutexLock lock(&mu_);
    running = running_.at(job_id).get();
  }
  absl::Status status =
      options_.check_paths ? options_.check_paths(submitted_by, spec) : absl::OkStatus();
  if (!status.ok()) {
    spdlog::warn("job {}: refused at its start: {}", job_id, std::string(status.message()));
  } else {
    status = executor_->Run(context, spec, sink, running->cancel);
  }
  absl::MutexLock lock(&mu_);
  FinishJob(job_id, status, resume_checkpoint);
  running_job_.clear();
}

void Scheduler::RunFusedJobs(const std::vector<std::string>& job_ids,
                             const std::string& submitted_by,
                             const std::vector<mpsd::v1::SubmitJobRequest>& specs,
                             bool shared_data_order) {
  std::vector<mpsd::api::TrialRun> trials;
  std::vector<size_t> refused;
  for (size_t i = 0; i < job_ids.size(); ++i) {
    const std::string& id = job_ids[i];
    spdlog::info("job {} running (fused)", id);
    absl::Status check =
        options_.check_paths ? options_.check_paths(submitted_by, specs[i]) : absl::OkStatus();
    if (!check.ok()) {
      spdlog::warn("job {}: refused at its start: {}", id, std::string(check.message()));
      absl::MutexLock lock(&mu_);
      FinishJob(id, check, "");
      continue;
    }
    mpsd::api::TrialRun& trial = trials.emplace_back();
    trial.job.job_id = id;
    trial.spec = specs[i];
    {
      absl::MutexLock lock(&mu_);
      trial.cancelled = &running_.at(id)->cancel;
    }
    trial.sink = [this, id](JobEvent event) {
      absl::MutexLock lock(&mu_);
      PublishRunEvent(id, std::move(event));
    };
    trial.done = [this, id](const absl::Status& status) {
      absl::MutexLock lock(&mu_);
      FinishJob(id, status, "");
    };
  }
  mpsd::api::FusionOptions options;
  options.shared_data_order = shared_data_order;
  if (!trials.empty()) executor_->RunFused(trials, options);
  absl::MutexLock lock(&mu_);
  // An executor that returned without `done` for a trial: settled here.
  for (const mpsd::api::TrialRun& trial : trials) {
    if (running_.contains(trial.job.job_id)) {
      FinishJob(trial.job.job_id, absl::InternalError("the fused run ended without its result"),
                "");
    }
  }
  running_job_.clear();
}

void Scheduler::FinishJob(const std::string& job_id, const absl::Status& status,
                          const std::string& resume_checkpoint) {
  auto it = running_.find(job_id);
  if (it == running_.end()) return;  // settled already
  const Job::State stop_as = it->second->stop_as.load();
  running_.erase(it);
  if (auto fused = fused_epochs_.find(job_id); fused != fused_epochs_.end()) {
    // The rest of its run no longer waits for its epochs (a decision on it now changes nothing:
    // it no longer runs).
    const std::shared_ptr<FusedEpochs> run = fused->second;
    fused_epochs_.erase(fused);
    run->running.erase(job_id);
    DecideFusedEpochs(*run, /*now=*/false);
  }
  std::optional<std::string> early_stop;
  if (auto stopped = early_stops_.find(job_id); stopped != early_stops_.end()) {
    early_stop = std::move(stopped->second);
    early_stops_.erase(stopped);
  }
  Job& job = jobs_[job_id];
  *job.mutable_finished_at() = Now();
  ++jobs_run_;
  if (status.ok()) {
    SetState(job, Job::SUCCEEDED, Job::FAILURE_REASON_UNSPECIFIED, "");
  } else if (status.code() == absl::StatusCode::kCancelled && early_stop.has_value()) {
    // Whatever else asked it to stop meanwhile (a cancel, a shutdown): the rule did first.
    if (api::HasCause(status, api::ErrorCause::CANCEL_NOT_HONOURED)) {
      absl::StrAppend(&*early_stop, "; ", status.message());
    }
    SetState(job, Job::CANCELLED, Job::EARLY_STOPPED, *early_stop);
  } else if (status.code() == absl::StatusCode::kCancelled && stop_as == Job::INTERRUPTED &&
             ResumesAfterRestart(job)) {
    // Stays queued in the store: the next start runs it again from its checkpoint.
    SetState(job, Job::QUEUED, Job::FAILURE_REASON_UNSPECIFIED,
             ResumeMessage(job, "mpsd shut down while the job ran"));
  } else if (status.code() == absl::StatusCode::kCancelled && stop_as == Job::INTERRUPTED &&
             RestartsTrialAfterRestart(job) &&
             !api::HasCause(status, api::ErrorCause::CANCEL_NOT_HONOURED)) {
    // Stays queued in the store: the next start trains it again from its start.
    QueueTrialFromItsStart(job);
    SetState(job, Job::QUEUED, Job::FAILURE_REASON_UNSPECIFIED,
             absl::StrCat("queued again: mpsd shut down while the trial ran", kTrialStartsOver));
  } else if (status.code() == absl::StatusCode::kCancelled) {
    const Job::State state = stop_as;
    std::string message =
        state == Job::CANCELLED ? "cancelled by request" : "interrupted: mpsd shut down";
    // The executor ignored the cancel and was killed (ExecutorSupervisor::Run): say so, and
    // that a new executor replaced it.
    if (api::HasCause(status, api::ErrorCause::CANCEL_NOT_HONOURED)) {
      absl::StrAppend(&message, "; ", status.message());
    }
    SetState(job, state, Job::FAILURE_REASON_UNSPECIFIED, message);
  } else if (!resume_checkpoint.empty() && api::InvalidFieldOf(status) == "train_job.resume_from") {
    // Not the spec's fault: the daemon's own checkpoint could not be used.
    SetState(job, Job::FAILED, Job::INTERNAL, AutoResumeFailure(resume_checkpoint, status));
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
  AfterStateChange(job);
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
