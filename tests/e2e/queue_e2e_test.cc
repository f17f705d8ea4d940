// End-to-end tests of issue 17 against real mpsd processes and the real mpsctl: sweeps (grid,
// random, rejected whole), dependencies (after: success, failure, SIGKILL and restart, cycles),
// queue control (pause across restarts, move, wait's exit codes), names, labels and paging,
// compare. Jobs train the MLP on small Fashion-MNIST subsets on the CPU.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using mpsd::v1::ListJobsRequest;
using mpsd::v1::SubmitJobRequest;
using ::testing::HasSubstr;

absl::Time ToTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

// A few steps of the MLP: quick to run.
SubmitJobRequest QuickJob() { return TrainJobRequest(128, 64, 1, 32, "mlp"); }

// The header of a job file on the same subset, for mpsctl submit.
constexpr char kJobFileHead[] = R"(kind: TrainJob
model: {name: mlp}
dataset: {name: fashion-mnist, root: /usr/share/datasets/fashion-mnist, limit_train: 256, limit_test: 128}
epochs: 1
device: cpu
seed: 1
optimizer: {name: adam}
)";

class QueueE2eTest : public ::testing::Test {
 protected:
  void StartDaemon(bool fault_injection = false) {
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    args_.clear();
    if (fault_injection) args_.push_back("--enable-fault-injection");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start(args_));
  }
  void Restart() { ASSERT_NO_FATAL_FAILURE(daemon_->Start(args_)); }

  void TearDown() override {
    if (daemon_ == nullptr || daemon_->pid() <= 0) return;
    const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  CommandResult Mpsctl(std::vector<std::string> args) {
    args.insert(args.begin(), {MpsctlPath(), "--server", daemon_->address()});
    return RunCommand(args);
  }
  // Writes a job file and submits it with mpsctl; returns the id it printed.
  std::string SubmitFile(const std::string& name, const std::string& yaml,
                         std::vector<std::string> flags = {}) {
    const std::string path = dir_.str() + "/" + name;
    WriteFile(path, yaml);
    std::vector<std::string> args = {"submit", path};
    args.insert(args.end(), flags.begin(), flags.end());
    CommandResult submitted = Mpsctl(args);
    EXPECT_EQ(submitted.exit_code, 0) << submitted.err;
    return std::string(absl::StripSuffix(submitted.out, "\n"));
  }
  // The calls on this test's daemon (tests/e2e/daemon.h, rpc_ok).
  Job Submit(const SubmitJobRequest& request) { return rpc_ok::Submit(*daemon_, request); }
  Job Get(const std::string& id) { return rpc_ok::Get(*daemon_, id); }
  Job WaitForEnd(const std::string& id) { return rpc_ok::WaitForEnd(*daemon_, id); }
  void Pause() {
    CommandResult paused = Mpsctl({"pause"});
    ASSERT_EQ(paused.exit_code, 0) << paused.err;
  }
  void Resume() {
    CommandResult resumed = Mpsctl({"resume"});
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::vector<std::string> args_;
};

// Rows of `mpsctl ... --format csv` as maps from header to cell.
std::vector<std::map<std::string, std::string>> CsvRows(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  std::vector<std::map<std::string, std::string>> rows;
  if (lines.empty()) return rows;
  const std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = absl::StrSplit(lines[i], ',');
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < header.size() && c < cells.size(); ++c) row[header[c]] = cells[c];
    rows.push_back(std::move(row));
  }
  return rows;
}

// A fresh user's pass: the label "sweep" could be set by hand (a job posing as a sweep's
// trial), and a sweep file's own was overwritten silently. mpsd reserves it.
TEST_F(QueueE2eTest, TheSweepLabelIsReserved) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  SubmitJobRequest posing = QuickJob();
  (*posing.mutable_labels())["sweep"] = "1";
  absl::StatusOr<Job> refused = rpc::Submit(*daemon_, posing);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("labels.sweep: reserved"));
  const std::string path = dir_.str() + "/labelled-sweep.yaml";
  WriteFile(path, absl::StrCat(kJobFileHead, R"(labels: {sweep: mine}
sweep:
  grid:
    batch_size: [32, 64]
)"));
  const CommandResult sweep = Mpsctl({"submit", path});
  EXPECT_NE(sweep.exit_code, 0) << sweep.out;
  EXPECT_THAT(sweep.err, HasSubstr("labels.sweep: reserved"));
  mpsd::v1::ListJobsRequest all;
  absl::StatusOr<mpsd::v1::ListJobsResponse> listed = rpc::List(*daemon_, all);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->jobs_size(), 0);
}

// A fresh user's pass: a sweep showed RUNNING while the queue was paused and none of its
// trials ran. It shows QUEUED then, saying why, and RUNNING again once a trial runs.
TEST_F(QueueE2eTest, ASweepWhoseTrialsWaitOnAPausedQueueIsQueued) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // Trials of a few seconds each: the pause comes while the first runs.
  const std::string sweep_id = SubmitFile("paused.yaml", R"(kind: TrainJob
model: {name: mlp}
dataset: {name: fashion-mnist, root: /usr/share/datasets/fashion-mnist, limit_train: 2048, limit_test: 128}
epochs: 10
device: cpu
seed: 1
optimizer: {name: adam}
sweep:
  grid:
    batch_size: [32, 64]
)");
  ASSERT_FALSE(sweep_id.empty());
  const Job sweep = Get(sweep_id);
  ASSERT_EQ(sweep.trial_job_ids_size(), 2);
  ASSERT_TRUE(WaitUntil([&] { return Get(sweep.trial_job_ids(0)).state() != Job::QUEUED; }));
  ASSERT_NO_FATAL_FAILURE(Pause());
  const Job first = WaitForEnd(sweep.trial_job_ids(0));
  EXPECT_EQ(first.state(), Job::SUCCEEDED) << first.message();
  Job waiting;
  EXPECT_TRUE(WaitUntil(
      [&] {
        waiting = Get(sweep_id);
        return waiting.state() == Job::QUEUED;
      },
      absl::Seconds(10)))
      << Job::State_Name(waiting.state());
  EXPECT_THAT(waiting.message(), HasSubstr("queue paused: 1 of 2 trials ended"));
  EXPECT_EQ(Get(sweep.trial_job_ids(1)).state(), Job::QUEUED);
  ASSERT_NO_FATAL_FAILURE(Resume());
  const Job done = WaitForEnd(sweep_id);
  EXPECT_EQ(done.state(), Job::SUCCEEDED) << done.message();
}

TEST_F(QueueE2eTest, GridSweepRunsSixTrialsInOrderAndMpsctlRanksThem) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // One trial after another (fuse: off), so that their order shows; fused sweeps are
  // FusedSweepE2eTest's.
  const std::string sweep_id = SubmitFile("grid.yaml", absl::StrCat(kJobFileHead, R"(name: lr-grid
labels: {project: q17}
sweep:
  fuse: off
  grid:
    optimizer.learning_rate: [0.01, 0.001, 0.0001]
    batch_size: [32, 64]
)"));
  ASSERT_FALSE(sweep_id.empty());
  Job sweep = Get(sweep_id);
  EXPECT_EQ(sweep.kind(), Job::SWEEP);
  ASSERT_EQ(sweep.trial_job_ids_size(), 6);

  // The first parameter varies slowest; every trial is a plain job with its values set.
  const std::vector<std::pair<double, int>> expected = {{0.01, 32},  {0.01, 64},   {0.001, 32},
                                                        {0.001, 64}, {0.0001, 32}, {0.0001, 64}};
  std::vector<Job> trials;
  for (int i = 0; i < 6; ++i) {
    Job trial = WaitForEnd(sweep.trial_job_ids(i));
    EXPECT_EQ(trial.kind(), Job::TRAIN_JOB);
    EXPECT_EQ(trial.state(), Job::SUCCEEDED) << trial.message();
    EXPECT_EQ(trial.trial().sweep_id(), sweep_id);
    EXPECT_EQ(trial.trial().index(), i);
    EXPECT_DOUBLE_EQ(trial.spec().train_job().optimizer().learning_rate(), expected[i].first);
    EXPECT_EQ(trial.spec().train_job().batch_size(), expected[i].second);
    EXPECT_EQ(trial.spec().name(), absl::StrCat("lr-grid/", i));
    EXPECT_EQ(trial.spec().labels().at("sweep"), sweep_id);
    EXPECT_EQ(trial.spec().labels().at("project"), "q17");
    EXPECT_FALSE(trial.spec().has_sweep());
    EXPECT_GT(trial.summary().steps(), 0);
    if (!trials.empty()) {
      EXPECT_LE(ToTime(trials.back().finished_at()), ToTime(trial.started_at()))
          << "trial " << i << " started before trial " << i - 1 << " ended";
    }
    trials.push_back(trial);
  }
  sweep = WaitForEnd(sweep_id);
  EXPECT_EQ(sweep.state(), Job::SUCCEEDED) << sweep.message();

  CommandResult ranked = Mpsctl({"sweep", sweep_id, "--format", "csv"});
  ASSERT_EQ(ranked.exit_code, 0) << ranked.err;
  const auto rows = CsvRows(ranked.out);
  ASSERT_EQ(rows.size(), 6u) << ranked.out;
  double previous = 2;
  std::set<std::string> jobs;
  for (const auto& row : rows) {
    double accuracy = -1;
    ASSERT_TRUE(absl::SimpleAtod(row.at("TEST_ACC"), &accuracy)) << ranked.out;
    EXPECT_LE(accuracy, previous) << "not sorted best first:\n" << ranked.out;
    previous = accuracy;
    jobs.insert(row.at("JOB"));
    EXPECT_EQ(row.at("STATE"), "SUCCEEDED");
    // The row's parameters are its trial's.
    const Job& trial = trials.at(std::stoi(row.at("TRIAL")));
    EXPECT_EQ(row.at("JOB"), trial.id());
    EXPECT_EQ(row.at("batch_size"), absl::StrCat(trial.spec().train_job().batch_size()));
    EXPECT_NEAR(accuracy, trial.summary().test_accuracy(), 1e-4);
  }
  EXPECT_EQ(jobs.size(), 6u);

  CommandResult loss = Mpsctl({"sweep", sweep_id, "--metric", "test_loss", "--format", "csv"});
  ASSERT_EQ(loss.exit_code, 0) << loss.err;
  previous = -1;
  for (const auto& row : CsvRows(loss.out)) {
    double value = 0;
    ASSERT_TRUE(absl::SimpleAtod(row.at("TEST_LOSS"), &value));
    EXPECT_GE(value, previous) << "losses not lowest first:\n" << loss.out;
    previous = value;
  }
  // The table says what its order means (on stderr: stdout stays the table); csv does not.
  CommandResult table = Mpsctl({"sweep", sweep_id});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  // (and, where equal accuracies were ordered by their loss, says that too)
  EXPECT_THAT(table.err, ::testing::StartsWith(
                             "ranked by test_accuracy, highest first (each trial's final value)"));
  EXPECT_EQ(ranked.err, "");
  CommandResult markdown = Mpsctl({"sweep", sweep_id, "--format", "markdown"});
  ASSERT_EQ(markdown.exit_code, 0) << markdown.err;
  EXPECT_THAT(markdown.out, HasSubstr("| RANK | TRIAL | JOB | optimizer.learning_rate | "
                                      "batch_size | STATE | TEST_ACC |"));
  CommandResult json = Mpsctl({"sweep", sweep_id, "--format", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  google::protobuf::Value parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &parsed).ok()) << json.out;
  ASSERT_EQ(parsed.list_value().values_size(), 6);
  const auto& best = parsed.list_value().values(0).struct_value().fields();
  EXPECT_EQ(best.at("state").string_value(), "SUCCEEDED");
  EXPECT_EQ(best.at("job_id").kind_case(), google::protobuf::Value::kStringValue);
  EXPECT_EQ(best.at("test_accuracy").kind_case(), google::protobuf::Value::kNumberValue);
  EXPECT_THAT(json.out, ::testing::StartsWith("[{\"rank\":1,\"trial\":"));

  // mpsctl sweep on a trial says what it is.
  CommandResult not_sweep = Mpsctl({"sweep", trials[0].id()});
  EXPECT_EQ(not_sweep.exit_code, 1);
  EXPECT_THAT(not_sweep.err, HasSubstr(absl::StrCat("trial 0 of sweep ", sweep_id)));

  // The sweep keeps no artifacts of its own: artifacts and download say where they are.
  const std::string where = absl::StrCat("job ", sweep_id, " is a sweep: its trials keep the ",
                                         "artifacts (", trials[0].id(), ", ", trials[1].id());
  CommandResult artifacts = Mpsctl({"artifacts", sweep_id});
  EXPECT_EQ(artifacts.exit_code, 0) << artifacts.err;
  EXPECT_THAT(artifacts.out, ::testing::StartsWith(absl::StrCat("no artifacts: ", where)));
  EXPECT_THAT(artifacts.out, HasSubstr(absl::StrCat(", …; mpsctl sweep ", sweep_id, ")")));
  CommandResult download = Mpsctl({"download", sweep_id, "-o", dir_.str() + "/sweep-model.pt"});
  EXPECT_EQ(download.exit_code, 1);
  EXPECT_THAT(download.err, HasSubstr(where));
  EXPECT_THAT(Mpsctl({"artifacts", trials[0].id()}).out, HasSubstr("model.pt"));
}

TEST_F(QueueE2eTest, RandomSweepIsReproducibleFromItsSeedAndCancelCancelsItsTrials) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Pause());
  auto random_sweep = [&](uint64_t seed) {
    SubmitJobRequest request = QuickJob();
    mpsd::v1::RandomSearch* random = request.mutable_sweep()->mutable_random();
    random->set_trials(4);
    random->set_seed(seed);
    mpsd::v1::SweepParameter* lr = random->add_parameters();
    lr->set_path("optimizer.learning_rate");
    lr->add_log_uniform(1e-4);
    lr->add_log_uniform(1e-1);
    mpsd::v1::SweepParameter* batch = random->add_parameters();
    batch->set_path("batch_size");
    for (const char* b : {"16", "32", "64"}) batch->add_choice(b);
    return Submit(request);
  };
  auto drawn = [&](const Job& sweep) {
    std::vector<std::pair<double, int>> values;
    for (const std::string& id : sweep.trial_job_ids()) {
      const Job trial = Get(id);
      values.emplace_back(trial.spec().train_job().optimizer().learning_rate(),
                          trial.spec().train_job().batch_size());
    }
    return values;
  };
  const Job a = random_sweep(7), b = random_sweep(7), c = random_sweep(8);
  ASSERT_EQ(a.trial_job_ids_size(), 4);
  const auto values_a = drawn(a);
  EXPECT_EQ(values_a, drawn(b));
  EXPECT_NE(values_a, drawn(c));
  std::set<double> distinct;
  for (const auto& [lr, batch] : values_a) {
    EXPECT_GE(lr, 1e-4);
    EXPECT_LT(lr, 1e-1);
    EXPECT_TRUE(batch == 16 || batch == 32 || batch == 64) << batch;
    distinct.insert(lr);
  }
  EXPECT_EQ(distinct.size(), 4u);

  for (const Job& sweep : {a, b, c}) {
    CommandResult cancelled = Mpsctl({"cancel", sweep.id()});
    ASSERT_EQ(cancelled.exit_code, 0) << cancelled.err;
    EXPECT_EQ(Get(sweep.id()).state(), Job::CANCELLED);
    for (const std::string& id : sweep.trial_job_ids()) {
      EXPECT_EQ(Get(id).state(), Job::CANCELLED) << "trial " << id;
    }
  }
  EXPECT_EQ(rpc::Status(*daemon_)->queued_jobs(), 0);
}

// Issue 31 through a real daemon and executor: a sweep's trials train fused (their logs say with
// whom), each exactly as it trains alone (one CPU thread: the fused step computes each trial's
// values in the same order), each with its own model.pt; a cancel stops one fused trial while
// the others train on; and the daemon stops cleanly after.
TEST(FusedSweepE2eTest, TrialsTrainFusedAsTheyWouldAloneAndEachStopsAlone) {
  TempDir dir;
  const std::string config = dir.str() + "/mpsd.yaml";
  WriteFile(config, "cpu_threads: 1\n");
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  ASSERT_NO_FATAL_FAILURE(daemon.Start({"--config", config}));
  auto sweep_of = [](const std::string& fuse, int epochs) {
    SubmitJobRequest request = TrainJobRequest(256, 128, epochs, 32, "mlp");
    request.mutable_train_job()->set_seed(1);
    request.mutable_train_job()->mutable_optimizer()->set_name("adamw");
    mpsd::v1::SweepParameter* lr = request.mutable_sweep()->add_grid();
    lr->set_path("optimizer.learning_rate");
    for (const char* value : {"0.01", "0.003", "0.001"}) lr->add_values(value);
    request.mutable_sweep()->set_fuse(fuse);
    return request;
  };
  auto steps = [&](const std::string& id) {
    std::vector<float> losses;
    for (const mpsd::v1::JobEvent& event : rpc::StreamAll(daemon, id)) {
      if (event.has_step()) losses.push_back(event.step().loss());
    }
    return losses;
  };
  std::vector<Job> fused, alone;
  for (const std::string& fuse : {"auto", "off"}) {
    const Job sweep = rpc_ok::WaitForEnd(daemon, rpc_ok::Submit(daemon, sweep_of(fuse, 2)).id());
    ASSERT_EQ(sweep.state(), Job::SUCCEEDED) << sweep.message();
    for (const std::string& id : sweep.trial_job_ids()) {
      (fuse == std::string("auto") ? fused : alone).push_back(rpc_ok::Get(daemon, id));
    }
  }
  ASSERT_EQ(fused.size(), 3u);
  const std::string group =
      absl::StrCat("trained fused with 2 other trial(s) of sweep ", fused[0].trial().sweep_id(),
                   ": jobs ", fused[0].id(), ", ", fused[1].id(), ", ", fused[2].id());
  for (size_t i = 0; i < fused.size(); ++i) {
    std::string logs;
    for (const mpsd::v1::JobEvent& event : rpc::StreamAll(daemon, fused[i].id())) {
      if (event.has_log()) absl::StrAppend(&logs, event.log().text(), "\n");
    }
    EXPECT_THAT(logs, HasSubstr(group)) << i;
    const std::vector<float> f = steps(fused[i].id()), a = steps(alone[i].id());
    ASSERT_EQ(f.size(), 16u) << i;  // 256 / 32 × 2 epochs
    ASSERT_EQ(a.size(), f.size()) << i;
    for (size_t s = 0; s < f.size(); ++s) EXPECT_NEAR(f[s], a[s], 1e-5) << i << " step " << s;
    EXPECT_NEAR(fused[i].summary().test_loss(), alone[i].summary().test_loss(), 1e-5) << i;
    EXPECT_NEAR(fused[i].summary().test_accuracy(), alone[i].summary().test_accuracy(), 1e-9);
    EXPECT_TRUE(std::filesystem::exists(
        absl::StrCat(dir.str(), "/state/artifacts/", fused[i].id(), "/model.pt")));
  }

  // A long sweep: one fused trial cancelled while the others train, then the rest.
  const Job running = rpc_ok::Submit(daemon, sweep_of("auto", 400));
  ASSERT_TRUE(
      WaitUntil([&] { return rpc_ok::Get(daemon, running.trial_job_ids(2)).last_seq() > 8; }));
  ASSERT_TRUE(rpc::Cancel(daemon, running.trial_job_ids(1)).ok());
  const Job cancelled = rpc_ok::WaitForEnd(daemon, running.trial_job_ids(1));
  EXPECT_EQ(cancelled.state(), Job::CANCELLED);
  const Job first = rpc_ok::Get(daemon, running.trial_job_ids(0));
  EXPECT_EQ(first.state(), Job::RUNNING);
  const int64_t seq = first.last_seq();
  EXPECT_TRUE(WaitUntil([&] { return rpc_ok::Get(daemon, first.id()).last_seq() > seq + 4; }))
      << "the other trials stopped with the cancelled one";
  // Cancelling the sweep while a trial runs: mpsctl says what happens to its trials.
  const CommandResult cancel_sweep =
      RunCommand({MpsctlPath(), "--server", daemon.address(), "cancel", running.id()});
  ASSERT_EQ(cancel_sweep.exit_code, 0) << cancel_sweep.err;
  EXPECT_EQ(cancel_sweep.out, absl::StrCat("sweep ", running.id(),
                                           ": its queued trials are cancelled, its running "
                                           "ones stop at their next step (watch it: mpsctl sweep ",
                                           running.id(), ")\n"));
  EXPECT_EQ(rpc_ok::WaitForEnd(daemon, running.id()).state(), Job::CANCELLED);
  const int status = daemon.Stop(SIGTERM, absl::Seconds(60));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// The job the sweep early-stopping tests sweep: 6 steps of 32 per epoch, a validation split.
constexpr char kStoppingSweepJob[] = R"(kind: TrainJob
model: {name: mlp}
dataset:
  name: fashion-mnist
  root: /usr/share/datasets/fashion-mnist
  limit_train: 256
  limit_test: 128
  validation: {fraction: 0.25}
epochs: 3
batch_size: 32
device: cpu
seed: 1
optimizer: {name: adam}
)";

// SweepSpec.scheduler through a real daemon and executor, from a job file through mpsctl: one
// learning rate that trains (1e-2) and two that barely move (1e-6, 1e-7), asha on val_loss with
// grace_period 1 and reduction_factor 2 over 3 epochs (rungs at epochs 1 and 2). The good trial
// reports first at each rung one after another and goes on; at rung 1 the first bad one is worse
// than the good one's loss (the cutoff with one value recorded) and the second worse than the
// median of the two before it. Fused, the three reach rung 1 together and each is judged against
// the other two. Either way both bad ones end CANCELLED with EARLY_STOPPED after epoch 1, and
// the sweep SUCCEEDED. Fused, and one after another with
// checkpoint.keep_best, whose best checkpoint an early-stopped trial keeps.
TEST_F(QueueE2eTest, AshaStopsTheBadTrialsOfASweepFusedAndOneAfterAnother) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string head = kStoppingSweepJob;
  const std::string sweep_block = R"(sweep:
  grid:
    optimizer.learning_rate: [0.01, 1e-6, 1e-7]
  scheduler: {type: asha, metric: val_loss, grace_period: 1, reduction_factor: 2}
)";
  std::string last_sweep;
  for (const std::string fuse : {"auto", "off"}) {
    SCOPED_TRACE(fuse);
    const bool fused = fuse == "auto";
    const std::string sweep_id =
        SubmitFile(absl::StrCat("asha-", fuse, ".yaml"),
                   absl::StrCat(head, fused ? "" : "checkpoint: {keep_best: true}\n", sweep_block,
                                "  fuse: ", fuse, "\n"));
    ASSERT_FALSE(sweep_id.empty());
    last_sweep = sweep_id;
    const Job sweep = WaitForEnd(sweep_id);
    EXPECT_EQ(sweep.state(), Job::SUCCEEDED) << sweep.message();
    EXPECT_EQ(sweep.message(),
              "1 of 3 trials succeeded; 2 were stopped early by the sweep's scheduler");
    ASSERT_EQ(sweep.trial_job_ids_size(), 3);
    const Job good = Get(sweep.trial_job_ids(0));
    EXPECT_EQ(good.state(), Job::SUCCEEDED) << good.message();
    EXPECT_EQ(good.last_epoch().epoch(), 3);
    const std::string artifacts = dir_.str() + "/state/artifacts/";
    EXPECT_TRUE(std::filesystem::exists(artifacts + good.id() + "/model.pt"));
    double good_first = 0;  // the good trial's val_loss at epoch 1: rung 1's first value
    for (const mpsd::v1::JobEvent& event : rpc::StreamAll(*daemon_, good.id())) {
      if (event.has_epoch() && event.epoch().epoch() == 1) good_first = event.epoch().val_loss();
    }
    ASSERT_GT(good_first, 0);
    for (int i = 1; i <= 2; ++i) {
      const Job bad = Get(sweep.trial_job_ids(i));
      EXPECT_EQ(bad.state(), Job::CANCELLED) << i;
      EXPECT_EQ(bad.failure_reason(), Job::EARLY_STOPPED) << i << ": " << bad.message();
      EXPECT_THAT(bad.message(),
                  HasSubstr(absl::StrFormat("asha stopped the trial at its rung of epoch 1: "
                                            "val_loss %.6g is worse than the cutoff ",
                                            bad.last_epoch().val_loss())));
      if (fused) {
        // The three reach rung 1 together: each is judged against the other two.
        EXPECT_THAT(bad.message(), HasSubstr("(2 trial(s) recorded there besides it, 2 of them "
                                             "at the same time;"));
      } else {
        EXPECT_THAT(bad.message(), HasSubstr(absl::StrCat("(", i, " trial(s) recorded there")));
      }
      if (i == 1 && !fused) {  // one value recorded before it: the cutoff is the good trial's
        EXPECT_THAT(bad.message(),
                    HasSubstr(absl::StrFormat("the cutoff %.6g for the best 1/2", good_first)));
      }
      EXPECT_EQ(bad.last_epoch().epoch(), 1) << i;
      std::string logs;
      for (const mpsd::v1::JobEvent& event : rpc::StreamAll(*daemon_, bad.id())) {
        if (event.has_log()) absl::StrAppend(&logs, event.log().text(), "\n");
      }
      EXPECT_THAT(logs, HasSubstr(absl::StrCat("early stopped by the scheduler of sweep ", sweep_id,
                                               ": asha stopped the trial")));
      EXPECT_EQ(logs.find("trained fused with 2 other trial(s)") != std::string::npos, fused)
          << logs;
      EXPECT_FALSE(std::filesystem::exists(artifacts + bad.id() + "/model.pt"));
      if (!fused) {  // keep_best: epoch 1's checkpoint and model stay
        EXPECT_TRUE(std::filesystem::exists(artifacts + bad.id() + "/checkpoint-best.pt"));
        EXPECT_TRUE(std::filesystem::exists(bad.summary().best_model_path()))
            << bad.summary().best_model_path();
      }
    }
  }
  // mpsctl's views: the trial's state with its reason; the sweep's table.
  const Job sweep = Get(last_sweep);
  CommandResult shown = Mpsctl({"get", sweep.trial_job_ids(1)});
  EXPECT_THAT(shown.out, HasSubstr("CANCELLED (EARLY_STOPPED): asha stopped the trial"));
  CommandResult table = Mpsctl({"sweep", last_sweep, "--format", "csv"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  std::multiset<std::string> states;
  for (const auto& row : CsvRows(table.out)) states.insert(row.at("STATE"));
  EXPECT_THAT(states,
              ::testing::UnorderedElementsAre("SUCCEEDED", "EARLY_STOPPED", "EARLY_STOPPED"));

  // A metric the trials do not report every epoch is refused at submit, naming the field.
  const auto refused = [&](const std::string& yaml) {
    const std::string path = dir_.str() + "/refused.yaml";
    WriteFile(path, yaml);
    CommandResult result = Mpsctl({"submit", path});
    EXPECT_EQ(result.exit_code, 1) << result.out;
    return result.err;
  };
  const std::string no_validation = absl::StrCat(
      absl::StrReplaceAll(head, {{"  validation: {fraction: 0.25}\n", ""}}), sweep_block);
  EXPECT_THAT(refused(no_validation),
              HasSubstr("sweep.scheduler.metric: val_loss is measured only with a validation "
                        "split"));
  EXPECT_THAT(refused(absl::StrCat(head, R"(sweep:
  grid: {optimizer.learning_rate: [0.01, 0.1]}
  scheduler: {type: asha, metric: test_loss}
)")),
              HasSubstr("sweep.scheduler.metric: test_loss is measured every epoch only with "
                        "evaluate_test: every_epoch"));
  EXPECT_THAT(refused(absl::StrCat(head, R"(sweep:
  grid: {optimizer.learning_rate: [0.01, 0.1]}
  scheduler: {type: asha, metric: val_acc, mode: max}
)")),
              HasSubstr("sweep.scheduler.metric: unknown epoch metric \"val_acc\""));
  EXPECT_THAT(refused(absl::StrCat(head, R"(sweep:
  grid: {optimizer.learning_rate: [0.01, 0.1]}
  scheduler: {type: hyperband, metric: val_loss}
)")),
              HasSubstr("sweep.scheduler.type: must be asha or median_stopping"));
  EXPECT_THAT(refused(absl::StrCat(head, R"(sweep:
  grid: {optimizer.learning_rate: [0.01, 0.1]}
  scheduler: {type: asha, metric: val_loss, reduction_factor: 1}
)")),
              HasSubstr("sweep.scheduler.reduction_factor: must be >= 2, got 1"));
  EXPECT_THAT(refused(absl::StrCat(head, R"(sweep:
  grid: {optimizer.learning_rate: [0.01, 0.1]}
  scheduler: {type: asha, metric: val_loss, grace_period: soon}
)")),
              HasSubstr("sweep.scheduler.grace_period"));
}

// median_stopping through a real daemon, fused: the same three learning rates, grace_period 1,
// min_samples_required 1, 3 epochs. No trial stops at epoch 1 (grace_period) or 3 (its last);
// at epoch 2 the three arrive together and are judged together: each bad one's best loss is
// worse than the median of the running means (epochs 1 to 2) of the other two, and it stops;
// the good one goes on.
TEST_F(QueueE2eTest, MedianStoppingStopsTheBadTrialsOfAFusedSweep) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string sweep_id = SubmitFile("median.yaml", absl::StrCat(kStoppingSweepJob, R"(sweep:
  grid:
    optimizer.learning_rate: [0.01, 1e-6, 1e-7]
  scheduler: {type: median_stopping, metric: val_loss, min_samples_required: 1}
)"));
  ASSERT_FALSE(sweep_id.empty());
  const Job sweep = WaitForEnd(sweep_id);
  EXPECT_EQ(sweep.state(), Job::SUCCEEDED) << sweep.message();
  ASSERT_EQ(sweep.trial_job_ids_size(), 3);
  EXPECT_EQ(Get(sweep.trial_job_ids(0)).state(), Job::SUCCEEDED);
  for (int i = 1; i <= 2; ++i) {
    const Job bad = Get(sweep.trial_job_ids(i));
    EXPECT_EQ(bad.failure_reason(), Job::EARLY_STOPPED) << i << ": " << bad.message();
    EXPECT_EQ(bad.last_epoch().epoch(), 2) << i;
    EXPECT_THAT(bad.message(),
                HasSubstr(absl::StrCat("median_stopping stopped the trial at epoch 2: its best "
                                       "val_loss so far")));
    EXPECT_THAT(bad.message(), HasSubstr("running means (epochs 1 to 2) of the 2 other"));
  }
}

TEST_F(QueueE2eTest, SweepWithOneInvalidTrialIsRejectedWhole) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string path = dir_.str() + "/bad.yaml";
  WriteFile(path, absl::StrCat(kJobFileHead, R"(sweep:
  grid:
    batch_size: [32, 64]
    optimizer.learning_rate: [0.01, -1]
)"));
  CommandResult rejected = Mpsctl({"submit", path});
  EXPECT_EQ(rejected.exit_code, 1);
  EXPECT_THAT(rejected.err, HasSubstr("sweep trial 1 (of trials 0 to 3; "));
  EXPECT_THAT(rejected.err, HasSubstr("optimizer.learning_rate=-1"));
  EXPECT_THAT(rejected.err, HasSubstr("learning_rate"));

  WriteFile(path, absl::StrCat(kJobFileHead, R"(sweep:
  grid:
    optimizer.lr: [0.01, 0.1]
)"));
  rejected = Mpsctl({"submit", path});
  EXPECT_EQ(rejected.exit_code, 1);
  EXPECT_THAT(rejected.err, HasSubstr("sweep.grid[0].path: \"optimizer.lr\""));

  WriteFile(path, absl::StrCat(kJobFileHead, R"(sweep:
  grid:
    batch_size: [32, sixty]
)"));
  rejected = Mpsctl({"submit", path});
  EXPECT_EQ(rejected.exit_code, 1);
  EXPECT_THAT(rejected.err, HasSubstr("sweep.grid[0].values[1]"));

  absl::StatusOr<mpsd::v1::ListJobsResponse> jobs = rpc::List(*daemon_, ListJobsRequest());
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->jobs_size(), 0) << "a rejected sweep left jobs behind";
}

TEST_F(QueueE2eTest, AfterRunsTheJobOnlyOnceItsDependencySucceeded) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string a = SubmitFile("a.yaml", kJobFileHead);
  const std::string b = SubmitFile("b.yaml", kJobFileHead, {"--after", a});
  EXPECT_THAT(Get(b).spec().after(), ::testing::ElementsAre(a));
  const Job done_b = WaitForEnd(b);
  const Job done_a = Get(a);
  EXPECT_EQ(done_a.state(), Job::SUCCEEDED);
  EXPECT_EQ(done_b.state(), Job::SUCCEEDED) << done_b.message();
  EXPECT_LE(ToTime(done_a.finished_at()), ToTime(done_b.started_at()));
}

TEST_F(QueueE2eTest, FailedDependencyCancelsTheChainAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(/*fault_injection=*/true));
  ASSERT_NO_FATAL_FAILURE(Pause());
  SubmitJobRequest failing = QuickJob();
  failing.mutable_train_job()->mutable_fault_injection()->set_kind("abort");
  const Job a = Submit(failing);
  SubmitJobRequest after_a = QuickJob();
  after_a.add_after(a.id());
  const Job b = Submit(after_a);
  SubmitJobRequest after_b = QuickJob();
  after_b.add_after(b.id());
  const Job c = Submit(after_b);
  const Job independent = Submit(QuickJob());
  ASSERT_NO_FATAL_FAILURE(Resume());

  const Job done_a = WaitForEnd(a.id());
  ASSERT_EQ(done_a.state(), Job::FAILED);
  // At once: b and c are already over when a's end is visible.
  for (const Job& dependent : {Get(b.id()), Get(c.id())}) {
    EXPECT_EQ(dependent.state(), Job::CANCELLED);
    EXPECT_EQ(dependent.failure_reason(), Job::DEPENDENCY_FAILED);
    EXPECT_FALSE(dependent.has_started_at()) << "job " << dependent.id() << " ran";
    EXPECT_LE(ToTime(dependent.finished_at()) - ToTime(done_a.finished_at()), absl::Seconds(1));
  }
  EXPECT_THAT(Get(b.id()).message(),
              HasSubstr(absl::StrCat("dependency job ", a.id(), " ended FAILED")));
  EXPECT_THAT(Get(c.id()).message(),
              HasSubstr(absl::StrCat("dependency job ", b.id(), " ended CANCELLED")));
  // The stream of a dependent ends with that state.
  const std::vector<mpsd::v1::JobEvent> events = rpc::StreamAll(*daemon_, b.id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state().failure_reason(), Job::DEPENDENCY_FAILED);
  EXPECT_EQ(WaitForEnd(independent.id()).state(), Job::SUCCEEDED);

  // A job submitted after its dependency failed ends at once too.
  SubmitJobRequest late = QuickJob();
  late.add_after(a.id());
  const Job late_job = Submit(late);
  EXPECT_EQ(late_job.state(), Job::CANCELLED);
  EXPECT_EQ(late_job.failure_reason(), Job::DEPENDENCY_FAILED);
  CommandResult shown = Mpsctl({"get", c.id()});
  EXPECT_THAT(shown.out, HasSubstr("DEPENDENCY_FAILED"));
}

TEST_F(QueueE2eTest, PausedChainSurvivesSigkillAndRestartThenRunsInOrder) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Pause());
  const Job a = Submit(QuickJob());
  SubmitJobRequest after_a = QuickJob();
  after_a.add_after(a.id());
  const Job b = Submit(after_a);
  SubmitJobRequest after_b = QuickJob();
  after_b.add_after(b.id());
  const Job c = Submit(after_b);
  const int status = daemon_->Stop(SIGKILL, absl::Seconds(30));
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  ASSERT_NO_FATAL_FAILURE(Restart());

  // Still paused after the restart: nothing starts.
  absl::StatusOr<mpsd::v1::ServerStatus> server = rpc::Status(*daemon_);
  ASSERT_TRUE(server.ok());
  EXPECT_TRUE(server->queue_paused());
  EXPECT_EQ(server->queued_jobs(), 3);
  CommandResult shown = Mpsctl({"status"});
  EXPECT_THAT(shown.out, HasSubstr("paused"));
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(Get(a.id()).state(), Job::QUEUED);
  EXPECT_THAT(Get(c.id()).spec().after(), ::testing::ElementsAre(b.id()));

  ASSERT_NO_FATAL_FAILURE(Resume());
  const Job done_c = WaitForEnd(c.id());
  const Job done_a = Get(a.id()), done_b = Get(b.id());
  EXPECT_EQ(done_c.state(), Job::SUCCEEDED) << done_c.message();
  EXPECT_LE(ToTime(done_a.finished_at()), ToTime(done_b.started_at()));
  EXPECT_LE(ToTime(done_b.finished_at()), ToTime(done_c.started_at()));
}

// A sweep's trials stopped by a clean shutdown while they train fused (no checkpoint to resume
// from) are queued again and, at the next start, train from their start: the sweep ends
// SUCCEEDED with every trial, not CANCELLED with two INTERRUPTED ones. 6,000 examples: 3 epochs
// of 188 steps, seconds of training after the stop at step 1, all run again after the restart.
TEST_F(QueueE2eTest, ASweepsRunningTrialsStartOverAfterARestart) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string sweep_id = SubmitFile("restart.yaml", R"(kind: TrainJob
model: {name: mlp}
dataset: {name: fashion-mnist, root: /usr/share/datasets/fashion-mnist, limit_train: 6000,
          limit_test: 256}
epochs: 3
batch_size: 32
device: cpu
seed: 1
optimizer: {name: adam}
sweep: {grid: {optimizer.learning_rate: [0.001, 0.003]}}
)");
  ASSERT_FALSE(sweep_id.empty());
  const Job submitted = Get(sweep_id);
  ASSERT_EQ(submitted.trial_job_ids_size(), 2);
  const std::string first = submitted.trial_job_ids(0), second = submitted.trial_job_ids(1);
  ASSERT_TRUE(WaitUntil([&] { return Get(first).last_step().step() >= 1; }));
  ASSERT_EQ(daemon_->Stop(SIGTERM, absl::Seconds(60)), 0);
  ASSERT_NO_FATAL_FAILURE(Restart());
  const Job sweep = WaitForEnd(sweep_id);
  EXPECT_EQ(sweep.state(), Job::SUCCEEDED) << sweep.message();
  for (const std::string& id : {first, second}) {
    const Job trial = Get(id);
    EXPECT_EQ(trial.state(), Job::SUCCEEDED) << id << ": " << trial.message();
    EXPECT_EQ(trial.last_epoch().epoch(), 3) << id;
  }
  bool queued_again = false;
  for (const mpsd::v1::JobEvent& event : rpc::StreamAll(*daemon_, first)) {
    queued_again =
        queued_again || (event.has_state() && event.state().state() == Job::QUEUED &&
                         absl::StrContains(event.state().message(), "trains again from its start"));
  }
  EXPECT_TRUE(queued_again);
}

TEST_F(QueueE2eTest, DependencyInterruptedBySigkillCancelsItsDependentOnRestart) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const Job a = Submit(TrainJobRequest(320, 64, 500, 64, "mlp"));  // runs until killed
  SubmitJobRequest after_a = QuickJob();
  after_a.add_after(a.id());
  const Job b = Submit(after_a);
  ASSERT_TRUE(WaitUntil([&] { return Get(a.id()).last_step().step() >= 1; }));
  ASSERT_TRUE(WIFSIGNALED(daemon_->Stop(SIGKILL, absl::Seconds(30))));
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_EQ(Get(a.id()).state(), Job::INTERRUPTED);
  const Job done_b = Get(b.id());
  EXPECT_EQ(done_b.state(), Job::CANCELLED);
  EXPECT_EQ(done_b.failure_reason(), Job::DEPENDENCY_FAILED);
  EXPECT_THAT(done_b.message(), HasSubstr("INTERRUPTED"));
}

TEST_F(QueueE2eTest, CyclesUnknownIdsAndMalformedIdsAreRejectedAtSubmit) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Pause());
  const Job a = Submit(QuickJob());
  // The id the next job would get: a job naming itself (the only way to close a cycle).
  const std::string own = absl::StrCat(std::stoll(a.id()) + 1);
  SubmitJobRequest self = QuickJob();
  self.add_after(own);
  absl::StatusOr<Job> rejected = rpc::Submit(*daemon_, self);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("cycle"));
  EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("after[0]"));

  SubmitJobRequest unknown = QuickJob();
  unknown.add_after(a.id());
  unknown.add_after("999");
  rejected = rpc::Submit(*daemon_, unknown);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("after[1]: no job 999"));

  SubmitJobRequest malformed = QuickJob();
  malformed.add_after("abc");
  rejected = rpc::Submit(*daemon_, malformed);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("not a job id"));
  // None of them was stored: the next job gets the id the first rejected one asked for.
  EXPECT_EQ(Submit(QuickJob()).id(), own);
}

TEST_F(QueueE2eTest, WaitExitsZeroOnlyWhenEveryJobSucceeded) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const Job ok = Submit(QuickJob());
  CommandResult waited = Mpsctl({"wait", ok.id()});
  EXPECT_EQ(waited.exit_code, 0) << waited.err;
  EXPECT_THAT(waited.out, HasSubstr(absl::StrCat("job ", ok.id(), " SUCCEEDED")));

  ASSERT_NO_FATAL_FAILURE(Pause());
  const Job held = Submit(QuickJob());
  const absl::Time start = absl::Now();
  waited = Mpsctl({"wait", ok.id(), held.id(), "--timeout", "1"});
  EXPECT_EQ(waited.exit_code, 4) << waited.err;
  EXPECT_THAT(waited.err, HasSubstr(absl::StrCat("timed out waiting for job(s) ", held.id())));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));

  ASSERT_TRUE(rpc::Cancel(*daemon_, held.id()).ok());
  waited = Mpsctl({"wait", ok.id(), held.id()});
  EXPECT_EQ(waited.exit_code, 1);
  EXPECT_THAT(waited.out, HasSubstr(absl::StrCat("job ", held.id(), " CANCELLED")));

  waited = Mpsctl({"wait", "999"});
  EXPECT_EQ(waited.exit_code, 1);
  EXPECT_THAT(waited.err, HasSubstr("999"));
  EXPECT_EQ(Mpsctl({"wait", "abc"}).exit_code, 64);
}

TEST_F(QueueE2eTest, MoveReordersTheQueue) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Pause());
  const Job first = Submit(QuickJob());
  const Job second = Submit(QuickJob());
  CommandResult moved = Mpsctl({"move", second.id(), "--priority", "5"});
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_EQ(Get(second.id()).priority(), 5);
  ASSERT_NO_FATAL_FAILURE(Resume());
  const Job done_first = WaitForEnd(first.id());
  const Job done_second = Get(second.id());
  EXPECT_EQ(done_second.state(), Job::SUCCEEDED);
  EXPECT_LE(ToTime(done_second.finished_at()), ToTime(done_first.started_at()));
  moved = Mpsctl({"move", first.id(), "--priority", "1"});
  EXPECT_EQ(moved.exit_code, 1);
  EXPECT_THAT(moved.err, HasSubstr("only a queued job can be moved"));
}

TEST_F(QueueE2eTest, NameLabelAndSinceFiltersPage) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Pause());
  std::vector<std::string> resnet_x;
  for (int i = 0; i < 7; ++i) {
    SubmitJobRequest request = QuickJob();
    request.set_name(absl::StrCat(i % 2 == 0 ? "resnet-" : "vgg-", i));
    (*request.mutable_labels())["project"] = i < 5 ? "x" : "y";
    const Job job = Submit(request);
    if (i % 2 == 0 && i < 5) resnet_x.push_back(job.id());
  }
  std::reverse(resnet_x.begin(), resnet_x.end());  // newest first
  ListJobsRequest request;
  request.set_name("resnet-*");
  (*request.mutable_labels())["project"] = "x";
  request.set_page_size(2);
  std::vector<std::string> seen;
  for (int page = 0; page < 5; ++page) {
    absl::StatusOr<mpsd::v1::ListJobsResponse> response = rpc::List(*daemon_, request);
    ASSERT_TRUE(response.ok()) << response.status();
    for (const Job& job : response->jobs()) seen.push_back(job.id());
    if (response->next_page_token().empty()) break;
    request.set_page_token(response->next_page_token());
  }
  EXPECT_EQ(seen, resnet_x);
  // A token is for its filter only.
  ListJobsRequest other;
  other.set_name("vgg-*");
  other.set_page_token(request.page_token());
  EXPECT_EQ(rpc::List(*daemon_, other).status().code(), absl::StatusCode::kInvalidArgument);

  CommandResult listed = Mpsctl(
      {"list", "--name", "resnet-*", "--label", "project=x", "--since", "1h", "--limit", "0"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  std::vector<std::string> lines = absl::StrSplit(listed.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << listed.out;
  EXPECT_THAT(lines[0],
              ::testing::MatchesRegex("ID +NAME +KIND +STATE +MODEL +PROGRESS +AGE +LABELS.*"));
  EXPECT_THAT(lines[1], ::testing::StartsWith(resnet_x[0] + " "));
  EXPECT_THAT(lines[1], HasSubstr("resnet-4"));
  EXPECT_THAT(lines[1], HasSubstr("project=x"));
  listed = Mpsctl({"list", "--label", "project=y"});
  std::vector<std::string> y_lines = absl::StrSplit(listed.out, '\n', absl::SkipEmpty());
  EXPECT_EQ(y_lines.size(), 3u) << listed.out;
  // Created within the last 0 s: none of them.
  absl::SleepFor(absl::Milliseconds(50));
  listed = Mpsctl({"list", "--since", "1ms"});
  EXPECT_EQ(listed.out, "no jobs\n");
  EXPECT_EQ(Mpsctl({"list", "--since", "yesterday"}).exit_code, 64);
  EXPECT_EQ(Mpsctl({"list", "--label", "project"}).exit_code, 64);
  CommandResult got = Mpsctl({"get", resnet_x[0]});
  EXPECT_THAT(got.out, HasSubstr("resnet-4"));
  EXPECT_THAT(got.out, HasSubstr("project=x"));
}

TEST_F(QueueE2eTest, CompareShowsTheDifferingKeysAndFinalMetrics) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  SubmitJobRequest a = QuickJob(), b = QuickJob();
  b.mutable_train_job()->mutable_optimizer()->set_learning_rate(0.01);
  const Job ja = Submit(a), jb = Submit(b);
  WaitForEnd(jb.id());
  CommandResult compared = Mpsctl({"compare", ja.id(), jb.id(), "--format", "csv"});
  ASSERT_EQ(compared.exit_code, 0) << compared.err;
  EXPECT_THAT(compared.out, HasSubstr(absl::StrCat("KEY,job ", ja.id(), ",job ", jb.id())));
  EXPECT_THAT(compared.out, HasSubstr("optimizer.learning_rate,0.001,0.01\n"));
  EXPECT_THAT(compared.out, HasSubstr("state,SUCCEEDED,SUCCEEDED\n"));
  EXPECT_THAT(compared.out, HasSubstr("test_accuracy,"));
  EXPECT_THAT(compared.out, ::testing::Not(HasSubstr("batch_size")));  // the same in both
  EXPECT_EQ(Mpsctl({"compare", ja.id()}).exit_code, 64);
}

// compare shows what the jobs ran with: a default equals the same value written out, an sgd
// job's default learning rate (0.01) differs from adam's (0.001), and the request_id mpsctl
// makes up for every submit is not a difference.
TEST_F(QueueE2eTest, CompareAppliesDefaultsAndSkipsRequestIds) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(Pause());  // nothing needs to run
  const std::string implicit = SubmitFile("implicit.yaml", kJobFileHead);
  std::string explicit_yaml = kJobFileHead;
  explicit_yaml.replace(explicit_yaml.find("optimizer: {name: adam}"), 23,
                        "optimizer: {name: adam, learning_rate: 0.001, betas: [0.9, 0.999]}\n"
                        "batch_size: 64\nprecision: fp32");
  const std::string spelled_out = SubmitFile("explicit.yaml", explicit_yaml);
  std::string sgd_yaml = kJobFileHead;
  sgd_yaml.replace(sgd_yaml.find("optimizer: {name: adam}"), 23, "optimizer: {name: sgd}");
  const std::string sgd = SubmitFile("sgd.yaml", sgd_yaml);
  ASSERT_NE(Get(implicit).spec().request_id(), Get(spelled_out).spec().request_id());

  CommandResult same = Mpsctl({"compare", implicit, spelled_out, "--format", "csv"});
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(same.out, absl::StrCat("KEY,job ", implicit, ",job ", spelled_out,
                                   "\nstate,QUEUED,QUEUED\ntest_accuracy,-,-\ntest_loss,-,-\n"
                                   "final_train_loss,-,-\nsamples_per_second,-,-\n"
                                   "total_time_s,-,-\n"));
  CommandResult other = Mpsctl({"compare", implicit, sgd, "--format", "csv"});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_THAT(other.out, HasSubstr("\noptimizer.learning_rate,0.001,0.01\n"));
  EXPECT_THAT(other.out, HasSubstr("\noptimizer.name,adam,sgd\n"));
  EXPECT_THAT(other.out, ::testing::Not(HasSubstr("request_id")));
}

}  // namespace
}  // namespace mpsd::testing
