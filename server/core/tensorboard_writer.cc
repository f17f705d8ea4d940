#include "server/core/tensorboard_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "api/effective_spec.h"
#include "api/job_state.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;

TensorBoardWriter::TensorBoardWriter(Options options)
    : options_(std::move(options)), thread_([this] { Loop(); }) {}

TensorBoardWriter::~TensorBoardWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.Signal();
  }
  thread_.join();
  for (auto& [id, files] : jobs_) {
    for (auto& writer : files.writers) (void)writer->Close();
  }
}

std::vector<std::string> TensorBoardWriter::DirsOf(const Job& job) const {
  std::vector<std::string> dirs;
  if (!job.spec().has_train_job()) return dirs;
  if (job.spec().train_job().tensorboard()) {
    dirs.push_back(absl::StrCat(options_.artifacts_dir, "/", job.id(), "/tensorboard"));
  }
  if (!options_.tensorboard_dir.empty()) {
    dirs.push_back(
        absl::StrCat(options_.tensorboard_dir, "/", tensorboard::RunName(job, /*with_id=*/true)));
  }
  return dirs;
}

void TensorBoardWriter::Observe(const Job& job, const JobEvent& event) {
  // A sweep's runs are its trials': the parent trains nothing, and a run of its own would hold
  // only its hyperparameters (an empty row in TensorBoard's HParams table).
  if (event.seq() == 0 || !job.spec().has_train_job() || job.kind() == Job::SWEEP) return;
  if (!job.spec().train_job().tensorboard() && options_.tensorboard_dir.empty()) return;
  absl::MutexLock lock(&mu_);
  std::shared_ptr<const Job>& kept = observed_[job.id()];
  if (kept == nullptr) {
    Job copy;
    copy.set_id(job.id());
    *copy.mutable_created_at() = job.created_at();
    *copy.mutable_spec() = job.spec();
    *copy.mutable_effective_spec() = api::EffectiveSpecOf(job);
    kept = std::make_shared<const Job>(std::move(copy));
  }
  queue_.push_back(Item{kept, event});
  if (event.has_state() && api::IsTerminal(event.state().state())) observed_.erase(job.id());
  ++queued_;
  work_.Signal();
}

void TensorBoardWriter::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = queued_;
  while (written_ < target) done_.Wait(&mu_);
}

void TensorBoardWriter::Loop() {
  for (;;) {
    std::vector<Item> items;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) work_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, everything written
      items.swap(queue_);
    }
    for (const Item& item : items) Write(item);
    FlushAll();  // the queue ran empty: readers see everything so far
    absl::MutexLock lock(&mu_);
    written_ += items.size();
    done_.SignalAll();
  }
}

void TensorBoardWriter::FlushAll() {
  for (auto& [id, files] : jobs_) {
    for (auto& writer : files.writers) (void)writer->Flush();
  }
}

void TensorBoardWriter::Write(const Item& item) {
  const JobEvent& event = item.event;
  auto found = jobs_.find(item.job->id());
  if (found == jobs_.end()) {
    // Files start with the job's run: a queued job, or one that ended without running, has none.
    const bool runs = event.has_step() || event.has_epoch() || event.has_summary() ||
                      (event.has_state() && event.state().state() == Job::RUNNING);
    if (!runs) return;
    JobFiles& files = jobs_[item.job->id()];
    if (event.seq() > 1 && options_.read_stored) {
      absl::StatusOr<std::vector<JobEvent>> stored =
          options_.read_stored(item.job->id(), event.seq());
      if (stored.ok()) {
        for (const JobEvent& earlier : *stored) files.history.Add(earlier);
      } else {
        spdlog::warn("job {}: TensorBoard file starts without the stored events: {}",
                     item.job->id(), stored.status().ToString());
      }
    }
    files.history.Add(event);
    if (absl::Status s = Rewrite(*item.job, files); !s.ok()) {
      spdlog::warn("job {}: not writing its TensorBoard file: {}", item.job->id(), s.ToString());
      files.failed = true;
    }
    return;
  }
  JobFiles& files = found->second;
  if (files.failed) return;
  const bool new_attempt = files.history.Add(event);
  const absl::Status written = new_attempt ? Rewrite(*item.job, files) : Append(event, files);
  if (!written.ok()) {
    spdlog::warn("job {}: not writing its TensorBoard file any more: {}", item.job->id(),
                 written.ToString());
    files.failed = true;
    files.writers.clear();
  }
  if (event.has_state() && api::IsTerminal(event.state().state())) {
    for (auto& writer : files.writers) (void)writer->Close();
    jobs_.erase(found);
  }
}

absl::Status TensorBoardWriter::Rewrite(const Job& job, JobFiles& files) {
  files.writers.clear();
  const mpsd::v1::JobSummary* summary =
      files.history.summary() ? &*files.history.summary() : nullptr;
  // `job` is Observe's copy, whose effective spec is already filled in.
  const auto hparams = tensorboard::HParamsOf(job.effective_spec(), summary);
  for (const std::string& dir : DirsOf(job)) {
    auto writer = tensorboard::EventFileWriter::Create(
        dir, static_cast<double>(job.created_at().seconds()), options_.host);
    if (!writer.ok()) return writer.status();
    if (absl::Status s = tensorboard::WriteHistory(files.history, hparams, writer->get());
        !s.ok()) {
      return s;
    }
    if (absl::Status s = (*writer)->Flush(); !s.ok()) return s;
    files.writers.push_back(*std::move(writer));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::Append(const JobEvent& event, JobFiles& files) {
  const tensorboard::JobHistory& history = files.history;
  absl::Status status;
  for (auto& writer : files.writers) {
    switch (event.payload_case()) {
      case JobEvent::kStep:
        status.Update(writer->WriteScalars(event.step().step(), tensorboard::WallTimeOf(event),
                                           tensorboard::StepScalars(event.step())));
        break;
      case JobEvent::kEpoch:
        status.Update(writer->WriteScalars(history.epochs().at(event.epoch().epoch()).step,
                                           tensorboard::WallTimeOf(event),
                                           tensorboard::EpochScalars(event.epoch())));
        status.Update(writer->Flush());
        break;
      case JobEvent::kSummary:
        status.Update(writer->WriteScalars(history.last_step(), tensorboard::WallTimeOf(event),
                                           tensorboard::SummaryScalars(event.summary())));
        break;
      case JobEvent::kState:
        if (api::IsTerminal(event.state().state())) {
          status.Update(writer->WriteSessionEnd(tensorboard::SessionStatusOf(event.state().state()),
                                                tensorboard::WallTimeOf(event)));
          status.Update(writer->Close());
        }
        break;
      default:
        break;
    }
  }
  return status;
}

}  // namespace mpsd::server
