// End-to-end tests of mpsctl: the real build/client/mpsctl binary against a real mpsd process on
// a temp unix socket, training on the real Fashion-MNIST files.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/client_context.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "tests/common/files.h"
#include "tests/e2e/daemon.h"

extern char** environ;

namespace mpsd::testing {
namespace {

using mpsd::v1::Job;
using mpsd::v1::JobEvent;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";
// util-linux script(1): runs a command on a pseudo-terminal.
constexpr char kScript[] = "/usr/bin/script";

// A Fashion-MNIST job file at batch size 64 on the CPU: limit_train / 64 steps per epoch.
std::string TrainJobYaml(int limit_train, int limit_test, int epochs,
                         const std::string& root = kFashionMnist) {
  return absl::StrFormat(
      "kind: TrainJob\n"
      "model: {name: convnet}\n"
      "dataset: {name: fashion-mnist, root: %s, limit_train: %d, limit_test: %d}\n"
      "batch_size: 64\n"
      "epochs: %d\n"
      "optimizer: {name: adam, learning_rate: 0.001}\n"
      "seed: 1\n"
      "device: cpu\n",
      root, limit_train, limit_test, epochs);
}
// 5 steps, about a second: for tests that need some finished job, not a particular one.
std::string TinyJobYaml() { return TrainJobYaml(320, 64, 1); }
// 250 steps in 50 short epochs (a minute): step events arrive after the first epoch (about a
// second), and the job stays RUNNING for as long as any test needs it.
std::string LongJobYaml() { return TrainJobYaml(320, 64, 50); }
// The smoke test of examples/fashion-mnist-small.yaml: 2,000 examples at batch 64 make 32 steps
// (the last batch has 16).
std::string SmallJobFile() { return SourcePath("examples/fashion-mnist-small.yaml"); }

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(absl::StripSuffix(text, "\n"), '\n');
}

// The job id in mpsctl's first line of follow output ("job 12 QUEUED").
std::string IdFromFollowOutput(const std::string& out) {
  std::vector<std::string> words = absl::StrSplit(Lines(out)[0], ' ');
  return words.size() == 3 && words[0] == "job" ? words[1] : "";
}

// A program running in the background with stdout and stderr in files, so a test can watch what
// it has printed so far. Killed (SIGKILL) by the destructor if still running.
class BackgroundCommand {
 public:
  explicit BackgroundCommand(const std::vector<std::string>& argv)
      : out_path_(dir_.str() + "/out"), err_path_(dir_.str() + "/err") {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~BackgroundCommand() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

  std::string out() const { return ReadFile(out_path_); }
  CommandResult Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out(),
            ReadFile(err_path_)};
  }

 private:
  TempDir dir_;
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
};

// Calls `done` every 20 ms until it returns true (then true) or 60 s have passed (then false).
bool PollUntil(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Reads one job's events from the daemon directly (not through mpsctl) until the stream ends.
std::vector<JobEvent> StreamAll(Daemon& daemon, const std::string& job_id) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  mpsd::v1::StreamEventsRequest request;
  request.set_job_id(job_id);
  auto reader = daemon.stub().StreamEvents(&context, request);
  std::vector<JobEvent> events;
  JobEvent event;
  while (reader->Read(&event)) events.push_back(event);
  reader->Finish();
  return events;
}

Job GetJob(Daemon& daemon, const std::string& job_id) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  mpsd::v1::GetJobRequest request;
  request.set_job_id(job_id);
  Job job;
  grpc::Status status = daemon.stub().GetJob(&context, request, &job);
  EXPECT_TRUE(status.ok()) << "GetJob " << job_id << ": " << status.error_message();
  return job;
}

// One daemon for the whole suite (one per test under CTest, which runs each test on its own).
// Every test leaves it idle: jobs it starts have ended when it returns.
class MpsctlE2eTest : public ::testing::Test {
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
    finished_.reset();
  }
  void SetUp() override { ASSERT_GT(daemon_->pid(), 0) << "the suite's mpsd did not start"; }

  static CommandResult Mpsctl(std::vector<std::string> args) {
    args.insert(args.begin(), {MpsctlPath(), "--server", daemon_->address()});
    return RunCommand(args);
  }

  // Runs mpsctl on a pseudo-terminal from script(1), as at a terminal; stdout and stderr both
  // come back in `out`.
  static CommandResult MpsctlOnTerminal(const std::vector<std::string>& args) {
    std::string command = absl::StrCat("'", MpsctlPath(), "' --server '", daemon_->address(), "'");
    for (const std::string& arg : args) absl::StrAppend(&command, " '", arg, "'");
    return RunCommand({"/usr/bin/env", "TERM=xterm", kScript, "--quiet", "--return", "--command",
                       command, "/dev/null"});
  }

  // Writes a job file into this test's temp dir and returns its path.
  std::string JobFile(const std::string& name, const std::string& yaml) {
    const std::string path = dir_.str() + "/" + name;
    WriteFile(path, yaml);
    return path;
  }

  // Submits a job file through mpsctl; returns the printed id.
  std::string Submit(const std::string& job_file) {
    CommandResult submitted = Mpsctl({"submit", job_file});
    EXPECT_EQ(submitted.exit_code, 0) << submitted.err;
    return std::string(absl::StripSuffix(submitted.out, "\n"));
  }

  static mpsd::v1::ListJobsResponse ListJobs() {
    grpc::ClientContext context;
    mpsd::v1::ListJobsResponse response;
    grpc::Status status =
        daemon_->stub().ListJobs(&context, mpsd::v1::ListJobsRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  // Cancels the job (unless it has ended) and waits until it has.
  static void CancelAndWait(const std::string& job_id) {
    grpc::ClientContext context;
    mpsd::v1::CancelJobRequest request;
    request.set_job_id(job_id);
    Job job;
    daemon_->stub().CancelJob(&context, request, &job);  // FAILED_PRECONDITION once it ended
    StreamAll(*daemon_, job_id);
  }

  // A job that SUCCEEDED, followed to its end with `mpsctl submit --follow --json`. The first
  // test of the suite that asks trains it.
  struct FinishedJob {
    std::string id;
    std::string json_lines;  // what `submit --follow --json` printed
  };
  const FinishedJob& Finished() {
    if (!finished_) {
      CommandResult followed =
          Mpsctl({"--json", "submit", JobFile("tiny.yaml", TinyJobYaml()), "--follow"});
      EXPECT_EQ(followed.exit_code, 0) << followed.err;
      std::vector<JobEvent> events = ParseEventLines(followed.out);
      finished_ = FinishedJob{events.empty() ? "" : events[0].job_id(), followed.out};
    }
    return *finished_;
  }

  TempDir dir_;
  inline static std::unique_ptr<TempDir> suite_dir_;
  inline static std::unique_ptr<Daemon> daemon_;
  inline static std::optional<FinishedJob> finished_;
};

TEST_F(MpsctlE2eTest, SubmitPrintsTheId) {
  CommandResult submitted = Mpsctl({"submit", JobFile("job.yaml", TinyJobYaml())});
  EXPECT_EQ(submitted.exit_code, 0) << submitted.err;
  EXPECT_THAT(submitted.out, MatchesRegex("[0-9]+\n"));
  EXPECT_EQ(submitted.err, "");
  const std::string id(absl::StripSuffix(submitted.out, "\n"));
  // The daemon got the job file's fields.
  const Job job = GetJob(*daemon_, id);
  EXPECT_EQ(job.spec().train_job().dataset().limit_train(), 320);
  EXPECT_EQ(job.spec().train_job().batch_size(), 64);
  CancelAndWait(id);
}

TEST_F(MpsctlE2eTest, SubmitJsonPrintsTheJob) {
  CommandResult submitted = Mpsctl({"submit", "--json", JobFile("job.yaml", TinyJobYaml())});
  EXPECT_EQ(submitted.exit_code, 0) << submitted.err;
  ASSERT_THAT(submitted.out, EndsWith("}\n"));
  EXPECT_EQ(Lines(submitted.out).size(), 1u);
  Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(submitted.out, &job).ok())
      << submitted.out;
  EXPECT_THAT(job.id(), Not(IsEmpty()));
  EXPECT_EQ(job.state(), Job::QUEUED);
  EXPECT_EQ(job.kind(), Job::TRAIN_JOB);
  EXPECT_EQ(job.spec().train_job().dataset().limit_train(), 320);
  EXPECT_THAT(submitted.out, StartsWith(absl::StrCat(R"({"id":")", job.id(), R"(",)")));
  CancelAndWait(job.id());
}

TEST_F(MpsctlE2eTest, BadJobFileNeverReachesTheDaemon) {
  const int jobs_before = ListJobs().jobs_size();
  const std::string file = JobFile("bad.yaml", "kind: TrainJob\nbatch_size: sixty\n");
  CommandResult submitted = Mpsctl({"submit", file});
  EXPECT_EQ(submitted.exit_code, 1);
  EXPECT_EQ(submitted.err, file + ":2:13: batch_size: expected an integer, got \"sixty\"\n");
  EXPECT_EQ(submitted.out, "");
  EXPECT_EQ(ListJobs().jobs_size(), jobs_before) << "a job was created";
}

TEST_F(MpsctlE2eTest, JobRejectedByTheDaemonNamesTheFieldAndTheFile) {
  const std::string missing = dir_.str() + "/no-such-dataset";
  const std::string file = JobFile("job.yaml", TrainJobYaml(320, 64, 1, missing));
  CommandResult submitted = Mpsctl({"submit", file});
  EXPECT_EQ(submitted.exit_code, 1);
  EXPECT_THAT(submitted.err,
              AllOf(StartsWith(absl::StrCat("mpsctl: ", file,
                                            ": mpsd rejected the job: train_job.dataset.root: ")),
                    HasSubstr(missing), EndsWith("\n")));
  EXPECT_EQ(Lines(submitted.err).size(), 1u);
  EXPECT_EQ(submitted.out, "");
}

TEST_F(MpsctlE2eTest, SubmitFollowPrintsProgressAndTheTestAccuracy) {
  CommandResult followed = Mpsctl({"submit", SmallJobFile(), "--follow"});
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  EXPECT_EQ(followed.err, "");
  const std::string id = IdFromFollowOutput(followed.out);
  ASSERT_THAT(id, Not(IsEmpty())) << followed.out;
  EXPECT_THAT(followed.out,
              StartsWith(absl::StrCat("job ", id, " QUEUED\njob ", id, " RUNNING\n")));
  EXPECT_THAT(followed.out, HasSubstr("epoch 1/1  step 32/32  loss "));
  EXPECT_THAT(followed.out, HasSubstr("\nepoch 1: train loss "));
  EXPECT_THAT(followed.out, Not(HasSubstr("\r")));  // not a terminal: no redrawing

  // The summary's test accuracy is the one the daemon stored.
  const Job job = GetJob(*daemon_, id);
  ASSERT_EQ(job.state(), Job::SUCCEEDED);
  EXPECT_GT(job.summary().test_accuracy(), 0.6);
  EXPECT_THAT(followed.out, HasSubstr(absl::StrCat("\njob ", id, " SUCCEEDED in ")));
  EXPECT_THAT(followed.out, HasSubstr(absl::StrFormat("\n  test accuracy %.4f, ",
                                                      job.summary().test_accuracy())));
}

TEST_F(MpsctlE2eTest, SubmitFollowJsonPrintsOnlyEventsOnePerStep) {
  CommandResult followed = Mpsctl({"submit", SmallJobFile(), "--follow", "--json"});
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  EXPECT_EQ(followed.err, "");
  const std::vector<JobEvent> events = ParseEventLines(followed.out);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.size(), Lines(followed.out).size());
  const std::string id = events[0].job_id();
  int64_t steps = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq(), static_cast<int64_t>(i + 1));  // 1..N, no gap
    EXPECT_EQ(events[i].job_id(), id);
    EXPECT_NE(events[i].payload_case(), JobEvent::PAYLOAD_NOT_SET);
    if (events[i].has_step()) {
      EXPECT_EQ(events[i].step().step(), ++steps);
      EXPECT_EQ(events[i].step().total_steps(), 32);
    }
  }
  EXPECT_EQ(steps, 32);
  ASSERT_TRUE(events.back().has_state());
  EXPECT_EQ(events.back().state().state(), Job::SUCCEEDED);
  EXPECT_EQ(GetJob(*daemon_, id).last_seq(), events.back().seq());
}

TEST_F(MpsctlE2eTest, LogsAfterPrintsExactlyTheLaterEvents) {
  const FinishedJob& job = Finished();
  ASSERT_THAT(job.id, Not(IsEmpty()));
  // The stored events are the ones the follower saw.
  CommandResult all = Mpsctl({"logs", job.id, "--json"});
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out, job.json_lines);
  const std::vector<std::string> lines = Lines(job.json_lines);
  const int64_t n = static_cast<int64_t>(lines.size());
  ASSERT_GT(n, 8);
  for (int64_t k : {int64_t{1}, int64_t{7}, n - 1, n}) {
    SCOPED_TRACE(absl::StrCat("--after ", k));
    CommandResult after = Mpsctl({"logs", job.id, "--after", absl::StrCat(k), "--json"});
    EXPECT_EQ(after.exit_code, 0) << after.err;
    std::string expected;
    for (int64_t i = k; i < n; ++i) absl::StrAppend(&expected, lines[i], "\n");
    EXPECT_EQ(after.out, expected);
    EXPECT_EQ(after.err, "");
  }
  EXPECT_EQ(Mpsctl({"logs", job.id, "--after", "-1"}).exit_code, 64);
  // Issue 26: beyond the last seq it printed nothing and exited 0 (with --follow: an error).
  CommandResult beyond = Mpsctl({"logs", job.id, "--after", absl::StrCat(n + 100)});
  EXPECT_EQ(beyond.exit_code, 1);
  EXPECT_EQ(beyond.out, "");
  EXPECT_THAT(beyond.err, HasSubstr(absl::StrCat("--after ", n + 100, " is beyond job ", job.id,
                                                 "'s last event (seq ", n, ")")));
}

TEST_F(MpsctlE2eTest, LogsOfAFinishedJobShowsTheSummary) {
  const FinishedJob& job = Finished();
  ASSERT_THAT(job.id, Not(IsEmpty()));
  CommandResult logs = Mpsctl({"logs", job.id});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_THAT(logs.out, StartsWith(absl::StrCat("job ", job.id, " QUEUED\n")));
  EXPECT_THAT(logs.out, HasSubstr("epoch 1/1  step 5/5  loss "));
  EXPECT_THAT(logs.out, HasSubstr(absl::StrCat("\njob ", job.id, " SUCCEEDED in ")));
  EXPECT_THAT(logs.out, HasSubstr("\n  test accuracy "));
  EXPECT_EQ(Mpsctl({"logs", job.id, "--follow"}).exit_code, 0);

  // On a terminal the progress line is redrawn in place, every step.
  if (!std::filesystem::exists(kScript)) GTEST_SKIP() << "no " << kScript;
  CommandResult live = MpsctlOnTerminal({"logs", job.id});
  EXPECT_EQ(live.exit_code, 0) << live.out << live.err;
  EXPECT_THAT(live.out, HasSubstr("\r\x1b[Kepoch 1/1  step 1/5  loss "));
  EXPECT_THAT(live.out, HasSubstr("\r\x1b[Kepoch 1/1  step 5/5  loss "));
}

TEST_F(MpsctlE2eTest, LogsOfARunningJobStopsAtTheStoredEvents) {
  const std::string id = Submit(JobFile("long.yaml", LongJobYaml()));
  ASSERT_TRUE(PollUntil([&] { return GetJob(*daemon_, id).last_step().step() > 0; }));
  const int64_t stored_before = GetJob(*daemon_, id).last_seq();

  CommandResult logs = Mpsctl({"logs", id, "--json"});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_EQ(logs.err, "");
  const std::vector<JobEvent> events = ParseEventLines(logs.out);
  ASSERT_GE(static_cast<int64_t>(events.size()), stored_before);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq(), static_cast<int64_t>(i + 1));
    EXPECT_FALSE(events[i].has_state() && events[i].state().state() > Job::RUNNING);
  }
  EXPECT_EQ(GetJob(*daemon_, id).state(), Job::RUNNING);

  // The progress line counts the epochs of the job's spec (seen on a terminal, where every step
  // is drawn).
  if (std::filesystem::exists(kScript)) {
    CommandResult live = MpsctlOnTerminal({"logs", id});
    EXPECT_EQ(live.exit_code, 0) << live.out << live.err;
    EXPECT_THAT(live.out, HasSubstr("\r\x1b[Kepoch 1/50  step 1/250  loss "));
  }
  CancelAndWait(id);
}

TEST_F(MpsctlE2eTest, GetShowsTheJob) {
  const FinishedJob& finished = Finished();
  ASSERT_THAT(finished.id, Not(IsEmpty()));
  CommandResult get = Mpsctl({"get", finished.id});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_THAT(get.out,
              AllOf(StartsWith(absl::StrCat("id          ", finished.id, "\n")),
                    HasSubstr("\nkind        TrainJob\n"), HasSubstr("\nstate       SUCCEEDED\n"),
                    HasSubstr("\nprogress    epoch 1/1  step 5/5  loss "),
                    HasSubstr("\n            test accuracy "),
                    HasSubstr("\nspec:\n  kind: TrainJob\n  model: {name: convnet}\n")));

  CommandResult json = Mpsctl({"get", finished.id, "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &job).ok()) << json.out;
  EXPECT_EQ(job.id(), finished.id);
  EXPECT_EQ(job.state(), Job::SUCCEEDED);
  EXPECT_EQ(job.last_seq(), static_cast<int64_t>(Lines(finished.json_lines).size()));
  EXPECT_EQ(job.spec().train_job().dataset().limit_train(), 320);

  CommandResult unknown = Mpsctl({"get", "999"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, AllOf(StartsWith("mpsctl: "), HasSubstr("999"), EndsWith("\n")));
  EXPECT_EQ(Lines(unknown.err).size(), 1u);
}

TEST_F(MpsctlE2eTest, ListPrintsATable) {
  const FinishedJob& finished = Finished();
  ASSERT_THAT(finished.id, Not(IsEmpty()));
  CommandResult list = Mpsctl({"list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  const std::vector<std::string> lines = Lines(list.out);
  EXPECT_THAT(lines[0], MatchesRegex("ID +KIND +STATE +MODEL +PROGRESS +AGE +BY"));
  EXPECT_THAT(lines, Contains(MatchesRegex(absl::StrCat(
                         finished.id, " +TrainJob +SUCCEEDED +convnet +100% +[0-9].*"))));

  CommandResult json = Mpsctl({"list", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  mpsd::v1::ListJobsResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &response).ok()) << json.out;
  ASSERT_EQ(response.jobs_size(), static_cast<int>(lines.size()) - 1);
  int64_t previous_id = INT64_MAX;
  for (const Job& job : response.jobs()) {
    int64_t id = 0;
    ASSERT_TRUE(absl::SimpleAtoi(job.id(), &id)) << job.id();
    EXPECT_LT(id, previous_id) << "not newest first";
    previous_id = id;
    if (job.id() == finished.id) EXPECT_EQ(job.state(), Job::SUCCEEDED);
  }
}

TEST_F(MpsctlE2eTest, CancelQueuedRunningAndFinishedJobs) {
  // The executor runs one job at a time: the second stays queued behind the first.
  const std::string running = Submit(JobFile("long.yaml", LongJobYaml()));
  const std::string queued = Submit(JobFile("tiny.yaml", TinyJobYaml()));

  CommandResult cancel_queued = Mpsctl({"cancel", queued});
  EXPECT_EQ(cancel_queued.exit_code, 0) << cancel_queued.err;
  EXPECT_EQ(cancel_queued.out, absl::StrCat("job ", queued, " CANCELLED\n"));
  CommandResult queued_logs = Mpsctl({"logs", queued, "--follow"});
  EXPECT_EQ(queued_logs.exit_code, 1);  // it did not succeed
  EXPECT_EQ(queued_logs.out, absl::StrCat("job ", queued, " QUEUED\njob ", queued,
                                          " CANCELLED: cancelled while queued\n"));

  ASSERT_TRUE(PollUntil([&] { return GetJob(*daemon_, running).state() == Job::RUNNING; }));
  CommandResult cancel_running = Mpsctl({"cancel", running});
  EXPECT_EQ(cancel_running.exit_code, 0) << cancel_running.err;
  EXPECT_EQ(cancel_running.out, absl::StrCat("job ", running,
                                             " stops at its next step (watch it: "
                                             "mpsctl logs ",
                                             running, " --follow)\n"));
  CommandResult running_logs = Mpsctl({"logs", running, "--follow"});
  EXPECT_EQ(running_logs.exit_code, 1);
  EXPECT_THAT(running_logs.out, HasSubstr(absl::StrCat("\njob ", running, " CANCELLED ")));
  EXPECT_THAT(running_logs.out, HasSubstr(": cancelled by request\n"));

  // A finished job cannot be cancelled: the daemon's FAILED_PRECONDITION, exit 1.
  CommandResult again = Mpsctl({"cancel", running});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_EQ(again.err, absl::StrCat("mpsctl: job ", running, " already finished (CANCELLED)\n"));
  EXPECT_EQ(again.out, "");
  CommandResult unknown = Mpsctl({"cancel", "999"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, AllOf(StartsWith("mpsctl: "), HasSubstr("999")));
}

TEST_F(MpsctlE2eTest, CancelTakesSeveralIdsAndSaysHowEachEnded) {
  const std::string running = Submit(JobFile("long.yaml", LongJobYaml()));
  const std::string first = Submit(JobFile("tiny1.yaml", TinyJobYaml()));
  const std::string second = Submit(JobFile("tiny2.yaml", TinyJobYaml()));

  // Every id is tried: one unknown id in the middle fails the command, not the others.
  CommandResult some = Mpsctl({"cancel", first, "999", second});
  EXPECT_EQ(some.exit_code, 1);
  EXPECT_EQ(some.out, absl::StrCat("job ", first, " CANCELLED\njob ", second, " CANCELLED\n"));
  EXPECT_THAT(some.err, AllOf(StartsWith("mpsctl: "), HasSubstr("999"), EndsWith("\n")));
  EXPECT_EQ(Lines(some.err).size(), 1u) << some.err;
  EXPECT_EQ(GetJob(*daemon_, first).state(), Job::CANCELLED);
  EXPECT_EQ(GetJob(*daemon_, second).state(), Job::CANCELLED);

  // --wait: returns once the running job has stopped, with its final state.
  ASSERT_TRUE(PollUntil([&] { return GetJob(*daemon_, running).state() == Job::RUNNING; }));
  CommandResult all = Mpsctl({"cancel", "--wait", running});
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out, absl::StrCat("job ", running, " CANCELLED: cancelled by request\n"));
  EXPECT_EQ(GetJob(*daemon_, running).state(), Job::CANCELLED);
  // Both already finished: each one's error, exit 1.
  CommandResult again = Mpsctl({"cancel", first, second});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_EQ(again.err, absl::StrCat("mpsctl: job ", first, " already finished (CANCELLED)\n",
                                    "mpsctl: job ", second, " already finished (CANCELLED)\n"));
  EXPECT_EQ(again.out, "");
}

// `download` into a folder that is not there names it; a file already there is never
// overwritten silently (as gh refuses without --clobber): --force overwrites it.
TEST_F(MpsctlE2eTest, DownloadNamesAMissingFolderAndKeepsAnExistingFile) {
  const FinishedJob& finished = Finished();
  ASSERT_THAT(finished.id, Not(IsEmpty()));
  const std::string missing = dir_.str() + "/no-such-dir";
  CommandResult into_missing = Mpsctl({"download", finished.id, "-o", missing + "/"});
  EXPECT_EQ(into_missing.exit_code, 1);
  EXPECT_EQ(into_missing.err,
            absl::StrCat("mpsctl: download: -o ", missing,
                         "/: no such directory (create it first: mkdir -p ", missing, "/)\n"));
  CommandResult file_in_missing = Mpsctl({"download", finished.id, "-o", missing + "/model.pt"});
  EXPECT_EQ(file_in_missing.exit_code, 1);
  EXPECT_EQ(file_in_missing.err, absl::StrCat("mpsctl: download: -o ", missing,
                                              "/model.pt: no such directory: ", missing, "\n"));
  EXPECT_FALSE(std::filesystem::exists(missing));

  // The default destination, ./model.pt, from the test's directory.
  auto download_here = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {"/usr/bin/env", "--chdir=" + dir_.str(), MpsctlPath(),
                                     "--server",     daemon_->address(),      "download",
                                     finished.id};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunCommand(argv);
  };
  const std::string here = dir_.str() + "/model.pt";
  CommandResult first = download_here({});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string model = ReadFile(here);
  ASSERT_FALSE(model.empty());
  WriteFile(here, "mine");
  CommandResult again = download_here({});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_EQ(again.err,
            "mpsctl: download: model.pt already exists; --force overwrites it, or -o names "
            "another file\n");
  EXPECT_EQ(ReadFile(here), "mine");
  EXPECT_FALSE(std::filesystem::exists(here + ".part"));
  CommandResult forced = download_here({"--force"});
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(ReadFile(here), model);

  // -o -: the checked bytes on stdout, nothing else; no file named "-", no temporary left.
  CommandResult piped = download_here({"-o", "-"});
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_TRUE(piped.out == model) << piped.out.size() << " bytes, not " << model.size();
  EXPECT_EQ(piped.err, "");
  EXPECT_FALSE(std::filesystem::exists(dir_.str() + "/-"));
}

TEST_F(MpsctlE2eTest, DeviceShowsTheDaemonsDevice) {
  grpc::ClientContext context;
  mpsd::v1::DeviceInfo expected;
  ASSERT_TRUE(daemon_->stub().GetDevice(&context, mpsd::v1::GetDeviceRequest(), &expected).ok());

  CommandResult device = Mpsctl({"device"});
  EXPECT_EQ(device.exit_code, 0) << device.err;
  EXPECT_THAT(device.out,
              StartsWith(absl::StrCat("device       ", expected.kind(), "\nname         ",
                                      expected.name(), "\navailable    ")));
  EXPECT_THAT(device.out,
              HasSubstr(absl::StrCat("\ntorch        ", expected.torch_version(), "\n")));
  // The executor process that owns the device (issue 6).
  ASSERT_GT(expected.executor_pid(), 0);
  EXPECT_THAT(device.out, HasSubstr(absl::StrCat("\nbaseline     allocated ")));
  EXPECT_THAT(device.out,
              HasSubstr(absl::StrCat("\nexecutor     pid ", expected.executor_pid(), ", up ")));

  CommandResult json = Mpsctl({"device", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  mpsd::v1::DeviceInfo printed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &printed).ok()) << json.out;
  EXPECT_EQ(printed.kind(), expected.kind());
  EXPECT_THAT(printed.available(), Contains("cpu"));
  EXPECT_EQ(printed.torch_version(), expected.torch_version());
}

// The line of `table` whose first column is `name`, or "".
std::string TableRow(const std::string& table, const std::string& name) {
  for (const std::string& line : Lines(table)) {
    if (absl::StartsWith(line, name + " ")) return line;
  }
  return "";
}

TEST_F(MpsctlE2eTest, ModelsListsTheZooWithParameterCounts) {
  CommandResult models = Mpsctl({"models"});
  EXPECT_EQ(models.exit_code, 0) << models.err;
  EXPECT_THAT(Lines(models.out).front(),
              MatchesRegex("NAME +PARAMETERS +INPUT +CLASSES +DESCRIPTION"));
  EXPECT_EQ(Lines(models.out).size(), 12u) << models.out;
  EXPECT_THAT(TableRow(models.out, "resnet50"),
              MatchesRegex("resnet50 +25,557,032  3×224×224 +1000  torchvision ResNet-50 .*"));
  EXPECT_THAT(TableRow(models.out, "vgg16"), HasSubstr(" 138,357,544  3×224×224 "));
  EXPECT_THAT(TableRow(models.out, "convnet"),
              MatchesRegex("convnet +1,199,882  1×28×28 +10  the seeds' MNIST ConvNet .*"));

  // At Fashion-MNIST's shape vgg cannot run: listed with the reason instead of a count.
  CommandResult small = Mpsctl({"models", "--input-shape", "1,28,28", "--num-classes", "10"});
  EXPECT_EQ(small.exit_code, 0) << small.err;
  EXPECT_THAT(TableRow(small.out, "vgg16"),
              MatchesRegex("vgg16 +-  1×28×28 +10  vgg16 cannot take 1×28×28 images: .*"));
  EXPECT_THAT(TableRow(small.out, "cifar_cnn"), HasSubstr(" 733,482  1×28×28 "));

  CommandResult json = Mpsctl({"models", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  mpsd::v1::ListModelsResponse printed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &printed).ok()) << json.out;
  ASSERT_EQ(printed.models_size(), 11);
  EXPECT_EQ(printed.models(5).name(), "resnet50");
  EXPECT_EQ(printed.models(5).parameters(), 25'557'032);

  CommandResult bad = Mpsctl({"models", "--input-shape", "3,0,32"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.err,
            "mpsctl: models: --input-shape: every dimension must be in [1, 1048576], got "
            "3×0×32\n");
  EXPECT_EQ(bad.out, "");
}

TEST_F(MpsctlE2eTest, ModelThatCannotTakeTheDatasetsImagesIsRejectedAtSubmit) {
  std::string yaml = TrainJobYaml(320, 64, 1);
  yaml.replace(yaml.find("convnet"), 7, "vgg16");
  const std::string file = JobFile("vgg.yaml", yaml);
  CommandResult submitted = Mpsctl({"submit", file});
  EXPECT_EQ(submitted.exit_code, 1);
  EXPECT_EQ(submitted.err,
            absl::StrCat("mpsctl: ", file,
                         ": mpsd rejected the job: train_job.model.name: vgg16 cannot take "
                         "1×28×28 images: its 5 2×2 max-pools reduce 28×28 to 0×0, so it needs "
                         "at least 32×32 (the input of dataset fashion-mnist)\n"));
  EXPECT_EQ(submitted.out, "");
}

TEST_F(MpsctlE2eTest, SubmitPriorityAndRequestId) {
  const std::string file =
      JobFile("job.yaml", absl::StrCat("priority: 2\nrequest_id: nightly-7\n", TinyJobYaml()));
  CommandResult first = Mpsctl({"submit", file, "--priority", "7"});
  EXPECT_EQ(first.exit_code, 0) << first.err;
  const std::string id(absl::StripSuffix(first.out, "\n"));
  const Job job = GetJob(*daemon_, id);
  EXPECT_EQ(job.spec().priority(), 7);  // the flag over the file
  EXPECT_EQ(job.spec().request_id(), "nightly-7");

  // The same request again: the same job, no new one.
  const int jobs = ListJobs().jobs_size();
  CommandResult again = Mpsctl({"submit", file, "--priority", "7"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, first.out);
  EXPECT_EQ(ListJobs().jobs_size(), jobs);
  // Another request under that id is refused, naming the job.
  CommandResult other = Mpsctl({"submit", file});
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_THAT(other.err, HasSubstr(absl::StrCat("already used for job ", id)));

  CommandResult get = Mpsctl({"get", id});
  EXPECT_THAT(get.out,
              HasSubstr("spec:\n  kind: TrainJob\n  priority: 7\n  request_id: nightly-7\n"));
  CancelAndWait(id);
}

TEST_F(MpsctlE2eTest, ListFiltersByStateAndKindWithALimit) {
  const FinishedJob& finished = Finished();
  ASSERT_THAT(finished.id, Not(IsEmpty()));
  const std::string cancelled = Submit(JobFile("long.yaml", LongJobYaml()));
  CancelAndWait(cancelled);

  CommandResult succeeded = Mpsctl({"list", "--state", "succeeded"});
  EXPECT_EQ(succeeded.exit_code, 0) << succeeded.err;
  EXPECT_THAT(succeeded.out, HasSubstr(absl::StrCat("\n", finished.id, " ")));
  EXPECT_THAT(succeeded.out, Not(HasSubstr("CANCELLED")));
  CommandResult both = Mpsctl({"list", "--state", "SUCCEEDED,cancelled"});
  EXPECT_THAT(both.out, AllOf(HasSubstr("SUCCEEDED"), HasSubstr("CANCELLED")));
  CommandResult queued = Mpsctl({"list", "--state", "queued", "--state", "running"});
  EXPECT_EQ(queued.out, "no jobs\n");
  EXPECT_EQ(Mpsctl({"list", "--kind", "BenchJob"}).out, "no jobs\n");
  EXPECT_THAT(Mpsctl({"list", "--kind", "train_job"}).out, HasSubstr("TrainJob"));

  // The newest job only, and a note that there are more.
  CommandResult one = Mpsctl({"list", "--limit", "1"});
  EXPECT_EQ(one.exit_code, 0) << one.err;
  const std::vector<std::string> lines = Lines(one.out);
  ASSERT_EQ(lines.size(), 2u) << one.out;
  EXPECT_THAT(lines[1], StartsWith(cancelled + " "));
  EXPECT_THAT(one.err, HasSubstr("the newest 1 shown"));  // a note on stderr: pipes see rows
  mpsd::v1::ListJobsResponse json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  Mpsctl({"list", "--limit", "1", "--json"}).out, &json)
                  .ok());
  EXPECT_EQ(json.jobs_size(), 1);
  EXPECT_TRUE(json.next_page_token().empty());

  CommandResult bad = Mpsctl({"list", "--state", "runing"});
  EXPECT_EQ(bad.exit_code, 64);
  EXPECT_THAT(bad.err, StartsWith("mpsctl: --state: unknown \"runing\" (expected QUEUED, "));
  EXPECT_EQ(Mpsctl({"list", "--kind", "nope"}).exit_code, 64);
  // EARLY_STOPPED, which STATE shows for a trial a sweep's scheduler stopped, is a reason.
  CommandResult early = Mpsctl({"list", "--state", "early_stopped"});
  EXPECT_EQ(early.exit_code, 64);
  EXPECT_THAT(early.err, HasSubstr("--state cancelled lists those trials"));
}

TEST_F(MpsctlE2eTest, StatusShowsTheDaemonsHealth) {
  CommandResult status = Mpsctl({"status"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, StartsWith("streams     0 open, 0 waiting for events\n"
                                     "queue       0 queued, no job running\n"));
  EXPECT_THAT(status.out, AllOf(HasSubstr("\nmemory      "), HasSubstr(" MiB resident\n")));

  CommandResult json = Mpsctl({"status", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  mpsd::v1::ServerStatus printed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &printed).ok()) << json.out;
  EXPECT_GT(printed.rss_bytes(), 0);
  EXPECT_GT(printed.uptime_s(), 0);
  EXPECT_EQ(printed.jobs_total(), ListJobs().jobs_size());
}

TEST_F(MpsctlE2eTest, FailedRunExitsOneWithTheReason) {
  // Training images cut short: the files are there at submit, the read fails at run time.
  const std::string root = dir_.str() + "/corrupt";
  std::filesystem::create_directories(root);
  for (const char* name :
       {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    std::filesystem::copy_file(absl::StrCat(kFashionMnist, "/", name), root + "/" + name);
  }
  WriteFile(root + "/train-images-idx3-ubyte", std::string("\x00\x00\x08\x03", 4) + "short");

  CommandResult followed =
      Mpsctl({"submit", JobFile("job.yaml", TrainJobYaml(2000, 500, 1, root)), "--follow"});
  EXPECT_EQ(followed.exit_code, 1) << followed.err;
  const std::string id = IdFromFollowOutput(followed.out);
  ASSERT_THAT(id, Not(IsEmpty())) << followed.out;
  EXPECT_THAT(followed.out, HasSubstr(absl::StrCat("\njob ", id, " FAILED (DATASET_ERROR)")));
  EXPECT_THAT(Lines(followed.out).back(), Not(HasSubstr("DATASET_ERROR")));  // summary below
  bool named = false;
  for (const std::string& line : Lines(followed.out)) {
    named |= absl::StrContains(line, "FAILED (DATASET_ERROR)") &&
             absl::StrContains(line, "train-images-idx3-ubyte");
  }
  EXPECT_TRUE(named) << "the FAILED line does not name the file:\n" << followed.out;

  // The job's outcome sets the exit code only when following.
  EXPECT_EQ(Mpsctl({"logs", id}).exit_code, 0);
  EXPECT_EQ(Mpsctl({"logs", id, "--follow"}).exit_code, 1);
}

TEST_F(MpsctlE2eTest, ServerAddressForms) {
  const std::string socket(absl::StripPrefix(daemon_->address(), "unix://"));
  // A socket path.
  CommandResult path = RunCommand({MpsctlPath(), "--server", socket, "device"});
  EXPECT_EQ(path.exit_code, 0) << path.err;
  // A relative path, from the socket's directory.
  const std::string dir = std::filesystem::path(socket).parent_path();
  CommandResult relative =
      RunCommand({"/usr/bin/env", "--chdir=" + dir, MpsctlPath(), "--server",
                  "./" + std::filesystem::path(socket).filename().string(), "device"});
  EXPECT_EQ(relative.exit_code, 0) << relative.err;
  // $MPSD_ADDR when there is no --server.
  CommandResult env =
      RunCommand({"/usr/bin/env", "MPSD_ADDR=" + daemon_->address(), MpsctlPath(), "device"});
  EXPECT_EQ(env.exit_code, 0) << env.err;
  // A host:port is kept as it is: nothing listens on port 1.
  CommandResult tcp = RunCommand({MpsctlPath(), "--server", "127.0.0.1:1", "device"});
  EXPECT_EQ(tcp.exit_code, 2);
  EXPECT_THAT(tcp.err, StartsWith("mpsctl: cannot reach mpsd at 127.0.0.1:1"));
}

TEST(MpsctlUnreachableTest, MissingSocketIsAClearOneLineError) {
  TempDir dir;
  const std::string address = "unix://" + dir.str() + "/mpsd.sock";
  CommandResult list = RunCommand({MpsctlPath(), "--server", address, "list"});
  EXPECT_EQ(list.exit_code, 2);
  EXPECT_EQ(list.err, absl::StrCat("mpsctl: cannot reach mpsd at ", address,
                                   " (No such file or directory): is the daemon running? (start "
                                   "it with: mpsd --listen ",
                                   address, ")\n"));
  EXPECT_EQ(list.out, "");
}

TEST(MpsctlUnreachableTest, EveryCommandReportsIt) {
  TempDir dir;
  const std::string address = "unix://" + dir.str() + "/mpsd.sock";
  for (std::vector<std::string> command :
       std::vector<std::vector<std::string>>{{"submit", SmallJobFile()},
                                             {"submit", SmallJobFile(), "--follow"},
                                             {"get", "1"},
                                             {"cancel", "1"},
                                             {"logs", "1"},
                                             {"logs", "1", "--follow"},
                                             {"device"}}) {
    SCOPED_TRACE(absl::StrJoin(command, " "));
    command.insert(command.begin(), {MpsctlPath(), "--server", address});
    CommandResult result = RunCommand(command);
    EXPECT_EQ(result.exit_code, 2);
    EXPECT_THAT(result.err, StartsWith("mpsctl: cannot reach mpsd at " + address));
    EXPECT_EQ(Lines(result.err).size(), 1u) << result.err;
  }
}

// A socket left by a daemon killed with SIGKILL: the hint says how to start mpsd where this
// mpsctl looks, also when the address came from MPSD_ADDR (which mpsd does not read).
TEST(MpsctlUnreachableTest, StaleSocketHintNamesTheAddressToListenOn) {
  TempDir dir;
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  daemon.Stop(SIGKILL);
  ASSERT_TRUE(std::filesystem::exists(dir.str() + "/mpsd.sock"));
  const std::string hint = absl::StrCat("(start it with: mpsd --listen ", daemon.address(), ")\n");
  CommandResult flag = RunCommand({MpsctlPath(), "--server", daemon.address(), "status"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_THAT(flag.err, AllOf(StartsWith("mpsctl: cannot reach mpsd at " + daemon.address()),
                              EndsWith(hint)));
  CommandResult env =
      RunCommand({"/usr/bin/env", "MPSD_ADDR=" + daemon.address(), MpsctlPath(), "status"});
  EXPECT_EQ(env.exit_code, 2);
  EXPECT_THAT(env.err, AllOf(StartsWith("mpsctl: cannot reach mpsd at " + daemon.address()),
                             EndsWith(hint)));
  EXPECT_EQ(Lines(env.err).size(), 1u) << env.err;
}

// Bad command lines are usage errors (exit 64) that name the flag, before anything connects.
TEST(MpsctlUsageTest, EmptyServerAddressNamesTheFlag) {
  for (const std::string& address : {std::string(""), std::string(" "), std::string("unix://")}) {
    SCOPED_TRACE("--server '" + address + "'");
    CommandResult result = RunCommand({MpsctlPath(), "--server", address, "status"});
    EXPECT_EQ(result.exit_code, 64);
    EXPECT_THAT(result.err, HasSubstr("--server"));
    EXPECT_THAT(result.err, Not(HasSubstr(".cc:")));  // no gRPC log line
    EXPECT_EQ(result.out, "");
  }
  CommandResult env = RunCommand({"/usr/bin/env", "MPSD_ADDR= ", MpsctlPath(), "status"});
  EXPECT_EQ(env.exit_code, 64);
  EXPECT_EQ(env.err,
            "mpsctl: $MPSD_ADDR: empty address; expected unix:///path/to.sock, HOST:PORT or a "
            "socket path\n");
}

// A mistyped command is named, with the command it most likely meant (CLI11 alone says only
// that a command is required).
TEST(MpsctlUsageTest, AMistypedCommandIsNamedWithTheNearestOne) {
  CommandResult result = RunCommand({MpsctlPath(), "swep", "1"});
  EXPECT_EQ(result.exit_code, 64);
  EXPECT_EQ(result.err,
            "mpsctl: unknown command \"swep\" (did you mean \"sweep\"?); mpsctl --help lists "
            "the commands\n");
  result = RunCommand({MpsctlPath(), "--server", "unix:///nowhere.sock", "lst"});
  EXPECT_EQ(result.exit_code, 64);
  EXPECT_THAT(result.err, HasSubstr("unknown command \"lst\" (did you mean \"list\"?)"));
  result = RunCommand({MpsctlPath(), "frobnicate"});
  EXPECT_EQ(result.exit_code, 64);
  EXPECT_THAT(result.err, StartsWith("mpsctl: unknown command \"frobnicate\"; "));
}

TEST(MpsctlUsageTest, NegativeWaitTimeoutNamesAReadableRange) {
  CommandResult result = RunCommand({MpsctlPath(), "wait", "1", "--timeout", "-1"});
  EXPECT_EQ(result.exit_code, 64);
  EXPECT_THAT(result.err, HasSubstr("--timeout"));
  EXPECT_THAT(result.err, HasSubstr("expected seconds from 0 to 31536000 (a year), got -1"));
  EXPECT_LT(result.err.size(), 200u) << result.err;  // CLI11's own range printed 309 digits
}

// The daemon dies (SIGKILL) while mpsctl follows a job: mpsctl says how to resume, and resuming
// from a restarted daemon misses nothing.
TEST(MpsctlLostDaemonTest, KilledWhileFollowingSaysHowToResume) {
  TempDir dir;
  const std::string socket = dir.str() + "/mpsd.sock";
  Daemon daemon(dir.str() + "/state", socket);
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  const std::string job_file = dir.str() + "/long.yaml";
  WriteFile(job_file, LongJobYaml());
  CommandResult submitted =
      RunCommand({MpsctlPath(), "--server", daemon.address(), "submit", job_file});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id(absl::StripSuffix(submitted.out, "\n"));

  // With reconnecting turned off (remote_e2e_test covers mpsctl reconnecting by itself).
  BackgroundCommand follow({MpsctlPath(), "--server", daemon.address(), "--reconnect-timeout", "0",
                            "--json", "logs", id, "--follow"});
  // Kill it once mpsctl has printed some step events.
  ASSERT_TRUE(PollUntil([&] { return absl::StrContains(follow.out(), R"("step":)"); }));
  daemon.Stop(SIGKILL);
  CommandResult lost = follow.Wait();
  EXPECT_EQ(lost.exit_code, 2);
  const std::vector<JobEvent> seen = ParseEventLines(lost.out);
  ASSERT_FALSE(seen.empty());
  const int64_t last_seen = seen.back().seq();
  EXPECT_THAT(lost.err,
              StartsWith(absl::StrCat("mpsctl: mpsd at ", daemon.address(), " is unavailable: ")));
  EXPECT_THAT(lost.err, EndsWith(absl::StrCat("mpsctl: job ", id,
                                              " may still be running; resume with: mpsctl logs ",
                                              id, " --follow --after ", last_seen, "\n")));

  // Resuming as told, from the restarted daemon (which marks the job INTERRUPTED: it was
  // running when mpsd died), continues at the next seq and ends with the job.
  std::filesystem::remove(socket);  // left behind by the killed daemon
  ASSERT_NO_FATAL_FAILURE(daemon.Start());
  CommandResult resumed = RunCommand({MpsctlPath(), "--server", daemon.address(), "--json", "logs",
                                      id, "--follow", "--after", absl::StrCat(last_seen)});
  EXPECT_EQ(resumed.exit_code, 1);  // followed to an end other than SUCCEEDED
  EXPECT_EQ(resumed.err, "");
  const std::vector<JobEvent> rest = ParseEventLines(resumed.out);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.front().seq(), last_seen + 1);
  ASSERT_TRUE(rest.back().has_state());
  EXPECT_EQ(rest.back().state().state(), Job::INTERRUPTED);
  EXPECT_EQ(rest.back().seq(), GetJob(daemon, id).last_seq());
}

// The daemon vanishes while mpsctl follows with reconnecting on: once --reconnect-timeout
// passed, mpsctl says the daemon went away and exits 2 ("cannot reach mpsd"), as every other
// command does for a missing daemon, with how to resume.
TEST(MpsctlLostDaemonTest, FollowThatGivesUpReconnectingSaysTheDaemonWentAway) {
  TempDir dir;
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  const std::string config = dir.str() + "/mpsd.yaml";
  WriteFile(config, "heartbeat_interval_s: 1\n");  // mpsctl's silence limit: 2 × 1 s + 5 s
  ASSERT_NO_FATAL_FAILURE(daemon.Start({"--config", config}));
  const std::string job_file = dir.str() + "/long.yaml";
  WriteFile(job_file, LongJobYaml());
  CommandResult submitted =
      RunCommand({MpsctlPath(), "--server", daemon.address(), "submit", job_file});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id(absl::StripSuffix(submitted.out, "\n"));

  BackgroundCommand follow({MpsctlPath(), "--server", daemon.address(), "--reconnect-timeout", "2",
                            "--json", "logs", id, "--follow"});
  ASSERT_TRUE(PollUntil([&] { return absl::StrContains(follow.out(), R"("step":)"); }));
  daemon.Stop(SIGKILL);
  CommandResult lost = follow.Wait();
  EXPECT_EQ(lost.exit_code, 2) << lost.err;
  const std::vector<JobEvent> seen = ParseEventLines(lost.out);
  ASSERT_FALSE(seen.empty());
  EXPECT_THAT(lost.err, HasSubstr(absl::StrCat("mpsctl: mpsd at ", daemon.address(),
                                               " went away while following job ", id,
                                               " and did not come back within 2s "
                                               "(--reconnect-timeout)\n")));
  EXPECT_THAT(lost.err, EndsWith(absl::StrCat("mpsctl: job ", id,
                                              " may still be running; resume with: mpsctl logs ",
                                              id, " --follow --after ", seen.back().seq(), "\n")));
}

// Bounded disk use: `mpsctl rm` frees a finished job's artifacts (its record and logs stay) and
// refuses a running job's; `mpsctl gc` applies the config's artifacts_retention policy, which
// the daemon also applies after every job; status reports the bytes.
TEST(MpsctlRetentionTest, RmAndThePolicyFreeFinishedJobsArtifactsOnly) {
  TempDir dir;
  Daemon daemon(dir.str() + "/state", dir.str() + "/mpsd.sock");
  const std::string config = dir.str() + "/mpsd.yaml";
  WriteFile(config, "artifacts_retention: {keep_last_jobs: 2}\n");
  ASSERT_NO_FATAL_FAILURE(daemon.Start({"--config", config}));
  auto mpsctl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {MpsctlPath(), "--server", daemon.address()});
    return RunCommand(args);
  };
  auto submit = [&](const std::string& name, const std::string& yaml) {
    const std::string path = dir.str() + "/" + name;
    WriteFile(path, yaml);
    CommandResult submitted = mpsctl({"submit", path});
    EXPECT_EQ(submitted.exit_code, 0) << submitted.err;
    return std::string(absl::StripSuffix(submitted.out, "\n"));
  };
  auto model_exists = [&](const std::string& id) {
    return std::filesystem::exists(dir.str() + "/state/artifacts/" + id + "/model.pt");
  };
  const std::string first = submit("a.yaml", TinyJobYaml());
  ASSERT_EQ(rpc_ok::WaitForEnd(daemon, first).state(), Job::SUCCEEDED);
  ASSERT_TRUE(model_exists(first));

  // A running job's artifacts stay, whoever asks.
  const std::string running = submit("long.yaml", LongJobYaml());
  ASSERT_TRUE(PollUntil([&] { return GetJob(daemon, running).state() == Job::RUNNING; }));
  CommandResult refused = mpsctl({"rm", running});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.err, absl::StrCat("mpsctl: job ", running, "'s artifacts must stay: job ",
                                      running, " is RUNNING\n"));
  ASSERT_EQ(mpsctl({"cancel", "--wait", running}).exit_code, 0);

  // rm: a dry run first, then the files go; the job and its record stay.
  CommandResult dry = mpsctl({"rm", "--dry-run", first});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  // model.pt and what travels with it (model.json, model.state_dict.pt, model.check.pt).
  EXPECT_THAT(dry.out, StartsWith(absl::StrCat("job ", first, ": would delete 4 files, ")));
  EXPECT_TRUE(model_exists(first));
  CommandResult rm = mpsctl({"rm", first});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_THAT(rm.out, StartsWith(absl::StrCat("job ", first, ": deleted 4 files, ")));
  EXPECT_THAT(rm.out, HasSubstr("\nfreed "));
  EXPECT_FALSE(model_exists(first));
  EXPECT_EQ(GetJob(daemon, first).state(), Job::SUCCEEDED);
  EXPECT_EQ(mpsctl({"artifacts", first}).out, "no artifacts\n");
  EXPECT_THAT(mpsctl({"status"}).out, HasSubstr(" deleted since start\n"));

  // The policy keeps the 2 most recent jobs with artifacts: after three more jobs the oldest of
  // them has none left, without anyone asking.
  std::vector<std::string> later;
  for (const char* name : {"b.yaml", "c.yaml", "d.yaml"}) {
    later.push_back(submit(name, TinyJobYaml()));
    ASSERT_EQ(rpc_ok::WaitForEnd(daemon, later.back()).state(), Job::SUCCEEDED);
  }
  EXPECT_TRUE(PollUntil([&] { return !model_exists(later[0]); }));
  EXPECT_TRUE(model_exists(later[1]));
  EXPECT_TRUE(model_exists(later[2]));
  CommandResult gc = mpsctl({"gc", "--dry-run"});
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_THAT(gc.out, StartsWith("nothing to delete\nwould free 0.0 MiB; "));
  CommandResult bad = mpsctl({"rm", "abc"});
  EXPECT_NE(bad.exit_code, 0);
}

// Without a policy, gc says how to set one.
TEST_F(MpsctlE2eTest, GcWithoutAPolicySaysSo) {
  CommandResult gc = Mpsctl({"gc"});
  EXPECT_EQ(gc.exit_code, 1);
  EXPECT_THAT(gc.err, HasSubstr("no artifacts_retention policy"));
}

}  // namespace
}  // namespace mpsd::testing
