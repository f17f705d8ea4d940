// The model registry and what all models share. The architectures are in trainer/models/.
#include "trainer/models.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/models/resnet.h"
#include "trainer/models/sequence.h"
#include "trainer/models/simple.h"
#include "trainer/models/vgg.h"

namespace mpsd::trainer {
namespace {

// Beyond these a shape is a typo, and the parameter arithmetic could overflow.
constexpr int64_t kMaxDimension = int64_t{1} << 20;
constexpr int64_t kMaxInputSize = int64_t{1} << 31;  // elements per example
constexpr int64_t kMaxClasses = int64_t{1} << 20;

absl::string_view Expected(InputKind kind) {
  switch (kind) {
    case InputKind::kImage:
      return "images [C, H, W]";
    case InputKind::kSequence:
      return "sequences [T, F] or images [C, H, W]";
    case InputKind::kAny:
      return "inputs of 1 to 3 dimensions";
  }
  return "";
}

bool RankFits(InputKind kind, size_t rank) {
  switch (kind) {
    case InputKind::kImage:
      return rank == 3;
    case InputKind::kSequence:
      return rank == 2 || rank == 3;
    case InputKind::kAny:
      return rank >= 1 && rank <= 3;
  }
  return false;
}

absl::Status CheckRank(const ModelEntry& entry, const std::vector<int64_t>& shape) {
  if (RankFits(entry.input_kind, shape.size())) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s takes %s, not a shape of %d dimension(s) (%s)", entry.name,
                      Expected(entry.input_kind), shape.size(), FormatShape(shape)));
}

absl::Status CheckListModelsRequest(const mpsd::v1::ListModelsRequest& request) {
  if (!request.input_shape().empty()) {
    const std::vector<int64_t> shape(request.input_shape().begin(), request.input_shape().end());
    if (absl::Status s = CheckInputShape(shape); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("input_shape: ", s.message()));
    }
  }
  if (request.has_num_classes()) {
    if (absl::Status s = CheckNumClasses(request.num_classes()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("num_classes: ", s.message()));
    }
  }
  return absl::OkStatus();
}

// `entry` at the request's shape and classes, or at its natural ones.
mpsd::v1::ModelInfo DescribeModel(const ModelEntry& entry,
                                  const mpsd::v1::ListModelsRequest& request) {
  ModelConfig config;
  config.input_shape =
      request.input_shape().empty()
          ? entry.natural_input_shape
          : std::vector<int64_t>(request.input_shape().begin(), request.input_shape().end());
  config.num_classes =
      request.has_num_classes() ? request.num_classes() : entry.natural_num_classes;
  mpsd::v1::ModelInfo info;
  info.set_name(std::string(entry.name));
  info.set_description(std::string(entry.description));
  for (const int64_t dim : config.input_shape) info.add_input_shape(dim);
  info.set_num_classes(static_cast<int32_t>(config.num_classes));
  for (const absl::string_view preset : entry.presets) info.add_presets(std::string(preset));
  if (absl::Status s = CheckModelConfig(entry, config); s.ok()) {
    info.set_parameters(entry.parameters(config));
  } else {
    info.set_unsupported(std::string(s.message()));
  }
  return info;
}

}  // namespace

void ClassifierImpl::train(bool on) {
  torch::nn::Module::train(on);
  for (const std::shared_ptr<torch::nn::Module>& module : eval_only_) module->eval();
}

void ClassifierImpl::KeepInEvalMode(std::vector<std::shared_ptr<torch::nn::Module>> modules) {
  eval_only_ = std::move(modules);
  if (is_training()) train(true);
}

const std::vector<ModelEntry>& Models() {
  static const auto* const kModels = [] {
    auto* models = new std::vector<ModelEntry>();
    for (std::vector<ModelEntry> family :
         {SimpleModels(), ResNetModels(), VggModels(), SequenceModels()}) {
      for (ModelEntry& entry : family) models->push_back(std::move(entry));
    }
    return models;
  }();
  return *kModels;
}

const ModelEntry* FindModel(absl::string_view name) {
  for (const ModelEntry& entry : Models()) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const ModelEntry& entry : Models()) names.emplace_back(entry.name);
  return names;
}

absl::Status CheckInputShape(const std::vector<int64_t>& shape) {
  if (shape.empty() || shape.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("must have 1 to 3 dimensions ([C, H, W] or [T, F]), got %d", shape.size()));
  }
  int64_t size = 1;
  for (const int64_t dim : shape) {
    if (dim <= 0 || dim > kMaxDimension) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "every dimension must be in [1, %d], got %s", kMaxDimension, FormatShape(shape)));
    }
    size *= dim;
    if (size > kMaxInputSize) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "an example may have at most %d elements, got %s", kMaxInputSize, FormatShape(shape)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNumClasses(int64_t num_classes) {
  if (num_classes > 0 && num_classes <= kMaxClasses) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("must be in [1, %d], got %d", kMaxClasses, num_classes));
}

absl::Status CheckPreset(const ModelEntry& entry, absl::string_view preset) {
  if (preset.empty() ||
      std::find(entry.presets.begin(), entry.presets.end(), preset) != entry.presets.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      entry.presets.empty() ? absl::StrFormat("%s has no presets, got \"%s\"", entry.name, preset)
                            : absl::StrFormat("unknown preset \"%s\" for %s (known: %s)", preset,
                                              entry.name, absl::StrJoin(entry.presets, ", ")));
}

absl::Status CheckModelConfig(const ModelEntry& entry, const ModelConfig& config) {
  if (absl::Status s = CheckNumClasses(config.num_classes); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("number of classes ", s.message()));
  }
  if (absl::Status s = CheckPreset(entry, config.preset); !s.ok()) return s;
  if (absl::Status s = CheckInputShape(config.input_shape); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("input shape ", s.message()));
  }
  if (absl::Status s = CheckRank(entry, config.input_shape); !s.ok()) return s;
  return entry.check(config);
}

absl::StatusOr<mpsd::v1::ListModelsResponse> ListModels(
    const mpsd::v1::ListModelsRequest& request) {
  if (absl::Status s = CheckListModelsRequest(request); !s.ok()) return s;
  mpsd::v1::ListModelsResponse response;
  for (const ModelEntry& entry : Models()) *response.add_models() = DescribeModel(entry, request);
  return response;
}

std::string FormatShape(const std::vector<int64_t>& shape) {
  return shape.empty() ? "[]" : absl::StrJoin(shape, "×");
}

torch::Tensor ZeroInputs(const ModelConfig& config, int64_t batch_size,
                         const torch::TensorOptions& options) {
  std::vector<int64_t> sizes = {batch_size};
  sizes.insert(sizes.end(), config.input_shape.begin(), config.input_shape.end());
  return torch::zeros(sizes, options.dtype(torch::kFloat32));
}

void ToChannelsLast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& parameter : module.parameters(/*recurse=*/true)) {
    if (parameter.dim() == 4) {
      parameter.set_data(ChannelsLastStrides(parameter.data()));
    }
  }
}

bool HasChannelsLastStrides(const torch::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast) &&
         t.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
}

torch::Tensor ChannelsLastStrides(const torch::Tensor& t) {
  if (t.dim() != 4) return t;
  if (!t.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    return t.contiguous(at::MemoryFormat::ChannelsLast);
  }
  if (!t.is_contiguous() || HasChannelsLastStrides(t)) return t;
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  return t.as_strided(t.sizes(), {c * h * w, 1, w * c, c});
}

torch::Tensor GatherRows(const torch::Tensor& rows, const torch::Tensor& index) {
  if (HasChannelsLastStrides(rows)) {
    return rows.permute({0, 2, 3, 1}).index_select(/*dim=*/0, index).permute({0, 3, 1, 2});
  }
  return rows.index_select(/*dim=*/0, index);
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const torch::Tensor& parameter : module.parameters(/*recurse=*/true)) {
    if (parameter.requires_grad()) count += parameter.numel();
  }
  return count;
}

}  // namespace mpsd::trainer
