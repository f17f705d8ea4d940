// JobService: unary RPCs answered from the scheduler; StreamEvents replays, follows and sends
// heartbeats while idle.
#include "server/grpc/job_service.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/attempts.h"
#include "api/error_cause.h"
#include "api/job_id.h"
#include "api/job_state.h"
#include "api/memory.h"
#include "api/metadata.h"
#include "api/sha256.h"
#include "api/status.h"
#include "api/user_code.h"
#include "google/protobuf/util/time_util.h"
#include "server/core/artifacts.h"
#include "server/core/job_query.h"
#include "server/core/uploads.h"
#include "server/grpc/grpc_auth.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

using mpsd::v1::JobEvent;

// api::ToGrpcStatus (the ErrorInfo that says mpsd answered), with "mpsd: " before an
// UNAVAILABLE message: gRPC's clients report a connection they could not make as UNAVAILABLE
// too, and a person reading the daemon's own should see who said it (the proto's JobService
// comment).
grpc::Status ToClientStatus(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnavailable) {
    return api::ToGrpcStatus(absl::Status(status.code(), absl::StrCat("mpsd: ", status.message())));
  }
  return api::ToGrpcStatus(status);
}

// Events read from the store per batch: bounds a stream's memory, however far behind it is.
constexpr int kReadBatch = 256;

// One StreamEvents call: writes committed events with seq > after_seq, one write in flight,
// reading the next batch when the last is sent and waiting on the EventLog when none is left.
// While it waits, the ticker calls OnTick, which sends a heartbeat (seq 0) once nothing was
// sent for the heartbeat interval. Ends with OK after the terminal state event, or UNAVAILABLE
// when the daemon shuts down before the job finished. Deletes itself in OnDone, then calls
// `on_done`.
//
// Threads: gRPC's (Start, OnWriteDone, OnCancel, OnDone), the EventLog's writer (OnCommitted)
// and the ticker's (OnTick), all serialised by mu_. The EventLog and the ticker each wait in
// Unwatch / Remove while a callback of this reactor runs, so both are called without mu_.
class EventStreamReactor final : public grpc::ServerWriteReactor<JobEvent> {
 public:
  // `stored_only`, `latest_attempt_only`: StreamEventsRequest's.
  EventStreamReactor(Scheduler* scheduler, Ticker* ticker, absl::Duration heartbeat_interval,
                     std::string job_id, int64_t after_seq, bool stored_only,
                     bool latest_attempt_only, std::function<void()> on_done)
      : scheduler_(scheduler),
        log_(&scheduler->events()),
        ticker_(ticker),
        heartbeat_interval_(heartbeat_interval),
        job_id_(std::move(job_id)),
        stored_only_(stored_only),
        latest_attempt_only_(latest_attempt_only),
        on_done_(std::move(on_done)),
        last_seq_(after_seq),
        read_seq_(after_seq) {}

  void Start() {
    absl::MutexLock lock(&mu_);
    if (latest_attempt_only_) {
      // The attempts among the stored events after after_seq (earlier ones supersede nothing
      // that is still to be sent): one pass over them before the replay.
      int64_t seq = read_seq_;
      for (;;) {
        absl::StatusOr<std::vector<JobEvent>> events = log_->Read(job_id_, seq, kReadBatch);
        if (!events.ok() || events->empty()) break;
        for (const JobEvent& event : *events) marks_.Add(event);
        seq = events->back().seq();
      }
      marks_through_ = seq;
    }
    last_sent_ = absl::Now();
    tick_id_ = ticker_->Add(last_sent_ + heartbeat_interval_,
                            [this](absl::Time now) { return OnTick(now); });
    Next();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {  // The client is gone; the status goes nowhere.
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed"));
      return;
    }
    if (std::exchange(heartbeat_in_flight_, false)) {
      Next();
      return;
    }
    const JobEvent& sent = pending_.front();
    last_seq_ = sent.seq();
    const bool terminal = sent.has_state() && api::IsTerminal(sent.state().state());
    pending_.pop_front();
    if (terminal) {
      FinishOnce(grpc::Status::OK);
      return;
    }
    Next();
  }

  void OnCancel() override {
    uint64_t watch, tick;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      watch = std::exchange(watch_id_, 0);
      tick = std::exchange(tick_id_, 0);
    }
    // Without mu_: a running callback may be waiting for it.
    log_->Unwatch(watch);
    ticker_->Remove(tick);
    absl::MutexLock lock(&mu_);
    Next();  // Finishes now, or in OnWriteDone once the write in flight is done.
  }

  void OnDone() override {
    uint64_t watch, tick;
    {
      absl::MutexLock lock(&mu_);
      watch = std::exchange(watch_id_, 0);
      tick = std::exchange(tick_id_, 0);
    }
    log_->Unwatch(watch);
    ticker_->Remove(tick);
    std::function<void()> on_done = std::move(on_done_);
    delete this;
    on_done();
  }

 private:
  void Next() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // write_in_flight_ covers heartbeats too: OnWriteDone calls Next again.
    if (finished_ || write_in_flight_) return;
    // Also reached from OnWriteDone(ok) after a cancel: a cancelled stream must still Finish,
    // or gRPC's shutdown waits for it forever.
    if (cancelled_) {
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      return;
    }
    // Already waiting for the next commit (a heartbeat was written meanwhile): OnCommitted
    // calls Next again. A second watch would leak the first.
    if (watch_id_ != 0) return;
    while (pending_.empty()) {
      // Read Closed() before the store: the log is closed only after its last commit, so a
      // closed log whose read comes back empty has nothing more for this job.
      const bool closed = log_->Closed();
      absl::StatusOr<std::vector<JobEvent>> events = log_->Read(job_id_, read_seq_, kReadBatch);
      if (!events.ok()) {
        FinishOnce(ToClientStatus(events.status()));
        return;
      }
      for (JobEvent& event : *events) {
        read_seq_ = event.seq();
        if (latest_attempt_only_) {
          // Events committed after Start's pass extend the marks as they arrive.
          if (event.seq() > marks_through_) {
            marks_.Add(event);
            marks_through_ = event.seq();
          }
          if (marks_.Superseded(event)) continue;
        }
        pending_.push_back(std::move(event));
      }
      if (!pending_.empty()) break;
      if (!events->empty()) continue;  // every event read was superseded: read on
      if (stored_only_) {
        FinishOnce(grpc::Status::OK);
        return;
      }
      if (closed) {
        // Names mpsd itself, so not through ToClientStatus's "mpsd: ".
        FinishOnce(api::ToGrpcStatus(
            absl::UnavailableError(absl::StrCat("mpsd is shutting down before job ", job_id_,
                                                " finished; resume with after_seq=", last_seq_))));
        return;
      }
      watch_id_ = log_->Watch(job_id_, read_seq_, [this] { OnCommitted(); });
      if (watch_id_ != 0) return;  // OnCommitted calls Next again.
      // Committed (or closed) between the read and the watch: read again.
    }
    Write(&pending_.front());
  }

  // Starts the one write in flight: a stored event, or the heartbeat.
  void Write(const JobEvent* event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    write_in_flight_ = true;
    last_sent_ = absl::Now();
    StartWrite(event);
  }

  void OnCommitted() {
    absl::MutexLock lock(&mu_);
    watch_id_ = 0;
    Next();
  }

  // On the ticker's thread: sends a heartbeat if the stream has been idle for the interval;
  // returns when to look again.
  absl::Time OnTick(absl::Time now) {
    absl::MutexLock lock(&mu_);
    if (finished_ || cancelled_) return absl::InfiniteFuture();
    // A write in flight is not idleness: the client is slow, and gets events, not heartbeats.
    if (write_in_flight_) return now + heartbeat_interval_;
    if (now < last_sent_ + heartbeat_interval_) return last_sent_ + heartbeat_interval_;
    heartbeat_.Clear();
    heartbeat_.set_job_id(job_id_);
    *heartbeat_.mutable_time() =
        google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(now));
    *heartbeat_.mutable_heartbeat() = scheduler_->HeartbeatOf(job_id_);
    heartbeat_in_flight_ = true;
    Write(&heartbeat_);
    return now + heartbeat_interval_;
  }

  void FinishOnce(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  // Constant after construction.
  Scheduler* const scheduler_;
  EventLog* const log_;
  Ticker* const ticker_;
  const absl::Duration heartbeat_interval_;
  const std::string job_id_;
  const bool stored_only_;
  const bool latest_attempt_only_;
  std::function<void()> on_done_;

  absl::Mutex mu_;
  // The newest seq sent (what a client resumes after), and the newest seq read from the store
  // (ahead of last_seq_ by what is pending, and by superseded events left out).
  int64_t last_seq_ ABSL_GUARDED_BY(mu_);
  int64_t read_seq_ ABSL_GUARDED_BY(mu_);
  // latest_attempt_only: the attempt starts among the events after after_seq read so far, and
  // the newest seq they cover.
  api::AttemptMarks marks_ ABSL_GUARDED_BY(mu_);
  int64_t marks_through_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<JobEvent> pending_ ABSL_GUARDED_BY(mu_);
  // The heartbeat being written; it is not in pending_ because it has no seq to resume from.
  JobEvent heartbeat_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool heartbeat_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // When the last write (event or heartbeat) started.
  absl::Time last_sent_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t watch_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t tick_id_ ABSL_GUARDED_BY(mu_) = 0;
};

// One GetArtifact call: the file from the requested offset in chunks of kArtifactChunkBytes,
// one write in flight; the next chunk is read (a local file, at most 1 MiB) in OnWriteDone.
// Threads: gRPC's. Deletes itself in OnDone.
class ArtifactReactor final : public grpc::ServerWriteReactor<mpsd::v1::ArtifactChunk> {
 public:
  ArtifactReactor(std::ifstream file, int64_t offset, int64_t size, std::string sha256)
      : file_(std::move(file)), offset_(offset), size_(size), sha256_(std::move(sha256)) {
    file_.seekg(offset_);
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed"));
      return;
    }
    Next();
  }

  void OnDone() override { delete this; }

 private:
  void Next() {
    // An empty file still gets one chunk, so that the client learns size and sha256.
    if (offset_ >= size_ && sent_any_) {
      Finish(grpc::Status::OK);
      return;
    }
    const int64_t length = std::min<int64_t>(kArtifactChunkBytes, size_ - offset_);
    std::string data(static_cast<size_t>(std::max<int64_t>(length, 0)), '\0');
    file_.read(data.data(), static_cast<std::streamsize>(data.size()));
    if (file_.gcount() != static_cast<std::streamsize>(data.size())) {
      Finish(ToClientStatus(
          absl::AbortedError("the artifact changed while it was read; download it again")));
      return;
    }
    chunk_.set_offset(offset_);
    chunk_.set_data(std::move(data));
    chunk_.set_size_bytes(size_);
    chunk_.set_sha256(sha256_);
    offset_ += length;
    sent_any_ = true;
    StartWrite(&chunk_);
  }

  std::ifstream file_;
  int64_t offset_;
  const int64_t size_;
  const std::string sha256_;
  bool sent_any_ = false;
  mpsd::v1::ArtifactChunk chunk_;
};

// A stream whose answer is known before it starts (unknown job, nothing left to send).
template <typename Message = JobEvent>
class FinishedStreamReactor final : public grpc::ServerWriteReactor<Message> {
 public:
  explicit FinishedStreamReactor(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

// One UploadFile call: each chunk is appended as it arrives (a 1 MiB write); the first one
// starts the upload (hashing the bytes already held) and the end of the stream finishes it
// (hash, unpack, rename), both by `aside`, on a thread of its own. A stream that breaks leaves
// the bytes it delivered for a resume.
// Threads: gRPC's, then the aside thread's; one at a time. Deletes itself in OnDone.
class UploadReactor final : public grpc::ServerReadReactor<mpsd::v1::UploadChunk> {
 public:
  using Aside = std::function<void(std::function<void()>)>;
  UploadReactor(UploadStore* store, std::string submitter, mpsd::v1::Upload* response, Aside aside)
      : store_(store),
        submitter_(std::move(submitter)),
        response_(response),
        aside_(std::move(aside)) {
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The client finished sending (or went away).
      if (writer_ == nullptr) {
        Finish(ToClientStatus(api::WithInvalidField(
            absl::InvalidArgumentError("name: the stream sent no chunk"), "name")));
        return;
      }
      aside_([this] {
        absl::StatusOr<mpsd::v1::Upload> upload = writer_->Finish();
        writer_.reset();
        if (upload.ok()) {
          spdlog::info("upload \"{}\" of {} complete ({} {} bytes)", upload->name(), submitter_,
                       upload->kind(), upload->size_bytes());
          *response_ = *std::move(upload);
        }
        Finish(ToClientStatus(upload.status()));
      });
      return;
    }
    if (static_cast<int64_t>(chunk_.data().size()) > kUploadChunkBytes) {
      Fail(api::WithInvalidField(
          absl::InvalidArgumentError(absl::StrCat(
              "data: ", chunk_.data().size(), " bytes in one chunk; at most ", kUploadChunkBytes)),
          "data"));
      return;
    }
    if (writer_ == nullptr) {
      // Begin hashes the bytes already held (seconds for GiB): off gRPC's threads.
      aside_([this] {
        absl::StatusOr<std::unique_ptr<UploadStore::Writer>> writer =
            store_->Begin(submitter_, chunk_);
        if (!writer.ok()) {
          Fail(writer.status());
          return;
        }
        writer_ = *std::move(writer);
        Append();
      });
      return;
    }
    Append();
  }

  void OnDone() override { delete this; }

 private:
  // Writes the chunk just read, then reads the next.
  void Append() {
    if (absl::Status s = writer_->Append(chunk_.offset(), chunk_.data()); !s.ok()) {
      Fail(s);
      return;
    }
    StartRead(&chunk_);
  }

  void Fail(const absl::Status& status) {
    writer_.reset();  // Keeps what was written for a resume.
    Finish(ToClientStatus(status));
  }

  UploadStore* const store_;
  const std::string submitter_;
  mpsd::v1::Upload* const response_;
  const Aside aside_;
  mpsd::v1::UploadChunk chunk_;
  std::unique_ptr<UploadStore::Writer> writer_;
};

// An UploadFile call refused before its first chunk.
class RefusedUploadReactor final : public grpc::ServerReadReactor<mpsd::v1::UploadChunk> {
 public:
  explicit RefusedUploadReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

template <typename T>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, absl::StatusOr<T> result,
                                 T* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (result.ok()) *response = *std::move(result);
  reactor->Finish(ToClientStatus(result.status()));
  return reactor;
}

}  // namespace

absl::Status JobService::CanResumeFrom(const Principal& principal,
                                       const mpsd::v1::SubmitJobRequest& request) const {
  if (principal.role == Role::kAdmin) return absl::OkStatus();
  const std::string id = ResumedJobId(request.train_job().resume_from(), options_.artifacts_dir);
  if (id.empty()) return absl::OkStatus();
  absl::StatusOr<mpsd::v1::Job> job = scheduler_->Get(id);
  // An unknown job: validation says so, as for anyone.
  if (!job.ok() || job->submitted_by() == principal.name) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "train_job.resume_from: job ", id,
      " was submitted by another submitter; a submitter may "
      "resume only from its own jobs' checkpoints (a token of role admin may resume from any)"));
}

absl::Status JobService::MayRead(const Principal& principal,
                                 const mpsd::v1::SubmitJobRequest& request) const {
  if (options_.data_roots == nullptr) {
    return absl::PermissionDeniedError("no data_roots on this listener");
  }
  if (absl::Status s = options_.data_roots->Check(request, &principal); !s.ok()) return s;
  return CanResumeFrom(principal, request);
}

JobService::JobService(Scheduler* scheduler, const Options& options)
    : scheduler_(scheduler), options_(options), started_(absl::Now()) {}

grpc::ServerUnaryReactor* JobService::SubmitJob(grpc::CallbackServerContext* context,
                                                const mpsd::v1::SubmitJobRequest* request,
                                                mpsd::v1::Job* response) {
  absl::StatusOr<Principal> principal = CallPrincipal(*context, options_.tokens);
  if (!principal.ok()) return Answer<mpsd::v1::Job>(context, principal.status(), response);
  // upload:NAME becomes the submitter's upload's path before anything looks at the paths.
  // Kept for the thread below (a copy: the request is gRPC's).
  auto resolved = std::make_shared<mpsd::v1::SubmitJobRequest>(*request);
  if (options_.data_roots != nullptr) {
    if (absl::Status s = options_.data_roots->ResolveUploads(resolved.get(), principal->name);
        !s.ok()) {
      return Answer<mpsd::v1::Job>(context, s, response);
    }
  }
  request = resolved.get();
  // The uploads the job names stay until it is stored (or refused): a DeleteUpload meanwhile is
  // refused, and one after it sees the job (UploadStore::Pins).
  std::optional<UploadStore::Pins> pins;
  if (options_.uploads != nullptr) {
    absl::StatusOr<UploadStore::Pins> pinned =
        options_.uploads->Pin(*request, principal->role == Role::kAdmin ? "" : principal->name);
    if (!pinned.ok()) return Answer<mpsd::v1::Job>(context, pinned.status(), response);
    pins = *std::move(pinned);
  }
  Scheduler::SubmitCheck may_read;
  if (!IsUnixSocketCall(*context)) {
    // The request and each trial of a sweep, as the scheduler expands it (once).
    // By value: a submit with user code runs it on a thread of its own (below).
    may_read = [this, context, principal = *principal](const mpsd::v1::SubmitJobRequest& each) {
      absl::Status allowed = MayRead(principal, each);
      if (!allowed.ok()) {
        spdlog::warn("SubmitJob from {} (token \"{}\") refused: {}", context->peer(),
                     principal.name, std::string(allowed.message()));
      }
      return allowed;
    };
  }
  if (!api::UserCodeOf(*request).has_value()) {
    return Answer(context, scheduler_->Submit(*request, principal->name, may_read), response);
  }
  // Validation runs the submitter's code in a process of its own, for seconds: answered from a
  // thread, so that gRPC's callback threads keep serving every other call meanwhile.
  {
    absl::MutexLock lock(&mu_);
    if (user_code_submits_ >= kMaxUserCodeSubmits) {
      return Answer<mpsd::v1::Job>(context,
                                   absl::ResourceExhaustedError(absl::StrCat(
                                       kMaxUserCodeSubmits,
                                       " submits of jobs with user code are being checked; submit "
                                       "again once one has been answered")),
                                   response);
    }
    ++user_code_submits_;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::thread([this, reactor, resolved, request, response, submitter = principal->name, may_read,
               pins = std::move(pins)]() mutable {
    absl::StatusOr<mpsd::v1::Job> job = scheduler_->Submit(*request, submitter, may_read);
    pins.reset();  // Before the service (and the upload store) may go: see ~JobService.
    if (job.ok()) *response = *std::move(job);
    reactor->Finish(ToClientStatus(job.status()));
    absl::MutexLock lock(&mu_);
    --user_code_submits_;
  }).detach();
  return reactor;
}

JobService::~JobService() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return user_code_submits_ == 0 && aside_ == 0;
  };
  mu_.Await(absl::Condition(&idle));
}

grpc::ServerUnaryReactor* JobService::GetJob(grpc::CallbackServerContext* context,
                                             const mpsd::v1::GetJobRequest* request,
                                             mpsd::v1::Job* response) {
  return Answer(context, scheduler_->Get(request->job_id()), response);
}

grpc::ServerUnaryReactor* JobService::ListJobs(grpc::CallbackServerContext* context,
                                               const mpsd::v1::ListJobsRequest* request,
                                               mpsd::v1::ListJobsResponse* response) {
  using Page = mpsd::v1::ListJobsResponse;
  absl::StatusOr<JobQuery> query = QueryForPage(*request);
  if (!query.ok()) return Answer<Page>(context, query.status(), response);
  // The page holds what can be read; which jobs cannot goes beside it (api/metadata.h), so
  // that a client never shows a damaged database's partial list as all there is.
  if (const std::vector<std::string> damaged = scheduler_->DamagedJobIds(); !damaged.empty()) {
    context->AddTrailingMetadata(api::kDamagedJobIdsMetadata, absl::StrJoin(damaged, ","));
  }
  return Answer<Page>(context, PageFrom(*request, scheduler_->List(*query)), response);
}

grpc::ServerUnaryReactor* JobService::CancelJob(grpc::CallbackServerContext* context,
                                                const mpsd::v1::CancelJobRequest* request,
                                                mpsd::v1::Job* response) {
  absl::StatusOr<Principal> principal = CallPrincipal(*context, options_.tokens);
  if (!principal.ok()) return Answer<mpsd::v1::Job>(context, principal.status(), response);
  if (principal->role != Role::kAdmin) {
    absl::StatusOr<mpsd::v1::Job> job = scheduler_->Get(request->job_id());
    if (!job.ok()) return Answer(context, std::move(job), response);
    if (absl::Status allowed = CanCancel(*principal, job->submitted_by(), job->id());
        !allowed.ok()) {
      spdlog::warn("CancelJob from {} (token \"{}\") refused: {}", context->peer(), principal->name,
                   std::string(allowed.message()));
      return Answer<mpsd::v1::Job>(context, allowed, response);
    }
  }
  return Answer(context, scheduler_->Cancel(request->job_id()), response);
}

grpc::ServerWriteReactor<JobEvent>* JobService::StreamEvents(
    grpc::CallbackServerContext* /*context*/, const mpsd::v1::StreamEventsRequest* request) {
  absl::StatusOr<mpsd::v1::Job> job = scheduler_->Get(request->job_id());
  if (!job.ok()) return new FinishedStreamReactor<>(ToClientStatus(job.status()));
  if (request->after_seq() < 0) {
    return new FinishedStreamReactor<>(ToClientStatus(
        api::WithInvalidField(absl::InvalidArgumentError("after_seq: must be >= 0"), "after_seq")));
  }
  // A seq the job has not reached would be waited for forever.
  if (request->after_seq() > job->last_seq()) {
    return new FinishedStreamReactor<>(ToClientStatus(absl::OutOfRangeError(
        absl::StrCat("after_seq: ", request->after_seq(), " is beyond job ", request->job_id(),
                     "'s last event (seq ", job->last_seq(), ")"))));
  }
  // A finished job with nothing after after_seq has nothing more to say.
  if (api::IsTerminal(job->state()) && request->after_seq() >= job->last_seq()) {
    return new FinishedStreamReactor<>(grpc::Status::OK);
  }
  {
    absl::MutexLock lock(&mu_);
    ++open_streams_;
  }
  auto* reactor = new EventStreamReactor(
      scheduler_, &ticker_, options_.heartbeat_interval, request->job_id(), request->after_seq(),
      request->stored_only(), request->latest_attempt_only(), [this] {
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
  return Answer(context, absl::StatusOr<mpsd::v1::DeviceInfo>(scheduler_->GetDevice()), response);
}

grpc::ServerUnaryReactor* JobService::ListModels(grpc::CallbackServerContext* context,
                                                 const mpsd::v1::ListModelsRequest* request,
                                                 mpsd::v1::ListModelsResponse* response) {
  return Answer(context, scheduler_->ListModels(*request), response);
}

grpc::ServerUnaryReactor* JobService::ListArtifacts(grpc::CallbackServerContext* context,
                                                    const mpsd::v1::ListArtifactsRequest* request,
                                                    mpsd::v1::ListArtifactsResponse* response) {
  using Response = mpsd::v1::ListArtifactsResponse;
  absl::StatusOr<mpsd::v1::Job> job = scheduler_->Get(request->job_id());
  if (!job.ok()) return Answer<Response>(context, job.status(), response);
  absl::StatusOr<std::vector<mpsd::v1::Artifact>> artifacts =
      server::ListArtifacts(JobArtifactsDir(job->id()));
  if (!artifacts.ok()) return Answer<Response>(context, artifacts.status(), response);
  Response list;
  for (mpsd::v1::Artifact& artifact : *artifacts) *list.add_artifacts() = std::move(artifact);
  return Answer<Response>(context, std::move(list), response);
}

grpc::ServerWriteReactor<mpsd::v1::ArtifactChunk>* JobService::GetArtifact(
    grpc::CallbackServerContext* /*context*/, const mpsd::v1::GetArtifactRequest* request) {
  using Failed = FinishedStreamReactor<mpsd::v1::ArtifactChunk>;
  absl::StatusOr<mpsd::v1::Job> job = scheduler_->Get(request->job_id());
  if (!job.ok()) return new Failed(ToClientStatus(job.status()));
  absl::StatusOr<std::string> path = ResolveArtifact(JobArtifactsDir(job->id()), request->name());
  if (!path.ok()) return new Failed(ToClientStatus(path.status()));
  std::ifstream file(*path, std::ios::binary);
  std::error_code error;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(*path, error));
  absl::StatusOr<std::string> sha256 = api::Sha256OfFile(*path);
  if (!file || error || !sha256.ok()) {
    return new Failed(ToClientStatus(
        absl::InternalError(absl::StrCat("cannot read artifact ", request->name()))));
  }
  if (request->offset() < 0 || request->offset() > size) {
    return new Failed(ToClientStatus(api::WithInvalidField(
        absl::InvalidArgumentError(absl::StrCat("offset: ", request->offset(), " is outside ",
                                                request->name(), " (", size, " bytes)")),
        "offset")));
  }
  return new ArtifactReactor(std::move(file), request->offset(), size, *std::move(sha256));
}

std::string JobService::JobArtifactsDir(const std::string& job_id) const {
  return (std::filesystem::path(options_.artifacts_dir) / job_id).string();
}

grpc::ServerUnaryReactor* JobService::PauseQueue(grpc::CallbackServerContext* context,
                                                 const mpsd::v1::PauseQueueRequest* /*request*/,
                                                 mpsd::v1::ServerStatus* response) {
  using Status = mpsd::v1::ServerStatus;
  if (absl::Status s = scheduler_->Pause(); !s.ok()) return Answer<Status>(context, s, response);
  return Answer(context, absl::StatusOr<Status>(CurrentStatus()), response);
}

grpc::ServerUnaryReactor* JobService::ResumeQueue(grpc::CallbackServerContext* context,
                                                  const mpsd::v1::ResumeQueueRequest* /*request*/,
                                                  mpsd::v1::ServerStatus* response) {
  using Status = mpsd::v1::ServerStatus;
  if (absl::Status s = scheduler_->Resume(); !s.ok()) return Answer<Status>(context, s, response);
  return Answer(context, absl::StatusOr<Status>(CurrentStatus()), response);
}

grpc::ServerUnaryReactor* JobService::MoveJob(grpc::CallbackServerContext* context,
                                              const mpsd::v1::MoveJobRequest* request,
                                              mpsd::v1::Job* response) {
  return Answer(context, scheduler_->Move(request->job_id(), request->priority()), response);
}

grpc::ServerUnaryReactor* JobService::DeleteArtifacts(
    grpc::CallbackServerContext* context, const mpsd::v1::DeleteArtifactsRequest* request,
    mpsd::v1::DeleteArtifactsResponse* response) {
  using Response = mpsd::v1::DeleteArtifactsResponse;
  if (options_.retention == nullptr) {
    return Answer<Response>(context, absl::UnimplementedError("no artifacts here"), response);
  }
  absl::StatusOr<Principal> principal = CallPrincipal(*context, options_.tokens);
  if (!principal.ok()) return Answer<Response>(context, principal.status(), response);
  if (request->job_ids().empty() == !request->retention_policy()) {
    return Answer<Response>(
        context,
        api::WithInvalidField(
            absl::InvalidArgumentError("job_ids: name the jobs whose artifacts to delete, or set "
                                       "retention_policy (not both)"),
            "job_ids"),
        response);
  }
  constexpr int kMaxDeleteIds = 1000;
  if (request->job_ids_size() > kMaxDeleteIds) {
    return Answer<Response>(
        context,
        api::WithInvalidField(absl::InvalidArgumentError(
                                  absl::StrCat("job_ids: at most ", kMaxDeleteIds,
                                               " ids per call, got ", request->job_ids_size())),
                              "job_ids"),
        response);
  }
  for (const std::string& id : request->job_ids()) {
    if (!api::ParseJobId(id).has_value()) {
      return Answer<Response>(
          context,
          api::WithInvalidField(absl::InvalidArgumentError(absl::StrCat(
                                    "job_ids: \"", absl::CHexEscape(id.substr(0, 64)),
                                    "\" is not a job id (a decimal number such as 12)")),
                                "job_ids"),
          response);
    }
  }
  JobQuery all;
  all.limit = std::numeric_limits<int>::max();
  const std::vector<mpsd::v1::Job> jobs = scheduler_->List(all);
  if (request->retention_policy()) {
    if (absl::Status allowed = Authorize(*principal, Role::kAdmin, "applying the retention policy");
        !allowed.ok()) {
      return Answer<Response>(context, allowed, response);
    }
    return Answer(context, options_.retention->Apply(jobs, absl::Now(), request->dry_run()),
                  response);
  }
  if (principal->role != Role::kAdmin) {
    for (const mpsd::v1::Job& job : jobs) {
      if (std::find(request->job_ids().begin(), request->job_ids().end(), job.id()) ==
              request->job_ids().end() ||
          job.submitted_by() == principal->name) {
        continue;
      }
      return Answer<Response>(
          context,
          absl::PermissionDeniedError(absl::StrCat(
              "deleting the artifacts of job ", job.id(), ", submitted by \"", job.submitted_by(),
              "\", needs role admin (a submitter may delete only its own "
              "jobs' artifacts); token \"",
              principal->name, "\" has ", RoleName(principal->role))),
          response);
    }
  }
  return Answer(context,
                options_.retention->Delete({request->job_ids().begin(), request->job_ids().end()},
                                           jobs, request->dry_run()),
                response);
}

void JobService::RunAside(std::function<void()> work) {
  {
    absl::MutexLock lock(&mu_);
    ++aside_;
  }
  std::thread([this, work = std::move(work)] {
    work();
    absl::MutexLock lock(&mu_);
    --aside_;
  }).detach();
}

absl::StatusOr<std::string> JobService::UploadOwner(const Principal& principal,
                                                    const std::string& submitter,
                                                    absl::string_view action) const {
  if (submitter.empty() || submitter == principal.name) return principal.name;
  if (absl::Status allowed =
          Authorize(principal, Role::kAdmin, absl::StrCat(action, " of another submitter"));
      !allowed.ok()) {
    return allowed;
  }
  return submitter;
}

grpc::ServerReadReactor<mpsd::v1::UploadChunk>* JobService::UploadFile(
    grpc::CallbackServerContext* context, mpsd::v1::Upload* response) {
  if (options_.uploads == nullptr) {
    return new RefusedUploadReactor(
        ToClientStatus(absl::UnimplementedError("this daemon keeps no uploads")));
  }
  absl::StatusOr<Principal> principal = CallPrincipal(*context, options_.tokens);
  if (!principal.ok()) return new RefusedUploadReactor(ToClientStatus(principal.status()));
  return new UploadReactor(options_.uploads, principal->name, response,
                           [this](std::function<void()> work) { RunAside(std::move(work)); });
}

grpc::ServerUnaryReactor* JobService::GetUploadStatus(
    grpc::CallbackServerContext* context, const mpsd::v1::GetUploadStatusRequest* request,
    mpsd::v1::UploadStatus* response) {
  using Response = mpsd::v1::UploadStatus;
  if (options_.uploads == nullptr) {
    return Answer<Response>(context, absl::UnimplementedError("no uploads here"), response);
  }
  absl::StatusOr<Principal> principal = CallPrincipal(*context, options_.tokens);
  if (!principal.ok()) return Answer<Response>(context, principal.status(), response);
  return Answer(context, options_.uploads->Status(principal->name, *request), response);
}

grpc::ServerUnaryReactor* JobService::ListUploads(grpc::CallbackServerContext* context,
                                                  const mpsd::v1::ListUploadsRequest* request,
                                                  mpsd::v1::ListUploadsResponse* response) {
  using Response = mpsd::v1::ListUploadsResponse;
  if (options_.uploads == nullptr) {
    return Answer<Response>(context, absl::UnimplementedError("no uploads here"), response);
  }
  absl::StatusOr<Principal> principal = CallPrincipal(*context, options_.tokens);
  if (!principal.ok()) return Answer<Response>(context, principal.status(), response);
  if (request->all()) {
    if (absl::Status allowed =
            Authorize(*principal, Role::kAdmin, "listing every submitter's uploads");
        !allowed.ok()) {
      return Answer<Response>(context, allowed, response);
    }
    return Answer(context, options_.uploads->List(""), response);
  }
  absl::StatusOr<std::string> owner =
      UploadOwner(*principal, request->submitter(), "listing the uploads");
  if (!owner.ok()) return Answer<Response>(context, owner.status(), response);
  return Answer(context, options_.uploads->List(*owner), response);
}

grpc::ServerUnaryReactor* JobService::DeleteUpload(grpc::CallbackServerContext* context,
                                                   const mpsd::v1::DeleteUploadRequest* request,
                                                   mpsd::v1::Upload* response) {
  using Response = mpsd::v1::Upload;
  if (options_.uploads == nullptr) {
    return Answer<Response>(context, absl::UnimplementedError("no uploads here"), response);
  }
  absl::StatusOr<Principal> principal = CallPrincipal(*context, options_.tokens);
  if (!principal.ok()) return Answer<Response>(context, principal.status(), response);
  absl::StatusOr<std::string> owner =
      UploadOwner(*principal, request->submitter(), "deleting an upload");
  if (!owner.ok()) return Answer<Response>(context, owner.status(), response);
  return Answer(context, options_.uploads->Delete(*owner, request->name()), response);
}

grpc::ServerUnaryReactor* JobService::GetServerStatus(
    grpc::CallbackServerContext* context, const mpsd::v1::GetServerStatusRequest* /*request*/,
    mpsd::v1::ServerStatus* response) {
  return Answer(context, absl::StatusOr<mpsd::v1::ServerStatus>(CurrentStatus()), response);
}

void JobService::SetHttpUrl(std::string url) {
  absl::MutexLock lock(&http_url_mu_);
  http_url_ = std::move(url);
}

mpsd::v1::ServerStatus JobService::CurrentStatus() {
  mpsd::v1::ServerStatus status;
  {
    absl::MutexLock lock(&mu_);
    status.set_open_streams(open_streams_);
  }
  const Scheduler::QueueStats queue = scheduler_->GetQueueStats();
  status.set_queued_jobs(queue.queued_jobs);
  status.set_running_job_id(queue.running_job_id);
  status.set_jobs_total(queue.jobs_total);
  status.set_queue_paused(queue.paused);
  const EventLog::Stats events = scheduler_->events().GetStats();
  status.set_event_watches(events.watches);
  status.set_events_stored(events.events_stored);
  status.set_event_commits(events.commits);
  status.set_commit_time_s(absl::ToDoubleSeconds(events.commit_time));
  status.set_events_pending(events.events_pending);
  status.set_rss_bytes(api::ResidentSetBytes(getpid()));
  status.set_uptime_s(absl::ToDoubleSeconds(absl::Now() - started_));
  status.set_heartbeat_interval_s(absl::ToDoubleSeconds(options_.heartbeat_interval));
  status.set_min_keepalive_interval_s(absl::ToDoubleSeconds(options_.min_keepalive_interval));
  {
    absl::MutexLock lock(&http_url_mu_);
    status.set_http_url(http_url_);
  }
  if (options_.retention != nullptr) {
    status.set_artifacts_bytes(options_.retention->ArtifactsBytes());
    status.set_artifacts_deleted_bytes(options_.retention->DeletedBytes());
  }
  return status;
}

}  // namespace mpsd::server
