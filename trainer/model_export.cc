// model.json, model.state_dict.pt and model.check.pt beside a finished job's model.pt
// (model_export.h).
#include "trainer/model_export.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/sha256.h"
#include "trainer/artifact_file.h"
#include "trainer/precision.h"
#include "version/version.h"

namespace mpsd::trainer {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

// model.json's layout version: a reader checks it before reading the rest.
constexpr int kModelJsonFormat = 1;

Value Number(double v) {
  Value value;
  value.set_number_value(v);
  return value;
}

Value Text(std::string v) {
  Value value;
  value.set_string_value(std::move(v));
  return value;
}

Value Null() {
  Value value;
  value.set_null_value(google::protobuf::NULL_VALUE);
  return value;
}

template <typename T>
Value Numbers(const std::vector<T>& values) {
  Value value;
  ListValue* list = value.mutable_list_value();
  for (const T& v : values) *list->add_values() = Number(static_cast<double>(v));
  return value;
}

Value Texts(const std::vector<std::string>& values) {
  Value value;
  ListValue* list = value.mutable_list_value();
  for (const std::string& v : values) *list->add_values() = Text(v);
  return value;
}

Value Object(Struct fields) {
  Value value;
  *value.mutable_struct_value() = std::move(fields);
  return value;
}

void Put(Struct& object, const std::string& key, Value value) {
  (*object.mutable_fields())[key] = std::move(value);
}

absl::Status WriteInJobDir(const TrainJobConfig& job, const std::string& file,
                           absl::string_view bytes, std::string& path) {
  path = (std::filesystem::path(job.job_dir) / file).string();
  return WriteArtifactFile(path, bytes);
}

// What the model is: a zoo name (with the Python constructor of its state dict) or a
// TorchScript file (with its SHA-256).
absl::StatusOr<Value> ModelPart(const TrainJobConfig& job) {
  Struct model;
  Put(model, "num_classes", Number(static_cast<double>(job.model_config.num_classes)));
  if (job.model != nullptr) {
    Put(model, "name", Text(std::string(job.model->name)));
    Put(model, "preset", Text(job.model_config.preset));
    Put(model, "parameters", Number(static_cast<double>(job.model->parameters(job.model_config))));
    const std::string python = PythonConstructor(job);
    Put(model, "python", python.empty() ? Null() : Text(python));
    return Object(std::move(model));
  }
  absl::StatusOr<std::string> sha256 = api::Sha256OfFile(job.torchscript_path);
  if (!sha256.ok()) return sha256.status();
  Put(model, "name", Null());
  Put(model, "torchscript", Text(job.torchscript_path));
  Put(model, "torchscript_sha256", Text(*sha256));
  Put(model, "parameters", Number(static_cast<double>(job.torchscript_parameters)));
  return Object(std::move(model));
}

// The inputs the model expects and how they were made from the data.
Value InputPart(const TrainJobConfig& job, const DeviceDataset& data) {
  const std::vector<int64_t>& shape = job.model_config.input_shape;
  Struct input;
  Put(input, "shape", Numbers(shape));
  Put(input, "dtype", Text("float32"));
  Put(input, "channels", shape.size() == 3 ? Number(static_cast<double>(shape[0])) : Null());
  Put(input, "image_size",
      shape.size() == 3 ? Numbers(std::vector<int64_t>{shape[1], shape[2]}) : Null());
  Value scaled;
  scaled.set_bool_value(data.scaled);
  Put(input, "scaled_to_unit", std::move(scaled));
  Put(input, "mean", data.mean.empty() ? Null() : Numbers(data.mean));
  Put(input, "std", data.std.empty() ? Null() : Numbers(data.std));
  std::string recipe = data.scaled ? "x = pixels / 255 (uint8 → [0, 1])" : "x = inputs";
  if (!data.mean.empty()) absl::StrAppend(&recipe, ", then (x - mean[c]) / std[c] per channel");
  if (job.dataset.info->name == "image_folder") {
    const ImageDecodeOptions& decode = job.dataset.own.decode;
    recipe = absl::StrFormat(
        "decode, convert to %d channel(s), resize to %d×%d (bilinear, as "
        "PIL's Image.resize), %s",
        decode.channels, decode.height, decode.width, recipe);
  }
  // AugmentationSpec.resize / center_crop: what evaluation batches got, so what a user's
  // inputs need (torchvision's Resize(antialias=True), CenterCrop).
  const Preprocessing& preprocess = job.dataset.augmentation.preprocess;
  if (preprocess.resize_height > 0) {
    absl::StrAppend(&recipe, absl::StrFormat(", then resize to %d×%d (torchvision "
                                             "Resize(antialias=True): bilinear)",
                                             preprocess.resize_height, preprocess.resize_width));
  }
  if (preprocess.crop_height > 0) {
    absl::StrAppend(&recipe, absl::StrFormat(", then centre-crop to %d×%d (torchvision "
                                             "CenterCrop)",
                                             preprocess.crop_height, preprocess.crop_width));
  }
  Put(input, "preprocessing", Text(recipe));
  return Object(std::move(input));
}

// What training was: the task, the loss, the settings as resolved.
Value TrainingPart(const TrainJobConfig& job) {
  Struct training;
  Put(training, "task", Text(TaskName(job.task.kind)));
  Put(training, "loss", Text(job.task.Describe()));
  // The epoch metrics the job reported (each split's, trainer/task.h), the user's last.
  std::vector<std::string> metrics = job.task.kind == TaskKind::kClassification
                                         ? std::vector<std::string>{"loss", "accuracy"}
                                     : job.task.kind == TaskKind::kMultilabel
                                         ? std::vector<std::string>{"loss", "accuracy", "macro_f1"}
                                         : std::vector<std::string>{"loss", "mse", "mae", "r2"};
  for (const UserMetricConfig& metric : job.task.metrics) metrics.push_back(metric.name);
  Put(training, "metrics", Texts(metrics));
  Put(training, "outputs",
      Text(job.task.kind == TaskKind::kClassification ? "logits [N, num_classes] (no softmax)"
           : job.task.kind == TaskKind::kMultilabel
               ? "logits [N, K], one per label (sigmoid > 0.5 = yes)"
               : "values [N, D] (the regression's outputs)"));
  Put(training, "dataset", Text(std::string(job.dataset.info->name)));
  Put(training, "batch_size", Number(job.batch_size));
  Put(training, "epochs", Number(job.epochs));
  Put(training, "optimizer", Text(DescribeOptimizer(job.optimizer)));
  Put(training, "schedule", Text(ScheduleName(job.schedule.config.kind)));
  Put(training, "precision", Text(PrecisionName(job.precision)));
  Put(training, "seed", Number(static_cast<double>(job.seed)));
  Put(training, "device", Text(job.device.str()));
  return Object(std::move(training));
}

// The spec in the job file's field names (batch_size, not batchSize).
absl::StatusOr<Value> SpecPart(const TrainJobConfig& job) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  if (auto s = google::protobuf::util::MessageToJsonString(job.spec, &json, options); !s.ok()) {
    return absl::InternalError(absl::StrCat("the job's spec as JSON: ", s.ToString()));
  }
  Value spec;
  if (auto s = google::protobuf::util::JsonStringToMessage(json, &spec); !s.ok()) {
    return absl::InternalError(absl::StrCat("the job's spec as JSON: ", s.ToString()));
  }
  return spec;
}

absl::StatusOr<std::string> ModelJson(const TrainJobConfig& job, const DeviceDataset& data,
                                      const mpsd::v1::JobSummary& summary) {
  Struct card;
  Put(card, "format", Number(kModelJsonFormat));
  Put(card, "job_id", Text(job.job_id));
  absl::StatusOr<Value> model = ModelPart(job);
  if (!model.ok()) return model.status();
  Put(card, "model", *std::move(model));
  Put(card, "input", InputPart(job, data));
  Put(card, "class_names", Texts(data.class_names));
  Put(card, "training", TrainingPart(job));
  absl::StatusOr<Value> spec = SpecPart(job);
  if (!spec.ok()) return spec.status();
  Put(card, "spec", *std::move(spec));
  Struct files;
  const auto name = [](const std::string& path) {
    return path.empty() ? Null() : Text(std::filesystem::path(path).filename().string());
  };
  Put(files, "model", name(summary.model_path()));
  Put(files, "model_format", Text(summary.model_format()));
  Put(files, "state_dict", name(summary.model_state_dict_path()));
  Put(files, "check", name(summary.model_check_path()));
  Put(card, "files", Object(std::move(files)));
  Struct versions;
  Put(versions, "mpsd", Text(GetBuildInfo().version));
  Put(versions, "mpsd_git_commit", Text(GetBuildInfo().git_commit));
  Put(versions, "libtorch", Text(TORCH_VERSION));
  Put(card, "versions", Object(std::move(versions)));
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  std::string json;
  if (auto s = google::protobuf::util::MessageToJsonString(card, &json, options); !s.ok()) {
    return absl::InternalError(absl::StrCat("model.json: ", s.ToString()));
  }
  return json;
}

// 16 inputs of the model's shape drawn from the job's seed (standard normal: the scale of
// normalised data) on the CPU, and the model's logits for them, in eval mode.
std::vector<char> CheckBytes(const TrainJobConfig& job, ClassifierImpl& model) {
  torch::NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> shape = {kCheckExamples};
  shape.insert(shape.end(), job.model_config.input_shape.begin(),
               job.model_config.input_shape.end());
  at::Generator generator = at::detail::createCPUGenerator(job.seed);
  const torch::Tensor inputs = torch::randn(shape, generator, torch::kFloat32);
  const torch::Tensor logits =
      model.forward(inputs.to(job.device)).to(torch::kCPU, torch::kFloat32).contiguous();
  c10::Dict<std::string, at::Tensor> check;
  check.insert("inputs", inputs);
  check.insert("logits", logits);
  return torch::pickle_save(check);
}

}  // namespace

std::string PythonConstructor(const TrainJobConfig& job) {
  if (job.model == nullptr || job.model_config.input_shape.size() != 3) return "";
  const std::string name(job.model->name);
  const int64_t channels = job.model_config.input_shape[0];
  const int64_t classes = job.model_config.num_classes;
  // torchvision's ResNet and VGG have 3 input channels built in.
  if (channels == 3 && (name == "resnet18" || name == "resnet34" || name == "resnet50" ||
                        name == "vgg11" || name == "vgg16")) {
    return absl::StrFormat("torchvision.models.%s(num_classes=%d)", name, classes);
  }
  return "";
}

std::vector<char> StateDictBytes(const torch::nn::Module& module) {
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    state.insert(item.key(), item.value().detach().to(torch::kCPU).contiguous());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    state.insert(item.key(), item.value().detach().to(torch::kCPU).contiguous());
  }
  return torch::pickle_save(state);
}

absl::Status WriteModelArtifacts(const TrainJobConfig& job, ClassifierImpl& model,
                                 const DeviceDataset& data, mpsd::v1::JobSummary& summary) {
  if (job.job_dir.empty()) return absl::OkStatus();
  std::string path;
  if (job.model != nullptr) {
    const std::vector<char> state = StateDictBytes(model);
    if (absl::Status s = WriteInJobDir(job, kStateDictFile, {state.data(), state.size()}, path);
        !s.ok()) {
      return s;
    }
    summary.set_model_state_dict_path(path);
  }
  const std::vector<char> check = CheckBytes(job, model);
  if (absl::Status s = WriteInJobDir(job, kModelCheckFile, {check.data(), check.size()}, path);
      !s.ok()) {
    return s;
  }
  summary.set_model_check_path(path);
  absl::StatusOr<std::string> json = ModelJson(job, data, summary);
  if (!json.ok()) return json.status();
  if (absl::Status s = WriteInJobDir(job, kModelJsonFile, *json, path); !s.ok()) return s;
  summary.set_model_json_path(path);
  return absl::OkStatus();
}

}  // namespace mpsd::trainer
