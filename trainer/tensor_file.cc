// Reading a torch.save dict of tensors with torch::pickle_load and checking every key.
#include "trainer/tensor_file.h"

#include <torch/serialize.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/torch_archive.h"

namespace mpsd::trainer {
namespace {

absl::Status KeyError(const std::string& path, absl::string_view key, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": ", problem));
}

std::string Shape(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes().vec(), ", "), "]");
}

// LibTorch's message about why it could not read the file, made into ours. `layout`: what a valid
// file holds, for the case of a one-entry dict.
absl::Status PickleError(
    const std::string& path, const std::string& message,
    absl::string_view layout = "a tensors file has the keys train and test, and x and y in each") {
  // LibTorch 1.13's unpickler lacks SETITEM (0x73), which pickle uses for a dict of one entry;
  // a valid file has none (train and test at the top, x and y in each split).
  if (absl::StrContains(message, "Unknown opcode") && absl::StrContains(message, "0x73")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": holds a dict with a single entry, which LibTorch " TORCH_VERSION " cannot read; ",
        layout, ": ", message));
  }
  if (absl::StrContains(message, "unknown type") || absl::StrContains(message, "Unknown type") ||
      absl::StrContains(message, "pickler class") || absl::StrContains(message, "global")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": holds pickled Python objects that are not read (only dicts, lists, strings, "
        "numbers and tensors are read; numpy arrays: torch.from_numpy first): ",
        message));
  }
  if (absl::StrContains(message, "version")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": written by a newer PyTorch in a format this LibTorch (" TORCH_VERSION ") cannot read: ",
        message));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": not a readable torch.save file: ", message));
}

absl::StatusOr<std::vector<char>> ReadBytes(const std::string& path) {
  absl::StatusOr<std::vector<char>> read = ReadWholeFile(path);
  if (absl::IsNotFound(read.status())) {
    return absl::NotFoundError(absl::StrFormat("file %s does not exist", path));
  }
  if (absl::IsPermissionDenied(read.status())) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open"));
  }
  if (!read.ok()) return read.status();
  std::vector<char>& bytes = *read;
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": a legacy torch.save file (a bare pickle, _use_new_zipfile_serialization=False); "
        "save it again with torch.save's default zip format (PyTorch >= 1.6)"));
  }
  if (bytes.size() < 4 || bytes[0] != 'P' || bytes[1] != 'K' || bytes[2] != 3 || bytes[3] != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a torch.save file (not a zip archive)"));
  }
  if (absl::Status s =
          CheckTorchArchive(absl::string_view(bytes.data(), bytes.size()), {{"data.pkl", "data/"}});
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  return read;
}

// The entries of a dict with string keys; every key must be one of `known`.
absl::StatusOr<std::vector<std::pair<std::string, c10::IValue>>> Entries(
    const std::string& path, absl::string_view where, const c10::IValue& value,
    const std::vector<std::string>& known) {
  if (!value.isGenericDict()) {
    return KeyError(path, where,
                    absl::StrCat("expected a dict with keys ", absl::StrJoin(known, ", "), ", got ",
                                 value.tagKind()));
  }
  std::vector<std::pair<std::string, c10::IValue>> entries;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) {
      return KeyError(path, where,
                      absl::StrCat("keys must be strings, got ", entry.key().tagKind()));
    }
    const std::string key = entry.key().toStringRef();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return KeyError(path, where.empty() ? key : absl::StrCat(where, ".", key),
                      absl::StrCat("unknown key (expected ", absl::StrJoin(known, ", "), ")"));
    }
    entries.emplace_back(key, entry.value());
  }
  return entries;
}

const c10::IValue* Find(const std::vector<std::pair<std::string, c10::IValue>>& entries,
                        absl::string_view key) {
  for (const auto& [name, value] : entries) {
    if (name == key) return &value;
  }
  return nullptr;
}

bool IsInputDtype(c10::ScalarType t) {
  return t == torch::kFloat32 || t == torch::kFloat64 || t == torch::kFloat16 ||
         t == torch::kBFloat16 || t == torch::kUInt8;
}

bool IsFloat(c10::ScalarType t) {
  return t == torch::kFloat32 || t == torch::kFloat64 || t == torch::kFloat16 ||
         t == torch::kBFloat16;
}

absl::StatusOr<TensorFileSplit> ReadSplit(const std::string& path, const std::string& name,
                                          const c10::IValue& value) {
  absl::StatusOr<std::vector<std::pair<std::string, c10::IValue>>> entries =
      Entries(path, name, value, {"x", "y"});
  if (!entries.ok()) return entries.status();
  TensorFileSplit split;
  for (const char* key : {"x", "y"}) {
    const c10::IValue* v = Find(*entries, key);
    const std::string where = absl::StrCat(name, ".", key);
    if (v == nullptr) return KeyError(path, where, "missing");
    if (!v->isTensor())
      return KeyError(path, where, absl::StrCat("expected a tensor, got ", v->tagKind()));
    (std::string(key) == "x" ? split.x : split.y) = v->toTensor().contiguous();
  }
  const torch::Tensor& x = split.x;
  const torch::Tensor& y = split.y;
  if (!IsInputDtype(x.scalar_type())) {
    return KeyError(path, name + ".x",
                    absl::StrCat("dtype ", c10::toString(x.scalar_type()),
                                 ", expected float32, float64, float16, bfloat16 or uint8"));
  }
  if (x.dim() < 2 || x.size(0) < 1) {
    return KeyError(path, name + ".x",
                    absl::StrCat("shape ", Shape(x), ", expected [N, ...] with N >= 1"));
  }
  if (y.scalar_type() != torch::kInt64 && !IsFloat(y.scalar_type())) {
    return KeyError(path, name + ".y",
                    absl::StrCat("dtype ", c10::toString(y.scalar_type()),
                                 ", expected int64 (class indices) or float (targets of task "
                                 "multilabel or regression)"));
  }
  if (y.scalar_type() == torch::kInt64 && (y.dim() != 1 || y.size(0) != x.size(0))) {
    return KeyError(path, name + ".y",
                    absl::StrFormat("shape %s, expected [%d] (one label per row of %s.x)", Shape(y),
                                    x.size(0), name));
  }
  if (IsFloat(y.scalar_type())) {
    if (y.dim() < 1 || y.dim() > 2 || y.size(0) != x.size(0) || (y.dim() == 2 && y.size(1) < 1)) {
      return KeyError(path, name + ".y",
                      absl::StrFormat("shape %s, expected [%d] or [%d, D] (float targets, one "
                                      "row per row of %s.x)",
                                      Shape(y), x.size(0), x.size(0), name));
    }
    split.y = y.to(torch::kFloat32).contiguous();
  }
  return split;
}

// "train.y[3, 1]" of the first element of y where `bad` holds.
std::string FirstWhere(const std::string& key, const torch::Tensor& bad) {
  const torch::Tensor at = bad.nonzero();
  if (at.size(0) == 0) return "";
  std::vector<int64_t> index;
  for (int64_t d = 0; d < at.size(1); ++d) index.push_back(at[0][d].item<int64_t>());
  return absl::StrCat(key, "[", absl::StrJoin(index, ", "), "]");
}

// Float targets: all splits float, of one width, finite; notes the first non-binary value.
absl::Status CheckFloatTargets(const std::string& path, TensorFile& file) {
  const std::pair<const char*, const TensorFileSplit*> splits[] = {
      {"train", &file.train}, {"test", &file.test}, {"val", &file.val}};
  file.float_targets = true;
  file.target_shape = file.train.y.sizes().slice(1).vec();
  for (const auto& [name, split] : splits) {
    const torch::Tensor& y = split->y;
    if (!y.defined()) continue;
    const std::string key = absl::StrCat(name, ".y");
    if (y.scalar_type() != torch::kFloat32) {
      return KeyError(path, key,
                      absl::StrCat("dtype ", c10::toString(y.scalar_type()),
                                   "; float targets must be float in every split"));
    }
    if (y.sizes().slice(1).vec() != file.target_shape) {
      return KeyError(path, key,
                      absl::StrFormat("shape %s, but train.y is %s (targets of one "
                                      "width)",
                                      Shape(y), Shape(file.train.y)));
    }
    const std::string bad = FirstWhere(key, torch::isfinite(y).logical_not());
    if (!bad.empty()) {
      const torch::Tensor value = y.flatten().index({torch::isfinite(y.flatten()).logical_not()});
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s: %g; targets must be finite (no NaN or infinity)", path, bad,
                          value[0].item<double>()));
    }
    if (file.non_binary_target.empty()) {
      const torch::Tensor non_binary = y.ne(0).logical_and(y.ne(1));
      const std::string where = FirstWhere(key, non_binary);
      if (!where.empty()) {
        file.non_binary_target = absl::StrFormat(
            "%s: %g", where, y.flatten().index({non_binary.flatten()})[0].item<double>());
      }
    }
  }
  file.num_classes = file.target_shape.empty() ? 1 : static_cast<int>(file.target_shape[0]);
  return absl::OkStatus();
}

absl::Status CheckLabels(const std::string& path, const std::string& key, const torch::Tensor& y,
                         int num_classes) {
  const torch::Tensor bad = torch::logical_or(y < 0, y >= num_classes).nonzero();
  if (bad.size(0) == 0) return absl::OkStatus();
  const int64_t index = bad[0][0].item<int64_t>();
  const int64_t label = y[index].item<int64_t>();
  if (label < 0) {
    return KeyError(path, absl::StrCat(key, "[", index, "]"),
                    absl::StrFormat("label %d; class labels are 0 or more", label));
  }
  return KeyError(path, absl::StrCat(key, "[", index, "]"),
                  absl::StrFormat("label %d, but there are %d classes (labels 0 to %d)", label,
                                  num_classes, num_classes - 1));
}

absl::Status ReadClasses(const std::string& path, const c10::IValue& value, TensorFile& file) {
  if (!value.isList()) {
    return KeyError(path, "classes",
                    absl::StrCat("expected a list of strings, got ", value.tagKind()));
  }
  size_t names_bytes = 0;
  for (const c10::IValue& name : value.toListRef()) {
    if (!name.isString()) {
      return KeyError(path, "classes",
                      absl::StrCat("expected a list of strings, got an item "
                                   "of type ",
                                   name.tagKind()));
    }
    // The names travel in every answer about the job (its summary, model.json): bounded so that
    // each answer stays far below gRPC's 4 MiB (a 5 MB list made every list call fail).
    constexpr size_t kMaxNameBytes = 256;
    constexpr size_t kMaxNamesBytes = size_t{1} << 20;
    if (name.toStringRef().size() > kMaxNameBytes) {
      return KeyError(path, absl::StrCat("classes[", file.class_names.size(), "]"),
                      absl::StrCat(name.toStringRef().size(), " bytes, more than the ",
                                   kMaxNameBytes, " a class name may have"));
    }
    names_bytes += name.toStringRef().size();
    if (names_bytes > kMaxNamesBytes) {
      return KeyError(path, "classes",
                      absl::StrCat("more than ", kMaxNamesBytes, " bytes of class names in all"));
    }
    file.class_names.push_back(name.toStringRef());
  }
  if (file.class_names.empty()) return KeyError(path, "classes", "empty list");
  return absl::OkStatus();
}

absl::StatusOr<TensorFile> CheckFile(const std::string& path, const c10::IValue& root) {
  absl::StatusOr<std::vector<std::pair<std::string, c10::IValue>>> entries =
      Entries(path, "", root, {"train", "test", "val", "classes"});
  if (!entries.ok()) return entries.status();
  TensorFile file;
  for (const char* key : {"train", "test"}) {
    const c10::IValue* v = Find(*entries, key);
    if (v == nullptr) return KeyError(path, key, "missing");
    absl::StatusOr<TensorFileSplit> split = ReadSplit(path, key, *v);
    if (!split.ok()) return split.status();
    (std::string(key) == "train" ? file.train : file.test) = *std::move(split);
  }
  if (const c10::IValue* v = Find(*entries, "val")) {
    absl::StatusOr<TensorFileSplit> split = ReadSplit(path, "val", *v);
    if (!split.ok()) return split.status();
    file.val = *std::move(split);
  }
  const torch::Tensor& x = file.train.x;
  const std::pair<const char*, const TensorFileSplit*> others[] = {{"test", &file.test},
                                                                   {"val", &file.val}};
  for (const auto& [name, other] : others) {
    const torch::Tensor& other_x = other->x;
    if (!other_x.defined()) continue;
    if (other_x.sizes().slice(1) != x.sizes().slice(1) ||
        other_x.scalar_type() != x.scalar_type()) {
      return KeyError(path, absl::StrCat(name, ".x"),
                      absl::StrFormat("shape %s %s, but train.x is %s %s (examples must match)",
                                      Shape(other_x), c10::toString(other_x.scalar_type()),
                                      Shape(x), c10::toString(x.scalar_type())));
    }
  }
  if (IsFloat(file.train.y.scalar_type()) || IsFloat(file.test.y.scalar_type()) ||
      (file.val.y.defined() && IsFloat(file.val.y.scalar_type()))) {
    if (Find(*entries, "classes") != nullptr) {
      return KeyError(path, "classes", "names classes, but y holds float targets");
    }
    if (absl::Status s = CheckFloatTargets(path, file); !s.ok()) return s;
    file.input_shape = x.sizes().slice(1).vec();
    return file;
  }
  if (const c10::IValue* classes = Find(*entries, "classes")) {
    if (absl::Status s = ReadClasses(path, *classes, file); !s.ok()) return s;
    file.num_classes = static_cast<int>(file.class_names.size());
  } else {
    const int64_t low = file.train.y.min().item<int64_t>();
    if (low < 0) return CheckLabels(path, "train.y", file.train.y, 1);
    file.num_classes = static_cast<int>(file.train.y.max().item<int64_t>() + 1);
  }
  if (absl::Status s = CheckLabels(path, "train.y", file.train.y, file.num_classes); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckLabels(path, "test.y", file.test.y, file.num_classes); !s.ok()) {
    return s;
  }
  if (file.val.y.defined()) {
    if (absl::Status s = CheckLabels(path, "val.y", file.val.y, file.num_classes); !s.ok()) {
      return s;
    }
  }
  file.input_shape = x.sizes().slice(1).vec();
  return file;
}

}  // namespace

absl::StatusOr<torch::Tensor> ReadInputsFile(const std::string& path) {
  constexpr absl::string_view kInputsLayout =
      "save the inputs themselves (torch.save(X)), or a dict with \"x\" and another entry";
  absl::StatusOr<std::vector<char>> bytes = ReadBytes(path);
  if (!bytes.ok()) return bytes.status();
  c10::IValue root;
  try {
    root = torch::pickle_load(*bytes);
  } catch (const c10::Error& e) {
    return PickleError(path, e.what_without_backtrace(), kInputsLayout);
  } catch (const std::exception& e) {
    return PickleError(path, e.what(), kInputsLayout);
  }
  torch::Tensor x;
  if (root.isTensor()) {
    x = root.toTensor();
  } else if (root.isGenericDict()) {
    for (const auto& entry : root.toGenericDict()) {
      if (entry.key().isString() && entry.key().toStringRef() == "x" && entry.value().isTensor()) {
        x = entry.value().toTensor();
      }
    }
  }
  if (!x.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": not a tensor or a dict with \"x\" (torch.save(X) or "
                     "torch.save({\"x\": X}))"));
  }
  const auto dtype = x.scalar_type();
  if (dtype != torch::kUInt8 && !torch::isFloatingType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": x: dtype ",
                                                   std::string(c10::toString(dtype)),
                                                   ", expected a float dtype or uint8"));
  }
  if (x.dim() < 2 || x.size(0) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": x: shape [", absl::StrJoin(x.sizes(), ", "), "], expected [N, ...] with N >= 1"));
  }
  return x;
}

absl::StatusOr<TensorFile> ReadTensorFile(const std::string& path) {
  absl::StatusOr<std::vector<char>> bytes = ReadBytes(path);
  if (!bytes.ok()) return bytes.status();
  c10::IValue root;
  try {
    root = torch::pickle_load(*bytes);
  } catch (const c10::Error& e) {
    return PickleError(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return PickleError(path, e.what());
  }
  try {
    return CheckFile(path, root);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what_without_backtrace()));
  }
}

}  // namespace mpsd::trainer
