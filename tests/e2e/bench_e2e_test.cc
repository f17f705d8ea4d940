// End-to-end tests of BenchJob: a real mpsd on a temp unix socket, the real mpsctl, small models
// on the CPU. Rows stream as events while the job runs; `mpsctl bench` prints them as a table,
// CSV and JSON that parse.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/client_context.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::BenchRow;
using mpsd::v1::Job;
using mpsd::v1::JobEvent;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// mlp and convnet at batch sizes 4 and 8 on the cpu: four rows of a few milliseconds each.
constexpr char kSmallBench[] =
    "kind: BenchJob\n"
    "models: [mlp, convnet]\n"
    "batch_sizes: [4, 8]\n"
    "devices: [cpu]\n"
    "warmup_iters: 1\n"
    "iters: 3\n";

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(absl::StripSuffix(text, "\n"), '\n');
}

class BenchE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_dir_ = std::make_unique<TempDir>();
    daemon_ =
        std::make_unique<Daemon>(suite_dir_->str() + "/state", suite_dir_->str() + "/mpsd.sock");
    daemon_->Start();
  }
  static void TearDownTestSuite() {
    daemon_.reset();
    suite_dir_.reset();
  }
  void SetUp() override { ASSERT_GT(daemon_->pid(), 0) << "the suite's mpsd did not start"; }

  static CommandResult Mpsctl(std::vector<std::string> args) {
    args.insert(args.begin(), {MpsctlPath(), "--server", daemon_->address()});
    return RunCommand(args);
  }

  std::string JobFile(const std::string& yaml) {
    const std::string path = dir_.str() + "/bench.yaml";
    WriteFile(path, yaml);
    return path;
  }

  TempDir dir_;
  inline static std::unique_ptr<TempDir> suite_dir_;
  inline static std::unique_ptr<Daemon> daemon_;
};

TEST_F(BenchE2eTest, SubmitFollowPrintsEachRowThenTheTableAndBenchOutputsParse) {
  const CommandResult followed = Mpsctl({"submit", JobFile(kSmallBench), "--follow"});
  ASSERT_EQ(followed.exit_code, 0) << followed.out << followed.err;
  const std::vector<std::string> words = absl::StrSplit(Lines(followed.out)[0], ' ');
  ASSERT_EQ(words.size(), 3u) << followed.out;
  const std::string id = words[1];
  // Each row's line, then the table (header and one line per model and batch size), then the
  // final state.
  const size_t first_row = followed.out.find("\nmlp batch 4 on cpu, inference fp32: median ");
  const size_t last_row = followed.out.find("\nconvnet batch 8 on cpu, inference fp32: median ");
  const size_t table = followed.out.find("\nmodel    batch  cpu (ms)\n");
  const size_t end = followed.out.find(absl::StrCat("\njob ", id, " SUCCEEDED in "));
  ASSERT_NE(first_row, std::string::npos) << followed.out;
  ASSERT_NE(last_row, std::string::npos) << followed.out;
  ASSERT_NE(table, std::string::npos) << followed.out;
  ASSERT_NE(end, std::string::npos) << followed.out;
  EXPECT_LT(first_row, last_row);
  EXPECT_LT(last_row, table);
  EXPECT_LT(table, end);
  EXPECT_THAT(followed.out, HasSubstr("\n  4 rows (all OK)"));

  const absl::StatusOr<Job> job = rpc::Get(*daemon_, id);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->summary().bench_rows_size(), 4);

  // csv: a header and four records of 20 fields; times positive and ordered.
  const CommandResult csv = Mpsctl({"bench", id, "--format", "csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  const std::vector<std::string> lines = Lines(csv.out);
  ASSERT_EQ(lines.size(), 5u) << csv.out;
  const std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  ASSERT_EQ(header.size(), 20u);
  EXPECT_EQ(header[0], "model");
  EXPECT_EQ(header[6], "status");
  EXPECT_EQ(header[8], "median_ms");
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> fields = absl::StrSplit(lines[i], ',');
    ASSERT_EQ(fields.size(), 20u) << lines[i];
    EXPECT_EQ(fields[6], "OK");
    double median = 0, p10 = 0, p90 = 0;
    ASSERT_TRUE(absl::SimpleAtod(fields[8], &median) && absl::SimpleAtod(fields[9], &p10) &&
                absl::SimpleAtod(fields[10], &p90))
        << lines[i];
    EXPECT_GT(p10, 0);
    EXPECT_LE(p10, median);
    EXPECT_LE(median, p90);
  }

  // json: one row per line, each the stored row.
  const CommandResult json = Mpsctl({"bench", id, "--format", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const std::vector<std::string> json_lines = Lines(json.out);
  ASSERT_EQ(json_lines.size(), 6u) << json.out;
  for (int i = 0; i < 4; ++i) {
    BenchRow row;
    const std::string object(absl::StripSuffix(json_lines[i + 1], ","));
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(object, &row).ok()) << object;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::ApproximatelyEquals(
        row, job->summary().bench_rows(i)))
        << row.ShortDebugString();
  }
  // --json means --format json.
  EXPECT_EQ(Mpsctl({"--json", "bench", id}).out, json.out);

  const CommandResult markdown = Mpsctl({"bench", id, "--format", "markdown"});
  EXPECT_THAT(markdown.out, StartsWith("| model | batch | cpu (ms) |\n| --- | ---: | ---: |\n"));
  EXPECT_EQ(Lines(markdown.out).size(), 6u) << markdown.out;
  const CommandResult text = Mpsctl({"bench", id});
  EXPECT_THAT(text.out, StartsWith("model    batch  cpu (ms)\nmlp          4  "));
}

TEST_F(BenchE2eTest, RowsArriveAsEventsWhileTheJobRuns) {
  // Three rows of at least 2 s each: the first row's event comes while the job still runs, and
  // the cancel it triggers stops the job inside the second row.
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::BenchJob& bench = *request.mutable_bench_job();
  bench.add_models("mlp");
  for (int batch : {2, 4, 8}) bench.add_batch_sizes(batch);
  bench.add_devices("cpu");
  bench.set_warmup_iters(0);
  bench.set_iters(1);
  bench.set_min_time_ms(2000);
  const absl::StatusOr<Job> submitted = rpc::Submit(*daemon_, request);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = submitted->id();

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  mpsd::v1::StreamEventsRequest stream_request;
  stream_request.set_job_id(id);
  auto reader = daemon_->stub().StreamEvents(&context, stream_request);
  JobEvent event;
  std::vector<BenchRow> rows;
  Job::State final_state = Job::STATE_UNSPECIFIED;
  while (reader->Read(&event)) {
    if (event.has_bench_row()) {
      rows.push_back(event.bench_row());
      if (rows.size() == 1) {
        const absl::StatusOr<Job> running = rpc::Get(*daemon_, id);
        ASSERT_TRUE(running.ok()) << running.status();
        EXPECT_EQ(running->state(), Job::RUNNING);
        ASSERT_TRUE(rpc::Cancel(*daemon_, id).ok());
      }
    }
    if (event.has_state()) final_state = event.state().state();
  }
  reader->Finish();
  EXPECT_EQ(final_state, Job::CANCELLED);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].batch_size(), 2);
  EXPECT_GE(rows[0].mean_ms() * rows[0].iters(), 2000 * (1 - 1e-9));

  // The cancelled job's table has the row it measured.
  const CommandResult csv = Mpsctl({"bench", id, "--format", "csv"});
  EXPECT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(Lines(csv.out).size(), 2u) << csv.out;
}

TEST_F(BenchE2eTest, BadBenchJobIsRejectedNamingTheField) {
  const std::string file =
      JobFile("kind: BenchJob\nmodels: [mlp]\nbatch_sizes: [0]\ndevices: [cpu]\n");
  const CommandResult submitted = Mpsctl({"submit", file});
  EXPECT_EQ(submitted.exit_code, 1);
  EXPECT_EQ(submitted.err, absl::StrCat("mpsctl: ", file,
                                        ": mpsd rejected the job: bench_job.batch_sizes[0]: must "
                                        "be > 0, got 0\n"));
}

TEST_F(BenchE2eTest, BenchOfATrainJobOrAnUnknownJobFails) {
  const absl::StatusOr<Job> train =
      rpc::Submit(*daemon_, TrainJobRequest(/*limit_train=*/64, /*limit_test=*/64, /*epochs=*/1,
                                            /*batch_size=*/64));
  ASSERT_TRUE(train.ok()) << train.status();
  const CommandResult bench = Mpsctl({"bench", train->id()});
  EXPECT_EQ(bench.exit_code, 1);
  EXPECT_EQ(bench.err,
            absl::StrCat("mpsctl: bench: job ", train->id(), " is a TrainJob, not a BenchJob\n"));
  EXPECT_TRUE(rpc::WaitForEnd(*daemon_, train->id()).ok());

  EXPECT_EQ(Mpsctl({"bench", "9999"}).exit_code, 1);
  EXPECT_EQ(Mpsctl({"bench", train->id(), "--format", "xml"}).exit_code, 64);
}

}  // namespace
}  // namespace mpsd::testing
