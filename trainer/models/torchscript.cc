// TorchScript user models: loading, the submit-time check, and the ClassifierImpl wrapper.
#include "trainer/models/torchscript.h"

#include <torch/csrc/jit/passes/inliner.h>

#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "trainer/task.h"
#include "trainer/torch_archive.h"
#include "trainer/torch_errors.h"

namespace mpsd::trainer {
namespace {

absl::Status FileError(const std::string& path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

// What an exception says: LibTorch's errors without their C++ backtrace.
std::string ErrorText(const std::exception& e) {
  const c10::Error* torch_error = dynamic_cast<const c10::Error*>(&e);
  return torch_error != nullptr ? torch_error->what_without_backtrace() : e.what();
}

// Why a node may not run in mpsd's executor, or "": an operator that opens a file by name
// (aten::from_file, and any operator with a `str filename` or `str path` argument). A model
// runs with the daemon's user's rights, so such an operator would read or write any file that
// user can (the state dir's tokens and database, other submitters' models), past data_roots.
std::string ForbiddenOperator(const torch::jit::Node& node) {
  if (node.kind() == c10::Symbol::fromQualString("aten::from_file")) {
    return "aten::from_file (torch.from_file) opens a file by name";
  }
  const c10::FunctionSchema* schema = node.maybeSchema();
  if (schema == nullptr) return "";
  for (const c10::Argument& argument : schema->arguments()) {
    if (argument.type()->kind() == c10::TypeKind::StringType &&
        (argument.name() == "filename" || argument.name() == "path" || argument.name() == "file")) {
      return absl::StrCat(schema->name(), " takes a file name (", argument.name(), ")");
    }
  }
  return "";
}

// Every operator of every method of `module` and its submodules, with the functions and methods
// they call inlined (torch::jit::Inline), checked by ForbiddenOperator before anything runs.
absl::Status CheckOperators(const torch::jit::Module& module) {
  for (const torch::jit::Module& each : module.modules()) {
    for (const torch::jit::Method& method : each.get_methods()) {
      std::shared_ptr<torch::jit::Graph> graph = method.graph()->copy();
      torch::jit::Inline(*graph);
      std::vector<const torch::jit::Block*> blocks = {graph->block()};
      while (!blocks.empty()) {
        const torch::jit::Block* block = blocks.back();
        blocks.pop_back();
        for (const torch::jit::Node* node : block->nodes()) {
          const std::string forbidden = ForbiddenOperator(*node);
          if (!forbidden.empty()) {
            return absl::InvalidArgumentError(
                absl::StrCat("method ", method.name(), " uses ", forbidden,
                             ", which mpsd does not run: a model may not read or write files"));
          }
          for (const torch::jit::Block* inner : node->blocks()) blocks.push_back(inner);
        }
      }
    }
  }
  return absl::OkStatus();
}

// Loads a TorchScript archive, turning every failure into INVALID_ARGUMENT naming the file.
absl::StatusOr<torch::jit::Module> LoadScript(const std::string& path,
                                              const torch::Device& device) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return FileError(path, "no such file");
  if (!std::filesystem::is_regular_file(path, ec)) return FileError(path, "not a regular file");
  // Read once: the bytes checked here are the bytes LibTorch loads.
  absl::StatusOr<std::vector<char>> bytes = ReadWholeFile(path);
  if (!bytes.ok()) return absl::InvalidArgumentError(bytes.status().message());
  const absl::string_view view(bytes->data(), bytes->size());
  if (absl::Status s = CheckTorchArchive(view, ScriptPickles()); !s.ok()) {
    return FileError(path, absl::StrCat("not a TorchScript module mpsd loads: ", s.message()));
  }
  try {
    // Loaded on the CPU first: nothing of it reaches the device before its operators are
    // checked; then, for another device, loaded again from the same bytes onto it (constants
    // included, which Module::to would leave behind).
    torch::jit::Module module =
        torch::jit::load(std::make_shared<MemoryReadAdapter>(view), torch::kCPU);
    if (absl::Status s = CheckOperators(module); !s.ok()) return FileError(path, s.message());
    if (device.is_cpu()) return module;
    return torch::jit::load(std::make_shared<MemoryReadAdapter>(view), device);
  } catch (const std::exception& e) {
    return FileError(path,
                     absl::StrCat("not a TorchScript module (torch.jit.save): ", ErrorText(e)));
  }
}

std::string ShapeOf(const torch::Tensor& tensor) {
  std::vector<int64_t> sizes(tensor.sizes().begin(), tensor.sizes().end());
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

}  // namespace

TorchScriptClassifierImpl::TorchScriptClassifierImpl(torch::jit::Module module, std::string field,
                                                     std::string path)
    : module_(std::move(module)), field_(std::move(field)), path_(std::move(path)) {
  std::set<std::string> names;
  auto unique_name = [&names](const std::string& dotted) {
    std::string name = absl::StrReplaceAll(dotted, {{".", "_"}});
    while (!names.insert(name).second) name += "_";
    return name;
  };
  for (const auto& parameter : module_.named_parameters(/*recurse=*/true)) {
    register_parameter(unique_name(parameter.name), parameter.value,
                       parameter.value.requires_grad());
  }
  for (const auto& buffer : module_.named_buffers(/*recurse=*/true)) {
    register_buffer(unique_name(buffer.name), buffer.value);
  }
}

torch::Tensor TorchScriptClassifierImpl::forward(torch::Tensor inputs) {
  const auto what = [&inputs] { return absl::StrCat("forward on inputs ", ShapeOf(inputs)); };
  const torch::jit::IValue output =
      CallUserCode(field_, path_, what, [&] { return module_.forward({inputs}); });
  if (!output.isTensor()) {
    throw UserCodeError(field_, absl::StrCat(field_, ": ", path_, ": ", what(), " returned ",
                                             output.tagKind(), ", not a tensor of logits"));
  }
  return output.toTensor();
}

void TorchScriptClassifierImpl::train(bool on) {
  ClassifierImpl::train(on);
  module_.train(on);
}

absl::StatusOr<std::shared_ptr<TorchScriptClassifierImpl>> LoadTorchScriptClassifier(
    const std::string& path, const torch::Device& device, const std::string& field) {
  absl::StatusOr<torch::jit::Module> script = LoadScript(path, device);
  if (!script.ok()) return script.status();
  script->train(true);
  return std::make_shared<TorchScriptClassifierImpl>(*std::move(script), field, path);
}

absl::StatusOr<int64_t> CheckTorchScriptModel(const std::string& path,
                                              const std::vector<int64_t>& input_shape,
                                              int64_t num_classes) {
  absl::StatusOr<torch::jit::Module> script = LoadScript(path, torch::kCPU);
  if (!script.ok()) return script.status();
  std::vector<int64_t> shape = {1};
  shape.insert(shape.end(), input_shape.begin(), input_shape.end());
  const std::string example = absl::StrCat("[", absl::StrJoin(shape, ", "), "] float32");
  torch::jit::IValue output;
  try {
    torch::NoGradGuard no_grad;
    script->eval();
    output = script->forward({torch::zeros(shape)});
  } catch (const std::exception& e) {
    return FileError(path,
                     absl::StrCat("forward failed on one example ", example, ": ", ErrorText(e)));
  }
  if (!output.isTensor()) {
    return FileError(path, absl::StrCat("forward must return a tensor of logits [1, classes] for ",
                                        example, ", got ", output.tagKind()));
  }
  const torch::Tensor logits = output.toTensor();
  if (logits.dim() != 2 || logits.size(0) != 1 || logits.size(1) < num_classes) {
    return FileError(path, absl::StrCat("forward must return logits [1, K] with K >= ", num_classes,
                                        " classes for ", example, ", got ", ShapeOf(logits)));
  }
  int64_t parameters = 0;
  for (const torch::Tensor& p : script->parameters(/*recurse=*/true)) {
    if (p.requires_grad()) parameters += p.numel();
  }
  return parameters;
}

namespace {

// The probe batch a user's loss or metric is tried on at submit: two examples of the task's
// shapes, all zeros; `probe` describes them for errors.
struct ProbeBatch {
  torch::Tensor logits;   // [2, outputs] float32
  torch::Tensor targets;  // [2, ...target_shape], int64 (classification) or float32
  std::string probe;      // "logits [2, 10] float32 and targets [2] int64"
};

ProbeBatch MakeProbeBatch(const TaskConfig& config, const torch::Device& device) {
  const auto on_device = torch::TensorOptions().device(device);
  ProbeBatch batch;
  batch.logits = torch::zeros({2, config.outputs}, on_device.dtype(torch::kFloat32));
  std::vector<int64_t> target_shape = {2};
  target_shape.insert(target_shape.end(), config.target_shape.begin(), config.target_shape.end());
  const bool classes = config.kind == TaskKind::kClassification;
  batch.targets =
      torch::zeros(target_shape, on_device.dtype(classes ? torch::kInt64 : torch::kFloat32));
  batch.probe = absl::StrCat("logits ", ShapeOf(batch.logits), " float32 and targets ",
                             ShapeOf(batch.targets), classes ? " int64" : " float32");
  return batch;
}

}  // namespace

absl::StatusOr<torch::jit::Module> LoadTorchScriptLoss(const TaskConfig& config,
                                                       const torch::Device& device) {
  const std::string& path = config.custom_loss_path;
  absl::StatusOr<torch::jit::Module> script = LoadScript(path, device);
  if (!script.ok()) return script.status();
  script->eval();
  const ProbeBatch batch = MakeProbeBatch(config, device);
  const torch::Tensor logits = batch.logits.clone().requires_grad_(true);
  const torch::Tensor& targets = batch.targets;
  const std::string& probe = batch.probe;
  torch::jit::IValue loss;
  try {
    loss = script->forward({logits, targets});
  } catch (const std::exception& e) {
    return FileError(path, absl::StrCat("forward failed on ", probe, ": ", ErrorText(e)));
  }
  if (!loss.isTensor()) {
    return FileError(path, absl::StrCat("forward must return the loss as a scalar float tensor "
                                        "for ",
                                        probe, ", got ", loss.tagKind()));
  }
  const torch::Tensor value = loss.toTensor();
  if (value.dim() != 0 || !value.is_floating_point()) {
    return FileError(path, absl::StrCat("forward must return the loss as a scalar float tensor "
                                        "for ",
                                        probe, ", got ", ShapeOf(value), " ",
                                        c10::toString(value.scalar_type())));
  }
  if (!value.requires_grad()) {
    return FileError(path, absl::StrCat("the loss forward returns for ", probe,
                                        " does not depend on the logits (no gradient would "
                                        "reach the model)"));
  }
  return script;
}

absl::StatusOr<torch::jit::Module> LoadTorchScriptMetric(const TaskConfig& config,
                                                         const std::string& path,
                                                         const torch::Device& device) {
  absl::StatusOr<torch::jit::Module> script = LoadScript(path, device);
  if (!script.ok()) return script.status();
  script->eval();
  const ProbeBatch batch = MakeProbeBatch(config, device);
  torch::jit::IValue value;
  try {
    torch::NoGradGuard no_grad;
    value = script->forward({batch.logits, batch.targets});
  } catch (const std::exception& e) {
    return FileError(path, absl::StrCat("forward failed on ", batch.probe, ": ", ErrorText(e)));
  }
  const std::string expected = "forward must return the batch's value as a scalar tensor for ";
  if (!value.isTensor()) {
    return FileError(path, absl::StrCat(expected, batch.probe, ", got ", value.tagKind()));
  }
  const torch::Tensor result = value.toTensor();
  if (result.dim() != 0 || result.is_complex() || result.scalar_type() == torch::kBool) {
    return FileError(path, absl::StrCat(expected, batch.probe, ", got ", ShapeOf(result), " ",
                                        c10::toString(result.scalar_type())));
  }
  return script;
}

}  // namespace mpsd::trainer
