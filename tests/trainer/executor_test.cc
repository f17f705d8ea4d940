// Tests for trainer/torch_executor.cc, through the public Executor interface, on the real
// Fashion-MNIST files and small temporary copies of them. CPU only, kept small for 2 cores.
#include "trainer/torch_executor.h"

#include <ATen/Context.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/common/temp_dir.h"
#include "trainer/schedule.h"

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;
using ::mpsd::testing::TempDir;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";
constexpr char kKnownModels[] =
    "(known: mlp, convnet, cifar_cnn, resnet18, resnet34, resnet50, vgg11, vgg16, lstm, "
    "transformer, bert_base)";

std::unique_ptr<Executor> MakeExecutor(int steps_per_readback = 32) {
  Executor::Options options;
  options.steps_per_readback = steps_per_readback;
  absl::StatusOr<std::unique_ptr<Executor>> executor = CreateTorchExecutor(options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return *std::move(executor);
}

// A small, valid CPU job: 2000 training examples = 31 batches of 64 and one of 16.
mpsd::v1::SubmitJobRequest SmallJob() {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("convnet");
  job.mutable_dataset()->set_name("fashion-mnist");
  job.mutable_dataset()->set_root(kFashionMnist);
  job.mutable_dataset()->set_limit_train(2000);
  job.mutable_dataset()->set_limit_test(500);
  job.set_batch_size(64);
  job.set_epochs(1);
  job.mutable_optimizer()->set_name("adam");
  job.mutable_optimizer()->set_learning_rate(1e-3);
  job.set_seed(1);
  job.set_device("cpu");
  return request;
}

struct RunResult {
  absl::Status status;
  std::vector<mpsd::v1::JobEvent> events;

  std::vector<mpsd::v1::StepMetrics> steps() const {
    std::vector<mpsd::v1::StepMetrics> steps;
    for (const auto& event : events) {
      if (event.has_step()) steps.push_back(event.step());
    }
    return steps;
  }
  std::vector<float> losses() const {
    std::vector<float> losses;
    for (const auto& step : steps()) losses.push_back(step.loss());
    return losses;
  }
  int CountEpochs() const {
    int count = 0;
    for (const auto& event : events) count += event.has_epoch() ? 1 : 0;
    return count;
  }
};

RunResult RunJob(Executor& executor, const mpsd::v1::SubmitJobRequest& request) {
  RunResult result;
  CancelFlag cancelled;
  result.status = executor.Run(
      JobContext{"1", ""}, request,
      [&](mpsd::v1::JobEvent event) { result.events.push_back(std::move(event)); }, cancelled);
  return result;
}

void LinkFashionMnistFile(const fs::path& dir, const std::string& name) {
  fs::create_symlink(fs::path(kFashionMnist) / (name + ".gz"), dir / (name + ".gz"));
}

// ---- Validate ---------------------------------------------------------------------------------

TEST(ExecutorValidateTest, AcceptsTheSmallJobAndTheDefaults) {
  auto executor = MakeExecutor();
  EXPECT_TRUE(executor->Validate(SmallJob()).ok());

  mpsd::v1::SubmitJobRequest minimal;
  minimal.mutable_train_job()->mutable_model()->set_name("convnet");
  minimal.mutable_train_job()->mutable_dataset()->set_name("fashion-mnist");
  EXPECT_TRUE(executor->Validate(minimal).ok()) << executor->Validate(minimal);
}

mpsd::v1::OptimizerSpec& Sgd(mpsd::v1::TrainJob& job) {
  job.mutable_optimizer()->set_name("sgd");
  return *job.mutable_optimizer();
}

mpsd::v1::ScheduleSpec& Schedule(mpsd::v1::TrainJob& job, const std::string& name) {
  job.mutable_schedule()->set_name(name);
  return *job.mutable_schedule();
}

struct BadField {
  std::string name;
  void (*mutate)(mpsd::v1::TrainJob&);
  std::string message_prefix;
};

TEST(ExecutorValidateTest, RejectsEachBadFieldNamingItsPath) {
  const std::vector<BadField> cases = {
      {"batch_size", [](auto& j) { j.set_batch_size(0); },
       "train_job.batch_size: must be > 0, got 0"},
      {"epochs", [](auto& j) { j.set_epochs(-2); }, "train_job.epochs: must be > 0, got -2"},
      {"model", [](auto& j) { j.mutable_model()->set_name("foo"); },
       absl::StrCat("train_job.model.name: unknown model \"foo\" ", kKnownModels)},
      {"no model", [](auto& j) { j.mutable_model()->clear_name(); },
       absl::StrCat("train_job.model.name: required ", kKnownModels)},
      {"model too big for the images", [](auto& j) { j.mutable_model()->set_name("vgg16"); },
       "train_job.model.name: vgg16 cannot take 1×28×28 images: its 5 2×2 max-pools reduce "
       "28×28 to 0×0, so it needs at least 32×32 (the input of dataset fashion-mnist)"},
      {"preset", [](auto& j) { j.mutable_model()->set_preset("bert_base"); },
       "train_job.model.preset: convnet has no presets, got \"bert_base\""},
      {"transformer preset",
       [](auto& j) {
         j.mutable_model()->set_name("transformer");
         j.mutable_model()->set_preset("bert_large");
       },
       "train_job.model.preset: unknown preset \"bert_large\" for transformer (known: small, "
       "bert_base)"},
      {"num_classes below the dataset's", [](auto& j) { j.mutable_model()->set_num_classes(5); },
       "train_job.model.num_classes: must be at least the 10 classes of dataset fashion-mnist, "
       "got 5"},
      {"num_classes zero", [](auto& j) { j.mutable_model()->set_num_classes(0); },
       "train_job.model.num_classes: must be in [1, 1048576], got 0"},
      {"dropout", [](auto& j) { j.mutable_model()->set_dropout(1); },
       "train_job.model.dropout: must be in [0, 1), got 1"},
      {"negative dropout", [](auto& j) { j.mutable_model()->set_dropout(-0.5); },
       "train_job.model.dropout: must be in [0, 1), got -0.5"},
      {"nproc_per_node", [](auto& j) { j.mutable_distributed()->set_nproc_per_node(0); },
       "train_job.distributed.nproc_per_node: must be in [1, 64], got 0"},
      {"node_rank", [](auto& j) { j.mutable_distributed()->set_node_rank(1); },
       "train_job.distributed.node_rank: must be in [0, nnodes = 1), got 1"},
      {"master_addr for two nodes", [](auto& j) { j.mutable_distributed()->set_nnodes(2); },
       "train_job.distributed.master_addr: required when nnodes > 1 (the host of node 0)"},
      {"master_port", [](auto& j) { j.mutable_distributed()->set_master_port(70000); },
       "train_job.distributed.master_port: must be in [1, 65535], got 70000"},
      {"backend", [](auto& j) { j.mutable_distributed()->set_backend("mpi"); },
       "train_job.distributed.backend: unknown backend \"mpi\" (known: auto, gloo, nccl)"},
      {"nccl on cpu", [](auto& j) { j.mutable_distributed()->set_backend("nccl"); },
       "train_job.distributed.backend: nccl needs CUDA devices; the job's is cpu (use gloo)"},
      {"devices count",
       [](auto& j) {
         j.mutable_distributed()->set_nproc_per_node(2);
         j.mutable_distributed()->add_devices("cpu");
       },
       "train_job.distributed.devices: must name one device per local rank (nproc_per_node = "
       "2), got 1"},
      {"timeout_s", [](auto& j) { j.mutable_distributed()->set_timeout_s(0); },
       "train_job.distributed.timeout_s: must be in (0, 86400], got 0"},
      {"dataset", [](auto& j) { j.mutable_dataset()->set_name("imagenet"); },
       "train_job.dataset.name: unknown dataset \"imagenet\" (known: fashion-mnist, mnist, "
       "cifar10, synthetic, image_folder, tensors)"},
      {"optimizer", [](auto& j) { j.mutable_optimizer()->set_name("lamb"); },
       "train_job.optimizer.name: unknown optimizer \"lamb\" (known: adam, adamw, sgd)"},
      {"momentum", [](auto& j) { Sgd(j).set_momentum(1.5); },
       "train_job.optimizer.momentum: must be in [0, 1), got 1.5"},
      {"momentum for adam", [](auto& j) { j.mutable_optimizer()->set_momentum(0.9); },
       "train_job.optimizer.momentum: only sgd takes it, not adam"},
      {"nesterov without momentum", [](auto& j) { Sgd(j).set_nesterov(true); },
       "train_job.optimizer.nesterov: needs momentum > 0, got momentum 0"},
      {"weight_decay", [](auto& j) { j.mutable_optimizer()->set_weight_decay(-0.1); },
       "train_job.optimizer.weight_decay: must be >= 0, got -0.1"},
      {"betas count", [](auto& j) { j.mutable_optimizer()->add_betas(0.9); },
       "train_job.optimizer.betas: must be [beta1, beta2], got 1 value(s)"},
      {"beta2",
       [](auto& j) {
         j.mutable_optimizer()->add_betas(0.9);
         j.mutable_optimizer()->add_betas(1.0);
       },
       "train_job.optimizer.betas[1]: must be in [0, 1), got 1"},
      {"betas for sgd", [](auto& j) { Sgd(j).add_betas(0.9); },
       "train_job.optimizer.betas: only adam and adamw take it, not sgd"},
      {"eps", [](auto& j) { j.mutable_optimizer()->set_eps(0); },
       "train_job.optimizer.eps: must be > 0, got 0"},
      {"schedule", [](auto& j) { j.mutable_schedule()->set_name("linear"); },
       "train_job.schedule.name: unknown schedule \"linear\" (known: constant, step, cosine, "
       "onecycle)"},
      {"gamma", [](auto& j) { Schedule(j, "step").set_gamma(0); },
       "train_job.schedule.gamma: must be > 0, got 0"},
      {"step_size_epochs", [](auto& j) { Schedule(j, "step").set_step_size_epochs(0); },
       "train_job.schedule.step_size_epochs: must be > 0, got 0"},
      {"gamma for cosine", [](auto& j) { Schedule(j, "cosine").set_gamma(0.5); },
       "train_job.schedule.gamma: only step takes it, not cosine"},
      {"both warm-ups",
       [](auto& j) {
         Schedule(j, "cosine").set_warmup_steps(5);
         j.mutable_schedule()->set_warmup_epochs(1);
       },
       "train_job.schedule.warmup_epochs: set at most one of warmup_steps and warmup_epochs"},
      {"warm-up as long as the job", [](auto& j) { Schedule(j, "cosine").set_warmup_epochs(1); },
       "train_job.schedule.warmup_epochs: warm-up of 32 steps leaves no step of the job's 32 for "
       "the cosine"},
      {"min_lr", [](auto& j) { Schedule(j, "cosine").set_min_lr(-1); },
       "train_job.schedule.min_lr: must be >= 0, got -1"},
      {"pct_start", [](auto& j) { Schedule(j, "onecycle").set_pct_start(1.5); },
       "train_job.schedule.pct_start: must be in [0, 1], got 1.5"},
      {"anneal_strategy", [](auto& j) { Schedule(j, "onecycle").set_anneal_strategy("exp"); },
       "train_job.schedule.anneal_strategy: must be \"cos\" or \"linear\", got \"exp\""},
      {"div_factor", [](auto& j) { Schedule(j, "onecycle").set_div_factor(-25); },
       "train_job.schedule.div_factor: must be > 0, got -25"},
      {"base_momentum above max", [](auto& j) { Schedule(j, "onecycle").set_base_momentum(0.99); },
       "train_job.schedule.base_momentum: must be <= max_momentum 0.95, got 0.99"},
      {"max_lr for constant", [](auto& j) { j.mutable_schedule()->set_max_lr(0.1); },
       "train_job.schedule: max_lr, pct_start, div_factor, final_div_factor, anneal_strategy and "
       "*_momentum are onecycle's, not constant's"},
      {"onecycle too short",
       [](auto& j) {
         Schedule(j, "onecycle");
         j.mutable_dataset()->set_limit_train(50);
       },
       "train_job.schedule.name: onecycle needs at least 2 optimizer steps in all (one per "
       "phase), got 1 (1 epoch(s) × 1 step(s) per epoch: 50 training examples, batch size 64, "
       "grad_accumulation_steps 1)"},
      {"onecycle too short with accumulation",
       [](auto& j) {
         Schedule(j, "onecycle");
         j.set_grad_accumulation_steps(32);
       },
       "train_job.schedule.name: onecycle needs at least 2 optimizer steps in all (one per "
       "phase), got 1 (1 epoch(s) × 1 step(s) per epoch: 2000 training examples, batch size 64, "
       "grad_accumulation_steps 32)"},
      {"drop_last leaves nothing",
       [](auto& j) {
         j.set_drop_last(true);
         j.mutable_dataset()->set_limit_train(50);
       },
       "train_job.drop_last: the 50 training examples make no full batch of 64"},
      {"precision", [](auto& j) { j.set_precision("fp8"); },
       "train_job.precision: unknown precision \"fp8\" (known: fp32, fp16, bf16)"},
      {"memory_format", [](auto& j) { j.set_memory_format("nhwc"); },
       "train_job.memory_format: must be \"contiguous\" or \"channels_last\", got \"nhwc\""},
      {"memory_format for an mlp",
       [](auto& j) {
         j.set_memory_format("channels_last");
         j.mutable_model()->set_name("mlp");
       },
       "train_job.memory_format: channels_last is for image models taking [C, H, W]; mlp takes "
       "1×28×28"},
      {"memory_format for an lstm",
       [](auto& j) {
         j.set_memory_format("channels_last");
         j.mutable_model()->set_name("lstm");
       },
       "train_job.memory_format: channels_last is for image models taking [C, H, W]; lstm"},
      {"grad_accumulation_steps", [](auto& j) { j.set_grad_accumulation_steps(0); },
       "train_job.grad_accumulation_steps: must be > 0, got 0"},
      {"grad_clip_norm", [](auto& j) { j.set_grad_clip_norm(0); },
       "train_job.grad_clip_norm: must be > 0, got 0"},
      {"label_smoothing", [](auto& j) { j.set_label_smoothing(1); },
       "train_job.label_smoothing: must be in [0, 1), got 1"},
      {"eval_every_epochs", [](auto& j) { j.set_eval_every_epochs(-1); },
       "train_job.eval_every_epochs: must be > 0, got -1"},
      {"lr zero", [](auto& j) { j.mutable_optimizer()->set_learning_rate(0); },
       "train_job.optimizer.learning_rate: must be > 0, got 0"},
      {"lr negative", [](auto& j) { j.mutable_optimizer()->set_learning_rate(-0.1); },
       "train_job.optimizer.learning_rate: must be > 0, got -0.1"},
      {"lr nan",
       [](auto& j) {
         j.mutable_optimizer()->set_learning_rate(std::numeric_limits<double>::quiet_NaN());
       },
       "train_job.optimizer.learning_rate: must be > 0"},
      {"lr inf",
       [](auto& j) {
         j.mutable_optimizer()->set_learning_rate(std::numeric_limits<double>::infinity());
       },
       "train_job.optimizer.learning_rate: must be finite"},
      // Issue 26: accepted, then FAILED INTERNAL at run ("value cannot be converted to type
      // float without overflow"), naming no field.
      {"lr 1e300",
       [](auto& j) {
         j.mutable_optimizer()->set_name("sgd");
         j.mutable_optimizer()->set_learning_rate(1e300);
       },
       "train_job.optimizer.learning_rate: must be at most 3.40282e+38 in size (the largest "
       "float32"},
      {"weight_decay 1e300", [](auto& j) { j.mutable_optimizer()->set_weight_decay(1e300); },
       "train_job.optimizer.weight_decay: must be at most 3.40282e+38"},
      {"grad_clip_norm 1e300", [](auto& j) { j.set_grad_clip_norm(1e300); },
       "train_job.grad_clip_norm: must be at most 3.40282e+38"},
      {"adam's first step",
       [](auto& j) {
         j.mutable_optimizer()->set_name("adam");
         j.mutable_optimizer()->set_learning_rate(1e38);
       },
       "train_job.optimizer.learning_rate: adam's first step is learning_rate / (1 - beta1) = "
       "1e+38 / 0.1 = 1e+39, beyond the largest float32"},
      // Issue 26: passed submit and failed at run; 0.9999 blamed drop_last, never set.
      {"fraction too small",
       [](auto& j) { j.mutable_dataset()->mutable_validation()->set_fraction(0.0001); },
       "train_job.dataset.validation.fraction: 0.0001 of 2000 training examples holds out 0, "
       "which leaves the validation split empty"},
      {"fraction too large",
       [](auto& j) { j.mutable_dataset()->mutable_validation()->set_fraction(0.9999); },
       "train_job.dataset.validation.fraction: 0.9999 of 2000 training examples holds out 2000, "
       "which leaves nothing to train on"},
      {"limit_train", [](auto& j) { j.mutable_dataset()->set_limit_train(-1); },
       "train_job.dataset.limit_train: must be >= 0, got -1"},
      {"limit_test", [](auto& j) { j.mutable_dataset()->set_limit_test(-5); },
       "train_job.dataset.limit_test: must be >= 0, got -5"},
      {"device", [](auto& j) { j.set_device("tpu"); },
       "train_job.device: unknown device \"tpu\" (expected auto, cpu, cuda, cuda:N or mps)"},
      {"device index", [](auto& j) { j.set_device("cuda:x"); },
       "train_job.device: unknown device \"cuda:x\""},
  };
  auto executor = MakeExecutor();
  for (const BadField& c : cases) {
    mpsd::v1::SubmitJobRequest request = SmallJob();
    c.mutate(*request.mutable_train_job());
    const absl::Status status = executor->Validate(request);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << status;
    EXPECT_THAT(std::string(status.message()), StartsWith(c.message_prefix)) << c.name;
  }
}

TEST(ExecutorValidateTest, AcceptsEveryModelThatTakesTheDatasetsImages) {
  auto executor = MakeExecutor();
  for (const char* name : {"mlp", "convnet", "cifar_cnn", "resnet18", "resnet34", "resnet50",
                           "lstm", "transformer", "bert_base"}) {
    mpsd::v1::SubmitJobRequest request = SmallJob();
    request.mutable_train_job()->mutable_model()->set_name(name);
    EXPECT_TRUE(executor->Validate(request).ok()) << name << ": " << executor->Validate(request);
  }
  mpsd::v1::SubmitJobRequest request = SmallJob();
  mpsd::v1::ModelSpec& model = *request.mutable_train_job()->mutable_model();
  model.set_name("transformer");
  model.set_preset("bert_base");
  model.set_num_classes(1000);
  EXPECT_TRUE(executor->Validate(request).ok()) << executor->Validate(request);
}

TEST(ExecutorValidateTest, RejectsADeviceThatIsNotAvailable) {
  auto executor = MakeExecutor();
  const mpsd::v1::DeviceInfo device = executor->GetDevice();
  if (std::find(device.available().begin(), device.available().end(), "cuda") !=
      device.available().end()) {
    GTEST_SKIP() << "this machine has CUDA";
  }
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->set_device("cuda");
  const absl::Status status = executor->Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("train_job.device: cuda is not available (available: cpu"));
}

TEST(ExecutorValidateTest, BenchJobIsValidatedAndAnEmptySpecInvalid) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest bench;
  bench.mutable_bench_job()->add_models("convnet");
  const absl::Status status = executor->Validate(bench);  // bench_test.cc has the rest
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "bench_job.batch_sizes: at least one required");
  bench.mutable_bench_job()->add_batch_sizes(8);
  EXPECT_TRUE(executor->Validate(bench).ok()) << executor->Validate(bench);

  EXPECT_EQ(executor->Validate(mpsd::v1::SubmitJobRequest()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExecutorValidateTest, MissingDatasetRootNamesTheDirectory) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_root("/nonexistent/fmnist");
  const absl::Status status = executor->Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(StartsWith("train_job.dataset.root: "), HasSubstr("/nonexistent/fmnist")));
}

TEST(ExecutorValidateTest, DatasetRootThatIsAFileIsNamed) {
  TempDir dir("executor_test_root_is_file");
  const fs::path file = dir.path() / "not-a-dir";
  std::ofstream(file) << "x";
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_root(file.string());
  const absl::Status status = executor->Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "train_job.dataset.root: " + file.string() + " is not a directory");
}

TEST(ExecutorValidateTest, DefaultRootIsPerDataset) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_name("mnist");
  request.mutable_train_job()->mutable_dataset()->clear_root();
  const absl::Status status = executor->Validate(request);
  if (fs::exists("/usr/share/datasets/mnist/train-images-idx3-ubyte.gz")) {
    EXPECT_TRUE(status.ok()) << status;
  } else {
    EXPECT_THAT(std::string(status.message()), AllOf(StartsWith("train_job.dataset.root: "),
                                                     HasSubstr("/usr/share/datasets/mnist")));
  }
}

TEST(ExecutorValidateTest, MissingIdxFileIsNamed) {
  TempDir dir("executor_test_missing_file");
  LinkFashionMnistFile(dir.path(), "train-images-idx3-ubyte");
  LinkFashionMnistFile(dir.path(), "train-labels-idx1-ubyte");
  LinkFashionMnistFile(dir.path(), "t10k-images-idx3-ubyte");
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_root(dir.path().string());
  const absl::Status status = executor->Validate(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(StartsWith("train_job.dataset.root: "), HasSubstr("t10k-labels-idx1-ubyte")));
}

// ---- ListModels -------------------------------------------------------------------------------

const mpsd::v1::ModelInfo* FindInfo(const mpsd::v1::ListModelsResponse& response,
                                    const std::string& name) {
  for (const mpsd::v1::ModelInfo& info : response.models()) {
    if (info.name() == name) return &info;
  }
  return nullptr;
}

TEST(ExecutorListModelsTest, ListsEveryModelAtItsNaturalInput) {
  auto executor = MakeExecutor();
  const absl::StatusOr<mpsd::v1::ListModelsResponse> response =
      executor->ListModels(mpsd::v1::ListModelsRequest());
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->models_size(), 11);
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"resnet18", 11'689'512}, {"resnet34", 21'797'672}, {"resnet50", 25'557'032},
      {"vgg11", 132'863'336},   {"vgg16", 138'357'544},   {"convnet", 1'199'882},
      {"cifar_cnn", 1'078'122},
  };
  for (const auto& [name, parameters] : expected) {
    const mpsd::v1::ModelInfo* info = FindInfo(*response, name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->parameters(), parameters) << name;
    EXPECT_TRUE(info->unsupported().empty()) << name;
    EXPECT_FALSE(info->description().empty()) << name;
  }
  const mpsd::v1::ModelInfo& resnet50 = *FindInfo(*response, "resnet50");
  EXPECT_THAT(resnet50.input_shape(), ::testing::ElementsAre(3, 224, 224));
  EXPECT_EQ(resnet50.num_classes(), 1000);
  const mpsd::v1::ModelInfo& transformer = *FindInfo(*response, "transformer");
  EXPECT_THAT(transformer.presets(), ::testing::ElementsAre("small", "bert_base"));
  EXPECT_THAT(transformer.input_shape(), ::testing::ElementsAre(128, 256));
}

TEST(ExecutorListModelsTest, CountsAtARequestedShapeAndSaysWhichModelsCannotTakeIt) {
  auto executor = MakeExecutor();
  mpsd::v1::ListModelsRequest request;
  for (int64_t dim : {1, 28, 28}) request.add_input_shape(dim);
  request.set_num_classes(10);
  const absl::StatusOr<mpsd::v1::ListModelsResponse> response = executor->ListModels(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(FindInfo(*response, "convnet")->parameters(), 1'199'882);
  EXPECT_EQ(FindInfo(*response, "cifar_cnn")->parameters(), 733'482);
  EXPECT_THAT(FindInfo(*response, "resnet18")->input_shape(), ::testing::ElementsAre(1, 28, 28));
  EXPECT_EQ(FindInfo(*response, "resnet18")->num_classes(), 10);
  // 3 input channels fewer in conv1 (64 × 7 × 7 × 2) and a 10-way fc instead of 1000.
  EXPECT_EQ(FindInfo(*response, "resnet18")->parameters(), 11'689'512 - 64 * 49 * 2 - 990 * 513);
  const mpsd::v1::ModelInfo& vgg16 = *FindInfo(*response, "vgg16");
  EXPECT_EQ(vgg16.parameters(), 0);
  EXPECT_THAT(vgg16.unsupported(), StartsWith("vgg16 cannot take 1×28×28 images"));

  mpsd::v1::ListModelsRequest sequence;
  sequence.add_input_shape(64);
  sequence.add_input_shape(32);
  const absl::StatusOr<mpsd::v1::ListModelsResponse> sequences = executor->ListModels(sequence);
  ASSERT_TRUE(sequences.ok()) << sequences.status();
  EXPECT_GT(FindInfo(*sequences, "lstm")->parameters(), 0);
  EXPECT_EQ(FindInfo(*sequences, "lstm")->num_classes(), 10);
  EXPECT_THAT(FindInfo(*sequences, "resnet50")->unsupported(),
              StartsWith("resnet50 takes images [C, H, W]"));
}

TEST(ExecutorListModelsTest, RejectsABadShapeOrClassCountNamingTheField) {
  auto executor = MakeExecutor();
  const auto message = [&](const std::vector<int64_t>& shape, int num_classes) {
    mpsd::v1::ListModelsRequest request;
    for (int64_t dim : shape) request.add_input_shape(dim);
    if (num_classes != 0) request.set_num_classes(num_classes);
    const absl::StatusOr<mpsd::v1::ListModelsResponse> response = executor->ListModels(request);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(response.status().message());
  };
  EXPECT_EQ(message({3, -32, 32}, 0),
            "input_shape: every dimension must be in [1, 1048576], got 3×-32×32");
  EXPECT_EQ(message({1, 2, 3, 4}, 0),
            "input_shape: must have 1 to 3 dimensions ([C, H, W] or [T, F]), got 4");
  EXPECT_EQ(message({}, -1), "num_classes: must be in [1, 1048576], got -1");
}

// ---- Run --------------------------------------------------------------------------------------

TEST(ExecutorRunTest, TrainsOneEpochReportingEveryStep) {
  auto executor = MakeExecutor();
  const RunResult result = RunJob(*executor, SmallJob());
  ASSERT_TRUE(result.status.ok()) << result.status;

  const std::vector<mpsd::v1::StepMetrics> steps = result.steps();
  ASSERT_EQ(steps.size(), 32u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(steps[i].epoch(), 1);
    EXPECT_EQ(steps[i].total_steps(), 32);
    EXPECT_EQ(steps[i].batch_size(), i + 1 < steps.size() ? 64 : 2000 - 31 * 64);
    EXPECT_DOUBLE_EQ(steps[i].learning_rate(), 1e-3);
    EXPECT_GT(steps[i].samples_per_second(), 0);
    EXPECT_GT(steps[i].step_time_ms(), 0);
    EXPECT_GE(steps[i].accuracy(), 0);
    EXPECT_LE(steps[i].accuracy(), 1);
    EXPECT_TRUE(std::isfinite(steps[i].loss()));
  }
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += steps[i].loss();
    last += steps[steps.size() - 10 + i].loss();
  }
  EXPECT_LT(last, first);

  // Logs, then the 32 steps, then the epoch, then the summary.
  ASSERT_GE(result.events.size(), 34u);
  EXPECT_TRUE(result.events.front().has_log());
  const mpsd::v1::JobEvent& epoch_event = result.events[result.events.size() - 2];
  ASSERT_TRUE(epoch_event.has_epoch());
  const mpsd::v1::EpochMetrics& epoch = epoch_event.epoch();
  EXPECT_EQ(epoch.epoch(), 1);
  EXPECT_GT(epoch.test_accuracy(), 0.6);
  EXPECT_GT(epoch.train_accuracy(), 0.3);
  EXPECT_GT(epoch.epoch_time_s(), 0);
  EXPECT_GT(epoch.samples_per_second(), 0);
  EXPECT_EQ(result.CountEpochs(), 1);

  ASSERT_TRUE(result.events.back().has_summary());
  const mpsd::v1::JobSummary& summary = result.events.back().summary();
  EXPECT_EQ(summary.device(), "cpu");
  EXPECT_EQ(summary.epochs(), 1);
  EXPECT_EQ(summary.steps(), 32);
  EXPECT_EQ(summary.train_examples(), 2000);
  EXPECT_EQ(summary.test_examples(), 500);
  EXPECT_EQ(summary.parameters(), 1199882);
  EXPECT_DOUBLE_EQ(summary.test_accuracy(), epoch.test_accuracy());
  EXPECT_DOUBLE_EQ(summary.final_train_loss(), epoch.train_loss());
  EXPECT_DOUBLE_EQ(summary.median_epoch_time_s(), epoch.epoch_time_s());
  EXPECT_GT(summary.samples_per_second(), 0);
  EXPECT_GE(summary.total_time_s(), epoch.epoch_time_s() + summary.data_load_time_s());
  EXPECT_GT(summary.data_load_time_s(), 0);

  const mpsd::v1::DeviceInfo device = executor->GetDevice();
  EXPECT_EQ(device.jobs_run(), 1);
}

TEST(ExecutorRunTest, CancelStopsAtTheNextStepBoundary) {
  // Read back at least every 4 steps (sooner when a step is slow): the flag set while step 5's
  // event is delivered stops the job after the group that holds step 5, at step 8 at most.
  auto executor = MakeExecutor(/*steps_per_readback=*/4);
  CancelFlag cancelled;
  std::vector<mpsd::v1::JobEvent> events;
  const absl::Status status = executor->Run(
      JobContext{"1", ""}, SmallJob(),
      [&](mpsd::v1::JobEvent event) {
        if (event.has_step() && event.step().step() == 5) cancelled.Cancel();
        events.push_back(std::move(event));
      },
      cancelled);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;

  std::vector<int64_t> steps;
  for (const auto& event : events) {
    if (event.has_step()) steps.push_back(event.step().step());
    EXPECT_FALSE(event.has_epoch());
  }
  ASSERT_GE(steps.size(), 5u);
  EXPECT_LE(steps.size(), 8u);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<int64_t>(i + 1));
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_summary());
  EXPECT_EQ(events.back().summary().steps(), static_cast<int64_t>(steps.size()));
  EXPECT_EQ(events.back().summary().epochs(), 0);
}

TEST(ExecutorRunTest, TruncatedIdxFileFailsWithDataLossNamingTheFile) {
  TempDir dir("executor_test_truncated");
  LinkFashionMnistFile(dir.path(), "train-labels-idx1-ubyte");
  LinkFashionMnistFile(dir.path(), "t10k-images-idx3-ubyte");
  LinkFashionMnistFile(dir.path(), "t10k-labels-idx1-ubyte");
  // A raw images file whose header promises 60000 images of 28×28 but holds only 10.
  const fs::path images = dir.path() / "train-images-idx3-ubyte";
  {
    std::ofstream out(images, std::ios::binary);
    const unsigned char header[16] = {0, 0, 8, 3, 0, 0, 0xea, 0x60, 0, 0, 0, 28, 0, 0, 0, 28};
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    const std::string body(10 * 28 * 28, '\x7f');
    out.write(body.data(), static_cast<std::streamsize>(body.size()));
  }
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_root(dir.path().string());
  ASSERT_TRUE(executor->Validate(request).ok());

  const RunResult result = RunJob(*executor, request);
  EXPECT_EQ(result.status.code(), absl::StatusCode::kDataLoss) << result.status;
  EXPECT_THAT(std::string(result.status.message()), HasSubstr(images.string()));
  EXPECT_TRUE(result.steps().empty());
  ASSERT_FALSE(result.events.empty());
  EXPECT_TRUE(result.events.back().has_summary());

  // The executor stays usable after a failed job.
  mpsd::v1::SubmitJobRequest small = SmallJob();
  small.mutable_train_job()->mutable_dataset()->set_limit_train(128);
  small.mutable_train_job()->mutable_dataset()->set_limit_test(100);
  EXPECT_TRUE(RunJob(*executor, small).status.ok());
}

TEST(ExecutorRunTest, SameSeedGivesIdenticalLossesOnCpu) {
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_limit_train(320);
  request.mutable_train_job()->mutable_dataset()->set_limit_test(100);
  auto executor = MakeExecutor();
  const RunResult a = RunJob(*executor, request);
  const RunResult b = RunJob(*executor, request);
  request.mutable_train_job()->set_seed(2);
  const RunResult c = RunJob(*executor, request);
  ASSERT_TRUE(a.status.ok() && b.status.ok() && c.status.ok());
  ASSERT_EQ(a.losses().size(), 5u);
  EXPECT_EQ(a.losses(), b.losses());
  EXPECT_NE(a.losses(), c.losses());
}

// memory_format: channels_last (issue 15) trains the same model to the same losses as the
// default layout, and the job's log says the layout was converted. NHWC convolutions sum in
// another order: the first step (the same weights) agrees to float rounding, later steps within
// 1% (SGD, so that rounding differences are not amplified by Adam's normalised first steps;
// with Adam, cifar_cnn's 5th step differed by 0.4% and resnet18's by 5%; with SGD at lr 0.05
// cifar_cnn's 5th by 1.5%).
TEST(ExecutorRunTest, ChannelsLastTrainsToTheSameLossesAsContiguous) {
  auto executor = MakeExecutor();
  for (const char* model : {"convnet", "cifar_cnn"}) {
    mpsd::v1::SubmitJobRequest request = SmallJob();
    request.mutable_train_job()->mutable_model()->set_name(model);
    Sgd(*request.mutable_train_job()).set_learning_rate(0.01);
    request.mutable_train_job()->mutable_dataset()->set_limit_train(320);
    request.mutable_train_job()->mutable_dataset()->set_limit_test(100);
    const RunResult contiguous = RunJob(*executor, request);
    request.mutable_train_job()->set_memory_format("channels_last");
    ASSERT_TRUE(executor->Validate(request).ok()) << model << ": " << executor->Validate(request);
    const RunResult nhwc = RunJob(*executor, request);
    ASSERT_TRUE(contiguous.status.ok()) << model << ": " << contiguous.status;
    ASSERT_TRUE(nhwc.status.ok()) << model << ": " << nhwc.status;
    const std::vector<float> a = contiguous.losses(), b = nhwc.losses();
    ASSERT_EQ(a.size(), 5u) << model;
    ASSERT_EQ(b.size(), a.size()) << model;
    EXPECT_NEAR(b[0], a[0], 1e-4 * std::abs(a[0])) << model << " step 1";
    for (size_t i = 1; i < a.size(); ++i) {
      EXPECT_NEAR(b[i], a[i], 1e-2 * std::abs(a[i])) << model << " step " << i + 1;
    }
    int converted = 0;
    for (const mpsd::v1::JobEvent& event : nhwc.events) {
      converted += event.has_log() && absl::StrContains(event.log().text(), "channels_last");
    }
    EXPECT_EQ(converted, 1) << model;
  }
}

// cudnn_benchmark is the job's own: on (torch.backends.cudnn.benchmark) while its steps and bench
// rows run, off again after it, and off for a job that does not ask (LibTorch's process-wide
// flag, which LibTorch keeps on a CPU build too).
TEST(ExecutorRunTest, CudnnBenchmarkIsOnForTheJobThatAsksAndOffAfter) {
  auto executor = MakeExecutor(/*steps_per_readback=*/4);
  EXPECT_FALSE(at::globalContext().benchmarkCuDNN()) << "the executor starts on heuristics";
  // What the flag was each time a step (or bench row) was reported.
  const auto run = [&](const mpsd::v1::SubmitJobRequest& request) {
    std::vector<bool> seen;
    CancelFlag cancelled;
    const absl::Status status = executor->Run(
        JobContext{"1", ""}, request,
        [&](mpsd::v1::JobEvent event) {
          if (event.has_step() || event.has_bench_row()) {
            seen.push_back(at::globalContext().benchmarkCuDNN());
          }
        },
        cancelled);
    EXPECT_TRUE(status.ok()) << status;
    return seen;
  };
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_limit_train(256);
  request.mutable_train_job()->mutable_dataset()->set_limit_test(64);
  request.mutable_train_job()->set_cudnn_benchmark(true);
  EXPECT_THAT(run(request), AllOf(SizeIs(4), Each(true)));
  EXPECT_FALSE(at::globalContext().benchmarkCuDNN());

  request.mutable_train_job()->set_cudnn_benchmark(false);
  EXPECT_THAT(run(request), AllOf(SizeIs(4), Each(false)));

  mpsd::v1::SubmitJobRequest bench;
  bench.mutable_bench_job()->add_models("mlp");
  bench.mutable_bench_job()->add_batch_sizes(8);
  bench.mutable_bench_job()->add_devices("cpu");
  bench.mutable_bench_job()->set_mode("both");
  bench.mutable_bench_job()->set_iters(1);
  bench.mutable_bench_job()->set_warmup_iters(0);
  bench.mutable_bench_job()->set_cudnn_benchmark(true);
  EXPECT_THAT(run(bench), AllOf(SizeIs(2), Each(true)));
  EXPECT_FALSE(at::globalContext().benchmarkCuDNN());
}

// Sweep trials that differ in cudnn_benchmark train apart: a fused run has one setting.
TEST(ExecutorRunTest, TrialsThatDifferInCudnnBenchmarkAreNotFused) {
  auto executor = MakeExecutor();
  std::vector<mpsd::v1::SubmitJobRequest> trials(2, SmallJob());
  trials[1].mutable_train_job()->set_cudnn_benchmark(true);
  const absl::StatusOr<std::vector<int>> plan = executor->PlanFusion(trials, 2);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(plan.status().message(), "trial 1 differs in train_job.cudnn_benchmark");
  trials[0].mutable_train_job()->set_cudnn_benchmark(true);
  const absl::StatusOr<std::vector<int>> both = executor->PlanFusion(trials, 2);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_THAT(*both, ElementsAre(0, 1));
}

TEST(ExecutorRunTest, CifarCnnLearnsFashionMnistIn100Steps) {
  // cifar_cnn built for Fashion-MNIST's 1×28×28 (the CIFAR-10 dataset is not in mpsd yet).
  mpsd::v1::SubmitJobRequest request = SmallJob();
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("cifar_cnn");
  job.mutable_dataset()->set_limit_train(3200);
  job.mutable_dataset()->set_limit_test(500);
  job.set_batch_size(32);
  auto executor = MakeExecutor();
  const RunResult result = RunJob(*executor, request);
  ASSERT_TRUE(result.status.ok()) << result.status;
  const std::vector<mpsd::v1::StepMetrics> steps = result.steps();
  ASSERT_EQ(steps.size(), 100u);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += steps[i].loss() / 10;
    last += steps[steps.size() - 10 + i].loss() / 10;
  }
  EXPECT_LT(last, 0.8 * first) << "first 10 steps " << first << ", last 10 " << last;
  ASSERT_TRUE(result.events.back().has_summary());
  EXPECT_EQ(result.events.back().summary().parameters(), 733'482);
  EXPECT_GT(result.events.back().summary().test_accuracy(), 0.6);
}

TEST(ExecutorRunTest, EveryModelThatTakesFashionMnistTrainsTwoSteps) {
  auto executor = MakeExecutor();
  for (const char* name : {"mlp", "resnet18", "lstm", "transformer"}) {
    mpsd::v1::SubmitJobRequest request = SmallJob();
    mpsd::v1::TrainJob& job = *request.mutable_train_job();
    job.mutable_model()->set_name(name);
    job.mutable_dataset()->set_limit_train(16);
    job.mutable_dataset()->set_limit_test(10);  // one of each class (stratified)
    job.set_batch_size(8);
    const RunResult result = RunJob(*executor, request);
    ASSERT_TRUE(result.status.ok()) << name << ": " << result.status;
    EXPECT_EQ(result.steps().size(), 2u) << name;
    EXPECT_EQ(result.CountEpochs(), 1) << name;
    for (const auto& step : result.steps()) EXPECT_TRUE(std::isfinite(step.loss())) << name;
  }
}

TEST(ExecutorRunTest, ListModelsAndValidateDuringARunLeaveItsLossesAlone) {
  // Neither builds a model, so neither draws from the generator the running job's dropout uses.
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->mutable_dataset()->set_limit_train(320);
  request.mutable_train_job()->mutable_dataset()->set_limit_test(100);
  auto executor = MakeExecutor();
  const RunResult alone = RunJob(*executor, request);
  std::atomic<bool> done{false};
  int calls = 0;
  std::thread lister([&] {
    mpsd::v1::SubmitJobRequest resnet = request;
    resnet.mutable_train_job()->mutable_model()->set_name("resnet50");
    while (!done) {
      EXPECT_TRUE(executor->ListModels(mpsd::v1::ListModelsRequest()).ok());
      EXPECT_TRUE(executor->Validate(resnet).ok());
      ++calls;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const RunResult together = RunJob(*executor, request);
  done = true;
  lister.join();
  ASSERT_TRUE(alone.status.ok() && together.status.ok());
  EXPECT_GT(calls, 0);
  EXPECT_EQ(alone.losses(), together.losses());
}

TEST(ExecutorValidateTest, PrecisionIsCheckedAgainstTheDevice) {
  auto executor = MakeExecutor();
  mpsd::v1::SubmitJobRequest request = SmallJob();
  request.mutable_train_job()->set_precision("bf16");
  EXPECT_TRUE(executor->Validate(request).ok()) << executor->Validate(request);
  request.mutable_train_job()->set_precision("fp16");
  const absl::Status status = executor->Validate(request);
  if (absl::StartsWith(executor->GetDevice().torch_version(), "1.")) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()),
                StartsWith("train_job.precision: fp16 cannot run on device cpu: fp16 autocast is "
                           "not available on cpu with LibTorch 1."));
  } else {
    EXPECT_TRUE(status.ok()) << status;
  }
}

TEST(ExecutorRunTest, ConvNetWithSgdOneCycleClippingAndAccumulationLearns) {
  // 2000 examples in batches of 32: 63 batches, 2 per step: 32 steps of OneCycleLR.
  mpsd::v1::SubmitJobRequest request = SmallJob();
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.set_batch_size(32);
  job.set_grad_accumulation_steps(2);
  job.set_grad_clip_norm(1.0);
  job.set_label_smoothing(0.1);
  Sgd(job).set_momentum(0.9);
  job.mutable_optimizer()->set_nesterov(true);
  job.mutable_optimizer()->set_learning_rate(0.05);
  Schedule(job, "onecycle").set_pct_start(0.25);
  auto executor = MakeExecutor();
  const RunResult result = RunJob(*executor, request);
  ASSERT_TRUE(result.status.ok()) << result.status;

  ScheduleConfig config;
  config.kind = ScheduleKind::kOneCycle;
  config.max_lr = 0.05;  // max_lr defaults to the optimizer's learning rate
  config.pct_start = 0.25;
  config.steps_per_epoch = 32;
  config.total_steps = 32;
  const absl::StatusOr<mpsd::trainer::Schedule> schedule = mpsd::trainer::Schedule::Create(config);
  ASSERT_TRUE(schedule.ok());
  const std::vector<mpsd::v1::StepMetrics> steps = result.steps();
  ASSERT_EQ(steps.size(), 32u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_DOUBLE_EQ(steps[i].learning_rate(), schedule->LearningRate(i)) << i;
    EXPECT_EQ(steps[i].batch_size(), i + 1 < steps.size() ? 64 : 2000 - 31 * 64);
    EXPECT_FALSE(steps[i].skipped());
  }
  double first = 0, last = 0;
  for (int i = 0; i < 8; ++i) {
    first += steps[i].loss() / 8;
    last += steps[steps.size() - 8 + i].loss() / 8;
  }
  EXPECT_LT(last, 0.8 * first) << "first 8 steps " << first << ", last 8 " << last;
  const mpsd::v1::JobEvent& epoch = result.events[result.events.size() - 2];
  ASSERT_TRUE(epoch.has_epoch());
  EXPECT_TRUE(epoch.epoch().evaluated());
  EXPECT_DOUBLE_EQ(epoch.epoch().learning_rate(), schedule->LearningRate(32));
  EXPECT_GT(epoch.epoch().test_accuracy(), 0.6);
  const mpsd::v1::JobSummary& summary = result.events.back().summary();
  EXPECT_EQ(summary.optimizer(), "sgd");
  EXPECT_EQ(summary.schedule(), "onecycle");
  EXPECT_EQ(summary.precision(), "fp32");
  EXPECT_EQ(summary.skipped_steps(), 0);
  EXPECT_EQ(summary.final_loss_scale(), 0);
  bool logged = false;
  for (const auto& event : result.events) {
    if (event.has_log() && absl::StrContains(event.log().text(), "training convnet")) {
      logged = true;
      EXPECT_THAT(event.log().text(),
                  AllOf(HasSubstr("sgd lr 0.05"), HasSubstr("nesterov"),
                        HasSubstr("schedule onecycle (max_lr 0.05, pct_start 0.25, cos"),
                        HasSubstr("precision fp32"), HasSubstr("× 2 accumulated")));
    }
  }
  EXPECT_TRUE(logged);
}

TEST(ExecutorRunTest, MlpInBf16WithAdamWAndCosineIsDeterministicAndLearns) {
  // 3 epochs of 2000 examples in batches of 32: 189 steps; evaluated after epochs 2 and 3.
  mpsd::v1::SubmitJobRequest request = SmallJob();
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("mlp");
  job.set_batch_size(32);
  job.set_epochs(3);
  job.set_eval_every_epochs(2);
  job.set_precision("bf16");
  job.mutable_optimizer()->set_name("adamw");
  Schedule(job, "cosine").set_warmup_steps(20);
  job.set_grad_clip_norm(5.0);
  auto executor = MakeExecutor();
  const RunResult a = RunJob(*executor, request);
  const RunResult b = RunJob(*executor, request);
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  ASSERT_EQ(a.losses().size(), 189u);
  EXPECT_EQ(a.losses(), b.losses());  // bitwise

  const std::vector<float> losses = a.losses();
  double first = 0, last = 0;
  for (int i = 0; i < 20; ++i) {
    first += losses[i] / 20;
    last += losses[losses.size() - 20 + i] / 20;
  }
  EXPECT_LT(last, 0.6 * first) << "first 20 steps " << first << ", last 20 " << last;
  EXPECT_EQ(a.steps().front().learning_rate(), 0);  // linear warm-up from 0
  EXPECT_DOUBLE_EQ(a.steps()[10].learning_rate(), 1e-3 * 10 / 20);
  std::vector<bool> evaluated;
  for (const auto& event : a.events) {
    if (event.has_epoch()) evaluated.push_back(event.epoch().evaluated());
  }
  EXPECT_THAT(evaluated, ::testing::ElementsAre(false, true, true));
  const mpsd::v1::JobSummary& summary = a.events.back().summary();
  EXPECT_EQ(summary.optimizer(), "adamw");
  EXPECT_EQ(summary.schedule(), "cosine");
  EXPECT_EQ(summary.precision(), "bf16");
  EXPECT_GT(summary.test_accuracy(), 0.6);
}

TEST(ExecutorDeviceTest, DescribesTheCpu) {
  auto executor = MakeExecutor();
  const mpsd::v1::DeviceInfo device = executor->GetDevice();
  EXPECT_THAT(device.available(), Contains("cpu"));
  EXPECT_FALSE(device.kind().empty());
  EXPECT_FALSE(device.name().empty());
  EXPECT_FALSE(device.torch_version().empty());
  EXPECT_GT(device.cpu_threads(), 0);
  if (device.kind() == "cpu") {
    EXPECT_GT(device.total_memory_bytes(), 0);
    EXPECT_EQ(device.allocated_bytes(), 0);
  }
  EXPECT_EQ(device.jobs_run(), 0);
}

// cpu_threads 0 means one intra-op thread per CPU the process may run on (issue 15: LibTorch's
// own default gave 1 on a 2-vCPU machine); a narrower affinity (taskset, a cpuset) narrows it,
// and an explicit cpu_threads wins.
TEST(ExecutorDeviceTest, DefaultCpuThreadsAreTheCpusThisProcessMayUse) {
  cpu_set_t all;
  CPU_ZERO(&all);
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  const int cpus = CPU_COUNT(&all);
  Executor::Options explicit_threads;
  explicit_threads.cpu_threads = 3;
  absl::StatusOr<std::unique_ptr<Executor>> three = CreateTorchExecutor(explicit_threads);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ((*three)->GetDevice().cpu_threads(), 3);
  if (cpus >= 2) {
    int first = 0;
    while (!CPU_ISSET(first, &all)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    EXPECT_EQ(AvailableCpuCount(), 1);
    EXPECT_EQ(MakeExecutor()->GetDevice().cpu_threads(), 1);
    ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
  }
  EXPECT_EQ(AvailableCpuCount(), cpus);
  const mpsd::v1::DeviceInfo device = MakeExecutor()->GetDevice();
  EXPECT_EQ(device.cpu_threads(), cpus);
  if (device.kind() == "cpu") {
    EXPECT_THAT(device.name(), HasSubstr(absl::StrCat("(", cpus, " thread")));
  }
}

}  // namespace
}  // namespace mpsd::trainer
