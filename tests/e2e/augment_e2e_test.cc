// AugmentationSpec through a real mpsd and mpsd-executor: bad values are refused at submit with
// INVALID_ARGUMENT naming the field; mixup on a regression is refused naming the field and the
// task; a Fashion-MNIST job with every augmentation at once (resize + center_crop changing the
// model's input, random_resized_crop, flip, rotation, colour jitter, erasing, mixup and cutmix)
// trains, learns, says its preprocessing in model.json, and gives the same step losses for the
// same seed and other ones for another seed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "tests/e2e/daemon.h"

namespace mpsd::testing {
namespace {

using mpsd::v1::AugmentationSpec;
using ::testing::HasSubstr;

constexpr char kPython[] = MPSD_TORCH_PYTHON;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class AugmentE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>();
    daemon_ = std::make_unique<Daemon>(dir_->str() + "/state", dir_->str() + "/mpsd.sock");
    daemon_->Start();
  }

  // A short Fashion-MNIST job (1 × 28 × 28) with `set` applied to its augmentation.
  static mpsd::v1::SubmitJobRequest Job(const std::function<void(AugmentationSpec&)>& set) {
    mpsd::v1::SubmitJobRequest request = TrainJobRequest(512, 256, 2, 64);
    set(*request.mutable_train_job()->mutable_dataset()->mutable_augmentation());
    return request;
  }

  std::vector<float> StepLosses(const std::string& id) {
    std::vector<float> losses;
    for (const mpsd::v1::JobEvent& event : rpc::StreamAll(*daemon_, id)) {
      if (event.has_step()) losses.push_back(event.step().loss());
    }
    return losses;
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(AugmentE2eTest, BadValuesAreRefusedAtSubmitNamingTheField) {
  struct Case {
    std::function<void(AugmentationSpec&)> set;
    std::string error;
  };
  const std::string field = "train_job.dataset.augmentation.";
  const std::vector<Case> cases = {
      {[](AugmentationSpec& a) { a.mutable_mixup()->set_alpha(-1); },
       field + "mixup.alpha: must be > 0"},
      {[](AugmentationSpec& a) { a.mutable_cutmix(); }, field + "cutmix: needs alpha"},
      {[](AugmentationSpec& a) {
         a.mutable_random_resized_crop()->add_scale(0);
         a.mutable_random_resized_crop()->add_scale(1);
       },
       field + "random_resized_crop.scale[0]: must be in (0, 1]"},
      {[](AugmentationSpec& a) {
         a.mutable_random_resized_crop()->add_scale(0.5);
         a.mutable_random_resized_crop()->add_scale(1.5);
       },
       field + "random_resized_crop.scale[1]: must be in (0, 1]"},
      {[](AugmentationSpec& a) {
         a.mutable_random_resized_crop()->add_scale(0.9);
         a.mutable_random_resized_crop()->add_scale(0.5);
       },
       field + "random_resized_crop.scale: min 0.9 is larger than max 0.5"},
      {[](AugmentationSpec& a) { a.mutable_random_resized_crop()->add_ratio(0.75); },
       field + "random_resized_crop.ratio: needs [min, max], got 1 values"},
      {[](AugmentationSpec& a) { a.add_center_crop(40); },
       field + "center_crop: 40×40 is larger than the dataset's images (28×28)"},
      {[](AugmentationSpec& a) {
         a.add_resize(20);
         a.add_center_crop(24);
       },
       field + "center_crop: 24×24 is larger than the resized images (20×20)"},
      {[](AugmentationSpec& a) {
         a.add_resize(32);
         a.add_center_crop(30);
         a.mutable_random_resized_crop()->add_size(28);
       },
       field + "random_resized_crop.size: 28×28, but evaluation batches are 30×30"},
      {[](AugmentationSpec& a) { a.add_resize(0); }, field + "resize: must be in [1, 4096]"},
      {[](AugmentationSpec& a) { a.mutable_color_jitter()->set_hue(0.7); },
       field + "color_jitter.hue: must be in [0, 0.5]"},
      {[](AugmentationSpec& a) { a.mutable_color_jitter()->set_brightness(-0.1); },
       field + "color_jitter.brightness"},
      {[](AugmentationSpec& a) { a.mutable_random_erasing()->set_p(1.5); },
       field + "random_erasing.p: must be in [0, 1]"},
      {[](AugmentationSpec& a) {
         a.mutable_random_erasing()->add_value(1);
         a.mutable_random_erasing()->add_value(2);
       },
       field + "random_erasing.value: needs one value or one per channel (1), got 2"},
      {[](AugmentationSpec& a) {
         a.mutable_random_rotation()->add_degrees(10);
         a.mutable_random_rotation()->add_degrees(5);
       },
       field + "random_rotation.degrees: min 10 is larger than max 5"},
      {[](AugmentationSpec& a) { a.set_random_crop_padding(28); },
       field + "random_crop_padding: must be smaller than the image's height and width"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<mpsd::v1::Job> job = rpc::Submit(*daemon_, Job(c.set));
    ASSERT_FALSE(job.ok()) << c.error;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(c.error));
  }
  // The daemon still runs a good job.
  const mpsd::v1::Job good = rpc_ok::Submit(*daemon_, TrainJobRequest(64, 64, 1, 32));
  EXPECT_EQ(rpc_ok::WaitForEnd(*daemon_, good.id()).state(), mpsd::v1::Job::SUCCEEDED);
}

TEST_F(AugmentE2eTest, MixupAndCutmixAreRefusedForRegression) {
  if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch";
  const std::string file = dir_->str() + "/images_regression.pt";
  const std::string script = dir_->str() + "/write.py";
  WriteFile(script, R"PY(
import sys, torch
g = torch.Generator().manual_seed(0)
split = lambda n: {"x": torch.rand(n, 1, 8, 8, generator=g), "y": torch.rand(n, generator=g)}
torch.save({"train": split(64), "test": split(32)}, sys.argv[1])
)PY");
  ASSERT_EQ(std::system(absl::StrCat(kPython, " ", script, " ", file).c_str()), 0);
  for (const char* const name : {"mixup", "cutmix"}) {
    const std::string mix = name;
    mpsd::v1::SubmitJobRequest request = TrainJobRequest(0, 0, 1, 16, "mlp");
    mpsd::v1::TrainJob& job = *request.mutable_train_job();
    job.set_task("regression");
    job.mutable_model()->set_num_classes(1);
    job.mutable_dataset()->set_name("tensors");
    job.mutable_dataset()->set_root(file);
    AugmentationSpec& augmentation = *job.mutable_dataset()->mutable_augmentation();
    (mix == "mixup" ? augmentation.mutable_mixup() : augmentation.mutable_cutmix())->set_alpha(0.2);
    absl::StatusOr<mpsd::v1::Job> refused = rpc::Submit(*daemon_, request);
    ASSERT_FALSE(refused.ok()) << mix;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr(absl::StrCat("train_job.dataset.augmentation.", mix,
                                       ": mixes one-hot class targets: task classification "
                                       "only, not regression")));
    // Without the mix the same job runs (the refusal is the mix's, not the data's).
    augmentation.Clear();
    augmentation.set_horizontal_flip(true);
    const mpsd::v1::Job ok = rpc_ok::Submit(*daemon_, request);
    EXPECT_EQ(rpc_ok::WaitForEnd(*daemon_, ok.id()).state(), mpsd::v1::Job::SUCCEEDED) << mix;
  }
}

// Every augmentation at once: resize 32 + center_crop 30 (the model takes 30 × 30, evaluation
// batches are resized and cropped so), random_resized_crop to 30 × 30, flip, rotation, colour
// jitter, erasing, mixup and cutmix.
void EveryAugmentation(AugmentationSpec& a) {
  a.add_resize(32);
  a.add_center_crop(30);
  a.mutable_random_resized_crop()->add_scale(0.5);
  a.mutable_random_resized_crop()->add_scale(1.0);
  a.set_horizontal_flip(true);
  a.mutable_random_rotation()->add_degrees(10);
  a.mutable_color_jitter()->set_brightness(0.3);
  a.mutable_color_jitter()->set_contrast(0.3);
  a.mutable_random_erasing()->set_p(0.25);
  a.mutable_mixup()->set_alpha(0.2);
  a.mutable_cutmix()->set_alpha(1.0);
}

TEST_F(AugmentE2eTest, EveryAugmentationTrainsAndTheSameSeedGivesTheSameSteps) {
  mpsd::v1::SubmitJobRequest request = Job(EveryAugmentation);
  const mpsd::v1::Job first = rpc_ok::Submit(*daemon_, request);
  const mpsd::v1::Job ended = rpc_ok::WaitForEnd(*daemon_, first.id());
  ASSERT_EQ(ended.state(), mpsd::v1::Job::SUCCEEDED) << ended.message();
  // 10 classes: chance is 0.1; 2 epochs of 512 heavily augmented examples learn something.
  EXPECT_GT(ended.summary().test_accuracy(), 0.3);
  const std::string card = ReadText(ended.summary().model_json_path());
  EXPECT_THAT(card, HasSubstr("then resize to 32×32"));
  EXPECT_THAT(card, HasSubstr("then centre-crop to 30×30"));
  // The model's input is the centre crop's size.
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(card, &parsed).ok()) << card;
  std::vector<double> shape;
  for (const google::protobuf::Value& v :
       parsed.fields().at("input").struct_value().fields().at("shape").list_value().values()) {
    shape.push_back(v.number_value());
  }
  EXPECT_EQ(shape, (std::vector<double>{1, 30, 30}));

  const std::vector<float> losses = StepLosses(first.id());
  ASSERT_EQ(losses.size(), 16u);  // 2 epochs of 512 / 64
  const mpsd::v1::Job again = rpc_ok::Submit(*daemon_, request);
  ASSERT_EQ(rpc_ok::WaitForEnd(*daemon_, again.id()).state(), mpsd::v1::Job::SUCCEEDED);
  EXPECT_EQ(StepLosses(again.id()), losses);
  request.mutable_train_job()->set_seed(2);
  const mpsd::v1::Job other = rpc_ok::Submit(*daemon_, request);
  ASSERT_EQ(rpc_ok::WaitForEnd(*daemon_, other.id()).state(), mpsd::v1::Job::SUCCEEDED);
  EXPECT_NE(StepLosses(other.id()), losses);
}

}  // namespace
}  // namespace mpsd::testing
