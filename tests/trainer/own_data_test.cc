// The image_folder and tensors datasets through the real Executor on the CPU: validation
// messages, tensors files that must be refused (written by Python's torch.save), a job on each
// format of the same easy task (examples/make_own_data.py: colours) reaching the same result as
// the other, the streamed path equal to the resident one step for step, the decode cache reused
// and invalidated across jobs, bad images, and class names in the summary and the finished model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainer/datasets.h"
#include "trainer/input_limits.h"
#include "trainer/tensor_file.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kPython[] = MPSD_TORCH_PYTHON;

// Runs a Python snippet (with torch and PIL) or a script with arguments; true on success.
bool RunPython(const std::string& arguments) {
  const std::string command = absl::StrCat(kPython, " ", arguments);
  return std::system(command.c_str()) == 0;
}

// One data set for the whole suite: 3 colour classes, 16 train and 6 val images each, PNG and
// JPEG of mixed sizes, plus the same images as a tensors file resized to 16×16 by PIL.
class OwnDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::string(kPython).empty()) return;
    dir_ = new fs::path(fs::temp_directory_path() / absl::StrCat("own_data_test_", getpid()));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    ASSERT_TRUE(RunPython(absl::StrCat(MPSD_SOURCE_DIR, "/examples/make_own_data.py ", Root(),
                                       " --tensors ", TensorsPath())));
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) fs::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (std::string(kPython).empty()) GTEST_SKIP() << "no python3 with torch and PIL";
  }

  static std::string Root() { return (*dir_ / "colours").string(); }
  static std::string TensorsPath() { return (*dir_ / "colours.pt").string(); }
  static std::string Path(const std::string& name) { return (*dir_ / name).string(); }

  static fs::path* dir_;
};
fs::path* OwnDataTest::dir_ = nullptr;

mpsd::v1::DatasetSpec ImageFolder(const std::string& root) {
  mpsd::v1::DatasetSpec spec;
  spec.set_name("image_folder");
  spec.set_root(root);
  spec.mutable_image_folder()->add_image_size(16);
  spec.mutable_image_folder()->add_image_size(16);
  return spec;
}

mpsd::v1::DatasetSpec Tensors(const std::string& path) {
  mpsd::v1::DatasetSpec spec;
  spec.set_name("tensors");
  spec.set_root(path);
  return spec;
}

mpsd::v1::SubmitJobRequest Job(const mpsd::v1::DatasetSpec& dataset, int epochs = 6) {
  mpsd::v1::SubmitJobRequest request;
  mpsd::v1::TrainJob& job = *request.mutable_train_job();
  job.mutable_model()->set_name("mlp");
  *job.mutable_dataset() = dataset;
  job.set_batch_size(10);  // 48 training examples: a partial last batch
  job.set_epochs(epochs);
  job.mutable_optimizer()->set_learning_rate(3e-3);
  job.set_seed(5);
  job.set_device("cpu");
  return request;
}

std::unique_ptr<Executor> MakeExecutor(const std::string& cache_dir = "",
                                       const std::string& artifacts_dir = "") {
  Executor::Options options;
  options.steps_per_readback = 3;
  options.cache_dir = cache_dir;
  options.artifacts_dir = artifacts_dir;
  absl::StatusOr<std::unique_ptr<Executor>> executor = CreateTorchExecutor(options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return *std::move(executor);
}

struct RunResult {
  absl::Status status;
  std::vector<float> losses;
  std::vector<std::string> logs;
  mpsd::v1::JobSummary summary;
  bool Logged(absl::string_view text) const {
    for (const std::string& line : logs) {
      if (absl::StrContains(line, text)) return true;
    }
    return false;
  }
};

RunResult RunJob(Executor& executor, const mpsd::v1::SubmitJobRequest& request) {
  RunResult result;
  CancelFlag cancelled;
  result.status = executor.Run(
      JobContext{"7", ""}, request,
      [&](mpsd::v1::JobEvent event) {
        if (event.has_step()) result.losses.push_back(event.step().loss());
        if (event.has_log()) result.logs.push_back(event.log().text());
        if (event.has_summary()) result.summary = event.summary();
      },
      cancelled);
  return result;
}

std::string ValidateError(const mpsd::v1::DatasetSpec& spec) {
  return std::string(MakeExecutor()->Validate(Job(spec)).message());
}

// ---- Validation --------------------------------------------------------------------------

TEST_F(OwnDataTest, ResolvesBothFormatsWithClassesAndShapes) {
  absl::StatusOr<DatasetConfig> folder = ResolveDataset(ImageFolder(Root()));
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->input_shape, (std::vector<int64_t>{3, 16, 16}));
  EXPECT_EQ(folder->num_classes, 3);
  EXPECT_THAT(folder->own.class_names, ElementsAre("blue", "green", "red"));
  EXPECT_EQ(folder->own.train_examples, 48);
  mpsd::v1::DatasetSpec gray = ImageFolder(Root());
  gray.mutable_image_folder()->set_channels(1);
  gray.set_limit_train(20);
  EXPECT_EQ(ResolveDataset(gray)->input_shape, (std::vector<int64_t>{1, 16, 16}));
  EXPECT_EQ(ResolveDataset(gray)->own.train_examples, 20);

  absl::StatusOr<DatasetConfig> tensors = ResolveDataset(Tensors(TensorsPath()));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->input_shape, (std::vector<int64_t>{3, 16, 16}));
  EXPECT_EQ(tensors->num_classes, 3);
  EXPECT_THAT(tensors->own.class_names, ElementsAre("blue", "green", "red"));
}

TEST_F(OwnDataTest, ValidationNamesEachBadField) {
  mpsd::v1::DatasetSpec spec = ImageFolder(Root());
  spec.mutable_image_folder()->clear_image_size();
  EXPECT_THAT(ValidateError(spec), StartsWith("train_job.dataset.image_folder.image_size: "
                                              "required: [height, width]"));
  spec = ImageFolder(Root());
  spec.mutable_image_folder()->set_image_size(1, 0);
  EXPECT_THAT(ValidateError(spec), StartsWith("train_job.dataset.image_folder.image_size[1]: "));
  spec = ImageFolder(Root());
  spec.mutable_image_folder()->set_channels(4);
  EXPECT_THAT(ValidateError(spec), StartsWith("train_job.dataset.image_folder.channels: "));
  spec = ImageFolder(Root());
  spec.mutable_image_folder()->set_on_bad_image("ignore");
  EXPECT_THAT(ValidateError(spec), StartsWith("train_job.dataset.image_folder.on_bad_image: "));
  spec = ImageFolder(Root());
  spec.set_placement("gpu");
  EXPECT_THAT(ValidateError(spec), StartsWith("train_job.dataset.placement: unknown placement"));
  spec = ImageFolder(Root());
  spec.add_mean(0.5);
  EXPECT_THAT(ValidateError(spec), StartsWith("train_job.dataset.std: set both mean and std"));
  spec.add_std(0);
  EXPECT_THAT(ValidateError(spec), StartsWith("train_job.dataset.std[0]: must be > 0"));
  spec.set_std(0, 0.2);
  spec.add_mean(0.5);
  spec.add_std(0.2);
  EXPECT_THAT(ValidateError(spec), StartsWith("train_job.dataset.mean: needs 1 value or 3"));
  spec = ImageFolder("");
  EXPECT_THAT(ValidateError(spec), StartsWith("train_job.dataset.root: required"));
  spec = ImageFolder(Path("nowhere"));
  EXPECT_EQ(ValidateError(spec),
            "train_job.dataset.root: directory " + Path("nowhere") + " does not exist");
  EXPECT_EQ(ValidateError(Tensors(Path("nothing.pt"))),
            "train_job.dataset.root: file " + Path("nothing.pt") + " does not exist");
  mpsd::v1::DatasetSpec cifar;
  cifar.set_name("synthetic");
  cifar.set_placement("streamed");
  EXPECT_THAT(ValidateError(cifar),
              StartsWith("train_job.dataset.placement: only image_folder and tensors take it"));
  cifar.clear_placement();
  cifar.mutable_image_folder()->set_channels(1);
  EXPECT_THAT(ValidateError(cifar),
              StartsWith("train_job.dataset.image_folder: only image_folder"));
  // A model that cannot take the images: vgg needs at least 32×32.
  mpsd::v1::SubmitJobRequest vgg = Job(ImageFolder(Root()));
  vgg.mutable_train_job()->mutable_model()->set_name("vgg11");
  EXPECT_THAT(std::string(MakeExecutor()->Validate(vgg).message()),
              AllOf(StartsWith("train_job.model.name: "), HasSubstr("image_folder")));
}

// Tensors files that must be refused, each written by Python's torch.save.
TEST_F(OwnDataTest, RefusesBadTensorsFilesNamingTheKey) {
  const std::string script = Path("bad_files.py");
  std::ofstream(script) << R"PY(
import io, os, sys, zipfile
import numpy, torch
out = sys.argv[1]
x, y = torch.zeros(4, 3, 2, 2), torch.tensor([0, 1, 2, 1])
def save(name, obj, **kw):
    torch.save(obj, os.path.join(out, name), **kw)
save("numpy.pt", {"train": {"x": numpy.zeros((4, 3)), "y": y}, "test": {"x": x, "y": y}})
class Sneaky:
    pass
save("object.pt", {"train": {"x": x, "y": y}, "test": {"x": x, "y": y}, "classes": Sneaky()})
save("unknown_key.pt", {"train": {"x": x, "y": y}, "test": {"x": x, "y": y}, "valid": 1})
save("bad_val.pt", {"train": {"x": x, "y": y}, "test": {"x": x, "y": y}, "val": 1})
save("missing_test.pt", {"train": {"x": x, "y": y}, "classes": ["a", "b", "c"]})
save("one_entry.pt", {"train": {"x": x, "y": y}})
save("missing_y.pt", {"train": {"x": x}, "test": {"x": x, "y": y}})
save("int_x.pt", {"train": {"x": x.int(), "y": y}, "test": {"x": x.int(), "y": y}})
save("float_y.pt", {"train": {"x": x, "y": y.float()}, "test": {"x": x, "y": y}})
save("short_y.pt", {"train": {"x": x, "y": y[:3]}, "test": {"x": x, "y": y}})
save("shape.pt", {"train": {"x": x, "y": y}, "test": {"x": torch.zeros(4, 3, 2, 5), "y": y}})
save("label.pt", {"train": {"x": x, "y": y}, "test": {"x": x, "y": torch.tensor([0, 1, 7, 1])},
                  "classes": ["a", "b", "c"]})
save("negative.pt", {"train": {"x": x, "y": torch.tensor([0, -1, 2, 1])}, "test": {"x": x, "y": y}})
save("legacy.pt", {"train": {"x": x, "y": y}, "test": {"x": x, "y": y}},
     _use_new_zipfile_serialization=False)
save("list.pt", [x, y])
# A file from a "newer" PyTorch: the same archive with its format version raised to 99.
good = io.BytesIO()
torch.save({"train": {"x": x, "y": y}, "test": {"x": x, "y": y}}, good)
with zipfile.ZipFile(good) as src, zipfile.ZipFile(os.path.join(out, "newer.pt"), "w") as dst:
    for item in src.infolist():
        data = src.read(item.filename)
        dst.writestr(item, b"99\n" if item.filename.endswith("/version") else data)
open(os.path.join(out, "text.pt"), "w").write("hello")
)PY";
  ASSERT_TRUE(RunPython(absl::StrCat(script, " ", dir_->string())));
  const auto error = [&](const std::string& name) {
    absl::StatusOr<TensorFile> file = ReadTensorFile(Path(name));
    EXPECT_FALSE(file.ok()) << name;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(std::string(file.status().message()), StartsWith(Path(name) + ": ")) << name;
    return std::string(file.status().message());
  };
  EXPECT_THAT(error("numpy.pt"), HasSubstr("pickled Python objects"));
  EXPECT_THAT(error("object.pt"), HasSubstr("pickled Python objects"));
  EXPECT_THAT(error("unknown_key.pt"), HasSubstr(": valid: unknown key"));
  EXPECT_THAT(error("bad_val.pt"), HasSubstr(": val: expected a dict with keys x, y"));
  EXPECT_THAT(error("missing_test.pt"), HasSubstr(": test: missing"));
  // A dict of one entry (pickle's SETITEM, which LibTorch 1.13 cannot read) is a missing key.
  EXPECT_THAT(error("one_entry.pt"), HasSubstr("a dict with a single entry"));
  EXPECT_THAT(error("missing_y.pt"), HasSubstr("a dict with a single entry"));
  EXPECT_THAT(error("int_x.pt"), HasSubstr(": train.x: dtype Int"));
  // Float y holds targets (task multilabel or regression, task_test.cc): in every split or none.
  EXPECT_THAT(error("float_y.pt"),
              HasSubstr(": test.y: dtype Long; float targets must be float in every split"));
  EXPECT_THAT(error("short_y.pt"), HasSubstr(": train.y: shape [3], expected [4]"));
  EXPECT_THAT(error("shape.pt"), HasSubstr(": test.x: shape [4, 3, 2, 5]"));
  EXPECT_THAT(error("label.pt"), HasSubstr(": test.y[2]: label 7, but there are 3 classes"));
  EXPECT_THAT(error("negative.pt"),
              HasSubstr(": train.y[1]: label -1; class labels are 0 or more"));
  EXPECT_THAT(error("legacy.pt"), HasSubstr("legacy torch.save file"));
  EXPECT_THAT(error("list.pt"), HasSubstr("expected a dict with keys train, test, val, classes"));
  EXPECT_THAT(error("newer.pt"), HasSubstr("newer PyTorch"));
  EXPECT_THAT(error("text.pt"), HasSubstr("not a torch.save file"));
  // Through validation, with the field path.
  EXPECT_THAT(ValidateError(Tensors(Path("label.pt"))),
              StartsWith("train_job.dataset.root: " + Path("label.pt") + ": test.y[2]: "));
}

// ---- Jobs --------------------------------------------------------------------------------

// The same images as a folder (decoded by libpng/libjpeg-turbo, resized by our Pillow
// resampling) and as a tensors file (decoded and resized by PIL in Python), with the same
// normalisation: the same training, step for step, and an easy task learnt.
TEST_F(OwnDataTest, FolderAndTensorsOfTheSameImagesTrainAlike) {
  mpsd::v1::DatasetSpec folder = ImageFolder(Root());
  mpsd::v1::DatasetSpec tensors = Tensors(TensorsPath());
  for (mpsd::v1::DatasetSpec* spec : {&folder, &tensors}) {
    for (int c = 0; c < 3; ++c) {
      spec->add_mean(0.45f);
      spec->add_std(0.25f);
    }
  }
  auto executor = MakeExecutor();
  const RunResult a = RunJob(*executor, Job(folder));
  const RunResult b = RunJob(*executor, Job(tensors));
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(a.losses.size(), 30u);  // 6 epochs × 5 batches
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.summary.test_accuracy(), b.summary.test_accuracy());
  EXPECT_GE(a.summary.test_accuracy(), 0.9);
  EXPECT_THAT(a.summary.class_names(), ElementsAre("blue", "green", "red"));
  EXPECT_THAT(b.summary.class_names(), ElementsAre("blue", "green", "red"));
  EXPECT_EQ(a.summary.data_placement(), "resident");
  EXPECT_EQ(a.summary.train_examples(), 48);
  EXPECT_EQ(a.summary.test_examples(), 18);
  EXPECT_TRUE(a.Logged("data placement resident: "));
  // Computed normalisation (no mean/std) learns the task too.
  const RunResult c = RunJob(*executor, Job(ImageFolder(Root())));
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_GE(c.summary.test_accuracy(), 0.9);
  EXPECT_TRUE(c.Logged("(of the training images)"));  // no cache directory here
}

// Forcing the streamed path on the CPU: the same batches, so the same losses bit for bit, with
// augmentation (which draws from the shuffle generator), a partial last batch and evaluation.
TEST_F(OwnDataTest, StreamedEqualsResidentStepForStep) {
  for (mpsd::v1::DatasetSpec spec : {ImageFolder(Root()), Tensors(TensorsPath())}) {
    spec.mutable_augmentation()->set_random_crop_padding(2);
    spec.mutable_augmentation()->set_horizontal_flip(true);
    mpsd::v1::DatasetSpec resident = spec, streamed = spec, tiny_budget = spec;
    resident.set_placement("resident");
    streamed.set_placement("streamed");
    tiny_budget.set_device_budget_bytes(1000);  // auto, and the data does not fit
    auto executor = MakeExecutor();
    const RunResult r = RunJob(*executor, Job(resident, 3));
    const RunResult s = RunJob(*executor, Job(streamed, 3));
    const RunResult t = RunJob(*executor, Job(tiny_budget, 3));
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_TRUE(s.status.ok()) << s.status;
    ASSERT_TRUE(t.status.ok()) << t.status;
    EXPECT_EQ(r.summary.data_placement(), "resident");
    EXPECT_EQ(s.summary.data_placement(), "streamed");
    EXPECT_EQ(t.summary.data_placement(), "streamed");
    EXPECT_TRUE(t.Logged("exceeds the device budget of 0.0 MiB (device_budget_bytes)"));
    ASSERT_EQ(r.losses.size(), 15u);
    EXPECT_EQ(r.losses, s.losses) << spec.name();
    EXPECT_EQ(r.losses, t.losses) << spec.name();
    EXPECT_EQ(r.summary.test_loss(), s.summary.test_loss()) << spec.name();
    EXPECT_EQ(r.summary.test_accuracy(), s.summary.test_accuracy()) << spec.name();
  }
}

// Issue 27: validation.fraction is held out on the host before placement, so a streamed job
// validates on the same examples as a resident one; the folder and the tensors file of the same
// images (in the same order) hold out the same ones; a limit keeps every class of the folder.
TEST_F(OwnDataTest, AValidationFractionHoldsOutTheSameExamplesResidentOrStreamed) {
  std::vector<RunResult> runs;
  for (mpsd::v1::DatasetSpec spec : {ImageFolder(Root()), Tensors(TensorsPath())}) {
    for (int c = 0; c < 3; ++c) {
      spec.add_mean(0.45f);
      spec.add_std(0.25f);
    }
    spec.mutable_validation()->set_fraction(0.25);
    for (const char* placement : {"resident", "streamed"}) {
      spec.set_placement(placement);
      auto executor = MakeExecutor();
      runs.push_back(RunJob(*executor, Job(spec, 2)));
      const RunResult& r = runs.back();
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.summary.train_examples(), 36) << spec.name();
      EXPECT_EQ(r.summary.val_examples(), 12) << spec.name();
      EXPECT_TRUE(r.summary.has_val_loss()) << spec.name();
      EXPECT_EQ(r.summary.validation(), "fraction 0.25 of train (seed 5)");
      EXPECT_TRUE(
          r.Logged("validation: 12 of 48 training examples held out (fraction 0.25, "
                   "stratified, seed 5); per class: blue 4, green 4, red 4"));
    }
  }
  for (const RunResult& r : runs) {
    EXPECT_EQ(r.losses, runs[0].losses);
    EXPECT_EQ(r.summary.val_loss(), runs[0].summary.val_loss());
  }
  // A limit on the folder (class-ordered files) keeps every class.
  mpsd::v1::DatasetSpec limited = ImageFolder(Root());
  limited.set_limit_train(12);
  const RunResult l = RunJob(*MakeExecutor(), Job(limited, 1));
  ASSERT_TRUE(l.status.ok()) << l.status;
  EXPECT_THAT(l.summary.train_class_counts(), ElementsAre(4, 4, 4));
}

TEST_F(OwnDataTest, DecodeCacheIsReusedAcrossJobsAndRebuiltWhenAFileChanges) {
  const std::string root = Path("cached");
  ASSERT_TRUE(RunPython(absl::StrCat(MPSD_SOURCE_DIR, "/examples/make_own_data.py ", root,
                                     " --classes 2 --train-per-class 5 --val-per-class 2")));
  const std::string cache = Path("cache");
  auto executor = MakeExecutor(cache);
  const RunResult first = RunJob(*executor, Job(ImageFolder(root), 1));
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_TRUE(first.Logged("train: decoded 10 images in "));
  EXPECT_TRUE(first.Logged("; cached in " + cache + "/image_folder-"));
  const RunResult second = RunJob(*executor, Job(ImageFolder(root), 1));
  ASSERT_TRUE(second.status.ok());
  EXPECT_TRUE(second.Logged("train: 10 images from the decode cache " + cache));
  EXPECT_TRUE(second.Logged("val: 4 images from the decode cache"));
  EXPECT_EQ(first.losses, second.losses);  // the normalisation stored with it, too
  // A training file rewritten: train is decoded again, val still comes from the cache.
  fs::copy_file(root + "/train/blue/img_002.png", root + "/train/blue/img_000.png",
                fs::copy_options::overwrite_existing);
  const RunResult third = RunJob(*executor, Job(ImageFolder(root), 1));
  ASSERT_TRUE(third.status.ok());
  EXPECT_TRUE(third.Logged("train: decoded 10 images in "));
  EXPECT_TRUE(third.Logged("val: 4 images from the decode cache"));
}

TEST_F(OwnDataTest, BadImagesFailTheJobOrAreSkipped) {
  const std::string root = Path("bad");
  ASSERT_TRUE(RunPython(absl::StrCat(MPSD_SOURCE_DIR, "/examples/make_own_data.py ", root,
                                     " --classes 2 --train-per-class 4 --val-per-class 2")));
  const std::string bad = root + "/train/green/img_001.jpg";
  fs::resize_file(bad, 100);  // truncated
  auto executor = MakeExecutor();
  const RunResult failed = RunJob(*executor, Job(ImageFolder(root), 1));
  EXPECT_EQ(failed.status.code(), absl::StatusCode::kDataLoss) << failed.status;
  EXPECT_THAT(std::string(failed.status.message()), HasSubstr(bad));
  mpsd::v1::DatasetSpec skip = ImageFolder(root);
  skip.mutable_image_folder()->set_on_bad_image("skip");
  const RunResult skipped = RunJob(*executor, Job(skip, 1));
  ASSERT_TRUE(skipped.status.ok()) << skipped.status;
  EXPECT_EQ(skipped.summary.skipped_images(), 1);
  EXPECT_EQ(skipped.summary.train_examples(), 7);
  EXPECT_TRUE(skipped.Logged("1 bad images skipped (on_bad_image: skip): " + bad));

  // A file that cannot even be examined (a dangling symlink) fails at submit unless skipped.
  const std::string dangling = root + "/val/blue/gone.png";
  fs::create_symlink(root + "/nowhere.png", dangling);
  EXPECT_THAT(ValidateError(ImageFolder(root)),
              StartsWith("train_job.dataset.root: " + dangling + ": cannot stat: No such file"));
  const RunResult both = RunJob(*executor, Job(skip, 1));
  ASSERT_TRUE(both.status.ok()) << both.status;
  EXPECT_EQ(both.summary.skipped_images(), 2);
  EXPECT_EQ(both.summary.test_examples(), 4);
}

TEST_F(OwnDataTest, FinishedModelCarriesTheClassNames) {
  const std::string artifacts = Path("artifacts");
  auto executor = MakeExecutor("", artifacts);
  const RunResult result = RunJob(*executor, Job(ImageFolder(Root()), 1));
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.summary.model_path(), artifacts + "/7/model.pt");
  torch::serialize::InputArchive archive;
  archive.load_from(result.summary.model_path());
  c10::IValue names;
  ASSERT_TRUE(archive.try_read("class_names", names));
  std::vector<std::string> read;
  for (const c10::IValue& name : names.toListRef()) read.push_back(name.toStringRef());
  EXPECT_THAT(read, ElementsAre("blue", "green", "red"));
}

// A user's TorchScript model (a linear classifier over the flattened 3×16×16 images, as a user
// would torch.jit.save it) trains on a tensors file, and its finished model.pt carries the class
// names as the extra file class_names.json, a JSON array that torch.jit.load(...,
// _extra_files=...) hands back.
TEST_F(OwnDataTest, TorchScriptModelTrainsOnOwnDataAndCarriesTheClassNames) {
  torch::manual_seed(3);
  torch::jit::Module linear("LinearClassifier");
  linear.register_parameter("weight", (torch::randn({3, 768}) * 0.01).requires_grad_(),
                            /*is_buffer=*/false);
  linear.register_parameter("bias", torch::zeros({3}).requires_grad_(), /*is_buffer=*/false);
  linear.define(R"(
    def forward(self, x):
        return torch.addmm(self.bias, torch.flatten(x, 1), self.weight.t())
  )");
  const std::string script = Path("linear.pt");
  linear.save(script);
  const std::string artifacts = Path("script_artifacts");
  auto executor = MakeExecutor("", artifacts);
  mpsd::v1::SubmitJobRequest request = Job(Tensors(TensorsPath()));
  request.mutable_train_job()->mutable_model()->clear_name();
  request.mutable_train_job()->mutable_model()->set_torchscript(script);
  ASSERT_TRUE(executor->Validate(request).ok()) << executor->Validate(request);
  const RunResult result = RunJob(*executor, request);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_GE(result.summary.test_accuracy(), 0.9);
  EXPECT_THAT(result.summary.class_names(), ElementsAre("blue", "green", "red"));
  ASSERT_EQ(result.summary.model_format(), "torchscript");
  torch::jit::ExtraFilesMap extra{{"class_names.json", ""}};
  torch::jit::Module trained = torch::jit::load(result.summary.model_path(), torch::kCPU, extra);
  EXPECT_EQ(extra["class_names.json"], R"(["blue","green","red"])");
  EXPECT_EQ(trained.forward({torch::zeros({2, 3, 16, 16})}).toTensor().sizes(),
            torch::IntArrayRef({2, 3}));
}

// An image folder with train/targets.csv and val/targets.csv: float targets instead of the
// class directories' labels (TrainJob.task multilabel and regression), matched to the images by
// path whatever the decode order, subset or cache, also without class directories; each bad
// targets file refused at submit.
TEST_F(OwnDataTest, TargetsCsvGivesAFolderFloatTargets) {
  const fs::path root = *dir_ / "colours-targets";
  fs::remove_all(root);
  fs::copy(Root(), root, fs::copy_options::recursive);
  // Multi-hot of the colour: label k = "the image is class k" (3 labels); regression targets:
  // the class index and its square.
  const auto write_targets = [&](const std::string& split, bool regression,
                                 const std::string& extra = "") {
    std::ofstream out(root / split / "targets.csv");
    out << "file,a,b,c\n" << extra;
    const std::vector<std::string> classes = {"blue", "green", "red"};
    for (size_t c = 0; c < classes.size(); ++c) {
      for (const fs::directory_entry& e : fs::directory_iterator(root / split / classes[c])) {
        out << classes[c] << "/" << e.path().filename().string();
        for (size_t k = 0; k < 3; ++k) {
          const double value = regression ? (k == 0 ? c : k == 1 ? c * c : 1.0) : (k == c);
          out << "," << value;
        }
        out << "\n";
      }
    }
  };
  mpsd::v1::SubmitJobRequest job = Job(ImageFolder(root.string()), 6);
  job.mutable_train_job()->set_task("multilabel");
  write_targets("train", false);
  write_targets("val", false);
  auto executor = MakeExecutor();
  ASSERT_TRUE(executor->Validate(job).ok()) << executor->Validate(job);
  const RunResult multilabel = RunJob(*executor, job);
  ASSERT_TRUE(multilabel.status.ok()) << multilabel.status;
  EXPECT_GE(multilabel.summary.metrics().at("test_accuracy"), 0.9);
  EXPECT_TRUE(multilabel.summary.class_names().empty());
  EXPECT_EQ(multilabel.summary.train_examples(), 48);

  // Regression on the same images: the class index is learnt from the colour.
  write_targets("train", true);
  write_targets("val", true);
  job.mutable_train_job()->set_task("regression");
  job.mutable_train_job()->set_epochs(10);
  const RunResult regression = RunJob(*executor, job);
  ASSERT_TRUE(regression.status.ok()) << regression.status;
  EXPECT_GT(regression.summary.metrics().at("test_mae"), 0);
  EXPECT_LT(regression.summary.metrics().at("test_mae"), 0.5);
  // Non-binary targets are no multilabel targets; classification takes no float targets.
  job.mutable_train_job()->set_task("multilabel");
  EXPECT_THAT(std::string(executor->Validate(job).message()),
              AllOf(StartsWith("train_job.dataset.root: " + root.string() + ": " + root.string() +
                               "/train/targets.csv, "),
                    HasSubstr("multilabel targets must be 0 or 1")));
  job.mutable_train_job()->set_task("");
  EXPECT_THAT(std::string(executor->Validate(job).message()),
              StartsWith("train_job.task: classification needs int64 class indices"));

  // Bad files, each named with its line.
  job.mutable_train_job()->set_task("regression");
  const std::string train_csv = (root / "train" / "targets.csv").string();
  write_targets("train", true, "blue/nothing.png,1,2,3\n");
  EXPECT_EQ(std::string(executor->Validate(job).message()),
            absl::StrCat("train_job.dataset.root: ", train_csv,
                         ": line 2: blue/nothing.png is "
                         "not an image of ",
                         root.string(), "/train"));
  write_targets("train", true, "x,1,abc,3\n");
  EXPECT_EQ(
      std::string(executor->Validate(job).message()),
      absl::StrCat("train_job.dataset.root: ", train_csv, ": line 2: \"abc\" is not a number"));
  write_targets("train", true, "x,1,nan,3\n");
  EXPECT_THAT(std::string(executor->Validate(job).message()),
              HasSubstr(": line 2: nan; targets must be finite"));
  write_targets("train", true);
  std::ofstream(root / "val" / "targets.csv") << "blue/zz.png,1\n";
  EXPECT_THAT(std::string(executor->Validate(job).message()),
              HasSubstr("/val/targets.csv: line 1: blue/zz.png is not an image of"));
  fs::remove(root / "val" / "targets.csv");
  EXPECT_THAT(std::string(executor->Validate(job).message()),
              HasSubstr("/val/targets.csv: missing"));
  write_targets("val", true);
  // A targets.csv over executor.max_file_bytes is refused before it is read (the images, all
  // smaller than the limit, are not).
  int64_t largest_image = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file() && e.path().extension() != ".csv") {
      largest_image = std::max<int64_t>(largest_image, static_cast<int64_t>(e.file_size()));
    }
  }
  {  // the same rows, each padded with spaces (stripped when read) past the images' size
    std::ifstream in(train_csv);
    std::string text, line;
    while (std::getline(in, line)) text += line + std::string(200, ' ') + "\n";
    std::ofstream(train_csv) << text;
  }
  ASSERT_TRUE(executor->Validate(job).ok());
  ASSERT_LT(largest_image + 1, static_cast<int64_t>(fs::file_size(train_csv)));
  api::InputLimits limits;
  limits.max_file_bytes = largest_image + 1;
  SetInputLimits(limits);
  EXPECT_THAT(std::string(executor->Validate(job).message()),
              HasSubstr(absl::StrCat(train_csv, ": ", fs::file_size(train_csv),
                                     " bytes, more than executor.max_file_bytes (",
                                     largest_image + 1, ")")));
  SetInputLimits(api::InputLimits());

  // Without class directories: the images right in train/ and val/, their targets by name.
  const fs::path flat = *dir_ / "colours-flat";
  fs::remove_all(flat);
  for (const char* split : {"train", "val"}) {
    fs::create_directories(flat / split);
    std::ofstream out(flat / split / "targets.csv");
    const std::vector<std::string> classes = {"blue", "green", "red"};
    for (size_t c = 0; c < classes.size(); ++c) {
      for (const fs::directory_entry& e : fs::directory_iterator(root / split / classes[c])) {
        const std::string name = classes[c] + "-" + e.path().filename().string();
        fs::copy_file(e.path(), flat / split / name);
        out << name << "," << (c == 0) << "," << (c == 1) << "," << (c == 2) << "\n";
      }
    }
  }
  mpsd::v1::SubmitJobRequest flat_job = Job(ImageFolder(flat.string()), 6);
  flat_job.mutable_train_job()->set_task("multilabel");
  const RunResult flat_run = RunJob(*executor, flat_job);
  ASSERT_TRUE(flat_run.status.ok()) << flat_run.status;
  EXPECT_GE(flat_run.summary.metrics().at("test_accuracy"), 0.9);
  EXPECT_EQ(flat_run.summary.train_examples(), 48);
  fs::remove_all(flat);
  fs::remove_all(root);
}

}  // namespace
}  // namespace mpsd::trainer
