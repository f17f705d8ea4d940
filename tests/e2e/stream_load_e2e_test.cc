// A subscriber that reads one event a second while a job streams hundreds a second, against a
// real mpsd: the job's step time must stay what it is without that subscriber, the daemon's
// memory must stay flat (the subscriber catches up from the store), and the subscriber must
// still get every event in order. Prints the figures: step times, RSS, events stored per second.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/client_context.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;

constexpr double kMiB = 1024.0 * 1024.0;
// Steps of 4 examples through the MLP, one event each: 10 to 30 s of training on a 2-core CPU.
constexpr int64_t kSteps = 3000;

mpsd::v1::SubmitJobRequest FastJob() { return TrainJobRequest(kSteps * 4, 64, 1, 4, "mlp"); }

// Training time per step of a finished one-epoch job, milliseconds.
double StepTimeMs(const Job& job) {
  return job.last_epoch().epoch_time_s() * 1000.0 / static_cast<double>(kSteps);
}

// GetServerStatus once a second, from a thread, until stopped.
class StatusSampler {
 public:
  explicit StatusSampler(Daemon& daemon) : daemon_(daemon), thread_([this] { Loop(); }) {}
  ~StatusSampler() { Stop(); }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  const std::vector<std::pair<absl::Time, mpsd::v1::ServerStatus>>& samples() const {
    return samples_;
  }

 private:
  void Loop() {
    while (!stop_) {
      absl::StatusOr<mpsd::v1::ServerStatus> status = rpc::Status(daemon_);
      if (status.ok()) samples_.emplace_back(absl::Now(), *status);
      absl::SleepFor(absl::Seconds(1));
    }
  }

  Daemon& daemon_;
  std::atomic<bool> stop_{false};
  std::vector<std::pair<absl::Time, mpsd::v1::ServerStatus>> samples_;  // the thread's until Stop
  std::thread thread_;
};

// Reads a job's stream one event a second until told to hurry, then as fast as it can.
class SlowReader {
 public:
  SlowReader(Daemon& daemon, const std::string& job_id)
      : thread_([this, &daemon, job_id] { Loop(daemon, job_id); }) {}
  ~SlowReader() { Join(); }

  void Hurry() { hurry_ = true; }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  int64_t read() const { return read_; }
  // After Join().
  const std::vector<JobEvent>& events() const { return events_; }
  const grpc::Status& status() const { return status_; }

 private:
  void Loop(Daemon& daemon, const std::string& job_id) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    mpsd::v1::StreamEventsRequest request;
    request.set_job_id(job_id);
    auto reader = daemon.stub().StreamEvents(&context, request);
    JobEvent event;
    while (reader->Read(&event)) {
      if (event.has_heartbeat()) continue;
      events_.push_back(event);
      ++read_;
      if (!hurry_) absl::SleepFor(absl::Seconds(1));
    }
    status_ = reader->Finish();
  }

  std::atomic<bool> hurry_{false};
  std::atomic<int64_t> read_{0};
  std::vector<JobEvent> events_;
  grpc::Status status_;
  std::thread thread_;
};

TEST(StreamLoadE2eTest, ASlowSubscriberCostsNeitherStepTimeNorMemory) {
  TempDir dir;
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  ASSERT_NO_FATAL_FAILURE(daemon.Start());

  // The same job twice: alone, then with the slow subscriber.
  absl::StatusOr<Job> alone = rpc::Submit(daemon, FastJob());
  ASSERT_TRUE(alone.ok()) << alone.status();
  alone = rpc::WaitForEnd(daemon, alone->id());
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_EQ(alone->state(), Job::SUCCEEDED);

  absl::StatusOr<mpsd::v1::ServerStatus> before = rpc::Status(daemon);
  ASSERT_TRUE(before.ok()) << before.status();
  absl::StatusOr<Job> watched = rpc::Submit(daemon, FastJob());
  ASSERT_TRUE(watched.ok()) << watched.status();
  const absl::Time start = absl::Now();
  SlowReader slow(daemon, watched->id());
  StatusSampler sampler(daemon);
  watched = rpc::WaitForEnd(daemon, watched->id());
  ASSERT_TRUE(watched.ok()) << watched.status();
  const absl::Duration took = absl::Now() - start;
  sampler.Stop();
  const int64_t read_while_running = slow.read();
  slow.Hurry();
  slow.Join();
  ASSERT_EQ(watched->state(), Job::SUCCEEDED);
  absl::StatusOr<mpsd::v1::ServerStatus> after = rpc::Status(daemon);
  ASSERT_TRUE(after.ok()) << after.status();

  // The subscriber was slow, and still got everything, in order, once it caught up.
  EXPECT_LT(read_while_running, watched->last_seq() / 2);
  ASSERT_TRUE(slow.status().ok()) << slow.status().error_message();
  ASSERT_EQ(static_cast<int64_t>(slow.events().size()), watched->last_seq());
  for (size_t i = 0; i < slow.events().size(); ++i) {
    ASSERT_EQ(slow.events()[i].seq(), static_cast<int64_t>(i + 1));
  }

  // Step time.
  const double alone_ms = StepTimeMs(*alone), watched_ms = StepTimeMs(*watched);
  std::printf(
      "step time: %.3f ms alone, %.3f ms with a subscriber reading 1 event/s (x%.2f); "
      "the subscriber read %lld of %lld events while the job ran\n",
      alone_ms, watched_ms, watched_ms / alone_ms, static_cast<long long>(read_while_running),
      static_cast<long long>(watched->last_seq()));
  EXPECT_LT(watched_ms, alone_ms * 2.0);  // generous: a shared, loaded CI machine

  // Memory: after the first seconds (model, data), the RSS must not climb with the backlog.
  const auto& samples = sampler.samples();
  ASSERT_GE(samples.size(), 4u) << "the job ran for less than 4 s";
  const int64_t early = samples[samples.size() / 4].second.rss_bytes();
  int64_t peak = 0;
  for (const auto& [time, status] : samples) peak = std::max(peak, status.rss_bytes());
  std::printf(
      "daemon RSS under the slow subscriber: %.1f MiB at 1/4 of the job, peak %.1f MiB, "
      "last %.1f MiB (%zu samples); events pending at most ",
      early / kMiB, peak / kMiB, samples.back().second.rss_bytes() / kMiB, samples.size());
  int64_t pending = 0;
  for (const auto& [time, status] : samples) pending = std::max(pending, status.events_pending());
  std::printf("%lld\n", static_cast<long long>(pending));
  EXPECT_LT(peak - early, static_cast<int64_t>(64 * kMiB));

  // Storage.
  const int64_t stored = after->events_stored() - before->events_stored();
  const int64_t commits = after->event_commits() - before->event_commits();
  const double commit_s = after->commit_time_s() - before->commit_time_s();
  std::printf(
      "events stored: %lld in %.1f s (%.0f events/s, as fast as the job made them) in "
      "%lld commits (%.1f events/commit); the store's own rate: %.0f events/s of commit "
      "time\n",
      static_cast<long long>(stored), absl::ToDoubleSeconds(took),
      stored / absl::ToDoubleSeconds(took), static_cast<long long>(commits),
      commits > 0 ? static_cast<double>(stored) / commits : 0.0,
      commit_s > 0 ? stored / commit_s : 0.0);
  EXPECT_GE(stored, watched->last_seq());
}

}  // namespace
}  // namespace mpsd::testing
