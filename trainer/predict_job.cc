// PredictJob (predict_job.h): inputs decoded and preprocessed as model.json says, the trained
// model's forward passes, and one Prediction per input.
#include "trainer/predict_job.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/device.h"
#include "trainer/image_decode.h"
#include "trainer/job_summary.h"
#include "trainer/log.h"
#include "trainer/tensor_file.h"
#include "trainer/torch_errors.h"
#include "trainer/trained_model.h"

namespace mpsd::trainer {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using mpsd::v1::JobEvent;

constexpr int kDefaultTopK = 5;
constexpr int kMaxTopK = 1000;
constexpr int64_t kMaxImages = 10'000;
constexpr int64_t kBatch = 256;

const FieldChecks& Fields() {
  static const FieldChecks* const fields = new FieldChecks("predict_job");
  return *fields;
}

// One input file: an image, or a tensors file of many inputs.
struct InputFile {
  std::string path;
  bool tensors = false;
};

struct PredictPlan {
  TrainedModel model;
  std::vector<InputFile> files;
  int top_k = kDefaultTopK;
  torch::Device device = torch::kCPU;
};

bool IsImageName(const fs::path& path) {
  const std::string ext = absl::AsciiStrToLower(path.extension().string());
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// inputs[i] as files: an image, a tensors file, or a folder's images sorted by name.
absl::Status ExpandInput(const std::string& input, int i, std::vector<InputFile>& files) {
  const std::string field = Indexed("inputs", i);
  std::error_code error;
  const fs::path path(input);
  if (fs::is_directory(path, error)) {
    std::vector<std::string> images;
    for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
      if (it->is_regular_file(error) && IsImageName(it->path())) {
        images.push_back(it->path().string());
      }
    }
    if (error) {
      return Fields().Error(field, absl::StrCat(input, ": cannot list: ", error.message()));
    }
    if (images.empty()) {
      return Fields().Error(field, absl::StrCat(input,
                                                ": a folder without .png, .jpg or .jpeg "
                                                "files"));
    }
    std::sort(images.begin(), images.end());
    for (std::string& image : images) files.push_back({std::move(image), false});
    return absl::OkStatus();
  }
  if (!fs::is_regular_file(path, error)) {
    return Fields().Error(field, absl::StrCat(input, ": no such file or folder"));
  }
  if (IsImageName(path)) {
    files.push_back({input, false});
  } else if (absl::AsciiStrToLower(path.extension().string()) == ".pt") {
    files.push_back({input, true});
  } else {
    return Fields().Error(field, absl::StrCat(input,
                                              ": not a PNG or JPEG file (.png, .jpg, "
                                              ".jpeg), a folder of them or a .pt tensors "
                                              "file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PredictPlan> ResolvePredictJob(const mpsd::v1::PredictJob& job,
                                              const DeviceInventory& inventory,
                                              const api::Executor::Options& options) {
  PredictPlan plan;
  absl::StatusOr<TrainedModel> model =
      ReadTrainedModel(job.model(), options.artifacts_dir, Fields());
  if (!model.ok()) return model.status();
  plan.model = *std::move(model);
  if (job.inputs().empty()) {
    return Fields().Error("inputs",
                          "at least one required: image files, folders of images or "
                          ".pt tensors files");
  }
  for (int i = 0; i < job.inputs_size(); ++i) {
    if (absl::Status s = ExpandInput(job.inputs(i), i, plan.files); !s.ok()) return s;
  }
  const int64_t images = std::count_if(plan.files.begin(), plan.files.end(),
                                       [](const InputFile& f) { return !f.tensors; });
  if (images > kMaxImages) {
    return Fields().Error("inputs",
                          absl::StrFormat("%d images; at most %d in one job", images, kMaxImages));
  }
  if (images > 0 && plan.model.config.input_shape.size() != 3) {
    return Fields().Error("inputs",
                          absl::StrFormat("images, but the model of %s takes inputs "
                                          "of %d dimension(s), not [C, H, W]",
                                          plan.model.label, plan.model.config.input_shape.size()));
  }
  if (job.has_top_k()) {
    if (absl::Status s = Fields().InRange("top_k", job.top_k(), 1, kMaxTopK); !s.ok()) return s;
    plan.top_k = job.top_k();
  }
  plan.top_k = static_cast<int>(std::min<int64_t>(plan.top_k, plan.model.config.num_classes));
  absl::StatusOr<torch::Device> device = ResolveDevice(job.device(), inventory);
  if (!device.ok()) return Fields().Error("device", device.status().message());
  plan.device = *device;
  return plan;
}

// uint8 pixels → the model's inputs: / 255 when the model's were scaled, then (x - mean) / std
// per channel (dim 1); float inputs as they are.
torch::Tensor Preprocess(torch::Tensor x, const TrainedModel& model) {
  if (x.scalar_type() != torch::kUInt8) return x.to(torch::kFloat32);
  x = x.to(torch::kFloat32);
  if (model.scaled) x = x / 255.0;
  if (model.mean.empty() || model.std.empty()) return x;
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = static_cast<int64_t>(model.mean.size());
  const torch::Tensor mean = torch::tensor(model.mean).reshape(shape);
  const torch::Tensor std = torch::tensor(model.std).reshape(shape);
  return (x - mean) / std;
}

// Every input as [N, ...input shape] float32 on the CPU, and their names, in order.
absl::StatusOr<torch::Tensor> ReadInputs(const PredictPlan& plan, std::vector<std::string>& names) {
  const std::vector<int64_t>& shape = plan.model.config.input_shape;
  std::vector<torch::Tensor> parts;
  for (const InputFile& file : plan.files) {
    if (file.tensors) {
      absl::StatusOr<torch::Tensor> x = ReadInputsFile(file.path);
      if (!x.ok()) return x.status();
      if (x->sizes().slice(1).vec() != shape) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: x: examples of shape [%s], but the model of %s takes [%s]",
                            file.path, absl::StrJoin(x->sizes().slice(1), ", "), plan.model.label,
                            absl::StrJoin(shape, ", ")));
      }
      for (int64_t i = 0; i < x->size(0); ++i) {
        names.push_back(absl::StrCat(file.path, "[", i, "]"));
      }
      parts.push_back(Preprocess(*x, plan.model));
      continue;
    }
    absl::StatusOr<RgbImage> image = ReadImageFile(file.path);
    if (!image.ok()) return image.status();  // the message names the file
    torch::Tensor pixels = torch::empty(shape, torch::kUInt8);
    ResizeInto(*image, static_cast<int>(shape[1]), static_cast<int>(shape[2]),
               static_cast<int>(shape[0]), pixels.data_ptr<uint8_t>());
    names.push_back(file.path);
    parts.push_back(Preprocess(pixels.unsqueeze(0), plan.model));
  }
  return torch::cat(parts);
}

// One input's Prediction from its output row `out` [outputs] float32 (CPU).
mpsd::v1::Prediction PredictionOf(const torch::Tensor& out, const PredictPlan& plan) {
  mpsd::v1::Prediction prediction;
  const TrainedModel& model = plan.model;
  const auto name = [&](int64_t c) {
    return c < static_cast<int64_t>(model.class_names.size()) ? model.class_names[c] : "";
  };
  if (model.task == "regression") {
    for (int64_t d = 0; d < out.size(0); ++d) prediction.add_values(out[d].item<double>());
  } else if (model.task == "multilabel") {
    const torch::Tensor p = torch::sigmoid(out);
    for (int64_t k = 0; k < p.size(0); ++k) {
      prediction.add_probabilities(p[k].item<double>());
      if (p[k].item<double>() > 0.5) prediction.add_classes(static_cast<int32_t>(k));
    }
    if (!model.class_names.empty()) {
      for (int64_t k = 0; k < p.size(0); ++k) prediction.add_class_names(name(k));
    }
  } else {
    const auto [p, c] = torch::softmax(out, /*dim=*/0).topk(plan.top_k);
    for (int64_t r = 0; r < plan.top_k; ++r) {
      prediction.add_classes(static_cast<int32_t>(c[r].item<int64_t>()));
      prediction.add_probabilities(p[r].item<double>());
      if (!model.class_names.empty()) prediction.add_class_names(name(c[r].item<int64_t>()));
    }
  }
  return prediction;
}

void EmitLog(const EventSink& sink, std::string text) {
  Log(LogLevel::kInfo, text);
  JobEvent event;
  event.mutable_log()->set_level(mpsd::v1::LogLine::INFO);
  event.mutable_log()->set_text(std::move(text));
  sink(std::move(event));
}

// Reads, runs and reports; the part of RunPredictJob inside the exception firewall.
absl::Status Predict(const PredictPlan& plan, const EventSink& sink,
                     const std::atomic<bool>& cancelled, mpsd::v1::JobSummary& summary) {
  std::vector<std::string> names;
  const Clock::time_point read_start = Clock::now();
  absl::StatusOr<torch::Tensor> inputs = ReadInputs(plan, names);
  if (!inputs.ok()) return inputs.status();
  summary.set_data_load_time_s(std::chrono::duration<double>(Clock::now() - read_start).count());
  absl::StatusOr<std::shared_ptr<ClassifierImpl>> model =
      LoadTrainedModel(plan.model, plan.device, Fields());
  if (!model.ok()) return model.status();
  summary.set_parameters(CountParameters(**model));
  for (const std::string& name : plan.model.class_names) summary.add_class_names(name);
  torch::NoGradGuard no_grad;
  const torch::Tensor on_device = inputs->to(plan.device);
  std::vector<torch::Tensor> outputs;
  Synchronize(plan.device);
  const Clock::time_point forward_start = Clock::now();
  for (int64_t start = 0; start < on_device.size(0); start += kBatch) {
    if (cancelled.load(std::memory_order_relaxed)) return absl::CancelledError("cancelled");
    const int64_t size = std::min(kBatch, on_device.size(0) - start);
    outputs.push_back((*model)->forward(on_device.narrow(/*dim=*/0, start, size)));
  }
  const torch::Tensor out = torch::cat(outputs).to(torch::kCPU, torch::kFloat32);  // synchronises
  const double forward_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - forward_start).count();
  summary.set_forward_time_ms(forward_ms);
  EmitLog(sink, absl::StrFormat("%s: %d input(s), forward passes %.3f ms on %s", plan.model.label,
                                out.size(0), forward_ms, DeviceString(plan.device)));
  for (int64_t i = 0; i < out.size(0); ++i) {
    mpsd::v1::Prediction prediction = PredictionOf(out[i], plan);
    prediction.set_input(names[i]);
    prediction.set_index(i);
    *summary.add_predictions() = prediction;
    JobEvent event;
    *event.mutable_prediction() = std::move(prediction);
    sink(std::move(event));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePredictJob(const mpsd::v1::PredictJob& job, const DeviceInventory& inventory,
                                const api::Executor::Options& options) {
  return CatchTorchErrors([&] { return ResolvePredictJob(job, inventory, options).status(); });
}

absl::Status RunPredictJob(const mpsd::v1::PredictJob& job, const DeviceInventory& inventory,
                           const api::Executor::Options& options, const EventSink& sink,
                           const std::atomic<bool>& cancelled) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<PredictPlan> plan;
  if (absl::Status s = CatchTorchErrors(
          [&] { return (plan = ResolvePredictJob(job, inventory, options)).status(); });
      !s.ok()) {
    return s;
  }
  SummaryBuilder summary(DeviceString(plan->device));
  mpsd::v1::JobSummary& s = summary.summary();
  s.set_task(plan->model.task);
  s.set_eval_model(job.model());
  s.set_eval_model_job_id(plan->model.job_id);
  const absl::Status status = CatchTorchErrors([&] {
    at::init_num_threads();  // this thread may not be the one that created the executor
    summary.SetMemoryBefore(ReadMemory(plan->device));
    return Predict(*plan, sink, cancelled, s);
  });
  if (!status.ok()) {
    Log(LogLevel::kWarning,
        absl::StrCat("job ended: ", status.ToString(absl::StatusToStringMode::kWithNoExtraData)));
  }
  const absl::Status cleanup = CatchTorchErrors([&] {
    Synchronize(plan->device);
    EmptyCache(plan->device);
    summary.SetMemoryAfter(ReadMemory(plan->device));
    return absl::OkStatus();
  });
  const absl::Status emitted = CatchTorchErrors([&] {
    JobEvent event;
    *event.mutable_summary() =
        summary.Build(std::chrono::duration<double>(Clock::now() - start).count());
    sink(std::move(event));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return cleanup.ok() ? emitted : cleanup;
}

}  // namespace mpsd::trainer
