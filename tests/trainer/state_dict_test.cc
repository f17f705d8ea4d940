// trainer/state_dict.h against files Python's torch.save writes (Debian's python3-torch and
// python3-torchvision): a torchvision resnet18's state dict loaded into the zoo's resnet18 gives
// torchvision's logits; heads of another size, wrong shapes, strict, and files that are refused.
#include "trainer/state_dict.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/common/files.h"
#include "tests/common/temp_dir.h"
#include "trainer/model_export.h"
#include "trainer/models.h"

namespace mpsd::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

constexpr char kPython[] = MPSD_TORCHVISION_PYTHON;

// Written once for the suite.
constexpr char kScript[] = R"PY(
import collections, os, sys, torch, torchvision
out = sys.argv[1]
torch.manual_seed(0)
m = torchvision.models.resnet18(num_classes=10)
# Non-trivial BatchNorm statistics, so that buffers that were not loaded would show.
with torch.no_grad():
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
            mod.num_batches_tracked.fill_(7)
m.eval()
torch.save(m.state_dict(), os.path.join(out, "r18.pt"))
x = torch.randn(4, 3, 40, 40)
with torch.no_grad():
    torch.save({"x": x, "logits": m(x)}, os.path.join(out, "reference.pt"))
torch.save(m.state_dict(), os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
torch.save({"model": m.state_dict(), "epoch": torch.tensor(3)}, os.path.join(out, "nested.pt"))
class Evil:
    def __reduce__(self):
        return (print, ("executed",))
torch.save({"a": torch.zeros(2), "b": Evil()}, os.path.join(out, "evil.pt"))
sd = m.state_dict()
del sd["layer4.1.bn2.running_var"]
sd["extra.weight"] = torch.zeros(3)
torch.save(sd, os.path.join(out, "partial.pt"))
torch.save(torch.nn.DataParallel(m).state_dict(), os.path.join(out, "wrapped.pt"))
)PY";

class StateDictTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::string(kPython).empty()) return;
    dir_ = new testing::TempDir();
    const std::string script = dir_->str() + "/write.py";
    std::ofstream(script) << kScript;
    ASSERT_EQ(std::system(absl::StrCat(kPython, " ", script, " ", dir_->str()).c_str()), 0);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch and torchvision";
  }
  static std::string Path(const std::string& name) { return dir_->str() + "/" + name; }

  static std::shared_ptr<ClassifierImpl> ResNet18(int64_t channels, int64_t classes) {
    ModelConfig config;
    config.input_shape = {channels, 40, 40};
    config.num_classes = classes;
    return FindModel("resnet18")->make(config);
  }

  static std::string ErrorOf(const std::string& name) {
    absl::StatusOr<NamedTensors> read = ReadStateDict(Path(name));
    EXPECT_FALSE(read.ok()) << name;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << name;
    return std::string(read.status().message());
  }

  static testing::TempDir* dir_;
};

testing::TempDir* StateDictTest::dir_ = nullptr;

std::map<std::string, torch::Tensor> AsMap(const NamedTensors& tensors) {
  return std::map<std::string, torch::Tensor>(tensors.begin(), tensors.end());
}

TEST_F(StateDictTest, TorchvisionResNet18LoadsByNameAndGivesTorchvisionsLogits) {
  absl::StatusOr<NamedTensors> file = ReadStateDict(Path("r18.pt"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(*file, SizeIs(122));  // 62 parameters, 60 BatchNorm buffers
  EXPECT_EQ(file->front().first, "conv1.weight");
  std::shared_ptr<ClassifierImpl> model = ResNet18(3, 10);
  absl::StatusOr<StateDictLoad> load = LoadStateDict(*model, *file, /*strict=*/true);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->loaded, 122);
  EXPECT_THAT(load->missing, IsEmpty());
  EXPECT_THAT(load->unexpected, IsEmpty());
  EXPECT_THAT(load->reinitialised, IsEmpty());

  absl::StatusOr<NamedTensors> reference = ReadStateDict(Path("reference.pt"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::map<std::string, torch::Tensor> ref = AsMap(*reference);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(ref["x"]);
  EXPECT_TRUE(torch::allclose(logits, ref["logits"], /*rtol=*/0, /*atol=*/1e-5))
      << (logits - ref["logits"]).abs().max();
}

TEST_F(StateDictTest, AHeadOfAnotherSizeKeepsItsInitialisation) {
  absl::StatusOr<NamedTensors> file = ReadStateDict(Path("r18.pt"));
  ASSERT_TRUE(file.ok()) << file.status();
  std::shared_ptr<ClassifierImpl> model = ResNet18(3, 5);
  const torch::Tensor fc_before = model->named_parameters()["fc.weight"].clone();
  absl::StatusOr<StateDictLoad> load = LoadStateDict(*model, *file, /*strict=*/true);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->loaded, 120);
  EXPECT_THAT(load->reinitialised, ElementsAre("fc.weight (file [10, 512], model [5, 512])",
                                               "fc.bias (file [10], model [5])"));
  EXPECT_TRUE(torch::equal(model->named_parameters()["fc.weight"], fc_before));
  EXPECT_TRUE(
      torch::equal(model->named_parameters()["conv1.weight"], AsMap(*file)["conv1.weight"]));
}

TEST_F(StateDictTest, AnotherShapeOutsideTheHeadNamesTheParameterAndBothShapes) {
  absl::StatusOr<NamedTensors> file = ReadStateDict(Path("r18.pt"));
  ASSERT_TRUE(file.ok()) << file.status();
  std::shared_ptr<ClassifierImpl> model = ResNet18(1, 10);
  absl::StatusOr<StateDictLoad> load = LoadStateDict(*model, *file, /*strict=*/true);
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(load.status().message(),
            "conv1.weight: the file has [64, 3, 7, 7], the model [64, 1, 7, 7]");
}

TEST_F(StateDictTest, StrictListsMissingAndUnexpectedNamesAndNonStrictReportsThem) {
  absl::StatusOr<NamedTensors> file = ReadStateDict(Path("partial.pt"));
  ASSERT_TRUE(file.ok()) << file.status();
  std::shared_ptr<ClassifierImpl> model = ResNet18(3, 10);
  absl::StatusOr<StateDictLoad> strict = LoadStateDict(*model, *file, /*strict=*/true);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().message(),
            "missing from the file: layer4.1.bn2.running_var; not in the model: extra.weight "
            "(strict: false loads the names both have)");
  absl::StatusOr<StateDictLoad> loose = LoadStateDict(*model, *file, /*strict=*/false);
  ASSERT_TRUE(loose.ok()) << loose.status();
  EXPECT_EQ(loose->loaded, 121);
  EXPECT_THAT(loose->missing, ElementsAre("layer4.1.bn2.running_var"));
  EXPECT_THAT(loose->unexpected, ElementsAre("extra.weight"));
}

// A file with no name in common loads nothing, which strict: false does not make a fine-tune:
// refused either way, and a DataParallel model's "module." names are pointed out.
TEST_F(StateDictTest, NoNameInCommonIsRefusedEvenWithoutStrict) {
  absl::StatusOr<NamedTensors> file = ReadStateDict(Path("wrapped.pt"));
  ASSERT_TRUE(file.ok()) << file.status();
  std::shared_ptr<ClassifierImpl> model = ResNet18(3, 10);
  for (const bool strict : {true, false}) {
    absl::StatusOr<StateDictLoad> load = LoadStateDict(*model, *file, strict);
    ASSERT_FALSE(load.ok()) << "strict " << strict;
    EXPECT_EQ(load.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(load.status().message(),
                HasSubstr("none of the file's 122 names is a parameter or buffer of the model"));
    EXPECT_THAT(load.status().message(),
                HasSubstr("its names start with \"module.\", as a DataParallel or "
                          "DistributedDataParallel model's do: save model.module.state_dict() "
                          "instead"));
  }
}

TEST_F(StateDictTest, FilesThatAreNotAStateDictAreRefusedWithoutRunningAnything) {
  EXPECT_THAT(ErrorOf("evil.pt"), HasSubstr("refused: the pickle names the Python object "
                                            "__builtin__.print"));
  EXPECT_THAT(ErrorOf("legacy.pt"), HasSubstr("torch.save's zip format"));
  EXPECT_THAT(ErrorOf("nested.pt"), HasSubstr("entry \"model\" is a GenericDict, not a tensor"));
  EXPECT_THAT(ErrorOf("missing.pt"), StartsWith(Path("missing.pt") + ": "));
}

TEST_F(StateDictTest, StateDictBytesReadBackAsTheSameTensors) {
  std::shared_ptr<ClassifierImpl> model = ResNet18(3, 4);
  const std::vector<char> bytes = StateDictBytes(*model);
  const std::string path = Path("ours.pt");
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  absl::StatusOr<NamedTensors> file = ReadStateDict(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::map<std::string, torch::Tensor> read = AsMap(*file);
  ASSERT_THAT(read, SizeIs(122));
  for (const auto& item : model->named_parameters()) {
    EXPECT_TRUE(torch::equal(read[item.key()], item.value())) << item.key();
  }
}

// Issue 26: a weights file in a folder mpsd's user cannot search was "no such file"; one it cannot
// read "LibTorch error: open file failed because of errno 13". Both say permission denied.
TEST(StateDictPermissionTest, AnUnreadableFileOrFolderSaysPermissionDenied) {
  testing::TempDir dir;
  const std::string locked = dir.str() + "/locked";
  ASSERT_EQ(mkdir(locked.c_str(), 0700), 0);
  const std::string hidden = locked + "/w.pt";
  const std::string secret = dir.str() + "/secret.pt";
  std::ofstream(hidden) << "x";
  std::ofstream(secret) << "x";
  ASSERT_EQ(chmod(dir.str().c_str(), 0755), 0);
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  if (!testing::RunsAsAnotherUser()) {
    ASSERT_EQ(chmod(locked.c_str(), 0), 0);
    ASSERT_EQ(chmod(secret.c_str(), 0), 0);
  }
  const std::string errors = testing::AsAnotherUser([&] {
    return absl::StrCat(ReadStateDict(hidden).status().message(), "\n",
                        ReadStateDict(secret).status().message());
  });
  chmod(locked.c_str(), 0700);
  EXPECT_THAT(errors, HasSubstr(hidden + ": permission denied: mpsd's user cannot search a "
                                         "folder on its path"));
  EXPECT_THAT(errors, HasSubstr(secret + ": permission denied: mpsd's user cannot read it"));
}

}  // namespace
}  // namespace mpsd::trainer
