// A data-parallel TrainJob's ranks on this node (ExecutorSupervisor::RunRanks): local rank 0 in
// the supervisor's own executor, ranks 1..N-1 each in an executor started for the job, all run
// at once; a failure of one cancels, then kills, the others, and the job's error names the rank
// that failed first and why.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/error_cause.h"
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

  // Executors for local ranks 1..N-1, started in parallel.
  std::vector<std::unique_ptr<ExecutorSupervisor>> ranks(nproc_per_node);
  std::vector<absl::Status> start_errors(nproc_per_node);
  {
    std::vector<std::thread> starting;
    for (int k = 1; k < nproc_per_node; ++k) {
      starting.emplace_back([&, k] {
        Options options = options_;
        options.socket_path = absl::StrCat(options_.socket_path, ".rank", k);
        options.per_job = false;  // stopped with its supervisor, after the job
        options.respawn = false;
        options.restart_after_jobs = 0;
        options.restart_above_baseline_bytes = 0;
        options.on_ready_changed = nullptr;
        absl::StatusOr<std::unique_ptr<ExecutorSupervisor>> started = Start(options);
        if (started.ok()) {
          ranks[k] = *std::move(started);
        } else {
          start_errors[k] = started.status();
        }
      });
    }
    for (std::thread& thread : starting) thread.join();
  }
  for (int k = 1; k < nproc_per_node; ++k) {
    if (!start_errors[k].ok()) {
      return api::WithFailureReason(absl::UnavailableError(absl::StrFormat(
                                        "rank %d of %d (host %s): its executor did not "
                                        "start: %s",
                                        rank_of(k), world_size, host, start_errors[k].message())),
                                    mpsd::v1::Job::EXECUTOR_CRASHED);
    }
  }

  absl::Mutex mu;
  std::vector<RankEnd> ends(nproc_per_node);
  std::vector<pid_t> pids(nproc_per_node, 0);
  // Ranks whose executor this function killed because a peer had failed: their end (a crash by
  // SIGKILL) is an effect, never the cause, unless nothing else failed.
  std::vector<bool> killed_for_peer(nproc_per_node, false);
  std::vector<std::unique_ptr<api::CancelFlag>> flags;
  for (int k = 0; k < nproc_per_node; ++k) flags.push_back(std::make_unique<api::CancelFlag>());
  const auto run_rank = [&](int k, const api::EventSink& rank_sink) {
    api::JobContext context = job;
    context.local_rank = k;
    ExecutorSupervisor& supervisor = k == 0 ? *this : *ranks[k];
    absl::Status status = supervisor.RunHere(context, spec, rank_sink, *flags[k], [&](pid_t pid) {
      absl::MutexLock lock(&mu);
      pids[k] = pid;
    });
    absl::MutexLock lock(&mu);
    ends[k] = RankEnd{true, std::move(status), absl::Now()};
  };

  // Watches for a cancel or a failure and passes it to every rank.
  std::atomic<bool> finished{false};
  std::thread coordinator([&] {
    bool stopping = false;
    absl::Time kill_at = absl::InfiniteFuture();
    while (!finished.load()) {
      absl::SleepFor(absl::Milliseconds(20));
      bool failed = false;
      std::vector<int> running;
      {
        absl::MutexLock lock(&mu);
        for (int k = 0; k < nproc_per_node; ++k) {
          if (ends[k].done && !ends[k].status.ok()) failed = true;
          if (!ends[k].done) running.push_back(k);
        }
      }
      if (!stopping && (failed || cancelled.cancelled())) {
        stopping = true;
        for (auto& flag : flags) flag->Cancel();
        if (failed) kill_at = absl::Now() + kPeerGrace;
      }
      if (absl::Now() >= kill_at) {
        for (const int k : running) {
          {
            absl::MutexLock lock(&mu);
            killed_for_peer[k] = true;
          }
          spdlog::warn("job {}: rank {} still runs {} after a peer failed; killing its executor",
                       job.job_id, rank_of(k), absl::FormatDuration(kPeerGrace));
          (k == 0 ? *this : *ranks[k]).KillCurrent("distributed: a peer rank failed");
        }
        kill_at = absl::InfiniteFuture();
      }
    }
  });
  std::vector<std::thread> threads;
  for (int k = 1; k < nproc_per_node; ++k) {
    threads.emplace_back([&, k] { run_rank(k, [](mpsd::v1::JobEvent) {}); });
  }
  run_rank(0, sink);  // rank 0's events are the job's, on the caller's thread
  for (std::thread& thread : threads) thread.join();
  finished.store(true);
  coordinator.join();
  ranks.clear();  // stops their executors

  // The job's end: rank 0's when nothing failed or the job was cancelled, else the failure
  // that explains it best.
  if (cancelled.cancelled()) {
    return absl::IsCancelled(ends[0].status) ? ends[0].status
                                             : absl::CancelledError("cancelled (every rank)");
  }
  const auto find_culprit = [&](bool include_killed) {
    int culprit = -1;
    for (int k = 0; k < nproc_per_node; ++k) {
      const RankEnd& end = ends[k];
      if (end.status.ok() || absl::IsCancelled(end.status)) continue;
      if (killed_for_peer[k] && !include_killed) continue;
      if (culprit < 0 || Blame(end.status) < Blame(ends[culprit].status) ||
          (Blame(end.status) == Blame(ends[culprit].status) && end.when < ends[culprit].when)) {
        culprit = k;
      }
    }
    return culprit;
  };
  int culprit = find_culprit(/*include_killed=*/false);
  if (culprit < 0) culprit = find_culprit(/*include_killed=*/true);
  if (culprit < 0) return ends[0].status;
  const absl::Status& cause = ends[culprit].status;
  return api::WithFailureReason(
      absl::Status(cause.code(),
                   absl::StrFormat("rank %d of %d (host %s, executor pid %d): %s", rank_of(culprit),
                                   world_size, host, pids[culprit], cause.message())),
      api::FailureReasonOf(cause));
}

}  // namespace mpsd::server
