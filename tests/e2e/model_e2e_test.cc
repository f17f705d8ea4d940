// A model that leaves mpsd ready to use, and fine-tuning from pretrained weights (issue 28),
// through a real mpsd and mpsctl on a generated image folder: the finished resnet18 loaded with
// torchvision's constructor and torch.load gives the executor's own logits; a TorchScript job's
// model.pt is in eval mode; a job that starts from a torchvision state dict with the backbone
// frozen leaves the backbone bitwise unchanged and moves the head; bad weights and prefixes are
// refused at submit naming the field. Python: Debian's python3-torch and python3-torchvision
// (tests/e2e/trained_model.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using ::mpsd::v1::Job;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

constexpr char kPython[] = MPSD_TORCHVISION_PYTHON;

bool LogSays(const std::vector<mpsd::v1::JobEvent>& events, const std::string& text) {
  for (const mpsd::v1::JobEvent& event : events) {
    if (event.has_log() && absl::StrContains(event.log().text(), text)) return true;
  }
  return false;
}

std::vector<std::string> Strings(const google::protobuf::Value& list) {
  std::vector<std::string> values;
  for (const google::protobuf::Value& v : list.list_value().values()) {
    values.push_back(v.string_value());
  }
  return values;
}

class ModelE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch and torchvision";
    ASSERT_EQ(Python({SourcePath("examples/make_own_data.py"), dir_.str() + "/colours",
                      "--train-per-class", "8", "--val-per-class", "4"})
                  .exit_code,
              0);
    daemon_ = std::make_unique<Daemon>(dir_.str() + "/state", dir_.str() + "/mpsd.sock");
    ASSERT_NO_FATAL_FAILURE(daemon_->Start());
  }
  void TearDown() override {
    if (daemon_ == nullptr) return;
    const int status = daemon_->Stop(SIGTERM, absl::Seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  CommandResult Python(std::vector<std::string> args) {
    args.insert(args.begin(), kPython);
    return RunCommandWithin(args, absl::Seconds(300));
  }
  CommandResult Helper(std::vector<std::string> args) {
    args.insert(args.begin(), SourcePath("tests/e2e/trained_model.py"));
    return Python(std::move(args));
  }
  // The helper's one JSON line.
  google::protobuf::Struct HelperJson(std::vector<std::string> args) {
    const CommandResult result = Helper(std::move(args));
    EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
    google::protobuf::Struct json;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(result.out, &json).ok()) << result.out;
    return json;
  }

  CommandResult Mpsctl(std::vector<std::string> args) {
    args.insert(args.begin(), {MpsctlPath(), "--server", daemon_->address()});
    return RunCommandWithin(args, absl::Seconds(300));
  }

  // A job file on the colours folder at 32×32; `model` and `extra` are YAML lines.
  std::string JobFile(const std::string& model, const std::string& extra = "") {
    const std::string path = dir_.str() + "/job.yaml";
    WriteFile(path, absl::StrCat("kind: TrainJob\n", model,
                                 "\n"
                                 "dataset:\n"
                                 "  name: image_folder\n"
                                 "  root: colours\n"
                                 "  image_folder: {image_size: [32, 32]}\n"
                                 "batch_size: 8\n"
                                 "epochs: 2\n"
                                 "optimizer: {name: sgd, learning_rate: 0.05, momentum: 0.9}\n"
                                 "seed: 1\n"
                                 "device: cpu\n",
                                 extra));
    return path;
  }

  // Submits `job_file`, follows it to its end; the finished job and its events.
  Job Run(const std::string& job_file, std::vector<mpsd::v1::JobEvent>& events) {
    const CommandResult followed = Mpsctl({"--json", "submit", job_file, "--follow"});
    EXPECT_EQ(followed.exit_code, 0) << followed.out << followed.err;
    events = ParseEventLines(followed.out);
    if (events.empty()) return Job();
    absl::StatusOr<Job> job = rpc::Get(*daemon_, events[0].job_id());
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : Job();
  }

  // What submitting `job_file` printed on stderr; the submit must fail.
  std::string Refused(const std::string& job_file) {
    const CommandResult submitted = Mpsctl({"submit", job_file});
    EXPECT_NE(submitted.exit_code, 0) << submitted.out;
    return submitted.err;
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(ModelE2eTest, AFinishedResnet18LoadsWithTorchvisionAndGivesTheExecutorsLogits) {
  std::vector<mpsd::v1::JobEvent> events;
  const Job job = Run(JobFile("model: {name: resnet18}"), events);
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.message();
  const mpsd::v1::JobSummary& summary = job.summary();
  const std::string job_dir = std::filesystem::path(summary.model_path()).parent_path().string();
  EXPECT_EQ(summary.model_json_path(), job_dir + "/model.json");
  EXPECT_EQ(summary.model_state_dict_path(), job_dir + "/model.state_dict.pt");
  EXPECT_EQ(summary.model_check_path(), job_dir + "/model.check.pt");
  EXPECT_TRUE(LogSays(events, "with model.json, model.state_dict.pt and model.check.pt in "));

  const google::protobuf::Struct loaded = HelperJson({"load", job_dir});
  const auto& f = loaded.fields();
  ASSERT_TRUE(f.contains("max_abs_diff")) << loaded.DebugString();
  EXPECT_LE(f.at("max_abs_diff").number_value(), 1e-5);
  EXPECT_EQ(f.at("examples").number_value(), 16);
  EXPECT_EQ(f.at("python").string_value(), "torchvision.models.resnet18(num_classes=3)");
  EXPECT_THAT(Strings(f.at("class_names")), ::testing::ElementsAre("blue", "green", "red"));
  EXPECT_THAT(f.at("mean").list_value().values(), SizeIs(3));  // computed from the images
  EXPECT_THAT(f.at("std").list_value().values(), SizeIs(3));
  EXPECT_EQ(f.at("task").string_value(), "classification");
  EXPECT_EQ(f.at("format").number_value(), 1);
}

TEST_F(ModelE2eTest, ATorchScriptJobsModelIsSavedInEvalModeAndGivesTheExecutorsLogits) {
  const std::string script = dir_.str() + "/tinynet.pt";
  ASSERT_EQ(Helper({"write-tinynet", script, "3"}).exit_code, 0);
  std::vector<mpsd::v1::JobEvent> events;
  const Job job = Run(JobFile("model: {torchscript: tinynet.pt}"), events);
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.message();
  EXPECT_EQ(job.summary().model_state_dict_path(), "");  // the module is the model
  const std::string job_dir =
      std::filesystem::path(job.summary().model_path()).parent_path().string();
  const google::protobuf::Struct loaded = HelperJson({"load", job_dir});
  const auto& f = loaded.fields();
  ASSERT_TRUE(f.contains("training_mode")) << loaded.DebugString();
  EXPECT_FALSE(f.at("training_mode").bool_value());
  // Dropout 0.5 and BatchNorm: training mode's outputs would differ by far more.
  EXPECT_LE(f.at("max_abs_diff").number_value(), 1e-5);
  EXPECT_THAT(f.at("sha256").string_value(), SizeIs(64));
}

TEST_F(ModelE2eTest, FineTuningFromTorchvisionWeightsLeavesTheFrozenBackboneBitwiseUnchanged) {
  const std::string pretrained = dir_.str() + "/r18.pt";
  ASSERT_EQ(Helper({"write-resnet18", pretrained, "3"}).exit_code, 0);
  std::vector<mpsd::v1::JobEvent> events;
  const Job job =
      Run(JobFile("model: {name: resnet18, weights: r18.pt}", "trainable: [fc.]\n"), events);
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.message();
  EXPECT_TRUE(LogSays(events, "weights: 122 tensors loaded from " + pretrained));
  EXPECT_TRUE(LogSays(events,
                      "frozen: 11176512 of 11178051 parameters (all but trainable fc.); "
                      "20 BatchNorm layer(s) of frozen blocks kept in eval mode"));
  const std::string job_dir =
      std::filesystem::path(job.summary().model_path()).parent_path().string();
  const google::protobuf::Struct compared = HelperJson({"compare", job_dir, pretrained});
  const auto& f = compared.fields();
  ASSERT_TRUE(f.contains("moved")) << compared.DebugString();
  // Every convolution, BatchNorm weight and running statistic (BatchNorm in eval mode) as
  // loaded; only the head trained.
  EXPECT_THAT(Strings(f.at("moved")), UnorderedElementsAre("fc.weight", "fc.bias"));
  EXPECT_THAT(f.at("equal").list_value().values(), SizeIs(120));
}

TEST_F(ModelE2eTest, BadWeightsAndPrefixesAreRefusedAtSubmitNamingTheField) {
  const std::string grey = dir_.str() + "/r18-grey.pt";
  ASSERT_EQ(Helper({"write-resnet18", grey, "3", "1"}).exit_code, 0);
  EXPECT_THAT(Refused(JobFile("model: {name: resnet18, weights: r18-grey.pt}")),
              HasSubstr("train_job.model.weights: " + grey +
                        ": conv1.weight: the file has [64, 1, 7, 7], the model [64, 3, 7, 7]"));
  const std::string evil = dir_.str() + "/evil.pt";
  ASSERT_EQ(Helper({"write-evil", evil}).exit_code, 0);
  EXPECT_THAT(Refused(JobFile("model: {name: resnet18, weights: evil.pt}")),
              HasSubstr("train_job.model.weights: " + evil +
                        ": refused: the pickle names the Python object __builtin__.print"));
  EXPECT_THAT(Refused(JobFile("model: {name: resnet18}", "freeze: [layer1., layer9.]\n")),
              HasSubstr("train_job.freeze[1]: \"layer9.\" matches no parameter of the model "
                        "(its top-level names: conv1, bn1, layer1, layer2, layer3, layer4, fc)"));
  EXPECT_THAT(Refused(JobFile("model: {name: resnet18}", "freeze: [fc.]\ntrainable: [fc.]\n")),
              HasSubstr("train_job.trainable: set either freeze or trainable, not both"));
  EXPECT_THAT(Refused(JobFile("model: {name: resnet18}",
                              "trainable: [fc.]\nparam_groups: [{prefix: layer4., "
                              "learning_rate: 0.001}]\n")),
              HasSubstr("train_job.param_groups[0].prefix: \"layer4.\" matches no trainable "
                        "parameter"));
  absl::StatusOr<mpsd::v1::ListJobsResponse> jobs = rpc::List(*daemon_, {});
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->jobs_size(), 0);
}

// Issue 26: a state dict rewritten with Python's zipfile so that a storage record is shorter than
// its pickle claims crashed the executor at the submit-time check (SIGSEGV, restarted into the
// same crash for minutes), or passed it and trained on garbage. Each is refused at submit naming
// the file, the tensor and both sizes, and nothing is built from it; the daemon stays up.
TEST_F(ModelE2eTest, WeightsThatLieAboutTheirTensorsAreRefusedAtSubmitNamingTheTensor) {
  const std::string pretrained = dir_.str() + "/r18.pt";
  ASSERT_EQ(Helper({"write-resnet18", pretrained, "3"}).exit_code, 0);
  const absl::StatusOr<mpsd::v1::DeviceInfo> before = rpc::Device(*daemon_);
  ASSERT_TRUE(before.ok()) << before.status();
  struct Lie {
    std::string mode;
    std::string expected;
  };
  const std::vector<Lie> lies = {
      {"biggest",
       "tensor \"layer4.0.conv2.weight\": its storage data/96 holds 8 bytes, but the "
       "pickle says 2359296 elements of 4 bytes (9437184 bytes)"},
      {"cut0",
       "tensor \"conv1.weight\": its storage data/0 holds 100 bytes, but the pickle says "
       "9408 elements of 4 bytes (37632 bytes)"},
      {"short-storage",
       "tensor \"fc.bias\": offset 0, size [3], stride [1] reaches past the "
       "end of its storage data/121 of 1 elements"},
  };
  for (const Lie& lie : lies) {
    SCOPED_TRACE(lie.mode);
    const std::string file = absl::StrCat(dir_.str(), "/lie-", lie.mode, ".pt");
    ASSERT_EQ(Helper({"lie", pretrained, file, lie.mode}).exit_code, 0);
    const std::string refused =
        Refused(JobFile(absl::StrCat("model: {name: resnet18, weights: lie-", lie.mode, ".pt}")));
    EXPECT_THAT(refused, HasSubstr("train_job.model.weights: " + file + ": "));
    EXPECT_THAT(refused, HasSubstr(lie.expected));
    EXPECT_THAT(refused, HasSubstr("the file is damaged or was altered"));
  }
  // The checks crashed nothing: the warm executor is the one from before.
  const absl::StatusOr<mpsd::v1::DeviceInfo> after = rpc::Device(*daemon_);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->executor_restarts(), before->executor_restarts());
  absl::StatusOr<mpsd::v1::ListJobsResponse> jobs = rpc::List(*daemon_, {});
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->jobs_size(), 0);
}

TEST_F(ModelE2eTest, ABenchJobTimesAFinishedJobsModelAndATorchScriptFile) {
  std::vector<mpsd::v1::JobEvent> events;
  const Job trained = Run(JobFile("model: {name: resnet18}"), events);
  ASSERT_EQ(trained.state(), Job::SUCCEEDED) << trained.message();
  ASSERT_EQ(Helper({"write-tinynet", dir_.str() + "/tinynet.pt", "3"}).exit_code, 0);
  const std::string bench = dir_.str() + "/bench.yaml";
  WriteFile(bench, absl::StrCat("kind: BenchJob\nmodels: [\"", trained.id(),
                                "\", tinynet.pt]\nbatch_sizes: [4]\ndevices: [cpu]\n"
                                "input_shape: [3, 32, 32]\niters: 2\nwarmup_iters: 1\n"));
  const Job measured = Run(bench, events);
  ASSERT_EQ(measured.state(), Job::SUCCEEDED) << measured.message();
  ASSERT_EQ(measured.summary().bench_rows_size(), 2);
  const mpsd::v1::BenchRow& job_row = measured.summary().bench_rows(0);
  EXPECT_EQ(job_row.model(), absl::StrCat("job ", trained.id(), " (resnet18)"));
  EXPECT_EQ(job_row.status(), mpsd::v1::BenchRow::OK) << job_row.message();
  EXPECT_EQ(job_row.parameters(), 11178051);  // resnet18 with the job's 3 classes
  const mpsd::v1::BenchRow& script_row = measured.summary().bench_rows(1);
  EXPECT_EQ(script_row.model(), "tinynet.pt");
  EXPECT_EQ(script_row.status(), mpsd::v1::BenchRow::OK) << script_row.message();
  EXPECT_GT(script_row.median_ms(), 0);

  WriteFile(bench, "kind: BenchJob\nmodels: [tinynet.pt]\nbatch_sizes: [4]\ndevices: [cpu]\n");
  EXPECT_THAT(Refused(bench), HasSubstr("bench_job.models[0]: " + dir_.str() +
                                        "/tinynet.pt: a TorchScript model needs "
                                        "bench_job.input_shape"));
  WriteFile(bench, "kind: BenchJob\nmodels: [resnet18, \"4242\"]\nbatch_sizes: [4]\n");
  EXPECT_THAT(Refused(bench), HasSubstr("bench_job.models[1]: job 4242 has no model.json"));
}

}  // namespace
}  // namespace mpsd::testing
