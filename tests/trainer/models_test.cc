// Tests for trainer/models.cc and trainer/models/: torchvision's parameter counts, the counting
// arithmetic against built modules, forward output shapes, the shape checks against what
// LibTorch actually accepts, and the initialisation. CPU; inputs kept small (one 224×224
// forward each for resnet50 and vgg11).
#include "trainer/models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/models/resnet.h"
#include "trainer/models/sequence.h"
#include "trainer/models/vgg.h"

namespace mpsd::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const ModelEntry& Entry(absl::string_view name) {
  const ModelEntry* entry = FindModel(name);
  EXPECT_NE(entry, nullptr) << name;
  return *entry;
}

ModelConfig Natural(const ModelEntry& entry) {
  return {entry.natural_input_shape, entry.natural_num_classes, ""};
}

// Parameter names of `module`, e.g. "layer1.0.conv1.weight".
std::vector<std::string> ParameterNames(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

int64_t CountWithPrefix(const torch::nn::Module& module, const std::string& prefix) {
  int64_t count = 0;
  for (const auto& item : module.named_parameters()) {
    if (item.key().rfind(prefix, 0) == 0) count += item.value().numel();
  }
  return count;
}

// ---- Registry ---------------------------------------------------------------------------------

TEST(ModelRegistryTest, NamesEveryModelInOrder) {
  EXPECT_THAT(ModelNames(),
              ElementsAre("mlp", "convnet", "cifar_cnn", "resnet18", "resnet34", "resnet50",
                          "vgg11", "vgg16", "lstm", "transformer", "bert_base"));
  EXPECT_EQ(FindModel("resnet101"), nullptr);
  for (const ModelEntry& entry : Models()) {
    EXPECT_TRUE(CheckModelConfig(entry, Natural(entry)).ok()) << entry.name;
    EXPECT_FALSE(entry.description.empty()) << entry.name;
  }
}

// ---- Parameter counts -------------------------------------------------------------------------

TEST(ModelCountTest, TorchvisionCountsAt224And1000Classes) {
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"resnet18", 11'689'512}, {"resnet34", 21'797'672}, {"resnet50", 25'557'032},
      {"vgg11", 132'863'336},   {"vgg16", 138'357'544},
  };
  for (const auto& [name, count] : expected) {
    const ModelEntry& entry = Entry(name);
    EXPECT_THAT(entry.natural_input_shape, ElementsAre(3, 224, 224)) << name;
    EXPECT_EQ(entry.natural_num_classes, 1000) << name;
    EXPECT_EQ(entry.parameters(Natural(entry)), count) << name;
  }
}

TEST(ModelCountTest, SmallModelsAtTheirNaturalInput) {
  EXPECT_EQ(Entry("mlp").parameters(Natural(Entry("mlp"))), 669'706);
  EXPECT_EQ(Entry("convnet").parameters(Natural(Entry("convnet"))), 1'199'882);
  EXPECT_EQ(Entry("cifar_cnn").parameters(Natural(Entry("cifar_cnn"))), 1'078'122);
  EXPECT_EQ(Entry("cifar_cnn").parameters({{1, 28, 28}, 10, ""}), 733'482);
  EXPECT_EQ(Entry("lstm").parameters(Natural(Entry("lstm"))), 3'421'194);
  EXPECT_EQ(Entry("transformer").parameters(Natural(Entry("transformer"))), 3'358'986);
  EXPECT_EQ(Entry("bert_base").parameters(Natural(Entry("bert_base"))), 86'041'346);
  EXPECT_EQ(Entry("transformer").parameters({{128, 768}, 2, "bert_base"}), 86'041'346);
}

TEST(ModelCountTest, BertBaseEncoderLayerHas7087872Parameters) {
  EXPECT_EQ(TransformerEncoderLayerImpl::Parameters(/*hidden=*/768, /*ffn=*/3072), 7'087'872);
  TransformerEncoderLayer layer(/*hidden=*/768, /*heads=*/12, /*ffn=*/3072, /*dropout=*/0.1);
  EXPECT_EQ(CountParameters(*layer), 7'087'872);
}

// What every model is built and run with below: the arithmetic count must be the built
// module's, and a batch of 2 must come out as [2, num_classes].
struct BuildCase {
  std::string model;
  std::vector<int64_t> input_shape;  // empty: the natural one
  int64_t num_classes;               // 0: the natural one
  std::string preset;
  bool forward;  // forward at the natural 224×224 only where asked (it is slow on CPU)
};

void BuildAndRun(const BuildCase& c) {
  SCOPED_TRACE(c.model + " at " + FormatShape(c.input_shape) + " preset " + c.preset);
  const ModelEntry& entry = Entry(c.model);
  ModelConfig config = Natural(entry);
  if (!c.input_shape.empty()) config.input_shape = c.input_shape;
  if (c.num_classes > 0) config.num_classes = c.num_classes;
  config.preset = c.preset;
  ASSERT_TRUE(CheckModelConfig(entry, config).ok()) << CheckModelConfig(entry, config);
  torch::manual_seed(0);
  const std::shared_ptr<ClassifierImpl> model = entry.make(config);
  EXPECT_EQ(CountParameters(*model), entry.parameters(config));
  if (!c.forward) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(ZeroInputs(config, /*batch_size=*/2));
  EXPECT_THAT(logits.sizes().vec(), ElementsAre(2, config.num_classes));
  EXPECT_EQ(logits.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
}

TEST(ModelBuildTest, SmallModels) {
  for (const BuildCase& c : std::vector<BuildCase>{
           {"mlp", {}, 0, "", true},
           {"mlp", {3, 32, 32}, 10, "", true},
           {"mlp", {16, 12}, 4, "", true},
           {"convnet", {}, 0, "", true},
           {"convnet", {3, 32, 32}, 10, "", true},
           {"convnet", {1, 6, 9}, 3, "", true},
           {"cifar_cnn", {}, 0, "", true},
           {"cifar_cnn", {1, 28, 28}, 10, "", true},
           {"cifar_cnn", {3, 40, 36}, 7, "", true},
           {"cifar_cnn", {2, 8, 8}, 2, "", true},
       }) {
    BuildAndRun(c);
  }
}

// ModelSpec.dropout: 0 makes a training-mode forward pass that of eval mode (no unit dropped);
// unset keeps the architecture's own dropout, which zeroes some units in training mode.
TEST(ModelBuildTest, DropoutOverridesEveryDropoutLayer) {
  for (const std::string name : {"mlp", "convnet", "cifar_cnn", "transformer"}) {
    SCOPED_TRACE(name);
    const ModelEntry& entry = Entry(name);
    ModelConfig config = Natural(entry);
    const torch::Tensor inputs = torch::randn(ZeroInputs(config, 4).sizes());
    for (const bool off : {true, false}) {
      config.dropout = off ? std::optional<double>(0.0) : std::nullopt;
      torch::manual_seed(1);
      std::shared_ptr<ClassifierImpl> model = entry.make(config);
      if (name == "cifar_cnn") {  // BatchNorm: compare in train mode against itself, not eval
        model->train();
        torch::manual_seed(2);
        const torch::Tensor first = model->forward(inputs);
        torch::manual_seed(3);
        const torch::Tensor second = model->forward(inputs);
        EXPECT_EQ(torch::equal(first, second), off);
        continue;
      }
      model->eval();
      const torch::Tensor expected = model->forward(inputs);
      model->train();
      const torch::Tensor trained = model->forward(inputs);
      EXPECT_EQ(torch::allclose(trained, expected, /*rtol=*/1e-6, /*atol=*/1e-6), off);
    }
  }
}

TEST(ModelBuildTest, ResNets) {
  for (const BuildCase& c : std::vector<BuildCase>{
           {"resnet18", {}, 0, "", false},
           {"resnet18", {1, 28, 28}, 10, "", true},
           {"resnet18", {3, 32, 32}, 10, "", true},
           {"resnet34", {}, 0, "", false},
           {"resnet34", {1, 28, 28}, 10, "", true},
           {"resnet50", {}, 0, "", true},
           {"resnet50", {1, 28, 28}, 10, "", true},
           {"resnet50", {3, 1, 1}, 5, "", true},
       }) {
    BuildAndRun(c);
  }
}

TEST(ModelBuildTest, Vggs) {
  for (const BuildCase& c : std::vector<BuildCase>{
           {"vgg11", {}, 0, "", true},
           {"vgg11", {1, 40, 36}, 7, "", true},
           {"vgg16", {}, 0, "", false},
           {"vgg16", {3, 32, 32}, 10, "", true},
       }) {
    BuildAndRun(c);
  }
}

TEST(ModelBuildTest, SequenceModels) {
  for (const BuildCase& c : std::vector<BuildCase>{
           {"lstm", {}, 0, "", true},
           {"lstm", {1, 28, 28}, 10, "", true},
           {"lstm", {30, 20}, 3, "", true},
           {"transformer", {}, 0, "", true},
           {"transformer", {1, 28, 28}, 10, "", true},
           {"transformer", {512, 3}, 4, "", true},
           {"transformer", {8, 16}, 2, "bert_base", true},
           {"bert_base", {}, 0, "", false},
       }) {
    BuildAndRun(c);
  }
}

TEST(ModelBuildTest, BertBaseHas85054464ParametersInItsTwelveLayers) {
  torch::manual_seed(0);
  const std::shared_ptr<ClassifierImpl> model = Entry("bert_base").make({{8, 16}, 2, ""});
  EXPECT_EQ(CountWithPrefix(*model, "layers."), 85'054'464);
  EXPECT_EQ(CountWithPrefix(*model, "layers.11."), 7'087'872);
  EXPECT_EQ(CountWithPrefix(*model, "layers.12."), 0);
}

// ---- Names and initialisation as torchvision's ------------------------------------------------

TEST(ModelInitTest, ResNet50HasTorchvisionNamesAndInit) {
  torch::manual_seed(0);
  const std::shared_ptr<ClassifierImpl> model = Entry("resnet50").make({{3, 32, 32}, 10, ""});
  const std::vector<std::string> names = ParameterNames(*model);
  for (const char* name : {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight",
                           "layer1.0.downsample.0.weight", "layer1.0.downsample.1.bias",
                           "layer2.0.conv2.weight", "layer4.2.bn3.bias", "fc.weight", "fc.bias"}) {
    EXPECT_THAT(names, ::testing::Contains(name));
  }
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("layer1.1.downsample.0.weight")));
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    const torch::Tensor& p = item.value();
    if (name.find("bn") != std::string::npos || name.find("downsample.1") != std::string::npos) {
      const double expected = name.size() > 6 && name.substr(name.size() - 6) == "weight" ? 1 : 0;
      EXPECT_TRUE(p.eq(expected).all().item<bool>()) << name;
    }
  }
  // kaiming_normal, fan_out, ReLU: std = sqrt(2 / (out_channels × k × k)). Stride on the 3×3
  // convolution (v1.5): layer2.0.conv2 has stride 2, layer2.0.conv1 stride 1.
  const torch::Tensor w = model->named_parameters()["layer3.0.conv2.weight"];
  EXPECT_NEAR(w.std().item<double>(), std::sqrt(2.0 / (256 * 9)), 0.003);
  EXPECT_NEAR(w.mean().item<double>(), 0, 0.001);
}

TEST(ModelInitTest, Vgg16HasTorchvisionNamesAndInit) {
  torch::manual_seed(0);
  const std::shared_ptr<ClassifierImpl> model = Entry("vgg16").make({{3, 32, 32}, 10, ""});
  const std::vector<std::string> names = ParameterNames(*model);
  for (const char* name : {"features.0.weight", "features.28.weight", "features.28.bias",
                           "classifier.0.weight", "classifier.3.weight", "classifier.6.bias"}) {
    EXPECT_THAT(names, ::testing::Contains(name));
  }
  auto params = model->named_parameters();
  EXPECT_NEAR(params["classifier.3.weight"].std().item<double>(), 0.01, 0.0005);
  EXPECT_TRUE(params["classifier.0.bias"].eq(0).all().item<bool>());
  EXPECT_TRUE(params["features.28.bias"].eq(0).all().item<bool>());
  EXPECT_NEAR(params["features.28.weight"].std().item<double>(), std::sqrt(2.0 / (512 * 9)), 0.002);
}

// ---- Shape checks: what the arithmetic rejects LibTorch rejects too --------------------------

TEST(ModelCheckTest, VggNeeds32x32AndSaysWhy) {
  const absl::Status status = CheckModelConfig(Entry("vgg16"), {{1, 28, 28}, 10, ""});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "vgg16 cannot take 1×28×28 images: its 5 2×2 max-pools reduce 28×28 to 0×0, so it "
            "needs at least 32×32");
  EXPECT_FALSE(CheckModelConfig(Entry("vgg11"), {{3, 31, 64}, 10, ""}).ok());
  EXPECT_TRUE(CheckModelConfig(Entry("vgg11"), {{3, 32, 64}, 10, ""}).ok());

  // The convolutions' weights do not depend on H and W, so one vgg11 shows both sides.
  torch::manual_seed(0);
  const std::shared_ptr<ClassifierImpl> model = Entry("vgg11").make({{1, 32, 32}, 10, ""});
  torch::NoGradGuard no_grad;
  EXPECT_NO_THROW(model->forward(torch::zeros({1, 1, 32, 32})));
  EXPECT_THROW(model->forward(torch::zeros({1, 1, 31, 32})), c10::Error);
}

TEST(ModelCheckTest, SmallModelsNeedTheirMinimumSize) {
  EXPECT_THAT(std::string(CheckModelConfig(Entry("convnet"), {{1, 5, 28}, 10, ""}).message()),
              HasSubstr("convnet cannot take 1×5×28 images"));
  EXPECT_FALSE(CheckModelConfig(Entry("cifar_cnn"), {{3, 32, 7}, 10, ""}).ok());
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  // convnet's linear layer is sized for the input, so a 5×5 one cannot even be built: build
  // for 6×6 and feed 5×5.
  EXPECT_THROW(Entry("convnet").make({{1, 6, 6}, 10, ""})->forward(torch::zeros({1, 1, 5, 5})),
               c10::Error);
  EXPECT_THROW(Entry("cifar_cnn").make({{3, 8, 8}, 10, ""})->forward(torch::zeros({2, 3, 7, 8})),
               c10::Error);
}

TEST(ModelCheckTest, RejectsRanksPresetsClassesAndSizes) {
  const auto message = [](absl::string_view model, const ModelConfig& config) {
    const absl::Status status = CheckModelConfig(Entry(model), config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << model;
    return std::string(status.message());
  };
  EXPECT_EQ(message("resnet50", {{128, 128}, 10, ""}),
            "resnet50 takes images [C, H, W], not a shape of 2 dimension(s) (128×128)");
  EXPECT_EQ(message("lstm", {{4, 4, 4, 4}, 10, ""}),
            "input shape must have 1 to 3 dimensions ([C, H, W] or [T, F]), got 4");
  EXPECT_EQ(message("lstm", {{10}, 10, ""}),
            "lstm takes sequences [T, F] or images [C, H, W], not a shape of 1 dimension(s) (10)");
  EXPECT_EQ(message("mlp", {{3, 0, 2}, 10, ""}),
            "input shape every dimension must be in [1, 1048576], got 3×0×2");
  EXPECT_EQ(message("mlp", {{1, 28, 28}, 0, ""}),
            "number of classes must be in [1, 1048576], got 0");
  EXPECT_EQ(message("transformer", {{1, 28, 28}, 10, "large"}),
            "unknown preset \"large\" for transformer (known: small, bert_base)");
  EXPECT_EQ(message("convnet", {{1, 28, 28}, 10, "small"}),
            "convnet has no presets, got \"small\"");
  EXPECT_EQ(message("transformer", {{513, 8}, 10, ""}),
            "transformer cannot take input 513×8: 513 steps, but it has position embeddings for "
            "at most 512");
  EXPECT_TRUE(CheckModelConfig(Entry("mlp"), {{784}, 10, ""}).ok());
}

// ---- Sequence models read images row by row ---------------------------------------------------

TEST(SequenceModelTest, ImageRowsAreSteps) {
  const torch::Tensor images = torch::randn({2, 2, 5, 3});
  // [N, C, H, W] → [N, H, C × W]: step t holds row t of every channel.
  const torch::Tensor steps = AsSequence(images);
  EXPECT_THAT(steps.sizes().vec(), ElementsAre(2, 5, 6));
  EXPECT_TRUE(steps[1][4].slice(/*dim=*/0, 0, 3).equal(images[1][0][4]));
  EXPECT_TRUE(steps[1][4].slice(/*dim=*/0, 3, 6).equal(images[1][1][4]));

  for (const char* name : {"lstm", "transformer"}) {
    torch::manual_seed(0);
    const std::shared_ptr<ClassifierImpl> model = Entry(name).make({{2, 5, 3}, 4, ""});
    model->eval();
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::allclose(model->forward(images), model->forward(steps))) << name;
  }
}

// GatherRows keeps NHWC: the batch of a channels_last dataset is channels_last itself (no copy
// back to NCHW), with the same values index_select gives; a contiguous dataset gathers as before.
TEST(GatherRowsTest, KeepsChannelsLastAndTheValues) {
  torch::manual_seed(3);
  const torch::Tensor nchw = torch::randn({6, 3, 4, 5});
  const torch::Tensor nhwc = nchw.contiguous(at::MemoryFormat::ChannelsLast);
  const torch::Tensor index = torch::tensor({4, 0, 4, 2}, torch::kInt64);
  const torch::Tensor expected = nchw.index_select(0, index);
  const torch::Tensor batch = GatherRows(nhwc, index);
  EXPECT_EQ(batch.sizes(), expected.sizes());
  EXPECT_TRUE(batch.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(batch.is_contiguous());
  EXPECT_TRUE(torch::equal(batch, expected));
  const torch::Tensor plain = GatherRows(nchw, index);
  EXPECT_TRUE(plain.is_contiguous());
  EXPECT_TRUE(torch::equal(plain, expected));
}

// A tensor of one channel is dense in both orders, and contiguous(channels_last) keeps its NCHW
// strides, which cuDNN reads as NCHW: ChannelsLastStrides gives it NHWC's strides on the same
// memory, and GatherRows keeps them, so the ConvNet's first convolution on Fashion-MNIST runs in
// NHWC (its output was converted every step, tests/perf/RESULTS.md, issue 32).
TEST(GatherRowsTest, OneChannelImagesGetChannelsLastStridesOnTheSameMemory) {
  torch::manual_seed(4);
  const torch::Tensor images = torch::randn({6, 1, 4, 5});
  ASSERT_NE(images.contiguous(at::MemoryFormat::ChannelsLast).suggest_memory_format(),
            at::MemoryFormat::ChannelsLast);  // what contiguous() alone leaves
  const torch::Tensor nhwc = ChannelsLastStrides(images);
  EXPECT_EQ(nhwc.suggest_memory_format(), at::MemoryFormat::ChannelsLast);
  EXPECT_EQ(nhwc.data_ptr(), images.data_ptr());
  EXPECT_TRUE(torch::equal(nhwc, images));
  const torch::Tensor index = torch::tensor({5, 1, 1}, torch::kInt64);
  const torch::Tensor batch = GatherRows(nhwc, index);
  EXPECT_EQ(batch.suggest_memory_format(), at::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(torch::equal(batch, images.index_select(0, index)));

  // Several channels: a copy into NHWC, or the tensor itself when it is NHWC already; other
  // ranks untouched.
  const torch::Tensor rgb = torch::randn({2, 3, 4, 4});
  const torch::Tensor rgb_nhwc = ChannelsLastStrides(rgb);
  EXPECT_EQ(rgb_nhwc.suggest_memory_format(), at::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(torch::equal(rgb_nhwc, rgb));
  EXPECT_EQ(ChannelsLastStrides(rgb_nhwc).data_ptr(), rgb_nhwc.data_ptr());
  const torch::Tensor rows = torch::randn({3, 4});
  EXPECT_EQ(ChannelsLastStrides(rows).strides(), rows.strides());

  // The ConvNet's 1-channel conv1 weight too.
  const std::shared_ptr<ClassifierImpl> convnet = Entry("convnet").make({{1, 28, 28}, 10, ""});
  ToChannelsLast(*convnet);
  for (const torch::Tensor& p : convnet->parameters()) {
    if (p.dim() == 4) EXPECT_EQ(p.suggest_memory_format(), at::MemoryFormat::ChannelsLast);
  }
}

// ToChannelsLast converts the convolution weights (4-D) in place and leaves the rest alone.
TEST(GatherRowsTest, ToChannelsLastConvertsConvolutionWeightsOnly) {
  const std::shared_ptr<ClassifierImpl> model = Entry("cifar_cnn").make({{3, 32, 32}, 10, ""});
  std::vector<torch::Tensor> before;
  for (const torch::Tensor& p : model->parameters()) before.push_back(p.detach().clone());
  ToChannelsLast(*model);
  int converted = 0;
  size_t i = 0;
  for (const torch::Tensor& p : model->parameters()) {
    if (p.dim() == 4) {
      ++converted;
      EXPECT_TRUE(p.is_contiguous(at::MemoryFormat::ChannelsLast));
      EXPECT_FALSE(p.is_contiguous());
    }
    EXPECT_TRUE(torch::equal(p, before[i++]));
  }
  EXPECT_GT(converted, 0);
}

}  // namespace
}  // namespace mpsd::trainer
