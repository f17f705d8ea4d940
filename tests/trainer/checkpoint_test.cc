// Tests for trainer/checkpoint.cc and trainer/models/torchscript.cc through the real Executor:
// checkpoints written by real jobs, a resumed job against an uninterrupted one, bad checkpoint
// files the tests write themselves, TorchScript models built here in C++, the finished model.
// CPU only, on small slices of the real Fashion-MNIST files.
#include <caffe2/serialize/inline_container.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/common/temp_dir.h"
#include "trainer/checkpoint.h"
#include "trainer/models.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;
using ::mpsd::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

std::string MessageOf(const absl::Status& status) { return std::string(status.message()); }

std::unique_ptr<Executor> MakeExecutor(const std::string& artifacts_dir) {
  Executor::Options options;
  options.steps_per_readback = 4;
  options.artifacts_dir = artifacts_dir;
  absl::StatusOr<std::unique_ptr<Executor>> executor = CreateTorchExecutor(options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return *std::move(executor);
}

// convnet (with dropout, so a resume must restore the RNG) on 128 examples: 2 steps an epoch.
mpsd::v1::SubmitJobRequest ConvnetJob(int epochs) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("convnet");
  job.mutable_dataset()->set_name("fashion-mnist");
  job.mutable_dataset()->set_root(kFashionMnist);
  job.mutable_dataset()->set_limit_train(128);
  job.mutable_dataset()->set_limit_test(64);
  job.set_batch_size(64);
  job.set_epochs(epochs);
  job.mutable_optimizer()->set_name("adam");
  job.mutable_optimizer()->set_learning_rate(1e-3);
  job.set_seed(7);
  job.set_device("cpu");
  return request;
}

struct RunResult {
  absl::Status status;
  std::vector<mpsd::v1::JobEvent> events;

  std::vector<float> losses() const {
    std::vector<float> losses;
    for (const auto& e : events) {
      if (e.has_step()) losses.push_back(e.step().loss());
    }
    return losses;
  }
  std::vector<int64_t> step_numbers() const {
    std::vector<int64_t> steps;
    for (const auto& e : events) {
      if (e.has_step()) steps.push_back(e.step().step());
    }
    return steps;
  }
  std::vector<mpsd::v1::CheckpointSaved> checkpoints() const {
    std::vector<mpsd::v1::CheckpointSaved> saved;
    for (const auto& e : events) {
      if (e.has_checkpoint()) saved.push_back(e.checkpoint());
    }
    return saved;
  }
  mpsd::v1::JobSummary summary() const {
    return events.empty() ? mpsd::v1::JobSummary() : events.back().summary();
  }
};

RunResult RunJob(Executor& executor, const std::string& job_id,
                 const mpsd::v1::SubmitJobRequest& request,
                 const std::string& resume_checkpoint = "") {
  RunResult result;
  CancelFlag cancelled;
  JobContext context{job_id, resume_checkpoint};
  result.status = executor.Run(
      context, request, [&](mpsd::v1::JobEvent e) { result.events.push_back(std::move(e)); },
      cancelled);
  return result;
}

// A zoo model as the finished-model archive of a job holds it (docs/job-files.md: how to load it).
std::shared_ptr<ClassifierImpl> LoadFinishedConvnet(const std::string& path) {
  ModelConfig config;
  config.input_shape = {1, 28, 28};
  config.num_classes = 10;
  std::shared_ptr<ClassifierImpl> model = FindModel("convnet")->make(config);
  torch::load(model, path);
  return model;
}

double MaxAbsDifference(const torch::nn::Module& a, const torch::nn::Module& b) {
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  double worst = 0;
  for (const auto& item : pa) {
    worst = std::max(worst, (item.value() - pb[item.key()]).abs().max().item<double>());
  }
  return worst;
}

TEST(CheckpointTest, ResumedAfterEpochOneOfThreeEndsWithTheSameWeights) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  mpsd::v1::SubmitJobRequest whole = ConvnetJob(3);
  const RunResult uninterrupted = RunJob(*executor, "1", whole);
  ASSERT_TRUE(uninterrupted.status.ok()) << uninterrupted.status;

  mpsd::v1::SubmitJobRequest first = ConvnetJob(1);
  first.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  const RunResult one_epoch = RunJob(*executor, "2", first);
  ASSERT_TRUE(one_epoch.status.ok()) << one_epoch.status;

  mpsd::v1::SubmitJobRequest rest = ConvnetJob(3);
  rest.mutable_train_job()->set_resume_from("2");  // a job id: its newest checkpoint
  ASSERT_TRUE(executor->Validate(rest).ok()) << executor->Validate(rest);
  const RunResult resumed = RunJob(*executor, "3", rest);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status;

  EXPECT_EQ(resumed.summary().resumed_at_step(), 2);
  EXPECT_THAT(resumed.step_numbers(), ElementsAre(3, 4, 5, 6));
  const std::vector<float> all = uninterrupted.losses();
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(resumed.losses(), std::vector<float>(all.begin() + 2, all.end()));
  EXPECT_EQ(resumed.summary().model_format(), "libtorch_archive");
  const auto a = LoadFinishedConvnet(uninterrupted.summary().model_path());
  const auto b = LoadFinishedConvnet(resumed.summary().model_path());
  EXPECT_LE(MaxAbsDifference(*a, *b), 1e-6);
  // Not trivially equal: the model after one epoch differs from the finished one.
  const auto after_one = LoadFinishedConvnet(one_epoch.summary().model_path());
  EXPECT_GT(MaxAbsDifference(*a, *after_one), 1e-4);
}

TEST(CheckpointTest, EveryEpochWritesOneKeepingTheNewestAndReportsIt) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  mpsd::v1::SubmitJobRequest request = ConvnetJob(3);
  request.mutable_train_job()->mutable_checkpoint()->set_every_epochs(2);
  request.mutable_train_job()->set_epochs(4);
  const RunResult result = RunJob(*executor, "9", request);
  ASSERT_TRUE(result.status.ok()) << result.status;

  const std::vector<mpsd::v1::CheckpointSaved> saved = result.checkpoints();
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].epoch(), 2);
  EXPECT_EQ(saved[0].step(), 4);
  EXPECT_EQ(saved[1].epoch(), 4);
  EXPECT_EQ(saved[1].step(), 8);
  EXPECT_EQ(saved[1].path(), dir / "9/checkpoint-epoch-4.pt");
  EXPECT_GT(saved[1].size_bytes(), 0);
  EXPECT_FALSE(fs::exists(dir / "9/checkpoint-epoch-2.pt"));
  EXPECT_TRUE(fs::equivalent(dir / "9/checkpoint-epoch-4.pt", dir / "9/checkpoint-latest.pt"));
  EXPECT_EQ(result.summary().checkpoint_path(), saved[1].path());
  EXPECT_EQ(result.summary().model_path(), dir / "9/model.pt");

  absl::StatusOr<CheckpointInfo> info = ReadCheckpointInfo(saved[1].path());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->model, "convnet");
  EXPECT_EQ(info->optimizer, "adam");
  EXPECT_EQ(info->dataset, "fashion-mnist");
  EXPECT_EQ(info->train_examples, 128);
  EXPECT_EQ(info->epoch, 4);
  EXPECT_EQ(info->step, 8);
  EXPECT_EQ(info->job_id, "9");
}

// ---- Bad checkpoints, rejected at Validate --------------------------------------------------

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A real checkpoint of a one-epoch convnet job, written by the executor into `dir`.
std::string WriteRealCheckpoint(Executor& executor, const TempDir& dir) {
  mpsd::v1::SubmitJobRequest request = ConvnetJob(1);
  request.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  const RunResult result = RunJob(executor, "5", request);
  EXPECT_TRUE(result.status.ok()) << result.status;
  return dir / "5/checkpoint-latest.pt";
}

absl::Status ValidateResume(Executor& executor, const std::string& path, int epochs = 3) {
  mpsd::v1::SubmitJobRequest request = ConvnetJob(epochs);
  request.mutable_train_job()->set_resume_from(path);
  return executor.Validate(request);
}

TEST(CheckpointValidateTest, RejectsBadFilesNamingTheFieldAndTheFile) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  const std::string real = WriteRealCheckpoint(*executor, dir);
  std::string bytes;
  {
    std::ifstream in(real, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_TRUE(ValidateResume(*executor, real).ok()) << ValidateResume(*executor, real);

  struct Case {
    std::string name;
    std::string bytes;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"empty.pt", "", "empty file"},
      {"truncated.pt", bytes.substr(0, bytes.size() / 2), "truncated or corrupt"},
      {"text.pt", "hello, not a checkpoint\n", "not a checkpoint archive"},
      {"legacy.pt", std::string("\x80\x02\x8a\x0a", 4) + "pickled magic number",
       "legacy PyTorch pickle"},
  };
  for (const Case& c : cases) {
    const std::string path = dir / c.name;
    WriteBytes(path, c.bytes);
    const absl::Status status = ValidateResume(*executor, path);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(MessageOf(status), StartsWith("train_job.resume_from: " + path + ": ")) << c.name;
    EXPECT_THAT(MessageOf(status), HasSubstr(c.expected)) << c.name;
  }

  const absl::Status missing = ValidateResume(*executor, dir / "nope.pt");
  EXPECT_THAT(MessageOf(missing), HasSubstr("nope.pt: no such checkpoint file"));
  const absl::Status no_job = ValidateResume(*executor, "4242");
  EXPECT_THAT(MessageOf(no_job), HasSubstr("4242/checkpoint-latest.pt: no such checkpoint file"));
}

TEST(CheckpointValidateTest, RejectsAPythonTorchSaveArchive) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  // What torch.save writes: archive/data.pkl, archive/data/0, archive/version.
  const std::string path = dir / "python.pt";
  {
    caffe2::serialize::PyTorchStreamWriter writer(path);
    const std::string pickle("\x80\x02}q\x00.", 6);
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
  }
  const absl::Status status = ValidateResume(*executor, path);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(status),
              StartsWith("train_job.resume_from: " + path +
                         ": saved by Python torch.save; mpsd resumes only from checkpoints it "
                         "wrote"));
}

// A TorchScript archive (what a job's model.pt is) is named as such, with what to resume from.
TEST(CheckpointValidateTest, RejectsATorchScriptModuleNamingIt) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  const std::string path = dir / "model.pt";
  torch::jit::Module module("Net");
  module.register_parameter("w", torch::zeros({2}), /*is_buffer=*/false);
  module.save(path);
  const absl::Status status = ValidateResume(*executor, path);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(status),
              StartsWith("train_job.resume_from: " + path +
                         ": a TorchScript module (as a job's model.pt is), not a checkpoint: "
                         "resume from the job's id, or its checkpoint-*.pt"));
}

// Item 8 of issue 14: validating a resume reads a bounded part of the file whatever it holds.
// Two archives built from a real checkpoint's records: one whose metadata record is padded to
// 1 MiB with keys ReadCheckpointInfo ignores, one with 20,000 extra records (a 1.5 MB central
// directory). Both would be accepted by reading them whole; both are refused naming the limit.
TEST(CheckpointValidateTest, ReadsTheMetadataWithASizeCap) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  const std::string real = WriteRealCheckpoint(*executor, dir);
  std::string info, state;
  {
    caffe2::serialize::PyTorchStreamReader reader(real);
    auto [info_data, info_size] = reader.getRecord("mpsd_checkpoint.txt");
    info.assign(static_cast<const char*>(info_data.get()), info_size);
    auto [state_data, state_size] = reader.getRecord("state.pt");
    state.assign(static_cast<const char*>(state_data.get()), state_size);
  }
  ASSERT_TRUE(ValidateResume(*executor, real).ok());

  const std::string padded = dir / "padded.pt";
  {
    std::string big = info;
    while (big.size() < (size_t{1} << 20)) big += "padding: " + std::string(100, 'x') + "\n";
    caffe2::serialize::PyTorchStreamWriter writer(padded);
    writer.writeRecord("mpsd_checkpoint.txt", big.data(), big.size());
    writer.writeRecord("state.pt", state.data(), state.size());
    writer.writeEndOfFile();
  }
  const absl::Status padded_status = ValidateResume(*executor, padded);
  EXPECT_EQ(padded_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(padded_status), StartsWith("train_job.resume_from: " + padded +
                                                   ": its record padded/"
                                                   "mpsd_checkpoint.txt is "));
  EXPECT_THAT(MessageOf(padded_status), HasSubstr("more than the 65536 bytes"));

  const std::string wide = dir / "wide.pt";
  {
    caffe2::serialize::PyTorchStreamWriter writer(wide);
    writer.writeRecord("mpsd_checkpoint.txt", info.data(), info.size());
    writer.writeRecord("state.pt", state.data(), state.size());
    for (int i = 0; i < 20'000; ++i) {
      writer.writeRecord(absl::StrCat("padding-record-", i), "x", 1);
    }
    writer.writeEndOfFile();
  }
  const absl::Status wide_status = ValidateResume(*executor, wide);
  EXPECT_EQ(wide_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(wide_status),
              StartsWith("train_job.resume_from: " + wide + ": its zip central directory is "));
  EXPECT_THAT(MessageOf(wide_status), HasSubstr("more than the 1048576 read to check a file"));
}

TEST(CheckpointValidateTest, RejectsACheckpointOfAnotherModelOptimizerBatchSizeOrSeed) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  // Checkpoints written with SaveCheckpoint itself, each differing from ConvnetJob in one way.
  ModelConfig config;
  config.input_shape = {1, 28, 28};
  std::shared_ptr<ClassifierImpl> model = FindModel("mlp")->make(config);
  torch::optim::Adam optimizer(model->parameters());
  const at::Generator shuffle = at::detail::createCPUGenerator(1);
  CheckpointInfo info;
  info.model = "convnet";
  info.parameters = FindModel("convnet")->parameters(config);
  info.optimizer = "adam";
  info.dataset = "fashion-mnist";
  info.batch_size = 64;
  info.epoch = 1;
  info.step = 2;
  const absl::StatusOr<mpsd::v1::CheckpointSaved> fits =
      SaveCheckpoint(dir / "fits", info, *model, optimizer, shuffle, {}, torch::kCPU);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_TRUE(ValidateResume(*executor, fits->path()).ok());

  struct Case {
    std::string dir;
    CheckpointInfo info;
    std::string expected;
  };
  std::vector<Case> cases(6, Case{"", info, ""});
  cases[0].dir = "model";
  cases[0].info.model = "mlp";
  cases[0].expected = "its model is mlp, this job's is convnet";
  cases[1].dir = "optimizer";
  cases[1].info.optimizer = "sgd";
  cases[1].expected = "its optimizer is sgd, this job's is adam";
  cases[2].dir = "batch";
  cases[2].info.batch_size = 32;
  cases[2].expected = "its batch size is 32, this job's is 64";
  cases[3].dir = "parameters";
  cases[3].info.parameters = 12;
  cases[3].expected = "its parameter count is 12";
  cases[4].dir = "epoch";
  cases[4].info.epoch = 5;
  cases[4].expected = "checkpoint is at epoch 5, beyond this job's 3 epoch(s)";
  cases[5].dir = "seed";
  cases[5].info.seed = 8;  // ConvnetJob's is 7
  cases[5].expected =
      "its seed (the data order, validation split and subsets follow it) is 8, this job's is 7";
  for (const Case& c : cases) {
    absl::StatusOr<mpsd::v1::CheckpointSaved> saved =
        SaveCheckpoint(dir / c.dir, c.info, *model, optimizer, shuffle, {}, torch::kCPU);
    ASSERT_TRUE(saved.ok()) << saved.status();
    const absl::Status status = ValidateResume(*executor, saved->path());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.dir;
    EXPECT_THAT(MessageOf(status), StartsWith("train_job.resume_from: " + saved->path()));
    EXPECT_THAT(MessageOf(status), HasSubstr(c.expected)) << status;
  }
}

TEST(CheckpointFileTest, ExtraStateAndRngStatesRoundTrip) {
  TempDir dir("checkpoint_test");
  ModelConfig config;
  config.input_shape = {1, 28, 28};
  torch::manual_seed(3);
  std::shared_ptr<ClassifierImpl> model = FindModel("mlp")->make(config);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  at::Generator shuffle = at::detail::createCPUGenerator(11);
  CheckpointInfo info;
  info.model = "mlp";
  info.epoch = 2;
  info.step = 40;
  const ExtraState extra = {{"grad_scaler_scale", torch::full({}, 1024.0, torch::kFloat64)},
                            {"grad_scaler_growth_tracker", torch::full({}, 17, torch::kInt64)}};
  absl::StatusOr<mpsd::v1::CheckpointSaved> saved =
      SaveCheckpoint(dir / "run", info, *model, optimizer, shuffle, extra, torch::kCPU);
  ASSERT_TRUE(saved.ok()) << saved.status();
  // What the default generator and the shuffle generator draw next, as saved.
  const torch::Tensor next_default = torch::rand({4});
  const torch::Tensor next_shuffle = torch::randperm(8, shuffle);

  torch::manual_seed(99);  // another model, another generator state
  std::shared_ptr<ClassifierImpl> other = FindModel("mlp")->make(config);
  torch::optim::SGD other_optimizer(other->parameters(),
                                    torch::optim::SGDOptions(0.1).momentum(0.9));
  ExtraState restored_extra = {
      {"grad_scaler_scale", {}}, {"grad_scaler_growth_tracker", {}}, {"absent", {}}};
  absl::StatusOr<RestoredCheckpoint> restored =
      LoadCheckpoint(saved->path(), *other, other_optimizer, restored_extra, torch::kCPU);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->info.epoch, 2);
  EXPECT_EQ(restored->info.step, 40);
  EXPECT_EQ(MaxAbsDifference(*model, *other), 0);
  EXPECT_EQ(restored_extra["grad_scaler_scale"].item<double>(), 1024.0);
  EXPECT_EQ(restored_extra["grad_scaler_growth_tracker"].item<int64_t>(), 17);
  EXPECT_FALSE(restored_extra["absent"].defined());
  EXPECT_TRUE(torch::equal(torch::rand({4}), next_default));
  at::Generator other_shuffle = at::detail::createCPUGenerator(0);
  other_shuffle.set_state(restored->shuffle_state);
  EXPECT_TRUE(torch::equal(torch::randperm(8, other_shuffle), next_shuffle));
}

TEST(CheckpointValidateTest, CheckpointsNeedAnArtifactsDirAndKnownRestartPolicy) {
  std::unique_ptr<Executor> executor = MakeExecutor("");
  mpsd::v1::SubmitJobRequest request = ConvnetJob(1);
  request.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  EXPECT_THAT(MessageOf(executor->Validate(request)),
              StartsWith("train_job.checkpoint.every_epochs: "));
  request = ConvnetJob(1);
  request.mutable_train_job()->mutable_checkpoint()->set_every_epochs(-1);
  EXPECT_THAT(MessageOf(executor->Validate(request)),
              StartsWith("train_job.checkpoint.every_epochs: must be >= 0, got -1"));
  request = ConvnetJob(1);
  request.mutable_train_job()->set_restart_policy("always");
  EXPECT_THAT(MessageOf(executor->Validate(request)),
              StartsWith("train_job.restart_policy: unknown policy \"always\""));
  request.mutable_train_job()->set_restart_policy("resume");
  EXPECT_TRUE(executor->Validate(request).ok());
}

// ---- TorchScript models ---------------------------------------------------------------------

// A linear classifier over flattened 28×28 images, as a user would torch.jit.save it;
// `classes` outputs, `inputs` input features (784 fits the dataset).
std::string SaveLinearScript(const std::string& path, int64_t classes = 10, int64_t inputs = 784) {
  torch::jit::Module m("LinearClassifier");
  m.register_parameter("weight", (torch::randn({classes, inputs}) * 0.01).requires_grad_(),
                       /*is_buffer=*/false);
  m.register_parameter("bias", torch::zeros({classes}).requires_grad_(), /*is_buffer=*/false);
  m.define(R"(
    def forward(self, x):
        return torch.addmm(self.bias, torch.flatten(x, 1), self.weight.t())
  )");
  m.save(path);
  return path;
}

mpsd::v1::SubmitJobRequest ScriptJob(const std::string& path) {
  mpsd::v1::SubmitJobRequest request = ConvnetJob(2);
  request.mutable_train_job()->mutable_model()->clear_name();
  request.mutable_train_job()->mutable_model()->set_torchscript(path);
  request.mutable_train_job()->mutable_dataset()->set_limit_train(1024);
  request.mutable_train_job()->mutable_optimizer()->set_learning_rate(1e-2);
  return request;
}

TEST(TorchScriptModelTest, TrainsItsParametersAndSavesTheTrainedModuleAsTorchScript) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  const std::string path = SaveLinearScript(dir / "linear.pt");
  const mpsd::v1::SubmitJobRequest request = ScriptJob(path);
  ASSERT_TRUE(executor->Validate(request).ok()) << executor->Validate(request);
  const RunResult result = RunJob(*executor, "4", request);
  ASSERT_TRUE(result.status.ok()) << result.status;

  const std::vector<float> losses = result.losses();
  ASSERT_EQ(losses.size(), 32u);
  EXPECT_LT(losses.back(), 0.7 * losses.front());
  EXPECT_EQ(result.summary().parameters(), 10 * 784 + 10);
  EXPECT_EQ(result.summary().model_format(), "torchscript");
  torch::jit::Module before = torch::jit::load(path);
  torch::jit::Module after = torch::jit::load(result.summary().model_path());
  const torch::Tensor w0 = before.attr("weight").toTensor();
  const torch::Tensor w1 = after.attr("weight").toTensor();
  EXPECT_GT((w1 - w0).abs().max().item<double>(), 1e-3);
  // The trained module still runs as TorchScript.
  EXPECT_EQ(after.forward({torch::zeros({2, 1, 28, 28})}).toTensor().sizes(),
            torch::IntArrayRef({2, 10}));
}

TEST(TorchScriptModelTest, ResumesFromItsCheckpoint) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  const std::string path = SaveLinearScript(dir / "linear.pt");
  mpsd::v1::SubmitJobRequest request = ScriptJob(path);
  const RunResult whole = RunJob(*executor, "1", request);
  request.mutable_train_job()->set_epochs(1);
  request.mutable_train_job()->mutable_checkpoint()->set_every_epochs(1);
  ASSERT_TRUE(RunJob(*executor, "2", request).status.ok());
  request = ScriptJob(path);
  request.mutable_train_job()->set_resume_from(dir / "2/checkpoint-latest.pt");
  const RunResult resumed = RunJob(*executor, "3", request);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status;
  const std::vector<float> all = whole.losses();
  EXPECT_EQ(resumed.losses(), std::vector<float>(all.begin() + 16, all.end()));
}

TEST(TorchScriptModelTest, RejectsBadModulesAtSubmitNamingTheField) {
  TempDir dir("checkpoint_test");
  std::unique_ptr<Executor> executor = MakeExecutor(dir.path().string());
  WriteBytes(dir / "text.pt", "not torchscript");
  const std::string narrow = SaveLinearScript(dir / "narrow.pt", /*classes=*/5);
  const std::string wrong_inputs = SaveLinearScript(dir / "wide.pt", 10, /*inputs=*/100);
  struct Case {
    std::string path;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {dir / "missing.pt", "no such file"},
      {dir / "text.pt", "not a TorchScript module"},
      {wrong_inputs, "forward failed on one example [1, 1, 28, 28] float32"},
      {narrow, "logits [1, K] with K >= 10 classes for [1, 1, 28, 28] float32, got [1, 5]"},
  };
  for (const Case& c : cases) {
    const absl::Status status = executor->Validate(ScriptJob(c.path));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.path;
    EXPECT_THAT(MessageOf(status), StartsWith("train_job.model.torchscript: " + c.path + ": "));
    EXPECT_THAT(MessageOf(status), HasSubstr(c.expected));
  }
  mpsd::v1::SubmitJobRequest both = ScriptJob(SaveLinearScript(dir / "ok.pt"));
  both.mutable_train_job()->mutable_model()->set_name("convnet");
  EXPECT_THAT(MessageOf(executor->Validate(both)), StartsWith("train_job.model.torchscript: "));
}

}  // namespace
}  // namespace mpsd::trainer
