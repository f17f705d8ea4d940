// A data-parallel TrainJob's ranks on this node (ExecutorSupervisor::RunRanks): local rank 0 in
// the supervisor's own executor, ranks 1..N-1 each in an executor started for the job, all run
// at once; a failure of one cancels, then kills, the others, and the job's error names the rank
// that failed first and why.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/error_cause.h"
#include "api/executor.h"
#include "api/failure_reason.h"
#include "server/executor/executor_supervisor.h"
#include "spdlog/spdlog.h"

namespace mpsd::server {
namespace {

// How long the other ranks get, after one failed, to end by themselves (their collectives fail
// at once when a peer's process group goes away) before their executors are killed.
constexpr absl::Duration kPeerGrace = absl::Seconds(5);

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown host";
  return name;
}

// How one local rank ended.
struct RankEnd {
  bool done = false;
  absl::Status status;
  absl::Time when;
};

// The order in which failures explain a job's end: an executor that died, then any other
// failure, then a collective that failed because a peer went away (DataParallel's "… failed on
// rank"), each group in time order. A rank cancelled, or killed, for a peer's failure explains
// nothing.
int Blame(const absl::Status& status) {
  if (api::FailureReasonOf(status) == mpsd::v1::Job::EXECUTOR_CRASHED) return 0;
  if (api::HasCause(status, api::ErrorCause::RANK_FAILED)) return 2;
  return 1;
}

// What one job's local ranks share while they run. Thread-safe.
class RankBoard {
 public:
  explicit RankBoard(int ranks) : ends_(ranks), pids_(ranks, 0), killed_for_peer_(ranks, false) {}

  void SetPid(int k, pid_t pid) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    pids_[k] = pid;
  }
  void End(int k, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ends_[k] = RankEnd{true, std::move(status), absl::Now()};
  }
  void RequestCancel() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    cancel_requested_ = true;
  }

  // Waits, without polling, until every rank ended or a cancel was requested or a rank failed;
  // then, unless every rank ended, cancels every rank through `flags` and, if a rank failed,
  // waits `grace` for the others to end and kills (`kill(k)`) each rank still running. Returns
  // when every rank has ended or was killed.
  void Coordinate(const std::vector<std::unique_ptr<api::CancelFlag>>& flags, absl::Duration grace,
                  const std::function<void(int)>& kill) ABSL_LOCKS_EXCLUDED(mu_) {
    bool failed = false;
    {
      absl::MutexLock lock(&mu_);
      const auto stop_or_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return cancel_requested_ || AnyFailed() || AllDone();
      };
      mu_.Await(absl::Condition(&stop_or_done));
      if (AllDone()) return;
      failed = AnyFailed();
    }
    // Not under mu_: a flag's callbacks (each rank's cancel watchdog) take locks of their own.
    for (const auto& flag : flags) flag->Cancel();
    if (!failed) return;
    std::vector<int> running;
    {
      absl::MutexLock lock(&mu_);
      const auto all_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return AllDone(); };
      mu_.AwaitWithTimeout(absl::Condition(&all_done), grace);
      for (size_t k = 0; k < ends_.size(); ++k) {
        if (ends_[k].done) continue;
        killed_for_peer_[k] = true;
        running.push_back(static_cast<int>(k));
      }
    }
    for (const int k : running) kill(k);
  }

  // The rank whose end explains the job's best (Blame, then time): never a rank cancelled, and a
  // rank killed for a peer's failure only when nothing else failed; -1 when no rank failed.
  // After every rank ended.
  int Culprit() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    int culprit = Culprit(/*include_killed=*/false);
    return culprit >= 0 ? culprit : Culprit(/*include_killed=*/true);
  }
  RankEnd EndOf(int k) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return ends_[k];
  }
  pid_t PidOf(int k) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return pids_[k];
  }

 private:
  bool AnyFailed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::any_of(ends_.begin(), ends_.end(),
                       [](const RankEnd& end) { return end.done && !end.status.ok(); });
  }
  bool AllDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::all_of(ends_.begin(), ends_.end(), [](const RankEnd& end) { return end.done; });
  }
  int Culprit(bool include_killed) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int culprit = -1;
    for (size_t k = 0; k < ends_.size(); ++k) {
      const RankEnd& end = ends_[k];
      if (end.status.ok() || absl::IsCancelled(end.status)) continue;
      if (killed_for_peer_[k] && !include_killed) continue;
      if (culprit < 0 || Blame(end.status) < Blame(ends_[culprit].status) ||
          (Blame(end.status) == Blame(ends_[culprit].status) && end.when < ends_[culprit].when)) {
        culprit = static_cast<int>(k);
      }
    }
    return culprit;
  }

  mutable absl::Mutex mu_;
  std::vector<RankEnd> ends_ ABSL_GUARDED_BY(mu_);
  std::vector<pid_t> pids_ ABSL_GUARDED_BY(mu_);
  // Ranks killed because a peer had failed: their end (a crash by SIGKILL) is an effect, never
  // the cause, unless nothing else failed.
  std::vector<bool> killed_for_peer_ ABSL_GUARDED_BY(mu_);
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;
};

// Executors for local ranks 1..n-1 of a job (index 0 stays empty: rank 0 runs in the caller's
// supervisor), started in parallel from `base` (own sockets, never respawned, stopped with
// their supervisor), or each one's start error.
struct PeerExecutors {
  std::vector<std::unique_ptr<ExecutorSupervisor>> supervisors;
  std::vector<absl::Status> errors;
};
PeerExecutors StartPeerExecutors(const ExecutorSupervisor::Options& base, int n) {
  PeerExecutors peers{std::vector<std::unique_ptr<ExecutorSupervisor>>(n),
                      std::vector<absl::Status>(n)};
  std::vector<std::thread> starting;
  for (int k = 1; k < n; ++k) {
    starting.emplace_back([&, k] {
      ExecutorSupervisor::Options options = base;
      options.socket_path = absl::StrCat(base.socket_path, ".rank", k);
      options.per_job = false;  // stopped with its supervisor, after the job
      options.respawn = false;
      options.restart_after_jobs = 0;
      options.restart_above_baseline_bytes = 0;
      options.on_ready_changed = nullptr;
      absl::StatusOr<std::unique_ptr<ExecutorSupervisor>> started =
          ExecutorSupervisor::Start(options);
      if (started.ok()) {
        peers.supervisors[k] = *std::move(started);
      } else {
        peers.errors[k] = started.status();
      }
    });
  }
  for (std::thread& thread : starting) thread.join();
  return peers;
}

}  // namespace

absl::Status ExecutorSupervisor::RunRanks(const api::JobContext& job,
                                          const mpsd::v1::SubmitJobRequest& spec,
                                          const api::EventSink& sink,
                                          const api::CancelFlag& cancelled, int nproc_per_node) {
  const mpsd::v1::DistributedSpec& d = spec.train_job().distributed();
  const int nnodes = d.has_nnodes() ? d.nnodes() : 1;
  const int world_size = nproc_per_node * nnodes;
  const auto rank_of = [&](int local) { return d.node_rank() * nproc_per_node + local; };
  const std::string host = HostName();

  // The ranks of one node meet through <artifacts_dir>/<job_id>/.rendezvous (a c10d FileStore,
  // api::kRendezvousFileName): a file left by a run that crashed goes before any rank opens it.
  if (nnodes == 1 && !options_.executor.artifacts_dir.empty()) {
    std::error_code error;
    std::filesystem::remove(std::filesystem::path(options_.executor.artifacts_dir) / job.job_id /
                                api::kRendezvousFileName,
                            error);
  }
  PeerExecutors peers = StartPeerExecutors(options_, nproc_per_node);
  for (int k = 1; k < nproc_per_node; ++k) {
    if (!peers.errors[k].ok()) {
      return api::WithFailureReason(absl::UnavailableError(absl::StrFormat(
                                        "rank %d of %d (host %s): its executor did not "
                                        "start: %s",
                                        rank_of(k), world_size, host, peers.errors[k].message())),
                                    mpsd::v1::Job::EXECUTOR_CRASHED);
    }
  }
  const auto supervisor_of = [&](int k) -> ExecutorSupervisor& {
    return k == 0 ? *this : *peers.supervisors[k];
  };

  RankBoard board(nproc_per_node);
  std::vector<std::unique_ptr<api::CancelFlag>> flags;
  for (int k = 0; k < nproc_per_node; ++k) flags.push_back(std::make_unique<api::CancelFlag>());
  const auto run_rank = [&](int k, const api::EventSink& rank_sink) {
    api::JobContext context = job;
    context.local_rank = k;
    board.End(k, supervisor_of(k).RunHere(context, spec, rank_sink, *flags[k],
                                          [&](pid_t pid) { board.SetPid(k, pid); }));
  };

  // Passes a cancel or a rank's failure to every rank (RankBoard::Coordinate).
  std::thread coordinator;
  {
    // Before the coordinator starts and destroyed after it ended: it only records the request.
    api::CancelFlag::Callback on_cancel(cancelled, [&] { board.RequestCancel(); });
    coordinator = std::thread([&] {
      board.Coordinate(flags, kPeerGrace, [&](int k) {
        spdlog::warn("job {}: rank {} still runs {} after a peer failed; killing its executor",
                     job.job_id, rank_of(k), absl::FormatDuration(kPeerGrace));
        supervisor_of(k).KillCurrent("distributed: a peer rank failed");
      });
    });
    std::vector<std::thread> threads;
    for (int k = 1; k < nproc_per_node; ++k) {
      threads.emplace_back([&, k] { run_rank(k, [](mpsd::v1::JobEvent) {}); });
    }
    run_rank(0, sink);  // rank 0's events are the job's, on the caller's thread
    for (std::thread& thread : threads) thread.join();
    coordinator.join();
  }
  peers.supervisors.clear();  // stops their executors

  // The job's end: rank 0's when nothing failed or the job was cancelled, else the failure
  // that explains it best.
  const RankEnd first = board.EndOf(0);
  if (cancelled.cancelled()) {
    return absl::IsCancelled(first.status) ? first.status
                                           : absl::CancelledError("cancelled (every rank)");
  }
  const int culprit = board.Culprit();
  if (culprit < 0) return first.status;
  const absl::Status cause = board.EndOf(culprit).status;
  return api::WithFailureReason(
      absl::Status(cause.code(),
                   absl::StrFormat("rank %d of %d (host %s, executor pid %d): %s", rank_of(culprit),
                                   world_size, host, board.PidOf(culprit), cause.message())),
      api::FailureReasonOf(cause));
}

}  // namespace mpsd::server
