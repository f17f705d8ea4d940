// State dict files: the pickle checked and rewritten for LibTorch's Unpickler, then loaded into a
// module by name (state_dict.h).
#include "trainer/state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/torch_errors.h"

namespace mpsd::trainer {
namespace {

// Names listed in an error before "and N more".
constexpr size_t kListedNames = 10;

absl::Status FileError(const std::string& path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

// Rewrites a state dict's pickle for LibTorch's Unpickler, refusing anything a state dict does
// not hold. LibTorch 1.13's Unpickler turns collections.OrderedDict into None (it expects one
// only as a tensor's empty backward hooks) and lacks SETITEM, APPEND and BUILD for dicts; so
// `OrderedDict()` (the callable, an empty argument tuple, REDUCE) becomes EMPTY_DICT, SETITEM
// becomes MARK key value SETITEMS (APPEND likewise), and BUILD, which sets the state dict's
// `_metadata` attribute, is dropped with its state. To place those MARKs and drop a state, the
// rewriter follows the pickle machine's stack: where in the output each value on it begins.
class PickleRewriter {
 public:
  explicit PickleRewriter(absl::string_view in) : in_(in) {}

  absl::StatusOr<std::string> Run() {
    while (pos_ < in_.size()) {
      const size_t start = pos_;
      const uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      absl::Status s = Step(op, start);
      if (!s.ok()) return s;
      if (op == '.') return out_;  // STOP
    }
    return Problem("the pickle ends without STOP");
  }

 private:
  static absl::Status Problem(absl::string_view what) {
    return absl::InvalidArgumentError(std::string(what));
  }
  static absl::Status Malformed() { return Problem("a malformed pickle"); }

  absl::StatusOr<absl::string_view> Take(size_t n) {
    if (n > in_.size() - pos_) return Problem("the pickle is truncated");
    absl::string_view bytes = in_.substr(pos_, n);
    pos_ += n;
    return bytes;
  }

  absl::StatusOr<uint64_t> Little(size_t n) {
    absl::StatusOr<absl::string_view> bytes = Take(n);
    if (!bytes.ok()) return bytes.status();
    uint64_t value = 0;
    for (size_t i = 0; i < n; ++i) value |= uint64_t{static_cast<uint8_t>((*bytes)[i])} << (8 * i);
    return value;
  }

  absl::StatusOr<std::string> Line() {
    const size_t end = in_.find('\n', pos_);
    if (end == absl::string_view::npos) return Problem("the pickle is truncated");
    std::string line(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return line;
  }

  // ---- The stack: where each value's bytes begin in out_ -------------------------------------
  absl::StatusOr<size_t> Pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back().first)) return Malformed();
    const size_t start = stack_.back();
    stack_.pop_back();
    return start;
  }
  // Pops to the topmost MARK; returns where the MARK was written.
  absl::StatusOr<size_t> PopMark() {
    if (marks_.empty()) return Malformed();
    const auto [depth, offset] = marks_.back();
    marks_.pop_back();
    if (stack_.size() < depth) return Malformed();
    stack_.resize(depth);
    return offset;
  }

  // Inserts one opcode byte at `offset` of out_ (a MARK before a SETITEM's key).
  void InsertAt(size_t offset, char op) {
    out_.insert(out_.begin() + static_cast<std::ptrdiff_t>(offset), op);
    for (size_t& start : stack_) start += start >= offset ? 1 : 0;
    for (auto& mark : marks_) mark.second += mark.second >= offset ? 1 : 0;
    for (auto& [id, at] : memo_) at += at >= offset ? 1 : 0;
  }

  // Copies the opcode at `start` and its `n` bytes of argument; it pushes `pushes` values.
  absl::Status Copy(size_t start, size_t n, int pushes) {
    if (absl::StatusOr<absl::string_view> arg = Take(n); !arg.ok()) return arg.status();
    if (pushes > 0) stack_.push_back(out_.size());
    out_.append(in_.data() + start, pos_ - start);
    return absl::OkStatus();
  }
  // An opcode whose argument is a length of `n` bytes and that many bytes; pushes one value.
  absl::Status CopySized(size_t start, size_t n) {
    absl::StatusOr<uint64_t> length = Little(n);
    if (!length.ok()) return length.status();
    return Copy(start, *length, 1);
  }
  // An opcode that pops `pops` values and pushes one in their place (TUPLE2, REDUCE, BINPERSID).
  absl::Status Combine(size_t start, int pops) {
    size_t first = 0;
    for (int i = 0; i < pops; ++i) {
      absl::StatusOr<size_t> popped = Pop();
      if (!popped.ok()) return popped.status();
      first = *popped;
    }
    stack_.push_back(first);
    return Copy(start, 0, 0);
  }

  absl::Status Global(size_t start) {
    absl::StatusOr<std::string> module = Line();
    if (!module.ok()) return module.status();
    absl::StatusOr<std::string> name = Line();
    if (!name.ok()) return name.status();
    if (*module == "collections" && *name == "OrderedDict") {
      ordered_dict_ = kCallable;
      return absl::OkStatus();
    }
    const bool tensor = *module == "torch._utils" && *name == "_rebuild_tensor_v2";
    const bool storage = *module == "torch" && absl::EndsWith(*name, "Storage");
    // LibTorch's own pickler (torch::pickle_save, model.state_dict.pt) tags a typed dict with it.
    const bool type_tag = *module == "torch.jit._pickle" && *name == "restore_type_tag";
    if (!tensor && !storage && !type_tag) {
      return Problem(absl::StrFormat("refused: the pickle names the Python object %s.%s; a "
                                     "state dict holds only tensors in a dict, and nothing "
                                     "else is read",
                                     *module, *name));
    }
    stack_.push_back(out_.size());
    out_.append(in_.data() + start, pos_ - start);
    return absl::OkStatus();
  }

  // BINPUT / LONG_BINPUT: memoising the OrderedDict callable is dropped (its uses are rewritten).
  absl::Status Put(size_t start, size_t n) {
    absl::StatusOr<uint64_t> id = Little(n);
    if (!id.ok()) return id.status();
    if (ordered_dict_ == kCallable) {
      ordered_dict_memo_.insert(*id);
      return absl::OkStatus();
    }
    if (stack_.empty()) return Malformed();
    ordered_dict_memo_.erase(*id);
    dropped_.erase(*id);
    memo_[*id] = out_.size();
    out_.append(in_.data() + start, pos_ - start);
    return absl::OkStatus();
  }

  absl::Status Get(size_t start, size_t n) {
    absl::StatusOr<uint64_t> id = Little(n);
    if (!id.ok()) return id.status();
    if (ordered_dict_memo_.count(*id) > 0) {
      ordered_dict_ = kCallable;
      return absl::OkStatus();
    }
    if (dropped_.count(*id) > 0) {
      return Problem("refused: the pickle reuses a value from an object's attributes");
    }
    if (memo_.count(*id) == 0) return Malformed();
    stack_.push_back(out_.size());
    out_.append(in_.data() + start, pos_ - start);
    return absl::OkStatus();
  }

  // SETITEM (2 values) and APPEND (1) as SETITEMS / APPENDS of one MARKed run.
  absl::Status Batched(int pops, char batched) {
    size_t first = 0;
    for (int i = 0; i < pops; ++i) {
      absl::StatusOr<size_t> popped = Pop();
      if (!popped.ok()) return popped.status();
      first = *popped;
    }
    if (stack_.empty()) return Malformed();
    InsertAt(first, '(');
    out_.push_back(batched);
    return absl::OkStatus();
  }

  // BUILD: the state (the value on top) is dropped, and with it what it memoised.
  absl::Status Build() {
    absl::StatusOr<size_t> state = Pop();
    if (!state.ok()) return state.status();
    if (stack_.empty()) return Malformed();
    out_.resize(*state);
    for (auto it = memo_.begin(); it != memo_.end();) {
      if (it->second >= *state) {
        dropped_.insert(it->first);
        it = memo_.erase(it);
      } else {
        ++it;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Step(uint8_t op, size_t start) {
    if (ordered_dict_ != kNone && op != 'q' && op != 'r') return OrderedDictCall(op);
    switch (op) {
      case 0x80: return Copy(start, 1, 0);  // PROTO
      case 0x95: return Copy(start, 8, 0);  // FRAME
      case '.': return Copy(start, 0, 0);   // STOP
      case 'c': return Global(start);
      case 'q': return Put(start, 1);
      case 'r': return Put(start, 4);
      case 'h': return Get(start, 1);
      case 'j': return Get(start, 4);
      case 'J': return Copy(start, 4, 1);      // BININT
      case 'K': return Copy(start, 1, 1);      // BININT1
      case 'M': return Copy(start, 2, 1);      // BININT2
      case 'G': return Copy(start, 8, 1);      // BINFLOAT
      case 0x8a: return CopySized(start, 1);  // LONG1
      case 'X': return CopySized(start, 4);   // BINUNICODE
      case 0x8c: return CopySized(start, 1);  // SHORT_BINUNICODE
      case '}': case ')': case ']': case 'N': case 0x88: case 0x89:
        return Copy(start, 0, 1);  // EMPTY_DICT, EMPTY_TUPLE, EMPTY_LIST, NONE, NEWTRUE, NEWFALSE
      case '(':  // MARK
        marks_.emplace_back(stack_.size(), out_.size());
        return Copy(start, 0, 0);
      case 't': {  // TUPLE
        absl::StatusOr<size_t> mark = PopMark();
        if (!mark.ok()) return mark.status();
        stack_.push_back(*mark);
        return Copy(start, 0, 0);
      }
      case 'u': case 'e': {  // SETITEMS, APPENDS
        if (absl::StatusOr<size_t> mark = PopMark(); !mark.ok()) return mark.status();
        if (stack_.empty()) return Malformed();
        return Copy(start, 0, 0);
      }
      case 0x85: return Combine(start, 1);  // TUPLE1
      case 0x86: return Combine(start, 2);  // TUPLE2
      case 0x87: return Combine(start, 3);  // TUPLE3
      case 'R': return Combine(start, 2);   // REDUCE
      case 'Q': return Combine(start, 1);   // BINPERSID
      case 's': return Batched(2, 'u');     // SETITEM
      case 'a': return Batched(1, 'e');     // APPEND
      case 'b': return Build();
      default:
        return Problem(absl::StrFormat("refused: pickle opcode 0x%02x at byte %d is not one a "
                                       "state dict uses",
                                       op, start));
    }
  }

  // After the OrderedDict callable: an empty argument tuple, then REDUCE.
  absl::Status OrderedDictCall(uint8_t op) {
    if (ordered_dict_ == kCallable && op == ')') {
      ordered_dict_ = kArguments;
      return absl::OkStatus();
    }
    if (ordered_dict_ == kArguments && op == 'R') {
      ordered_dict_ = kNone;
      stack_.push_back(out_.size());
      out_.push_back('}');  // EMPTY_DICT
      return absl::OkStatus();
    }
    return Problem("refused: collections.OrderedDict is called other than as OrderedDict()");
  }

  enum OrderedDictState { kNone, kCallable, kArguments };

  absl::string_view in_;
  size_t pos_ = 0;
  std::string out_;
  std::vector<size_t> stack_;                      // out_ offset where each value begins
  std::vector<std::pair<size_t, size_t>> marks_;  // (stack depth, out_ offset) of each MARK
  std::map<uint64_t, size_t> memo_;               // memo id → out_ offset of its BINPUT
  std::set<uint64_t> dropped_;                    // memo ids inside a dropped BUILD state
  OrderedDictState ordered_dict_ = kNone;
  std::set<uint64_t> ordered_dict_memo_;
};

// The dict the pickle built, as named tensors; INVALID_ARGUMENT for anything else.
absl::StatusOr<NamedTensors> ToNamedTensors(const c10::IValue& value) {
  if (!value.isGenericDict()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "holds a ", value.tagKind(), ", not a dict of tensors (torch.save(model.state_dict()))"));
  }
  NamedTensors tensors;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a key is a ", entry.key().tagKind(), ", not a parameter name"));
    }
    const std::string& name = entry.key().toStringRef();
    if (!entry.value().isTensor()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "entry \"%s\" is a %s, not a tensor (a checkpoint holding a state dict? save "
          "model.state_dict() itself)",
          name, entry.value().tagKind()));
    }
    tensors.emplace_back(name, entry.value().toTensor());
  }
  return tensors;
}

absl::StatusOr<NamedTensors> ReadArchive(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  if (!reader.hasRecord("data.pkl")) {
    return FileError(path, "no data.pkl in the archive: not a file torch.save wrote");
  }
  at::DataPtr pickle;
  size_t pickle_size = 0;
  std::tie(pickle, pickle_size) = reader.getRecord("data.pkl");
  absl::StatusOr<std::string> rewritten = PickleRewriter(absl::string_view(
      static_cast<const char*>(pickle.get()), pickle_size)).Run();
  if (!rewritten.ok()) return FileError(path, rewritten.status().message());
  size_t offset = 0;
  const auto read = [&](char* buffer, size_t n) {
    const size_t count = std::min(n, rewritten->size() - offset);
    std::memcpy(buffer, rewritten->data() + offset, count);
    offset += count;
    return count;
  };
  const auto read_record = [&](const std::string& name) {
    return std::get<0>(reader.getRecord("data/" + name));
  };
  torch::jit::Unpickler unpickler(read, /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
                                  read_record, c10::Device(c10::kCPU));
  unpickler.set_version(reader.version());
  absl::StatusOr<NamedTensors> tensors = ToNamedTensors(unpickler.parse_ivalue());
  if (!tensors.ok()) return FileError(path, tensors.status().message());
  return tensors;
}

std::string Listed(const std::vector<std::string>& names) {
  std::vector<std::string> shown(names.begin(),
                                 names.begin() + std::min(names.size(), kListedNames));
  std::string text = absl::StrJoin(shown, ", ");
  if (names.size() > kListedNames) {
    absl::StrAppendFormat(&text, " and %d more", names.size() - kListedNames);
  }
  return text;
}

// The head's prefix: the last parameter's module ("fc.bias" → "fc.").
std::string HeadPrefix(const torch::nn::Module& module) {
  const auto parameters = module.named_parameters(/*recurse=*/true);
  if (parameters.is_empty()) return "";
  const std::string& last = parameters.pairs().back().first;
  const size_t dot = last.rfind('.');
  return dot == std::string::npos ? "" : last.substr(0, dot + 1);
}

}  // namespace

std::string ShapeText(const torch::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "]");
}

absl::StatusOr<NamedTensors> ReadStateDict(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return FileError(path, std::filesystem::exists(path, ec) ? "not a regular file"
                                                             : "no such file");
  }
  absl::StatusOr<NamedTensors> tensors;
  const absl::Status status = CatchTorchErrors([&] {
    tensors = ReadArchive(path);
    return absl::OkStatus();
  });
  if (!status.ok()) {
    // LibTorch's reader: not a zip (the pre-1.6 format), a newer file format, a bad record.
    return FileError(path, absl::StrCat("not a state dict this LibTorch reads (torch.save's zip "
                                        "format, PyTorch >= 1.6): ",
                                        status.message()));
  }
  return tensors;
}

absl::StatusOr<StateDictLoad> LoadStateDict(torch::nn::Module& module, const NamedTensors& file,
                                            bool strict) {
  std::map<std::string, torch::Tensor> targets;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    targets[item.key()] = item.value();
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    targets[item.key()] = item.value();
  }
  const std::string head = HeadPrefix(module);
  StateDictLoad load;
  std::set<std::string> seen;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (const auto& [name, tensor] : file) {
    const auto target = targets.find(name);
    if (target == targets.end()) {
      load.unexpected.push_back(name);
      continue;
    }
    seen.insert(name);
    if (target->second.sizes() != tensor.sizes()) {
      const std::string shapes = absl::StrFormat("the file has %s, the model %s",
                                                 ShapeText(tensor), ShapeText(target->second));
      if (head.empty() || !absl::StartsWith(name, head)) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": ", shapes));
      }
      load.reinitialised.push_back(absl::StrFormat("%s (file %s, model %s)", name,
                                                   ShapeText(tensor), ShapeText(target->second)));
      continue;
    }
    copies.emplace_back(target->second, tensor);
  }
  for (const auto& [name, tensor] : targets) {
    if (seen.count(name) == 0) load.missing.push_back(name);
  }
  if (strict && (!load.missing.empty() || !load.unexpected.empty())) {
    std::vector<std::string> parts;
    if (!load.missing.empty()) parts.push_back("missing from the file: " + Listed(load.missing));
    if (!load.unexpected.empty()) {
      parts.push_back("not in the model: " + Listed(load.unexpected));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(parts, "; "), " (strict: false loads the names both have)"));
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, tensor] : copies) target.copy_(tensor);
  load.loaded = static_cast<int64_t>(copies.size());
  return load;
}

}  // namespace mpsd::trainer
