// JobService: unary RPCs answered from the scheduler; StreamEvents replays then follows.
#include "server/job_service.h"

#include <deque>
#include <functional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/status_util.h"

namespace mpsd::server {
namespace {

using mpsd::v1::JobEvent;

// Events read from the store per batch: bounds a stream's memory, however far behind it is.
constexpr int kReadBatch = 256;

// One StreamEvents call: writes committed events with seq > after_seq, one write in flight,
// reading the next batch when the last is sent and waiting on the EventLog when none is left.
// Ends with OK after the terminal state event, or UNAVAILABLE when the daemon shuts down
// before the job finished. Deletes itself in OnDone, then calls `on_done`.
class EventStreamReactor final : public grpc::ServerWriteReactor<JobEvent> {
 public:
  EventStreamReactor(EventLog* log, std::string job_id, int64_t after_seq,
                     std::function<void()> on_done)
      : log_(log),
        job_id_(std::move(job_id)),
        on_done_(std::move(on_done)),
        last_seq_(after_seq) {}

  void Start() {
    absl::MutexLock lock(&mu_);
    Next();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {  // The client is gone; the status goes nowhere.
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed"));
      return;
    }
    const JobEvent& sent = pending_.front();
    last_seq_ = sent.seq();
    const bool terminal = sent.has_state() && IsTerminal(sent.state().state());
    pending_.pop_front();
    if (terminal) {
      FinishOnce(grpc::Status::OK);
      return;
    }
    Next();
  }

  void OnCancel() override {
    uint64_t watch;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      watch = std::exchange(watch_id_, 0);
    }
    log_->Unwatch(watch);  // Without mu_: a running callback may be waiting for it.
    absl::MutexLock lock(&mu_);
    Next();  // Finishes now, or in OnWriteDone once the write in flight is done.
  }

  void OnDone() override {
    uint64_t watch;
    {
      absl::MutexLock lock(&mu_);
      watch = std::exchange(watch_id_, 0);
    }
    log_->Unwatch(watch);
    std::function<void()> on_done = std::move(on_done_);
    delete this;
    on_done();
  }

 private:
  void Next() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || write_in_flight_) return;
    // Also reached from OnWriteDone(ok) after a cancel: a cancelled stream must still Finish,
    // or gRPC's shutdown waits for it forever.
    if (cancelled_) {
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      return;
    }
    while (pending_.empty()) {
      // Read Closed() before the store: the log is closed only after its last commit, so a
      // closed log whose read comes back empty has nothing more for this job.
      const bool closed = log_->Closed();
      absl::StatusOr<std::vector<JobEvent>> events = log_->Read(job_id_, last_seq_, kReadBatch);
      if (!events.ok()) {
        FinishOnce(ToGrpcStatus(events.status()));
        return;
      }
      for (JobEvent& event : *events) pending_.push_back(std::move(event));
      if (!pending_.empty()) break;
      if (closed) {
        FinishOnce(grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            absl::StrCat("mpsd is shutting down before job ", job_id_,
                         " finished; resume with after_seq=", last_seq_)));
        return;
      }
      watch_id_ = log_->Watch(job_id_, last_seq_, [this] { OnCommitted(); });
      if (watch_id_ != 0) return;  // OnCommitted calls Next again.
      // Committed (or closed) between the read and the watch: read again.
    }
    write_in_flight_ = true;
    StartWrite(&pending_.front());
  }

  void OnCommitted() {
    absl::MutexLock lock(&mu_);
    watch_id_ = 0;
    Next();
  }

  void FinishOnce(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  EventLog* const log_;
  const std::string job_id_;
  std::function<void()> on_done_;

  absl::Mutex mu_;
  int64_t last_seq_ ABSL_GUARDED_BY(mu_);
  std::deque<JobEvent> pending_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t watch_id_ ABSL_GUARDED_BY(mu_) = 0;
};

// A stream whose answer is known before it starts (unknown job, nothing left to send).
class FinishedStreamReactor final : public grpc::ServerWriteReactor<JobEvent> {
 public:
  explicit FinishedStreamReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

template <typename T>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                 absl::StatusOr<T> result, T* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (result.ok()) *response = *std::move(result);
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* JobService::SubmitJob(grpc::CallbackServerContext* context,
                                                const mpsd::v1::SubmitJobRequest* request,
                                                mpsd::v1::Job* response) {
  return Answer(context, scheduler_->Submit(*request), response);
}

grpc::ServerUnaryReactor* JobService::GetJob(grpc::CallbackServerContext* context,
                                             const mpsd::v1::GetJobRequest* request,
                                             mpsd::v1::Job* response) {
  return Answer(context, scheduler_->Get(request->job_id()), response);
}

grpc::ServerUnaryReactor* JobService::ListJobs(grpc::CallbackServerContext* context,
                                               const mpsd::v1::ListJobsRequest* /*request*/,
                                               mpsd::v1::ListJobsResponse* response) {
  mpsd::v1::ListJobsResponse list;
  for (mpsd::v1::Job& job : scheduler_->List()) *list.add_jobs() = std::move(job);
  return Answer(context, absl::StatusOr<mpsd::v1::ListJobsResponse>(std::move(list)), response);
}

grpc::ServerUnaryReactor* JobService::CancelJob(grpc::CallbackServerContext* context,
                                                const mpsd::v1::CancelJobRequest* request,
                                                mpsd::v1::Job* response) {
  return Answer(context, scheduler_->Cancel(request->job_id()), response);
}

grpc::ServerWriteReactor<JobEvent>* JobService::StreamEvents(
    grpc::CallbackServerContext* /*context*/, const mpsd::v1::StreamEventsRequest* request) {
  absl::StatusOr<mpsd::v1::Job> job = scheduler_->Get(request->job_id());
  if (!job.ok()) return new FinishedStreamReactor(ToGrpcStatus(job.status()));
  if (request->after_seq() < 0) {
    return new FinishedStreamReactor(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "after_seq: must be >= 0"));
  }
  // A seq the job has not reached would be waited for forever.
  if (request->after_seq() > job->last_seq()) {
    return new FinishedStreamReactor(grpc::Status(
        grpc::StatusCode::OUT_OF_RANGE,
        absl::StrCat("after_seq: ", request->after_seq(), " is beyond job ", request->job_id(),
                     "'s last event (seq ", job->last_seq(), ")")));
  }
  // A finished job with nothing after after_seq has nothing more to say.
  if (IsTerminal(job->state()) && request->after_seq() >= job->last_seq()) {
    return new FinishedStreamReactor(grpc::Status::OK);
  }
  {
    absl::MutexLock lock(&mu_);
    ++open_streams_;
  }
  auto* reactor = new EventStreamReactor(&scheduler_->events(), request->job_id(),
                                         request->after_seq(), [this] {
                                           absl::MutexLock lock(&mu_);
                                           --open_streams_;
                                         });
  reactor->Start();
  return reactor;
}

bool JobService::WaitForStreamsToEnd(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_streams_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&ended), timeout);
}

grpc::ServerUnaryReactor* JobService::GetDevice(grpc::CallbackServerContext* context,
                                                const mpsd::v1::GetDeviceRequest* /*request*/,
                                                mpsd::v1::DeviceInfo* response) {
  return Answer(context, absl::StatusOr<mpsd::v1::DeviceInfo>(scheduler_->GetDevice()),
                response);
}

grpc::ServerUnaryReactor* JobService::ListModels(grpc::CallbackServerContext* context,
                                                 const mpsd::v1::ListModelsRequest* request,
                                                 mpsd::v1::ListModelsResponse* response) {
  return Answer(context, scheduler_->ListModels(*request), response);
}

}  // namespace mpsd::server
