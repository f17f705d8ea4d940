// Live TensorBoard event files: while a TrainJob trains, the daemon writes what it stores (every
// step, epoch and summary event, the spec as HParams) into an event file, so that
// `tensorboard --logdir` and W&B's TensorBoard sync follow the job. The file is the same as
// `mpsctl export --format tensorboard` would write at that moment (api/tensorboard/).
#ifndef MPSD_SERVER_CORE_TENSORBOARD_WRITER_H_
#define MPSD_SERVER_CORE_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "api/tensorboard/event_file.h"
#include "api/tensorboard/job_history.h"
#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::server {

// Thread-safe. Observe() only queues (it runs under the scheduler's lock); one writer thread of
// its own does the file work, so training never waits for it. Which jobs and where:
//   - TrainJob.tensorboard: true: <artifacts_dir>/<job id>/tensorboard/events.out.tfevents.*
//     (an artifact of the job: mpsctl artifacts / download);
//   - every TrainJob when tensorboard_dir is set: <tensorboard_dir>/<name>-<id> (a job without a
//     name: <id>; api/tensorboard/job_history.h RunName)/events.out.tfevents.*.
// The file's name comes from the job's created_at, so rewriting it replaces it. It is rewritten
// whole from the job's stored events when a step repeats (a resumed attempt: one value per step,
// the latest attempt's) and when the writer first sees a job that already has events (a daemon
// restarted while the job was running, or a job that resumes after a restart). Written records
// are flushed to the kernel whenever the queue runs empty, at every epoch, and at the job's end.
// A file that cannot be written is logged once per job (warning) and given up for that job;
// the job itself never fails for it.
class TensorBoardWriter {
 public:
  // The job's stored events with seq < before_seq, ascending (EventLog::Read after a Flush).
  using ReadStored = std::function<absl::StatusOr<std::vector<mpsd::v1::JobEvent>>(
      const std::string& job_id, int64_t before_seq)>;
  struct Options {
    // <state_dir>/artifacts.
    std::string artifacts_dir;
    // Config tensorboard_dir; empty: only jobs that ask (TrainJob.tensorboard).
    std::string tensorboard_dir;
    // The host part of file names; empty: gethostname.
    std::string host;
    ReadStored read_stored;
  };

  explicit TensorBoardWriter(Options options);
  // Writes what is queued, closes every file, stops the thread.
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Queues `event` of `job` (Scheduler::Options::on_event). Quick: a copy and a signal.
  void Observe(const mpsd::v1::Job& job, const mpsd::v1::JobEvent& event);
  // Blocks until everything observed before the call is written and flushed (tests).
  void Flush();

  // The directories a job's event files go to (none for a job that does not write any).
  std::vector<std::string> DirsOf(const mpsd::v1::Job& job) const;

 private:
  struct Item {
    // The job's id, spec and created_at (its metrics cleared), shared by all its items: one copy
    // per job, not one per event under the scheduler's lock.
    std::shared_ptr<const mpsd::v1::Job> job;
    mpsd::v1::JobEvent event;
  };
  // One job's open files and what was written to them.
  struct JobFiles {
    tensorboard::JobHistory history;
    std::vector<std::unique_ptr<tensorboard::EventFileWriter>> writers;
    bool failed = false;
  };

  void Loop();
  void Write(const Item& item);
  // Opens (truncating) the job's files and writes its history so far.
  absl::Status Rewrite(const mpsd::v1::Job& job, JobFiles& files);
  absl::Status Append(const mpsd::v1::JobEvent& event, JobFiles& files);
  void FlushAll();

  const Options options_;

  absl::Mutex mu_;
  // Signalled when an item is queued or stopping_ set; when written_ grows.
  absl::CondVar work_;
  absl::CondVar done_;
  std::vector<Item> queue_ ABSL_GUARDED_BY(mu_);
  // The jobs being observed (until their terminal event), for Item::job.
  absl::flat_hash_map<std::string, std::shared_ptr<const mpsd::v1::Job>> observed_
      ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Only the writer thread touches these.
  absl::flat_hash_map<std::string, JobFiles> jobs_;

  std::thread thread_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_TENSORBOARD_WRITER_H_
