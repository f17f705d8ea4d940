// Finding, reading and loading a finished TrainJob's model (trained_model.h).
#include "trainer/trained_model.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/job_id.h"
#include "trainer/model_export.h"
#include "trainer/models/torchscript.h"
#include "trainer/torch_archive.h"

namespace mpsd::trainer {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

const Value& Member(const Struct& object, const std::string& key) {
  static const Value* const kMissing = new Value();
  const auto it = object.fields().find(key);
  return it == object.fields().end() ? *kMissing : it->second;
}

std::vector<float> Floats(const Value& value) {
  std::vector<float> out;
  for (const Value& v : value.list_value().values()) {
    out.push_back(static_cast<float>(v.number_value()));
  }
  return out;
}

// The directory of `model` (a job id or a model.pt path) whose model.json describes it.
absl::StatusOr<std::filesystem::path> ModelDir(const std::string& model,
                                               const std::string& artifacts_dir,
                                               const FieldChecks& fields) {
  if (model.empty()) {
    return fields.Error("model", "required: a finished TrainJob's id or a model.pt path");
  }
  if (api::IsJobId(model)) {
    if (artifacts_dir.empty()) {
      return fields.Error("model",
                          "this executor has no artifacts directory to find job "
                          "models in");
    }
    return std::filesystem::path(artifacts_dir) / model;
  }
  std::error_code error;
  if (std::filesystem::is_directory(model, error)) {
    return fields.Error("model", absl::StrCat(model,
                                              ": a directory; name the model.pt (or best.pt) in "
                                              "it, or a finished TrainJob's id"));
  }
  if (!std::filesystem::is_regular_file(model, error)) {
    return fields.Error("model", absl::StrCat(model,
                                              ": no such file (expected a finished "
                                              "TrainJob's id or a model.pt written by mpsd)"));
  }
  return std::filesystem::path(model).parent_path();
}

// The zoo's part of model.json into `out` (entry, config); a TorchScript model has none.
absl::Status ReadModelPart(const Struct& model_part, const std::string& where,
                           const FieldChecks& fields, TrainedModel& out) {
  const Value& name = Member(model_part, "name");
  if (name.has_null_value()) {
    out.label = absl::StrFormat("%s (torchscript)", out.label);
    return absl::OkStatus();
  }
  out.entry = FindModel(name.string_value());
  out.label = absl::StrFormat("%s (%s)", out.label, name.string_value());
  if (out.entry == nullptr) {
    return fields.Error("model", absl::StrFormat("%s: model \"%s\" is not in this executor's zoo",
                                                 where, name.string_value()));
  }
  out.config.preset = Member(model_part, "preset").string_value();
  if (out.spec.model().has_dropout()) out.config.dropout = out.spec.model().dropout();
  if (absl::Status s = CheckModelConfig(*out.entry, out.config); !s.ok()) {
    return fields.Error("model", absl::StrCat(where, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainedModel> ReadTrainedModel(const std::string& model,
                                              const std::string& artifacts_dir,
                                              const FieldChecks& fields) {
  absl::StatusOr<std::filesystem::path> dir = ModelDir(model, artifacts_dir, fields);
  if (!dir.ok()) return dir.status();
  const std::string json_path = (*dir / kModelJsonFile).string();
  std::ifstream in(json_path);
  std::error_code error;
  if (!in && api::IsJobId(model) && std::filesystem::is_directory(*dir, error) &&
      std::filesystem::is_empty(*dir, error)) {
    // DeleteArtifacts empties the job's folder and keeps it (server/core/retention.cc).
    return fields.Error("model", absl::StrFormat("job %s's artifacts were deleted (mpsctl rm, or "
                                                 "the daemon's artifacts_retention): its model "
                                                 "is gone",
                                                 model));
  }
  if (!in) {
    return fields.Error(
        "model", api::IsJobId(model)
                     ? absl::StrFormat("job %s has no %s: not a TrainJob of this daemon that "
                                       "finished",
                                       model, kModelJsonFile)
                     : absl::StrFormat("%s: no %s beside it (mpsd writes one beside every "
                                       "model.pt it saves; for a model fetched with mpsctl "
                                       "download, fetch it too: mpsctl download JOB %s)",
                                       model, kModelJsonFile, kModelJsonFile));
  }
  std::stringstream text;
  text << in.rdbuf();
  Struct card;
  const auto bad = [&](absl::string_view what) {
    return fields.Error("model", absl::StrCat(json_path, ": ", what));
  };
  if (!google::protobuf::util::JsonStringToMessage(text.str(), &card).ok()) return bad("not JSON");
  TrainedModel out;
  out.dir = dir->string();
  out.weights_path = api::IsJobId(model) ? (*dir / "model.pt").string() : model;
  out.job_id = Member(card, "job_id").string_value();
  out.label = out.job_id.empty() ? model : absl::StrCat("job ", out.job_id);
  const std::string file = std::filesystem::path(out.weights_path).filename().string();
  // model.json and the files it lists beside the weights (state_dict: PyTorch's format for
  // Python; check: a test input and its output) are not weights this executor loads.
  const Struct& files = Member(card, "files").struct_value();
  std::string not_weights;
  if (file == kModelJsonFile) {
    not_weights = "the model's description, not weights";
  } else if (file == Member(files, "check").string_value()) {
    not_weights = "the model's check (a test input and its output), not weights";
  } else if (file == Member(files, "state_dict").string_value()) {
    not_weights = "weights for PyTorch in Python (torch.load), not mpsd's format";
  }
  if (!not_weights.empty()) {
    return fields.Error("model", absl::StrFormat("%s: %s; name the job's model.pt (or its id) or "
                                                 "best.pt",
                                                 model, not_weights));
  }
  if (!out.job_id.empty() && file != "model.pt") {
    absl::StrAppend(&out.label, " ", file);  // "job 12 best.pt"
  }
  const Struct& input = Member(card, "input").struct_value();
  for (const Value& v : Member(input, "shape").list_value().values()) {
    out.config.input_shape.push_back(static_cast<int64_t>(v.number_value()));
  }
  out.config.num_classes = static_cast<int64_t>(
      Member(Member(card, "model").struct_value(), "num_classes").number_value());
  if (out.config.input_shape.empty() || out.config.num_classes < 1) {
    return bad("no model.num_classes or input.shape");
  }
  out.scaled = Member(input, "scaled_to_unit").bool_value();
  out.mean = Floats(Member(input, "mean"));
  out.std = Floats(Member(input, "std"));
  for (const Value& v : Member(card, "class_names").list_value().values()) {
    out.class_names.push_back(v.string_value());
  }
  const std::string task = Member(Member(card, "training").struct_value(), "task").string_value();
  if (!task.empty()) out.task = task;
  std::string spec_json;
  if (!google::protobuf::util::MessageToJsonString(Member(card, "spec"), &spec_json).ok() ||
      !google::protobuf::util::JsonStringToMessage(spec_json, &out.spec).ok()) {
    return bad("its \"spec\" is not a TrainJob");
  }
  if (absl::Status s = ReadModelPart(Member(card, "model").struct_value(), json_path, fields, out);
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<std::shared_ptr<ClassifierImpl>> LoadTrainedModel(const TrainedModel& model,
                                                                 const torch::Device& device,
                                                                 const FieldChecks& fields) {
  const std::string& path = model.weights_path;
  std::shared_ptr<ClassifierImpl> loaded;
  if (model.entry == nullptr) {
    absl::StatusOr<std::shared_ptr<TorchScriptClassifierImpl>> script =
        LoadTorchScriptClassifier(path, device, fields.Path("model"));
    if (!script.ok()) return fields.Error("model", script.status().message());
    loaded = *std::move(script);
  } else {
    loaded = model.entry->make(model.config);
    // Read once and checked (a model.pt named by path is the submitter's file) before LibTorch
    // parses the same bytes (trainer/torch_archive.h).
    absl::StatusOr<std::vector<char>> bytes = ReadWholeFile(path);
    if (!bytes.ok()) return fields.Error("model", bytes.status().message());
    const absl::string_view view(bytes->data(), bytes->size());
    if (absl::Status s = CheckTorchArchive(view, ScriptPickles()); !s.ok()) {
      return fields.Error("model", absl::StrCat(path, ": ", s.message()));
    }
    torch::serialize::InputArchive archive;
    try {
      archive.load_from(view.data(), view.size(), torch::kCPU);
      loaded->load(archive);
    } catch (const c10::Error& e) {
      return fields.Error("model", absl::StrFormat("%s: not the weights of %s: %s", path,
                                                   model.label, e.what_without_backtrace()));
    }
    loaded->to(device);
  }
  loaded->eval();
  return loaded;
}

}  // namespace mpsd::trainer
