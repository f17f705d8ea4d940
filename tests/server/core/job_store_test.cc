// Tests of server/core/job_store.cc against real database files in a temp dir, plus a measurement
// of Commit throughput for batches of per-step events.
#include "server/core/job_store.h"

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace mpsd::server {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::mpsd::v1::Job;
using ::mpsd::v1::JobEvent;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

MATCHER_P(EqualsProto, expected, "") { return MessageDifferencer::Equals(arg, expected); }

MATCHER_P(StatusIs, code, "") {
  *result_listener << "status is " << arg;
  return arg.code() == code;
}

JobStore::Options Options(const std::string& path) {
  JobStore::Options options;
  options.path = path;
  return options;
}

Job NewTrainJob() {
  Job job;
  job.set_kind(Job::TRAIN_JOB);
  job.set_state(Job::QUEUED);
  job.mutable_created_at()->set_seconds(1700000000);
  job.mutable_created_at()->set_nanos(123456000);
  auto* train = job.mutable_spec()->mutable_train_job();
  train->mutable_model()->set_name("convnet");
  train->mutable_dataset()->set_name("fashion-mnist");
  train->set_batch_size(64);
  train->set_epochs(2);
  return job;
}

// A per-step event as the executor reports it: every StepMetrics field set.
JobEvent StepEvent(const std::string& job_id, int64_t seq) {
  JobEvent event;
  event.set_job_id(job_id);
  event.set_seq(seq);
  event.mutable_time()->set_seconds(1700000000 + seq);
  event.mutable_time()->set_nanos(987654321);
  auto* step = event.mutable_step();
  step->set_epoch(1 + static_cast<int32_t>(seq / 938));
  step->set_step(seq);
  step->set_total_steps(1876);
  step->set_loss(2.302585f / static_cast<float>(seq));
  step->set_accuracy(0.8671875f);
  step->set_learning_rate(0.001);
  step->set_samples_per_second(41234.5678);
  step->set_step_time_ms(1.5521);
  step->set_allocated_bytes(123456789);
  step->set_batch_size(64);
  return event;
}

std::vector<int64_t> Seqs(const std::vector<JobEvent>& events) {
  std::vector<int64_t> seqs;
  for (const JobEvent& event : events) seqs.push_back(event.seq());
  return seqs;
}

// Talks to the file directly, to set up states the store itself never produces.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK) << path;
  }
  ~RawDb() { sqlite3_close(db_); }

  void Exec(const std::string& sql) {
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
        << sql << ": " << (error != nullptr ? error : "");
    sqlite3_free(error);
  }

  // The first column of the first row, as text ("" if there is no row).
  std::string Query(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sql;
    std::string result;
    if (sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      if (text != nullptr) result = reinterpret_cast<const char*>(text);
    }
    sqlite3_finalize(stmt);
    return result;
  }

 private:
  sqlite3* db_ = nullptr;
};

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = (std::filesystem::path(dir_) / "mpsd.db").string(); }

  std::unique_ptr<JobStore> OpenStore() {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(Options(path_));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  Job Insert(JobStore& store, Job job = NewTrainJob()) {
    absl::StatusOr<Job> inserted = store.InsertJob(std::move(job));
    EXPECT_TRUE(inserted.ok()) << inserted.status();
    return inserted.value_or(Job());
  }

  const mpsd::testing::TempDir temp_{"job_store"};
  const std::string dir_ = temp_.str();
  std::string path_;
};

TEST_F(JobStoreTest, IdsIncreaseAndAreNotReusedAcrossReopen) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    Job with_id = NewTrainJob();
    with_id.set_id("77");  // ignored
    EXPECT_EQ(Insert(*store, with_id).id(), "1");
    EXPECT_EQ(Insert(*store).id(), "2");
    EXPECT_EQ(Insert(*store).id(), "3");
  }
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(Insert(*store).id(), "4");
  }
  // Even if the newest job is deleted (the store has no delete yet; a later one may), its id
  // is not handed out again.
  RawDb(path_).Exec("DELETE FROM jobs WHERE id = 4");
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Insert(*store).id(), "5");
  EXPECT_THAT(store->GetJob("4").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(JobStoreTest, InsertJobStoresTheJobWithItsId) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Job inserted = Insert(*store);
  Job expected = NewTrainJob();
  expected.set_id("1");
  EXPECT_THAT(inserted, EqualsProto(expected));
  absl::StatusOr<Job> got = store->GetJob("1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, EqualsProto(expected));
}

TEST_F(JobStoreTest, InsertJobSetsMissingCreatedAt) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Job job = NewTrainJob();
  job.clear_created_at();
  const int64_t before = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  Job inserted = Insert(*store, job);
  EXPECT_GE(inserted.created_at().seconds(), before);
  EXPECT_LE(inserted.created_at().seconds(), before + 60);
}

TEST_F(JobStoreTest, ReopenKeepsJobsAndEvents) {
  Job job;
  std::vector<JobEvent> events;
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    job = Insert(*store);
    for (int64_t seq = 1; seq <= 5; ++seq) events.push_back(StepEvent(job.id(), seq));
    job.set_state(Job::RUNNING);
    job.set_last_seq(5);
    *job.mutable_last_step() = events.back().step();
    ASSERT_TRUE(store->Commit({job}, events).ok());
  }
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<Job> got = store->GetJob(job.id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, EqualsProto(job));
  absl::StatusOr<std::vector<JobEvent>> read = store->ReadEvents(job.id(), 0, 100);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_THAT((*read)[i], EqualsProto(events[i]));
}

TEST_F(JobStoreTest, DatabaseIsInWalModeWithSchemaVersion) {
  ASSERT_NE(OpenStore(), nullptr);
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.Query("PRAGMA user_version"), "2");
}

TEST_F(JobStoreTest, KindStateAndCreatedAtColumnsFollowTheBlob) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Job job = Insert(*store);
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("SELECT kind || ',' || state || ',' || created_at FROM jobs"),
            absl::StrCat(Job::TRAIN_JOB, ",", Job::QUEUED, ",1700000000123456"));
  job.set_state(Job::FAILED);
  job.set_kind(Job::BENCH_JOB);
  job.mutable_created_at()->set_seconds(1700000001);
  ASSERT_TRUE(store->Commit({job}, {}).ok());
  EXPECT_EQ(raw.Query("SELECT kind || ',' || state || ',' || created_at FROM jobs"),
            absl::StrCat(Job::BENCH_JOB, ",", Job::FAILED, ",1700000001123456"));
}

TEST_F(JobStoreTest, DuplicateSeqFailsAlreadyExistsAndWritesNothing) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  const Job original = Insert(*store);
  ASSERT_TRUE(store->Commit({}, {StepEvent("1", 1), StepEvent("1", 2), StepEvent("1", 3)}).ok());

  Job updated = original;
  updated.set_state(Job::RUNNING);
  updated.set_last_seq(5);
  // seq 2 is already stored.
  absl::Status status =
      store->Commit({updated}, {StepEvent("1", 4), StepEvent("1", 5), StepEvent("1", 2)});
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(status.message(), HasSubstr("2"));
  // seq 4 twice in one batch.
  EXPECT_THAT(store->Commit({updated}, {StepEvent("1", 4), StepEvent("1", 4)}),
              StatusIs(absl::StatusCode::kAlreadyExists));

  absl::StatusOr<std::vector<JobEvent>> events = store->ReadEvents("1", 0, 100);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_THAT(Seqs(*events), ElementsAre(1, 2, 3));
  absl::StatusOr<Job> job = store->GetJob("1");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(*job, EqualsProto(original));

  // The store is still usable after the rolled-back transactions.
  ASSERT_TRUE(store->Commit({updated}, {StepEvent("1", 4), StepEvent("1", 5)}).ok());
  EXPECT_THAT(Seqs(store->ReadEvents("1", 0, 100).value()), ElementsAre(1, 2, 3, 4, 5));
}

TEST_F(JobStoreTest, CommitOfUnknownJobFailsNotFoundAndWritesNothing) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  const Job original = Insert(*store);
  Job updated = original;
  updated.set_state(Job::RUNNING);

  for (const char* unknown_id : {"99", "abc", "", "-1", "01"}) {
    SCOPED_TRACE(unknown_id);
    Job unknown = NewTrainJob();
    unknown.set_id(unknown_id);
    EXPECT_THAT(store->Commit({updated, unknown}, {StepEvent("1", 1)}),
                StatusIs(absl::StatusCode::kNotFound));
    // An event of an unknown job, next to a valid update.
    EXPECT_THAT(store->Commit({updated}, {StepEvent("1", 1), StepEvent(unknown_id, 1)}),
                StatusIs(absl::StatusCode::kNotFound));
  }
  EXPECT_THAT(store->GetJob("1").value(), EqualsProto(original));
  EXPECT_THAT(store->ReadEvents("1", 0, 100).value(), IsEmpty());
}

TEST_F(JobStoreTest, CommitRejectsSeqBelowOne) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Insert(*store);
  EXPECT_THAT(store->Commit({}, {StepEvent("1", 1), StepEvent("1", 0)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store->ReadEvents("1", 0, 100).value(), IsEmpty());
}

TEST_F(JobStoreTest, EmptyCommitIsOk) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Commit({}, {}).ok());
}

TEST_F(JobStoreTest, ReadEventsHonoursAfterSeqAndLimit) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Insert(*store);
  Insert(*store);
  std::vector<JobEvent> events;
  for (int64_t seq = 1; seq <= 10; ++seq) {
    events.push_back(StepEvent("1", seq));
    events.push_back(StepEvent("2", seq));  // must not show up in job 1's events
  }
  ASSERT_TRUE(store->Commit({}, events).ok());

  EXPECT_THAT(Seqs(store->ReadEvents("1", 0, 100).value()),
              ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  EXPECT_THAT(Seqs(store->ReadEvents("1", 3, 4).value()), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(Seqs(store->ReadEvents("1", 8, 100).value()), ElementsAre(9, 10));
  EXPECT_THAT(Seqs(store->ReadEvents("1", 0, 1).value()), ElementsAre(1));
  EXPECT_THAT(store->ReadEvents("1", 10, 100).value(), IsEmpty());
  const std::vector<JobEvent> job2 = store->ReadEvents("2", 0, 100).value();
  EXPECT_EQ(job2.size(), 10u);
  for (const JobEvent& event : job2) EXPECT_EQ(event.job_id(), "2");
  EXPECT_THAT(store->ReadEvents("3", 0, 100).value(), IsEmpty());
  EXPECT_THAT(store->ReadEvents("x", 0, 100).value(), IsEmpty());
  EXPECT_THAT(store->ReadEvents("1", 0, 0).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JobStoreTest, ListJobsIsNewestFirst) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(store->ListJobs().value(), IsEmpty());
  for (int i = 0; i < 12; ++i) Insert(*store);  // past 9, so a text sort would show
  absl::StatusOr<std::vector<Job>> jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::vector<std::string> ids;
  for (const Job& job : *jobs) ids.push_back(job.id());
  EXPECT_THAT(ids, ElementsAre("12", "11", "10", "9", "8", "7", "6", "5", "4", "3", "2", "1"));
}

TEST_F(JobStoreTest, GetJobOfUnknownOrMalformedIdIsNotFound) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Insert(*store);
  for (const char* id : {"2", "0", "abc", "", "-1", "+1", "01", "1.0", " 1", "1 ",
                         "99999999999999999999", "9223372036854775808"}) {
    EXPECT_THAT(store->GetJob(id).status(), StatusIs(absl::StatusCode::kNotFound)) << id;
  }
  EXPECT_TRUE(store->GetJob("1").ok());
}

TEST_F(JobStoreTest, GarbageFileIsDataLossNamingThePath) {
  {
    std::ofstream file(path_, std::ios::binary);
    for (int i = 0; i < 256; ++i) file << "this is not a database, just text ";
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(Options(path_));
  EXPECT_THAT(store.status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
  EXPECT_THAT(store.status().message(), HasSubstr("not a database"));
}

TEST_F(JobStoreTest, NewerSchemaIsFailedPreconditionNamingThePath) {
  ASSERT_NE(OpenStore(), nullptr);
  RawDb(path_).Exec("PRAGMA user_version = 99");
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(Options(path_));
  EXPECT_THAT(store.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
  EXPECT_THAT(store.status().message(), HasSubstr("99"));
}

TEST_F(JobStoreTest, ForeignDatabaseIsDataLoss) {
  RawDb(path_).Exec("CREATE TABLE jobs (name TEXT)");
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(Options(path_));
  EXPECT_THAT(store.status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
}

TEST_F(JobStoreTest, OurVersionWithoutOurTablesIsDataLoss) {
  RawDb(path_).Exec("PRAGMA user_version = 1");
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(Options(path_));
  EXPECT_THAT(store.status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
}

TEST_F(JobStoreTest, CorruptStoredProtoIsDataLoss) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Insert(*store);
  ASSERT_TRUE(store->Commit({}, {StepEvent("1", 1)}).ok());
  RawDb raw(path_);
  raw.Exec("UPDATE jobs SET job = x'ff'");  // a varint that never ends
  raw.Exec("UPDATE events SET event = x'ff'");
  absl::Status status = store->GetJob("1").status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(status.message(), HasSubstr("job 1"));
  EXPECT_THAT(store->ListJobs().status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(store->ReadEvents("1", 0, 10).status(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(JobStoreTest, ListJobsSkippingDamagedReadsAroundADamagedRow) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 4; ++i) Insert(*store);
  RawDb(path_).Exec("UPDATE jobs SET job = x'ff' WHERE id = 2");
  ASSERT_THAT(store->ListJobs().status(), StatusIs(absl::StatusCode::kDataLoss));
  absl::StatusOr<JobStore::JobListing> listing = store->ListJobsSkippingDamaged();
  ASSERT_TRUE(listing.ok()) << listing.status();
  std::vector<std::string> ids;
  for (const Job& job : listing->jobs) ids.push_back(job.id());
  EXPECT_THAT(ids, ElementsAre("4", "3", "1"));
  ASSERT_EQ(listing->damaged.size(), 1u);
  EXPECT_EQ(listing->damaged[0].first, "2");
  EXPECT_THAT(listing->damaged[0].second, StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(JobStoreTest, ListJobsSkippingDamagedOfAHealthyStoreIsListJobs) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Insert(*store);
  Insert(*store);
  absl::StatusOr<JobStore::JobListing> listing = store->ListJobsSkippingDamaged();
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(listing->jobs.size(), 2u);
  EXPECT_TRUE(listing->damaged.empty());
}

TEST_F(JobStoreTest, ReserveIdsThroughSkipsIdsAcrossReopen) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->ReserveIdsThrough(7).ok());  // before any job: no sequence row yet
    EXPECT_EQ(Insert(*store).id(), "8");
    ASSERT_TRUE(store->ReserveIdsThrough(3).ok());  // lower: nothing changes
    EXPECT_EQ(Insert(*store).id(), "9");
    ASSERT_TRUE(store->ReserveIdsThrough(20).ok());
  }
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Insert(*store).id(), "21");
}

TEST_F(JobStoreTest, MissingDirectoryNamesThePath) {
  const std::string path = dir_ + "/no/such/dir/mpsd.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(Options(path));
  EXPECT_THAT(store.status(), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(store.status().message(), HasSubstr(path));
}

// One writer appends batches of 10 events and the job's last_seq in one Commit, another
// inserts jobs, and readers check what they see: never an error, never half a batch.
TEST_F(JobStoreTest, ConcurrentReadersAndWriters) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Job job = Insert(*store);
  constexpr int kBatches = 150;
  constexpr int kBatchSize = 10;
  constexpr int kInsertedJobs = 40;

  absl::Mutex mu;
  std::vector<std::string> errors;  // guarded by mu
  auto report = [&](const std::string& what) {
    absl::MutexLock lock(&mu);
    errors.push_back(what);
  };
  std::atomic<bool> writing{true};

  std::thread writer([&] {
    for (int b = 0; b < kBatches; ++b) {
      std::vector<JobEvent> events;
      for (int i = 1; i <= kBatchSize; ++i)
        events.push_back(StepEvent(job.id(), b * kBatchSize + i));
      job.set_last_seq(events.back().seq());
      absl::Status status = store->Commit({job}, events);
      if (!status.ok()) report(status.ToString());
    }
    writing = false;
  });
  std::thread inserter([&] {
    for (int i = 0; i < kInsertedJobs; ++i) {
      absl::StatusOr<Job> inserted = store->InsertJob(NewTrainJob());
      if (!inserted.ok()) report(inserted.status().ToString());
    }
  });
  std::vector<std::thread> readers;
  std::atomic<int> reads{0};
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      do {
        absl::StatusOr<Job> got = store->GetJob("1");
        if (!got.ok()) {
          report(got.status().ToString());
          continue;
        }
        absl::StatusOr<std::vector<JobEvent>> events = store->ReadEvents("1", 0, 100000);
        if (!events.ok()) {
          report(events.status().ToString());
          continue;
        }
        const int64_t n = static_cast<int64_t>(events->size());
        if (got->last_seq() % kBatchSize != 0 || n % kBatchSize != 0 || n < got->last_seq()) {
          report(absl::StrCat("saw last_seq ", got->last_seq(), " then ", n, " events"));
        }
        for (int64_t i = 0; i < n; ++i) {
          if ((*events)[i].seq() != i + 1) report(absl::StrCat("gap at ", i + 1));
        }
        absl::StatusOr<std::vector<Job>> jobs = store->ListJobs();
        if (!jobs.ok()) report(jobs.status().ToString());
        ++reads;
      } while (writing);
    });
  }
  writer.join();
  inserter.join();
  for (std::thread& reader : readers) reader.join();

  EXPECT_THAT(errors, IsEmpty());
  EXPECT_GT(reads.load(), 0);
  RecordProperty("reader_passes", reads.load());
  EXPECT_EQ(store->GetJob("1").value().last_seq(), kBatches * kBatchSize);
  EXPECT_EQ(store->ReadEvents("1", 0, 100000).value().size(), size_t{kBatches * kBatchSize});
  EXPECT_EQ(store->ListJobs().value().size(), size_t{1 + kInsertedJobs});
}

// Not a pass/fail test: measures events/s for the writer thread's batches (one job row update
// plus N StepMetrics events per Commit) and prints them. Each size runs for about 0.5 s.
TEST_F(JobStoreTest, CommitThroughput) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  const std::string sample = StepEvent("1", 1).SerializeAsString();
  std::printf("[ perf     ] StepMetrics event: %zu bytes serialized\n", sample.size());
  for (int batch_size : {1, 32, 512}) {
    for (bool with_job_update : {true, false}) {
      Job job = Insert(*store);
      int64_t seq = 0;
      int64_t commits = 0;
      // Only the Commit calls are timed, not building the events.
      std::chrono::duration<double> elapsed{0};
      while (elapsed.count() < 0.5) {
        std::vector<JobEvent> events;
        events.reserve(batch_size);
        for (int i = 0; i < batch_size; ++i) events.push_back(StepEvent(job.id(), ++seq));
        job.set_last_seq(seq);
        *job.mutable_last_step() = events.back().step();
        std::vector<Job> jobs;
        if (with_job_update) jobs.push_back(job);
        const auto start = std::chrono::steady_clock::now();
        absl::Status status = store->Commit(jobs, events);
        elapsed += std::chrono::steady_clock::now() - start;
        ASSERT_TRUE(status.ok()) << status;
        ++commits;
      }
      const double events_per_s = static_cast<double>(seq) / elapsed.count();
      std::printf("[ perf     ] batch %4d%s: %9.0f events/s, %7.0f commits/s, %6.1f us/commit\n",
                  batch_size, with_job_update ? " + job row" : "          ", events_per_s,
                  static_cast<double>(commits) / elapsed.count(),
                  1e6 * elapsed.count() / static_cast<double>(commits));
      RecordProperty(
          absl::StrCat("events_per_s_batch_", batch_size, with_job_update ? "_with_job" : ""),
          static_cast<int>(events_per_s));
    }
  }
}

}  // namespace
}  // namespace mpsd::server

namespace mpsd::server {
namespace {

// A database as mpsd wrote it at schema version 1 (before names and settings): it opens,
// is upgraded in place, and keeps its job and events.
TEST(JobStoreMigrationTest, VersionOneDatabaseIsUpgradedKeepingItsJobs) {
  const mpsd::testing::TempDir dir{"job_store"};
  const std::string path = dir.str() + "/mpsd.db";
  Job job;
  job.set_id("3");
  job.set_kind(Job::TRAIN_JOB);
  job.set_state(Job::SUCCEEDED);
  job.mutable_spec()->set_priority(2);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const std::string blob = job.SerializeAsString();
    std::string hex;
    for (unsigned char c : blob) absl::StrAppendFormat(&hex, "%02x", c);
    const std::string sql = absl::StrCat(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, kind INTEGER NOT NULL, "
        "state INTEGER NOT NULL, created_at INTEGER NOT NULL, job BLOB NOT NULL);"
        "CREATE TABLE events (job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, "
        "seq INTEGER NOT NULL, event BLOB NOT NULL, PRIMARY KEY (job_id, seq)) WITHOUT ROWID;"
        "INSERT INTO jobs VALUES (3, 1, 3, 0, x'",
        hex,
        "');"
        "PRAGMA user_version = 1;");
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open({path});
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Job> got = (*store)->GetJob("3");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec().priority(), 2);
  EXPECT_EQ(got->state(), Job::SUCCEEDED);
  // The new parts work on the upgraded file.
  EXPECT_EQ((*store)->GetSetting("queue_paused").value_or("?"), "");
  ASSERT_TRUE((*store)->PutSetting("queue_paused", "1").ok());
  Job named;
  named.set_kind(Job::TRAIN_JOB);
  named.mutable_spec()->set_name("resnet-a");
  absl::StatusOr<Job> inserted = (*store)->InsertJob(named);
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  EXPECT_EQ(inserted->id(), "4");
  store->reset();
  absl::StatusOr<std::unique_ptr<JobStore>> again = JobStore::Open({path});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->GetSetting("queue_paused").value_or("?"), "1");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT group_concat(name, '|') FROM jobs ORDER BY id", -1,
                               &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "|resnet-a");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

}  // namespace
}  // namespace mpsd::server
