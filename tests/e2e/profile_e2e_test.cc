// End-to-end tests of TrainJob.profile against a real mpsd and mpsctl: the profiled steps land
// in the job's artifacts as a Chrome-trace JSON file that the summary names and `mpsctl
// download` fetches, holding one "ProfilerStep#N" range per profiled step and the operators
// that ran inside them; bad profile fields are refused at submit naming the field.
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using google::protobuf::Value;
using mpsd::v1::Job;

// An event of a Chrome trace ("ph": "X" complete events carry ts and dur, microseconds).
struct TraceEvent {
  std::string name;
  double ts = 0;
  double dur = 0;
};

// The trace's events: the legacy profiler writes a JSON array of them, Kineto an object whose
// "traceEvents" holds them.
std::vector<TraceEvent> ParseTrace(const std::string& text) {
  Value root;
  const auto parsed = google::protobuf::util::JsonStringToMessage(text, &root);
  EXPECT_TRUE(parsed.ok()) << parsed.ToString();
  const google::protobuf::ListValue* list = nullptr;
  if (root.has_list_value()) list = &root.list_value();
  if (root.has_struct_value()) {
    const auto& fields = root.struct_value().fields();
    if (auto it = fields.find("traceEvents"); it != fields.end()) list = &it->second.list_value();
  }
  std::vector<TraceEvent> events;
  if (list == nullptr) {
    ADD_FAILURE() << "neither an array nor {\"traceEvents\": [...]}";
    return events;
  }
  for (const Value& value : list->values()) {
    const auto& fields = value.struct_value().fields();
    TraceEvent event;
    if (auto it = fields.find("name"); it != fields.end()) event.name = it->second.string_value();
    if (auto it = fields.find("ts"); it != fields.end()) event.ts = it->second.number_value();
    if (auto it = fields.find("dur"); it != fields.end()) event.dur = it->second.number_value();
    events.push_back(event);
  }
  return events;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ProfileE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start());
  }
  void TearDown() override {
    const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  CommandResult Mpsctl(std::vector<std::string> args) {
    args.insert(args.begin(), {MpsctlPath(), "--server", daemon_->address()});
    return RunCommandWithin(args, absl::Seconds(300));
  }

  // 256 examples in batches of 64: 4 steps an epoch, 2 epochs, on the CPU.
  std::string JobYaml(const std::string& profile) {
    return absl::StrCat(
        "kind: TrainJob\n"
        "model: {name: convnet}\n"
        "dataset: {name: fashion-mnist, root: /usr/share/datasets/fashion-mnist, "
        "limit_train: 256, limit_test: 64}\n"
        "batch_size: 64\n"
        "epochs: 2\n"
        "optimizer: {name: adam, learning_rate: 0.001}\n"
        "seed: 1\n"
        "device: cpu\n",
        profile, "\n");
  }

  std::string JobFile(const std::string& profile) {
    const std::string path = dir_.str() + "/job.yaml";
    WriteFile(path, JobYaml(profile));
    return path;
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(ProfileE2eTest, ProfiledStepsAreAChromeTraceArtifactThatMpsctlDownloads) {
  // Steps 3 to 5: the last of epoch 1 and the first two of epoch 2.
  const CommandResult submitted = Mpsctl({"submit", JobFile("profile: {start_step: 3, steps: 3}")});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id(absl::StripSuffix(submitted.out, "\n"));
  absl::StatusOr<Job> job = rpc::WaitForEnd(*daemon_, id);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), Job::SUCCEEDED) << job->message();
  const mpsd::v1::JobSummary& summary = job->summary();
  EXPECT_EQ(summary.profile_path(),
            absl::StrCat(dir_.str(), "/state/artifacts/", id, "/profile.json"));
  EXPECT_EQ(summary.profile_first_step(), 3);
  EXPECT_EQ(summary.profile_last_step(), 5);

  const CommandResult listed = Mpsctl({"artifacts", id});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_TRUE(absl::StrContains(listed.out, "profile.json")) << listed.out;
  const std::string downloaded = dir_.str() + "/trace.json";
  const CommandResult fetched = Mpsctl({"download", id, "profile.json", "-o", downloaded});
  ASSERT_EQ(fetched.exit_code, 0) << fetched.err;
  const std::string text = ReadAll(downloaded);
  EXPECT_EQ(text, ReadAll(summary.profile_path()));

  const std::vector<TraceEvent> events = ParseTrace(text);
  std::map<std::string, TraceEvent> steps;
  for (const TraceEvent& event : events) {
    if (absl::StartsWith(event.name, "ProfilerStep#")) steps[event.name] = event;
  }
  ASSERT_EQ(steps.size(), 3u) << "ProfilerStep ranges in " << events.size() << " events";
  for (const std::string& name : {"ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"}) {
    ASSERT_TRUE(steps.count(name)) << name;
    const TraceEvent& step = steps[name];
    EXPECT_GT(step.dur, 0) << name;
    // The step's operators ran inside its range: the convolutions of forward and backward.
    int convolutions = 0;
    for (const TraceEvent& event : events) {
      if (absl::StrContains(event.name, "convolution") && event.ts >= step.ts &&
          event.ts + event.dur <= step.ts + step.dur) {
        ++convolutions;
      }
    }
    EXPECT_GE(convolutions, 2) << name;
  }

  // mpsctl's summary of the finished job names the trace.
  const CommandResult shown = Mpsctl({"get", id});
  EXPECT_TRUE(absl::StrContains(shown.out, "profile: " + summary.profile_path() + " (steps 3-5"))
      << shown.out;
}

TEST_F(ProfileE2eTest, BadProfileFieldsAreRefusedAtSubmitNamingTheField) {
  struct Case {
    std::string profile;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"profile: {start_step: 9, steps: 1}",
       "train_job.profile.start_step: must be in [1, 8] (the job's 2 epoch(s) × 4 step(s)), got 9"},
      {"profile: {start_step: 0}", "train_job.profile.start_step: must be in [1, 8]"},
      {"profile: {steps: 0}", "train_job.profile.steps: must be in [1, 100], got 0"},
      {"profile: {steps: 101}", "train_job.profile.steps: must be in [1, 100], got 101"},
  };
  for (const Case& c : cases) {
    const CommandResult submitted = Mpsctl({"submit", JobFile(c.profile)});
    EXPECT_NE(submitted.exit_code, 0) << c.profile;
    EXPECT_TRUE(absl::StrContains(submitted.err, c.error)) << c.profile << ": " << submitted.err;
  }
  absl::StatusOr<mpsd::v1::ListJobsResponse> jobs = rpc::List(*daemon_, {});
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->jobs_size(), 0);
}

}  // namespace
}  // namespace mpsd::testing
