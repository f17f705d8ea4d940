// Tests for trainer/datasets.cc: the dataset part of validation (ResolveDataset, and through
// Executor::Validate), decoding CIFAR-10 files the tests write onto the CPU, synthetic data, and
// short CPU jobs through the real Executor on both, with augmentation.
#include "trainer/datasets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"
#include "tests/trainer/cifar_files.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;
using ::mpsd::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::MakeRecord;
using ::testing::StartsWith;
using testing::WriteCifarRoot;

mpsd::v1::DatasetSpec Cifar(const std::string& root) {
  mpsd::v1::DatasetSpec spec;
  spec.set_name("cifar10");
  spec.set_root(root);
  return spec;
}

mpsd::v1::DatasetSpec Synthetic() {
  mpsd::v1::DatasetSpec spec;
  spec.set_name("synthetic");
  return spec;
}

std::string ErrorOf(const mpsd::v1::DatasetSpec& spec) {
  absl::StatusOr<DatasetConfig> config = ResolveDataset(spec);
  EXPECT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

// ---- ResolveDataset ---------------------------------------------------------------------------

TEST(ResolveDatasetTest, KnowsEveryDatasetAndItsShape) {
  EXPECT_THAT(DatasetNames(), ::testing::ElementsAre("fashion-mnist", "mnist", "cifar10",
                                                     "synthetic", "image_folder", "tensors"));
  TempDir dir("datasets_test_shape");
  WriteCifarRoot(dir.path(), 1, 1);
  absl::StatusOr<DatasetConfig> cifar = ResolveDataset(Cifar(dir.str()));
  ASSERT_TRUE(cifar.ok()) << cifar.status();
  EXPECT_EQ(cifar->input_shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(cifar->num_classes, 10);
  EXPECT_EQ(cifar->root, dir.str());
  EXPECT_FALSE(cifar->augmentation.enabled());

  absl::StatusOr<DatasetConfig> synthetic = ResolveDataset(Synthetic());
  ASSERT_TRUE(synthetic.ok()) << synthetic.status();
  EXPECT_EQ(synthetic->input_shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(synthetic->num_classes, 10);
  EXPECT_EQ(synthetic->synthetic_train, 10000);
  EXPECT_EQ(synthetic->synthetic_test, 1000);
}

TEST(ResolveDatasetTest, CifarDefaultRootAndMissingFileAreNamed) {
  mpsd::v1::DatasetSpec spec = Cifar("");
  if (!fs::exists("/usr/share/datasets/cifar10")) {
    EXPECT_EQ(ErrorOf(spec),
              "train_job.dataset.root: directory /usr/share/datasets/cifar10 does not exist");
  }
  TempDir dir("datasets_test_missing");
  WriteCifarRoot(dir.path(), 1, 1);
  fs::remove(dir.path() / "data_batch_4.bin");
  EXPECT_THAT(ErrorOf(Cifar(dir.str())),
              StartsWith("train_job.dataset.root: " + (dir.path() / "data_batch_4.bin").string() +
                         ": no such file"));
}

TEST(ResolveDatasetTest, RejectsEachBadSyntheticField) {
  struct Case {
    std::vector<int64_t> shape;
    int num_classes;  // 0 = unset
    int64_t train;    // 0 = unset
    int64_t test;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{3, 32, 32, 2}, 0, 0, 0, "train_job.dataset.synthetic.input_shape: "},
      {{3, 0, 32}, 0, 0, 0, "train_job.dataset.synthetic.input_shape: "},
      {{}, -1, 0, 0, "train_job.dataset.synthetic.num_classes: "},
      {{}, 0, -5, 0, "train_job.dataset.synthetic.train_examples: must be > 0, got -5"},
      {{}, 0, 0, -1, "train_job.dataset.synthetic.test_examples: must be > 0, got -1"},
      {{3, 1024, 1024},
       0,
       2000,
       0,
       "train_job.dataset.synthetic.train_examples: 2000 examples of shape [3, 1024, 1024] are "
       "more than 2^32 values"},
  };
  for (const Case& c : cases) {
    mpsd::v1::DatasetSpec spec = Synthetic();
    for (const int64_t dim : c.shape) spec.mutable_synthetic()->add_input_shape(dim);
    if (c.num_classes != 0) spec.mutable_synthetic()->set_num_classes(c.num_classes);
    if (c.train != 0) spec.mutable_synthetic()->set_train_examples(c.train);
    if (c.test != 0) spec.mutable_synthetic()->set_test_examples(c.test);
    EXPECT_THAT(ErrorOf(spec), StartsWith(c.message));
  }
}

TEST(ResolveDatasetTest, SyntheticTakesItsSpecAndTheLimits) {
  mpsd::v1::DatasetSpec spec = Synthetic();
  spec.mutable_synthetic()->add_input_shape(20);
  spec.mutable_synthetic()->set_num_classes(3);
  spec.mutable_synthetic()->set_train_examples(500);
  spec.set_limit_train(200);
  spec.set_limit_test(7);
  absl::StatusOr<DatasetConfig> config = ResolveDataset(spec);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->input_shape, (std::vector<int64_t>{20}));
  EXPECT_EQ(config->num_classes, 3);
  EXPECT_EQ(config->synthetic_train, 200);
  EXPECT_EQ(config->synthetic_test, 7);
}

TEST(ResolveDatasetTest, RejectsBadAugmentation) {
  mpsd::v1::DatasetSpec spec = Synthetic();
  spec.mutable_augmentation()->set_random_crop_padding(-1);
  EXPECT_EQ(ErrorOf(spec),
            "train_job.dataset.augmentation.random_crop_padding: must be >= 0, got -1");
  spec.mutable_augmentation()->set_random_crop_padding(32);
  EXPECT_EQ(ErrorOf(spec),
            "train_job.dataset.augmentation.random_crop_padding: must be smaller than the "
            "image's height and width (32×32), got 32");
  spec.mutable_synthetic()->add_input_shape(3);
  spec.mutable_synthetic()->add_input_shape(40);
  spec.mutable_synthetic()->add_input_shape(8);
  spec.mutable_augmentation()->set_random_crop_padding(8);
  EXPECT_THAT(ErrorOf(spec), HasSubstr("(40×8), got 8"));

  mpsd::v1::DatasetSpec flat = Synthetic();
  flat.mutable_synthetic()->add_input_shape(784);
  flat.mutable_augmentation()->set_horizontal_flip(true);
  EXPECT_EQ(ErrorOf(flat),
            "train_job.dataset.augmentation: needs images [C, H, W], but the examples of "
            "dataset synthetic have shape [784]");
}

TEST(ResolveDatasetTest, AugmentationPadsWithBlackOfTheNormalisedImages) {
  TempDir dir("datasets_test_fill");
  WriteCifarRoot(dir.path(), 1, 1);
  mpsd::v1::DatasetSpec spec = Cifar(dir.str());
  spec.mutable_augmentation()->set_random_crop_padding(4);
  spec.mutable_augmentation()->set_horizontal_flip(true);
  absl::StatusOr<DatasetConfig> config = ResolveDataset(spec);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->augmentation.random_crop_padding, 4);
  EXPECT_TRUE(config->augmentation.horizontal_flip);
  const torch::Tensor& fill = config->augmentation.padding_fill;
  ASSERT_EQ(fill.sizes(), (std::vector<int64_t>{3}));
  EXPECT_FLOAT_EQ(fill[0].item<float>(), -0.4914f / 0.2470f);
  EXPECT_FLOAT_EQ(fill[2].item<float>(), -0.4465f / 0.2616f);
}

// ---- LoadDataset ------------------------------------------------------------------------------

TEST(LoadDatasetTest, DecodesCifarRecordsExactly) {
  TempDir dir("datasets_test_decode");
  WriteCifarRoot(dir.path(), /*per_train_file=*/4, /*test=*/3);
  mpsd::v1::DatasetSpec spec = Cifar(dir.str());
  spec.set_limit_train(10);  // two whole files and half of the third
  spec.set_subset("first");
  absl::StatusOr<DatasetConfig> config = ResolveDataset(spec);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<DeviceDataset> data = LoadDataset(*config, /*seed=*/0, torch::kCPU);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->train.images.sizes(), (std::vector<int64_t>{10, 3, 32, 32}));
  ASSERT_EQ(data->test.images.sizes(), (std::vector<int64_t>{3, 3, 32, 32}));
  EXPECT_EQ(data->train.images.dtype(), torch::kFloat32);
  EXPECT_EQ(data->train.labels.dtype(), torch::kInt64);
  const float mean[3] = {0.4914f, 0.4822f, 0.4465f};
  const float std[3] = {0.2470f, 0.2435f, 0.2616f};
  for (const int64_t i : {0, 5, 9}) {
    const std::vector<uint8_t> record = MakeRecord(i);
    EXPECT_EQ(data->train.labels[i].item<int64_t>(), record[0]);
    // Pixel (c, y, x) is byte 1 + c × 1024 + y × 32 + x of the record.
    for (const auto [c, y, x] : {std::array<int64_t, 3>{0, 0, 0}, {1, 5, 31}, {2, 31, 7}}) {
      const float expected = (record[1 + c * 1024 + y * 32 + x] / 255.0f - mean[c]) / std[c];
      EXPECT_NEAR(data->train.images[i][c][y][x].item<float>(), expected, 1e-5)
          << "example " << i << " pixel " << c << "," << y << "," << x;
    }
  }
  EXPECT_EQ(data->test.labels[2].item<int64_t>(), MakeRecord(1000002)[0]);
}

// Issue 27: limit_train keeps a stratified subset drawn from the seed: one record of each class
// of the 20 (two per class), the same ones for the same seed, each decoded from its own record.
TEST(LoadDatasetTest, CifarLimitKeepsAStratifiedSubsetDrawnFromTheSeed) {
  TempDir dir("datasets_test_stratified");
  WriteCifarRoot(dir.path(), /*per_train_file=*/4, /*test=*/3);
  mpsd::v1::DatasetSpec spec = Cifar(dir.str());
  spec.set_limit_train(10);
  absl::StatusOr<DatasetConfig> config = ResolveDataset(spec);
  ASSERT_TRUE(config.ok()) << config.status();
  const auto load = [&](uint64_t seed) {
    absl::StatusOr<DeviceDataset> data = LoadDataset(*config, seed, torch::kCPU);
    EXPECT_TRUE(data.ok()) << data.status();
    return *std::move(data);
  };
  const DeviceDataset a = load(1), b = load(1);
  EXPECT_EQ(a.train_class_counts, std::vector<int64_t>(10, 1));
  EXPECT_TRUE(torch::equal(a.train.images, b.train.images));
  EXPECT_THAT(a.notes, ::testing::Contains(::testing::HasSubstr(
                           "train subset: stratified, 10 of 20 examples (seed 1)")));
  bool another_draw = false;
  for (const uint64_t seed : {2, 3, 4, 5}) {
    another_draw |= !torch::equal(load(seed).train.images, a.train.images);
  }
  EXPECT_TRUE(another_draw) << "every seed kept the same records";
  const float mean = 0.4914f, std = 0.2470f;
  for (int64_t i = 0; i < 10; ++i) {
    const int64_t label = a.train.labels[i].item<int64_t>();
    const float pixel = a.train.images[i][0][0][1].item<float>();
    bool matches = false;
    for (const int64_t record : {label, label + 10}) {
      matches |= std::abs(pixel - (MakeRecord(record)[2] / 255.0f - mean) / std) < 1e-5;
    }
    EXPECT_TRUE(matches) << "example " << i << " is no record of class " << label;
  }
}

TEST(LoadDatasetTest, SyntheticIsDrawnFromTheSeed) {
  mpsd::v1::DatasetSpec spec = Synthetic();
  spec.mutable_synthetic()->add_input_shape(2);
  spec.mutable_synthetic()->add_input_shape(5);
  spec.mutable_synthetic()->set_num_classes(4);
  spec.mutable_synthetic()->set_train_examples(300);
  spec.mutable_synthetic()->set_test_examples(20);
  absl::StatusOr<DatasetConfig> config = ResolveDataset(spec);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<DeviceDataset> a = LoadDataset(*config, /*seed=*/7, torch::kCPU);
  absl::StatusOr<DeviceDataset> b = LoadDataset(*config, /*seed=*/7, torch::kCPU);
  absl::StatusOr<DeviceDataset> c = LoadDataset(*config, /*seed=*/8, torch::kCPU);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->train.images.sizes(), (std::vector<int64_t>{300, 2, 5}));
  EXPECT_EQ(a->test.labels.sizes(), (std::vector<int64_t>{20}));
  EXPECT_EQ(a->train.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(a->train.labels.max().item<int64_t>(), 3);
  EXPECT_TRUE(torch::equal(a->train.images, b->train.images));
  EXPECT_TRUE(torch::equal(a->test.labels, b->test.labels));
  EXPECT_FALSE(torch::equal(a->train.images, c->train.images));
}

// ---- Jobs through the Executor ----------------------------------------------------------------

std::unique_ptr<Executor> MakeExecutor() {
  Executor::Options options;
  options.steps_per_readback = 4;
  absl::StatusOr<std::unique_ptr<Executor>> executor = CreateTorchExecutor(options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return *std::move(executor);
}

mpsd::v1::SubmitJobRequest Job(const std::string& model, const mpsd::v1::DatasetSpec& dataset) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name(model);
  *job.mutable_dataset() = dataset;
  job.set_batch_size(50);
  job.set_epochs(1);
  job.mutable_optimizer()->set_learning_rate(1e-3);
  job.set_seed(3);
  job.set_device("cpu");
  return request;
}

struct RunResult {
  absl::Status status;
  std::vector<float> losses;
  std::vector<mpsd::v1::EpochMetrics> epochs;
  mpsd::v1::JobSummary summary;
};

RunResult RunJob(Executor& executor, const mpsd::v1::SubmitJobRequest& request) {
  RunResult result;
  CancelFlag cancelled;
  result.status = executor.Run(
      JobContext{"1", ""}, request,
      [&](mpsd::v1::JobEvent event) {
        if (event.has_step()) result.losses.push_back(event.step().loss());
        if (event.has_epoch()) result.epochs.push_back(event.epoch());
        if (event.has_summary()) result.summary = event.summary();
      },
      cancelled);
  return result;
}

TEST(DatasetJobTest, ValidateNamesTheDatasetFields) {
  auto executor = MakeExecutor();
  mpsd::v1::DatasetSpec bad_padding = Synthetic();
  bad_padding.mutable_augmentation()->set_random_crop_padding(40);
  EXPECT_THAT(std::string(executor->Validate(Job("cifar_cnn", bad_padding)).message()),
              StartsWith("train_job.dataset.augmentation.random_crop_padding: must be smaller"));
  mpsd::v1::DatasetSpec bad_shape = Synthetic();
  bad_shape.mutable_synthetic()->add_input_shape(0);
  EXPECT_THAT(std::string(executor->Validate(Job("mlp", bad_shape)).message()),
              StartsWith("train_job.dataset.synthetic.input_shape: "));
  // The model must take the synthetic shape.
  mpsd::v1::DatasetSpec small = Synthetic();
  for (const int64_t dim : {3, 8, 8}) small.mutable_synthetic()->add_input_shape(dim);
  EXPECT_THAT(std::string(executor->Validate(Job("vgg16", small)).message()),
              AllOf(StartsWith("train_job.model.name: "), HasSubstr("dataset synthetic")));
  TempDir dir("datasets_test_validate");
  WriteCifarRoot(dir.path(), 1, 1);
  fs::remove(dir.path() / "test_batch.bin");
  EXPECT_THAT(std::string(executor->Validate(Job("cifar_cnn", Cifar(dir.str()))).message()),
              AllOf(StartsWith("train_job.dataset.root: "), HasSubstr("test_batch.bin")));
}

TEST(DatasetJobTest, TrainsCifarCnnOnCifarFilesWithAugmentation) {
  TempDir dir("datasets_test_run");
  WriteCifarRoot(dir.path(), /*per_train_file=*/60, /*test=*/100);
  mpsd::v1::DatasetSpec spec = Cifar(dir.str());
  spec.mutable_augmentation()->set_random_crop_padding(4);
  spec.mutable_augmentation()->set_horizontal_flip(true);
  auto executor = MakeExecutor();
  const RunResult result = RunJob(*executor, Job("cifar_cnn", spec));
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.losses.size(), 6u);  // 300 / 50
  for (const float loss : result.losses) EXPECT_TRUE(std::isfinite(loss));
  ASSERT_EQ(result.epochs.size(), 1u);
  EXPECT_TRUE(std::isfinite(result.epochs[0].test_loss()));
  EXPECT_EQ(result.summary.train_examples(), 300);
  EXPECT_EQ(result.summary.test_examples(), 100);
}

TEST(DatasetJobTest, SyntheticJobRunsAndHonoursTheLimits) {
  mpsd::v1::DatasetSpec spec = Synthetic();
  for (const int64_t dim : {3, 8, 8}) spec.mutable_synthetic()->add_input_shape(dim);
  spec.mutable_synthetic()->set_train_examples(400);
  spec.mutable_synthetic()->set_test_examples(64);
  spec.set_limit_train(150);
  auto executor = MakeExecutor();
  const RunResult result = RunJob(*executor, Job("mlp", spec));
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.losses.size(), 3u);
  EXPECT_EQ(result.summary.train_examples(), 150);
  EXPECT_EQ(result.summary.test_examples(), 64);
  for (const float loss : result.losses) EXPECT_TRUE(std::isfinite(loss));
}

// With a learning rate too small to change a float32 weight, the model after training is the
// model before it: evaluation must then give the same loss with and without augmentation, while
// the training losses (on augmented batches) differ. A seed gives the same run twice.
TEST(DatasetJobTest, AugmentationChangesTrainingBatchesOnlyAndFollowsTheSeed) {
  mpsd::v1::DatasetSpec plain = Synthetic();
  for (const int64_t dim : {3, 8, 8}) plain.mutable_synthetic()->add_input_shape(dim);
  plain.mutable_synthetic()->set_train_examples(200);
  plain.mutable_synthetic()->set_test_examples(64);
  mpsd::v1::DatasetSpec augmented = plain;
  augmented.mutable_augmentation()->set_random_crop_padding(2);
  augmented.mutable_augmentation()->set_horizontal_flip(true);
  mpsd::v1::SubmitJobRequest plain_job = Job("mlp", plain);
  mpsd::v1::SubmitJobRequest augmented_job = Job("mlp", augmented);
  plain_job.mutable_train_job()->mutable_optimizer()->set_learning_rate(1e-30);
  augmented_job.mutable_train_job()->mutable_optimizer()->set_learning_rate(1e-30);

  auto executor = MakeExecutor();
  const RunResult without = RunJob(*executor, plain_job);
  const RunResult with = RunJob(*executor, augmented_job);
  const RunResult again = RunJob(*executor, augmented_job);
  ASSERT_TRUE(without.status.ok() && with.status.ok() && again.status.ok());
  ASSERT_EQ(with.epochs.size(), 1u);
  ASSERT_EQ(without.epochs.size(), 1u);
  EXPECT_EQ(with.epochs[0].test_loss(), without.epochs[0].test_loss());
  EXPECT_NE(with.losses, without.losses);
  EXPECT_EQ(with.losses, again.losses);
}

}  // namespace
}  // namespace mpsd::trainer
