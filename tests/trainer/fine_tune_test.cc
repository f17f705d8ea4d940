// trainer/fine_tune.h on the zoo's resnet18 (CPU): frozen parameters and their BatchNorm layers
// in eval mode through train(), parameter groups and their learning-rate scales, field errors.
#include "trainer/fine_tune.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainer/models.h"

namespace mpsd::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::shared_ptr<ClassifierImpl> ResNet18() {
  ModelConfig config;
  config.input_shape = {3, 32, 32};
  config.num_classes = 3;
  return FindModel("resnet18")->make(config);
}

const FieldChecks& Fields() {
  static const FieldChecks* const fields = new FieldChecks("train_job");
  return *fields;
}

FineTuneConfig Resolve(const mpsd::v1::TrainJob& spec, const OptimizerConfig& optimizer) {
  absl::StatusOr<FineTuneConfig> config = ResolveFineTune(spec, optimizer, Fields());
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : FineTuneConfig();
}

bool Training(ClassifierImpl& model, const std::string& name) {
  return model.named_modules()[name]->is_training();
}

TEST(FineTuneTest, FrozenBlocksStayInEvalModeAndOutOfTheOptimizer) {
  mpsd::v1::TrainJob spec;
  for (const char* prefix : {"conv1.", "bn1.", "layer1."}) spec.add_freeze(prefix);
  OptimizerConfig optimizer;
  const FineTuneConfig config = Resolve(spec, optimizer);
  std::shared_ptr<ClassifierImpl> model = ResNet18();
  std::vector<std::string> notes;
  absl::StatusOr<ParameterGroups> groups =
      PrepareFineTune(config, optimizer, *model, Fields(), notes);
  ASSERT_TRUE(groups.ok()) << groups.status();
  // conv1 (9408) + bn1 (128) + layer1 (2 blocks × (2 × 36864 + 2 × 128)).
  EXPECT_EQ(groups->frozen_parameters, 9408 + 128 + 2 * (2 * 36864 + 2 * 128));
  EXPECT_THAT(notes, ElementsAre(HasSubstr("5 BatchNorm layer(s) of frozen blocks kept in eval")));
  EXPECT_FALSE(model->named_parameters()["layer1.0.conv1.weight"].requires_grad());
  EXPECT_TRUE(model->named_parameters()["layer2.0.conv1.weight"].requires_grad());
  model->train();
  EXPECT_FALSE(Training(*model, "bn1"));
  EXPECT_FALSE(Training(*model, "layer1.1.bn2"));
  EXPECT_TRUE(Training(*model, "layer2.0.bn1"));
  EXPECT_TRUE(Training(*model, "layer2.0.downsample.1"));
  ASSERT_EQ(groups->groups.size(), 1u);
  for (const torch::Tensor& p : groups->groups[0].parameters) EXPECT_TRUE(p.requires_grad());
}

// Prefixes that freeze everything leave nothing to train: refused, naming freeze (at submit,
// where the job's model is built to check the spec, as here).
TEST(FineTuneTest, FreezingEveryParameterIsAFieldError) {
  mpsd::v1::TrainJob spec;
  for (const char* prefix : {"conv1.", "bn1.", "layer", "fc."}) spec.add_freeze(prefix);
  OptimizerConfig optimizer;
  const FineTuneConfig config = Resolve(spec, optimizer);
  std::shared_ptr<ClassifierImpl> model = ResNet18();
  std::vector<std::string> notes;
  absl::StatusOr<ParameterGroups> groups =
      PrepareFineTune(config, optimizer, *model, Fields(), notes);
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(groups.status().message(),
            "train_job.freeze: conv1., bn1., layer, fc. freezes every parameter of the model: "
            "nothing would train (name fewer prefixes, or the ones that train with trainable, "
            "e.g. [\"fc.\"])");
}

TEST(FineTuneTest, ParamGroupsGetTheirOwnSettingsScaledByTheSchedule) {
  mpsd::v1::TrainJob spec;
  mpsd::v1::ParamGroupSpec* group = spec.add_param_groups();
  group->set_prefix("layer4.");
  group->set_learning_rate(1e-4);
  group->set_weight_decay(0.5);
  OptimizerConfig optimizer;
  optimizer.kind = OptimizerKind::kSgd;
  optimizer.learning_rate = 1e-3;
  const FineTuneConfig config = Resolve(spec, optimizer);
  std::shared_ptr<ClassifierImpl> model = ResNet18();
  std::vector<std::string> notes;
  absl::StatusOr<ParameterGroups> groups =
      PrepareFineTune(config, optimizer, *model, Fields(), notes);
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->groups.size(), 2u);
  EXPECT_EQ(groups->groups[0].parameters.size(), 15u);  // layer4: 2 blocks, with a downsample
  EXPECT_EQ(groups->groups[1].parameters.size(), 62u - 15u);
  EXPECT_THAT(groups->learning_rate_scales, ElementsAre(::testing::DoubleNear(0.1, 1e-12), 1));
  std::unique_ptr<torch::optim::Optimizer> built =
      MakeOptimizer(std::move(groups->groups), optimizer);
  SetLearningRate(*built, 0.5, groups->learning_rate_scales);
  ASSERT_EQ(built->param_groups().size(), 2u);
  EXPECT_NEAR(built->param_groups()[0].options().get_lr(), 0.05, 1e-12);
  EXPECT_EQ(built->param_groups()[1].options().get_lr(), 0.5);
  EXPECT_EQ(
      static_cast<torch::optim::SGDOptions&>(built->param_groups()[0].options()).weight_decay(),
      0.5);
}

TEST(FineTuneTest, FieldErrorsNameTheField) {
  OptimizerConfig optimizer;
  const auto error = [&](const mpsd::v1::TrainJob& spec) {
    absl::StatusOr<FineTuneConfig> config = ResolveFineTune(spec, optimizer, Fields());
    EXPECT_FALSE(config.ok());
    return std::string(config.status().message());
  };
  mpsd::v1::TrainJob spec;
  spec.add_freeze("");
  EXPECT_EQ(error(spec),
            "train_job.freeze[0]: empty: a prefix of parameter names "
            "(\"layer4.\", \"fc.\")");
  spec.Clear();
  spec.add_param_groups()->set_prefix("fc.");
  spec.mutable_param_groups(0)->set_learning_rate(-1);
  EXPECT_THAT(error(spec), HasSubstr("train_job.param_groups[0].learning_rate: "));
  spec.Clear();
  spec.mutable_model()->set_torchscript("net.pt");
  spec.mutable_model()->set_weights("w.pt");
  EXPECT_THAT(error(spec), HasSubstr("train_job.model.weights: for a zoo model"));
  spec.Clear();
  spec.mutable_model()->set_strict(false);
  EXPECT_EQ(error(spec), "train_job.model.strict: applies only with model.weights");
}

}  // namespace
}  // namespace mpsd::trainer
