// Tests of server/core/event_log.cc against a real JobStore in a temp dir: what is appended is
// committed and readable, watchers fire once after the commit they wait for, Unwatch and
// Close end watches, and a failed commit drops the batch without blocking the producer.
#include "server/core/event_log.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/core/job_store.h"
#include "tests/common/temp_dir.h"

namespace mpsd::server {
namespace {

using ::mpsd::testing::TempDir;
using ::mpsd::v1::Job;
using ::mpsd::v1::JobEvent;

class EventLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobStore::Options options;
    options.path = dir_ / "mpsd.db";
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    Job job;
    job.set_state(Job::QUEUED);
    absl::StatusOr<Job> inserted = store_->InsertJob(job);
    ASSERT_TRUE(inserted.ok()) << inserted.status();
    job_ = *inserted;
  }

  // Events seq first..last of the job, with step = seq; job_ updated to last_seq = last.
  std::vector<JobEvent> Steps(int64_t first, int64_t last) {
    std::vector<JobEvent> events;
    for (int64_t seq = first; seq <= last; ++seq) {
      JobEvent event;
      event.set_job_id(job_.id());
      event.set_seq(seq);
      event.mutable_step()->set_step(seq);
      events.push_back(event);
    }
    job_.set_last_seq(last);
    return events;
  }

  TempDir dir_{"event_log_test"};
  std::unique_ptr<JobStore> store_;
  Job job_;
};

TEST_F(EventLogTest, FlushCommitsWhatWasAppended) {
  EventLog log(store_.get());
  log.Append(job_, Steps(1, 3));
  log.Append(job_, Steps(4, 5));
  ASSERT_TRUE(log.Flush().ok());
  EXPECT_EQ(log.CommittedSeq(job_.id()), 5);
  absl::StatusOr<std::vector<JobEvent>> read = log.Read(job_.id(), 2, 10);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[0].seq(), 3);
  EXPECT_EQ((*read)[2].step().step(), 5);
  // The job's row is the last snapshot appended.
  EXPECT_EQ(store_->GetJob(job_.id())->last_seq(), 5);
  const EventLog::Stats stats = log.GetStats();
  EXPECT_EQ(stats.events_stored, 5);
  EXPECT_GE(stats.commits, 1);
  EXPECT_LE(stats.commits, 2);
  EXPECT_EQ(stats.events_pending, 0);
}

TEST_F(EventLogTest, DestructorCommitsEverything) {
  {
    EventLog log(store_.get());
    log.Append(job_, Steps(1, 100));
  }
  absl::StatusOr<std::vector<JobEvent>> stored = store_->ReadEvents(job_.id(), 0, 1000);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 100u);
}

TEST_F(EventLogTest, WatchFiresOnceAfterTheCommitItWaitsFor) {
  EventLog log(store_.get());
  log.Append(job_, Steps(1, 2));
  ASSERT_TRUE(log.Flush().ok());
  // Already committed beyond after_seq: no watch, read now.
  EXPECT_EQ(log.Watch(job_.id(), 1, [] { ADD_FAILURE() << "must not run"; }), 0u);

  absl::Mutex mu;
  int fired = 0;
  int64_t seen_seq = 0;
  const uint64_t id = log.Watch(job_.id(), 2, [&] {
    absl::MutexLock lock(&mu);
    ++fired;
    seen_seq = log.CommittedSeq(job_.id());
  });
  ASSERT_NE(id, 0u);
  EXPECT_EQ(log.GetStats().watches, 1);
  log.Append(job_, Steps(3, 3));
  ASSERT_TRUE(log.Flush().ok());
  log.Append(job_, Steps(4, 4));
  ASSERT_TRUE(log.Flush().ok());
  absl::MutexLock lock(&mu);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(seen_seq, 3);  // ran after seq 3 was committed, and only then
  EXPECT_EQ(log.GetStats().watches, 0);
}

TEST_F(EventLogTest, WatchOfAnotherJobDoesNotFire) {
  EventLog log(store_.get());
  bool fired = false;
  const uint64_t id = log.Watch("999", 0, [&] { fired = true; });
  ASSERT_NE(id, 0u);
  log.Append(job_, Steps(1, 1));
  ASSERT_TRUE(log.Flush().ok());
  EXPECT_FALSE(fired);
  log.Unwatch(id);
  EXPECT_EQ(log.GetStats().watches, 0);
}

TEST_F(EventLogTest, UnwatchedCallbackNeverRuns) {
  EventLog log(store_.get());
  const uint64_t id = log.Watch(job_.id(), 0, [] { ADD_FAILURE() << "must not run"; });
  log.Unwatch(id);
  log.Unwatch(0);  // ignored
  log.Append(job_, Steps(1, 1));
  ASSERT_TRUE(log.Flush().ok());
}

TEST_F(EventLogTest, CloseRunsEveryWatchAndRefusesNewOnes) {
  EventLog log(store_.get());
  absl::Notification fired;
  ASSERT_NE(log.Watch(job_.id(), 0, [&] { fired.Notify(); }), 0u);
  EXPECT_FALSE(log.Closed());
  log.Close();
  EXPECT_TRUE(fired.HasBeenNotified());
  EXPECT_TRUE(log.Closed());
  EXPECT_EQ(log.Watch(job_.id(), 0, [] { ADD_FAILURE() << "must not run"; }), 0u);
}

TEST_F(EventLogTest, RecoveredSeqCountsAsCommitted) {
  EventLog log(store_.get());
  log.SetCommittedSeq("7", 12);
  EXPECT_EQ(log.CommittedSeq("7"), 12);
  EXPECT_EQ(log.CommittedSeq("8"), 0);
  EXPECT_EQ(log.Watch("7", 11, [] {}), 0u);
}

TEST_F(EventLogTest, RejectedBatchIsDroppedWithoutBlocking) {
  EventLog log(store_.get());
  log.Append(job_, Steps(1, 2));
  ASSERT_TRUE(log.Flush().ok());
  // The same seqs again: the store refuses the batch (ALREADY_EXISTS) on every attempt.
  log.Append(job_, Steps(1, 2));
  log.Flush().IgnoreError();
  EXPECT_EQ(log.CommittedSeq(job_.id()), 2);
  EXPECT_EQ(log.GetStats().events_stored, 2);
  EXPECT_EQ(log.GetStats().events_pending, 0);
  // Later events still go through.
  log.Append(job_, Steps(3, 3));
  ASSERT_TRUE(log.Flush().ok());
  EXPECT_EQ(log.CommittedSeq(job_.id()), 3);
}

}  // namespace
}  // namespace mpsd::server
