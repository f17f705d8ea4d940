// Tests of server/http/sse.cc: the SSE framing, where a stream resumes (after_seq against a
// reconnecting EventSource's Last-Event-ID), and EventFollower over a real EventLog on a real
// SQLite JobStore in a temp dir: replay then follow, resume with no gap and no duplicate, the end
// at the terminal event, heartbeat timeouts and shutdown.
#include "server/http/sse.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/event_log.h"
#include "server/core/job_store.h"
#include "tests/common/temp_dir.h"

namespace mpsd::server {
namespace {

using ::mpsd::v1::Job;
using ::mpsd::v1::JobEvent;
using ::testing::HasSubstr;

TEST(SseFramingTest, MessageSplitsEveryKindOfLineBreakIntoDataLines) {
  EXPECT_EQ(SseMessage(7, R"({"seq":"7"})"), "id: 7\ndata: {\"seq\":\"7\"}\n\n");
  EXPECT_EQ(SseMessage(8, "a\nb\r\nc\rd"), "id: 8\ndata: a\ndata: b\ndata: c\ndata: d\n\n");
  EXPECT_EQ(SseMessage(9, ""), "id: 9\ndata: \n\n");
}

TEST(SseFramingTest, CommentCannotInjectAField) {
  EXPECT_EQ(SseComment("heartbeat"), ": heartbeat\n\n");
  EXPECT_EQ(SseComment("x\n\nid: 99\ndata: evil"), ": x  id: 99 data: evil\n\n");
  EXPECT_EQ(SseRetry(2000), "retry: 2000\n\n");
}

TEST(ResumeAfterSeqTest, LastEventIdWinsOverTheRepeatedQueryParameter) {
  EXPECT_EQ(*ResumeAfterSeq("", ""), 0);
  EXPECT_EQ(*ResumeAfterSeq("5", ""), 5);
  EXPECT_EQ(*ResumeAfterSeq("5", "42"), 42);
  EXPECT_EQ(*ResumeAfterSeq("", "0"), 0);
}

TEST(ResumeAfterSeqTest, BadValuesAreNamed) {
  absl::StatusOr<int64_t> bad = ResumeAfterSeq("-1", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("after_seq"));
  bad = ResumeAfterSeq("1", "abc");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("Last-Event-ID"));
}

class EventFollowerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open({dir_ + "/mpsd.db"});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    log_ = std::make_unique<EventLog>(store_.get());
    Job job;
    job.set_kind(Job::TRAIN_JOB);
    job.set_state(Job::RUNNING);
    absl::StatusOr<Job> stored = store_->InsertJob(job);
    ASSERT_TRUE(stored.ok()) << stored.status();
    job_ = *stored;
  }

  void TearDown() override {
    log_.reset();
    store_.reset();
  }

  // Appends steps first..last; `terminal` makes the last one a SUCCEEDED state event instead.
  void Append(int64_t first, int64_t last, bool terminal = false) {
    std::vector<JobEvent> events;
    for (int64_t seq = first; seq <= last; ++seq) {
      JobEvent event;
      event.set_job_id(job_.id());
      event.set_seq(seq);
      if (terminal && seq == last) {
        event.mutable_state()->set_state(Job::SUCCEEDED);
      } else {
        event.mutable_step()->set_step(seq);
      }
      events.push_back(event);
    }
    job_.set_last_seq(last);
    log_->Append(job_, std::move(events));
  }

  // Follows until finished (or `stop_after` events), returning every seq received.
  std::vector<int64_t> Follow(int64_t after_seq, size_t stop_after = SIZE_MAX,
                              bool* finished = nullptr) {
    EventFollower follower(log_.get(), job_.id(), after_seq, /*batch=*/7);
    std::vector<int64_t> seqs;
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (absl::Now() < give_up && seqs.size() < stop_after) {
      absl::StatusOr<EventFollower::Batch> batch = follower.Next(absl::Milliseconds(200));
      EXPECT_TRUE(batch.ok()) << batch.status();
      if (!batch.ok()) break;
      for (const JobEvent& event : batch->events) {
        seqs.push_back(event.seq());
        if (seqs.size() == stop_after) break;
      }
      if (batch->finished) {
        if (finished != nullptr) *finished = true;
        break;
      }
    }
    return seqs;
  }

  static std::vector<int64_t> Range(int64_t first, int64_t last) {
    std::vector<int64_t> out;
    for (int64_t s = first; s <= last; ++s) out.push_back(s);
    return out;
  }

  const mpsd::testing::TempDir temp_{"sse_test"};
  const std::string dir_ = temp_.str();
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<EventLog> log_;
  Job job_;
};

TEST_F(EventFollowerTest, ReplaysThenFollowsLiveAndEndsAtTheTerminalEvent) {
  Append(1, 30);
  ASSERT_TRUE(log_->Flush().ok());
  std::thread producer([this] {
    for (int64_t first = 31; first <= 300; first += 10) {
      absl::SleepFor(absl::Milliseconds(5));
      Append(first, first + 9, /*terminal=*/first + 9 == 300);
    }
  });
  bool finished = false;
  const std::vector<int64_t> seqs = Follow(0, SIZE_MAX, &finished);
  producer.join();
  EXPECT_TRUE(finished);
  EXPECT_EQ(seqs, Range(1, 300));
}

TEST_F(EventFollowerTest, ResumingAtTheLastIdReceivedHasNoGapAndNoDuplicate) {
  std::thread producer([this] {
    for (int64_t first = 1; first <= 200; first += 5) {
      absl::SleepFor(absl::Milliseconds(3));
      Append(first, first + 4, /*terminal=*/first + 4 == 200);
    }
  });
  // A client that drops after 57 events and reconnects with Last-Event-ID: 57.
  std::vector<int64_t> seqs = Follow(0, /*stop_after=*/57);
  ASSERT_EQ(seqs.size(), 57u);
  const int64_t last_event_id = seqs.back();
  absl::StatusOr<int64_t> resume = ResumeAfterSeq("0", std::to_string(last_event_id));
  ASSERT_TRUE(resume.ok());
  bool finished = false;
  for (int64_t seq : Follow(*resume, SIZE_MAX, &finished)) seqs.push_back(seq);
  producer.join();
  EXPECT_TRUE(finished);
  EXPECT_EQ(seqs, Range(1, 200));
}

TEST_F(EventFollowerTest, IdleTimeoutReturnsNothingSoTheCallerCanSendAHeartbeat) {
  Append(1, 3);
  ASSERT_TRUE(log_->Flush().ok());
  EventFollower follower(log_.get(), job_.id(), 3);
  const absl::Time start = absl::Now();
  absl::StatusOr<EventFollower::Batch> batch = follower.Next(absl::Milliseconds(300));
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(batch->events.empty());
  EXPECT_FALSE(batch->finished);
  EXPECT_FALSE(batch->closed);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
  EXPECT_EQ(log_->GetStats().watches, 0);  // The timed-out watch was cancelled.
  // A commit during a wait wakes it at once.
  std::thread producer([this] {
    absl::SleepFor(absl::Milliseconds(100));
    Append(4, 4);
  });
  batch = follower.Next(absl::Seconds(10));
  producer.join();
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->events.size(), 1u);
  EXPECT_EQ(batch->events[0].seq(), 4);
}

TEST_F(EventFollowerTest, ClosedLogEndsAWaitingFollower) {
  Append(1, 2);
  ASSERT_TRUE(log_->Flush().ok());
  EventFollower follower(log_.get(), job_.id(), 2);
  std::thread closer([this] {
    absl::SleepFor(absl::Milliseconds(100));
    log_->Close();
  });
  absl::StatusOr<EventFollower::Batch> batch = follower.Next(absl::Seconds(10));
  closer.join();
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(batch->events.empty());
  EXPECT_TRUE(batch->closed);
}

}  // namespace
}  // namespace mpsd::server
