// mpsd.v1.JobService on gRPC's callback API: unary RPCs answer on the DefaultReactor, and
// StreamEvents is a write reactor with one write in flight that reads committed events from
// the EventLog and waits on it for more, so nothing blocks inside a reaction. Idle streams get
// heartbeats from one Ticker thread shared by all streams.
#ifndef MPSD_SERVER_GRPC_JOB_SERVICE_H_
#define MPSD_SERVER_GRPC_JOB_SERVICE_H_

#include <functional>
#include <string>
#include <thread>
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "absl/time/time.h"
#include "mpsd/v1/mpsd.grpc.pb.h"
#include "server/access/auth.h"
#include "server/access/data_roots.h"
#include "server/core/retention.h"
#include "server/core/scheduler.h"
#include "server/core/ticker.h"
#include "server/core/uploads.h"

namespace mpsd::server {

// Who may call what is decided before a call gets here (TokenAuthProcessor on every TCP
// listener; the unix socket acts as admin). The service itself records who submitted a job,
// lets a submitter cancel only its own jobs and resume only from its own jobs' checkpoints,
// and holds jobs submitted over TCP to data_roots. request_id is each submitter's own.
//
// Thread-safe (gRPC calls it from its own threads). Borrows the scheduler, which must outlive
// the gRPC server this service is registered with; the service itself must outlive that
// server too (its streams use the service's ticker until their OnDone).
class JobService final : public mpsd::v1::JobService::CallbackService {
 public:
  struct Options {
    // A stream that has sent nothing for this long gets a heartbeat event. > 0.
    absl::Duration heartbeat_interval = absl::Seconds(15);
    // Reported in ServerStatus: the keepalive policy the gRPC server was built with.
    absl::Duration min_keepalive_interval = absl::Seconds(10);
    // <state_dir>/artifacts: jobs' artifacts are in its <job_id>/ subdirectories.
    std::string artifacts_dir;
    // The tokens of the TCP listeners, whose calls have passed TokenAuthProcessor
    // (server/grpc/grpc_auth.h) before they reach this service; null when there is no TCP listener.
    // Borrowed; must outlive the service.
    const TokenStore* tokens = nullptr;
    // Where the paths of jobs submitted over TCP must lie. Borrowed; null = no TCP listener.
    const DataRoots* data_roots = nullptr;
    // Deletes artifacts (DeleteArtifacts) and measures them (ServerStatus). Borrowed; must
    // outlive the service; null = DeleteArtifacts answers UNIMPLEMENTED.
    ArtifactRetention* retention = nullptr;
    // Where uploads go (UploadFile and friends); its unfinished_jobs should list the
    // scheduler's, so that DeleteUpload spares the uploads they name. Borrowed; must outlive
    // the service; null = those RPCs answer UNIMPLEMENTED.
    UploadStore* uploads = nullptr;
  };

  JobService(Scheduler* scheduler, const Options& options);
  // Waits for the submits still answering on threads of their own (see SubmitJob).
  ~JobService() override;

  // Submits whose validation runs user code (api/user_code.h; seconds, up to the daemon's
  // executor.user_code_timeout_s) are answered from a thread of their own, never on gRPC's
  // callback threads, so that no other call waits for them; at most this many at once, and
  // RESOURCE_EXHAUSTED beyond.
  static constexpr int kMaxUserCodeSubmits = 8;

  // For shutdown, once the scheduler has stopped and its EventLog is closed: waits until every
  // StreamEvents call has ended (each ends after sending what is stored), at most `timeout`.
  // Returns false on timeout, e.g. when a client stopped reading.
  bool WaitForStreamsToEnd(absl::Duration timeout);

  // Holds the uploads the request names (UploadStore::Pin) until the scheduler answered, so
  // that a DeleteUpload at the same moment either sees the job or makes this submit fail.
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const mpsd::v1::SubmitJobRequest* request,
                                      mpsd::v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const mpsd::v1::GetJobRequest* request,
                                   mpsd::v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const mpsd::v1::ListJobsRequest* request,
                                     mpsd::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const mpsd::v1::CancelJobRequest* request,
                                      mpsd::v1::Job* response) override;
  grpc::ServerWriteReactor<mpsd::v1::JobEvent>* StreamEvents(
      grpc::CallbackServerContext* context, const mpsd::v1::StreamEventsRequest* request) override;
  grpc::ServerUnaryReactor* GetDevice(grpc::CallbackServerContext* context,
                                      const mpsd::v1::GetDeviceRequest* request,
                                      mpsd::v1::DeviceInfo* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const mpsd::v1::ListModelsRequest* request,
                                       mpsd::v1::ListModelsResponse* response) override;
  // What GetServerStatus answers now (also read by /metrics). Thread-safe.
  mpsd::v1::ServerStatus CurrentStatus();

  // ServerStatus.http_url from now on (the HTTP listener starts after this service exists).
  // Thread-safe.
  void SetHttpUrl(std::string url) ABSL_LOCKS_EXCLUDED(http_url_mu_);

  grpc::ServerUnaryReactor* ListArtifacts(grpc::CallbackServerContext* context,
                                          const mpsd::v1::ListArtifactsRequest* request,
                                          mpsd::v1::ListArtifactsResponse* response) override;
  grpc::ServerWriteReactor<mpsd::v1::ArtifactChunk>* GetArtifact(
      grpc::CallbackServerContext* context, const mpsd::v1::GetArtifactRequest* request) override;
  grpc::ServerUnaryReactor* PauseQueue(grpc::CallbackServerContext* context,
                                       const mpsd::v1::PauseQueueRequest* request,
                                       mpsd::v1::ServerStatus* response) override;
  grpc::ServerUnaryReactor* ResumeQueue(grpc::CallbackServerContext* context,
                                        const mpsd::v1::ResumeQueueRequest* request,
                                        mpsd::v1::ServerStatus* response) override;
  grpc::ServerUnaryReactor* MoveJob(grpc::CallbackServerContext* context,
                                    const mpsd::v1::MoveJobRequest* request,
                                    mpsd::v1::Job* response) override;
  grpc::ServerUnaryReactor* DeleteArtifacts(grpc::CallbackServerContext* context,
                                            const mpsd::v1::DeleteArtifactsRequest* request,
                                            mpsd::v1::DeleteArtifactsResponse* response) override;
  // Uploads: the chunks are written as they arrive (on gRPC's threads: a 1 MiB write each);
  // the SHA-256 check and unpacking at the end run on a thread of their own.
  grpc::ServerReadReactor<mpsd::v1::UploadChunk>* UploadFile(grpc::CallbackServerContext* context,
                                                             mpsd::v1::Upload* response) override;
  grpc::ServerUnaryReactor* GetUploadStatus(grpc::CallbackServerContext* context,
                                            const mpsd::v1::GetUploadStatusRequest* request,
                                            mpsd::v1::UploadStatus* response) override;
  grpc::ServerUnaryReactor* ListUploads(grpc::CallbackServerContext* context,
                                        const mpsd::v1::ListUploadsRequest* request,
                                        mpsd::v1::ListUploadsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteUpload(grpc::CallbackServerContext* context,
                                         const mpsd::v1::DeleteUploadRequest* request,
                                         mpsd::v1::Upload* response) override;
  grpc::ServerUnaryReactor* GetServerStatus(grpc::CallbackServerContext* context,
                                            const mpsd::v1::GetServerStatusRequest* request,
                                            mpsd::v1::ServerStatus* response) override;

 private:
  // <artifacts_dir>/<job_id>.
  std::string JobArtifactsDir(const std::string& job_id) const;
  // PERMISSION_DENIED naming train_job.resume_from when a caller other than an admin resumes
  // from another submitter's job (its id, or a path into its artifacts directory).
  absl::Status CanResumeFrom(const Principal& principal,
                             const mpsd::v1::SubmitJobRequest& request) const;
  // For a call over TCP: every path the request names lies under data_roots, and CanResumeFrom.
  // PERMISSION_DENIED naming the field. Asked by Scheduler::Submit about the request and about
  // each trial of a sweep.
  absl::Status MayRead(const Principal& principal, const mpsd::v1::SubmitJobRequest& request) const;
  // Runs `work` on a thread of its own, which the destructor waits for.
  void RunAside(std::function<void()> work) ABSL_LOCKS_EXCLUDED(mu_);
  // Whose uploads a call acts on: the caller's own, or for an admin `submitter` (when not
  // empty). PERMISSION_DENIED for anyone else naming another submitter.
  absl::StatusOr<std::string> UploadOwner(const Principal& principal, const std::string& submitter,
                                          absl::string_view action) const;
  // Constant after construction.
  Scheduler* const scheduler_;
  const Options options_;
  const absl::Time started_;

  // Heartbeat clocks of the open streams. Its thread is joined when the service is destroyed,
  // which is after the gRPC server has ended every stream.
  Ticker ticker_;

  absl::Mutex mu_;
  int open_streams_ ABSL_GUARDED_BY(mu_) = 0;
  // Submits answering on threads of their own (kMaxUserCodeSubmits).
  int user_code_submits_ ABSL_GUARDED_BY(mu_) = 0;
  // RunAside threads still running.
  int aside_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex http_url_mu_;
  std::string http_url_ ABSL_GUARDED_BY(http_url_mu_);
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_GRPC_JOB_SERVICE_H_
