// State dict files: the pickle checked and rewritten for LibTorch's Unpickler, then loaded into a
// module by name (state_dict.h).
#include "trainer/state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "trainer/pickle_scan.h"
#include "trainer/torch_archive.h"
#include "trainer/torch_errors.h"
#include "trainer/zip_index.h"

namespace mpsd::trainer {
namespace {

// Names listed in an error before "and N more".
constexpr size_t kListedNames = 10;

absl::Status FileError(const std::string& path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

using pickle::Value;
using pickle::ValuePtr;

// Rewrites a state dict's pickle for LibTorch's Unpickler, refusing anything a state dict does
// not hold. LibTorch 1.13's Unpickler turns collections.OrderedDict into None (it expects one
// only as a tensor's empty backward hooks) and lacks SETITEM, APPEND and BUILD for dicts; so
// `OrderedDict()` (the callable, an empty argument tuple, REDUCE) becomes EMPTY_DICT, SETITEM
// becomes MARK key value SETITEMS (APPEND likewise), and BUILD, which sets the state dict's
// `_metadata` attribute, is dropped with its state. To place those MARKs and drop a state, the
// rewriter follows the pickle machine's stack: where in the output each value on it begins.
//
// It also follows the values a tensor is made of, and refuses a file whose tensors do not fit
// their data before anything is built (LibTorch's Unpickler trusts the pickle: a storage whose
// record is shorter than its claimed size, or a tensor reaching past its storage, would be read
// out of bounds when the weights are copied): each storage's record (`records`) must hold
// exactly numel × element size bytes, and each tensor's elements (offset + Σ (size_i - 1) ×
// stride_i) must lie inside its storage. The problem is told naming the tensor's key in the
// dict, with both sizes.
class PickleRewriter {
 public:
  PickleRewriter(absl::string_view in, const RecordSizes& records)
      : in_(in), cursor_(in), records_(records) {}

  absl::StatusOr<std::string> Run() {
    while (!cursor_.done()) {
      const size_t start = cursor_.pos();
      const uint8_t op = cursor_.Next();
      absl::Status s = Step(op, start);
      if (!s.ok()) return s;
      if (op == '.') {  // STOP
        // A damaged tensor outside the dict's values (the dict refuses it later, by kind).
        if (!unnamed_problem_.empty()) return Problem(unnamed_problem_);
        return out_;
      }
    }
    return Problem("the pickle ends without STOP");
  }

 private:
  static absl::Status Problem(absl::string_view what) {
    return absl::InvalidArgumentError(std::string(what));
  }
  static absl::Status Malformed() { return Problem("a malformed pickle"); }

  // ---- The stack: where each value's bytes begin in out_ -------------------------------------
  absl::StatusOr<size_t> Pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back().first)) return Malformed();
    const size_t start = stack_.back();
    stack_.pop_back();
    popped_ = std::move(values_.back());
    values_.pop_back();
    return start;
  }
  void Push(size_t start, ValuePtr value) {
    stack_.push_back(start);
    values_.push_back(value != nullptr ? std::move(value) : std::make_shared<const Value>());
  }
  // The values above the topmost MARK, bottom first (none if there is no MARK).
  std::vector<ValuePtr> AboveMark() const {
    if (marks_.empty() || values_.size() < marks_.back().first) return {};
    return std::vector<ValuePtr>(values_.begin() + static_cast<std::ptrdiff_t>(marks_.back().first),
                                 values_.end());
  }
  // Pops to the topmost MARK; returns where the MARK was written.
  absl::StatusOr<size_t> PopMark() {
    if (marks_.empty()) return Malformed();
    const auto [depth, offset] = marks_.back();
    marks_.pop_back();
    if (stack_.size() < depth) return Malformed();
    stack_.resize(depth);
    values_.resize(depth);
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
    absl::StatusOr<absl::string_view> arg = cursor_.Take(n);
    if (!arg.ok()) return arg.status();
    if (pushes > 0) Push(out_.size(), ValueOf(static_cast<uint8_t>(in_[start]), *arg));
    out_.append(in_.data() + start, cursor_.pos() - start);
    return absl::OkStatus();
  }
  // The value an opcode that pushes one constant pushes, from its argument bytes.
  static ValuePtr ValueOf(uint8_t op, absl::string_view arg) {
    auto value = std::make_shared<Value>();
    switch (op) {
      case 'K':
      case 'M':
      case 'J':
      case 0x8a:  // BININT1, BININT2, BININT, LONG1
        if (const std::optional<int64_t> integer = pickle::IntArgument(op, arg)) {
          value->kind = Value::kInt;
          value->integer = *integer;
        }
        break;
      case 'X':
      case 0x8c:  // BINUNICODE, SHORT_BINUNICODE
        value->kind = Value::kString;
        value->text = std::string(arg);
        break;
      case ')':  // EMPTY_TUPLE
        value->kind = Value::kTuple;
        break;
      default:
        break;
    }
    return value;
  }
  // An opcode whose argument is a length of `n` bytes and that many bytes; pushes one value.
  absl::Status CopySized(size_t start, size_t n) {
    absl::StatusOr<uint64_t> length = cursor_.Little(n);
    if (!length.ok()) return length.status();
    return Copy(start, *length, 1);
  }
  // An opcode that pops `pops` values and pushes one in their place (TUPLE2, REDUCE, BINPERSID).
  absl::Status Combine(size_t start, int pops) {
    size_t first = 0;
    std::vector<ValuePtr> operands(static_cast<size_t>(pops));
    for (int i = pops - 1; i >= 0; --i) {
      absl::StatusOr<size_t> popped = Pop();
      if (!popped.ok()) return popped.status();
      first = *popped;
      operands[static_cast<size_t>(i)] = std::move(popped_);
    }
    absl::StatusOr<ValuePtr> value = Combined(static_cast<uint8_t>(in_[start]), operands);
    if (!value.ok()) return value.status();
    Push(first, *std::move(value));
    return Copy(start, 0, 0);
  }

  // The value TUPLE1-3, REDUCE or BINPERSID makes of its operands (bottom first).
  absl::StatusOr<ValuePtr> Combined(uint8_t op, const std::vector<ValuePtr>& operands) {
    if (op == 0x85 || op == 0x86 || op == 0x87) return pickle::Tuple(operands);
    if (op == 'Q') return pickle::PersistentStorage(*operands[0], records_, "data/");
    if (op == 'R' && operands[0]->kind == Value::kGlobal &&
        operands[0]->text == "torch._utils._rebuild_tensor_v2") {
      return RebuiltTensor(*operands[1]);
    }
    return std::make_shared<const Value>();
  }
  // _rebuild_tensor_v2's tensor; a damaged one outside the dict's values is told at STOP.
  absl::StatusOr<ValuePtr> RebuiltTensor(const Value& args) {
    absl::StatusOr<ValuePtr> tensor = pickle::RebuiltTensor(args);
    if (tensor.ok() && !(*tensor)->problem.empty() && unnamed_problem_.empty()) {
      unnamed_problem_ = absl::StrCat("a tensor: ", (*tensor)->problem);
    }
    return tensor;
  }

  // A dict entry (SETITEM, or a pair of SETITEMS): a damaged tensor is told by its key.
  absl::Status CheckEntry(const Value& key, const Value& value) const {
    if (value.kind != Value::kTensor || value.problem.empty()) return absl::OkStatus();
    const std::string name = key.kind == Value::kString ? key.text : "(a key that is no name)";
    return Problem(absl::StrFormat("tensor \"%s\": %s: the file is damaged or was altered", name,
                                   value.problem));
  }

  absl::Status Global(size_t start) {
    absl::StatusOr<std::string> module = cursor_.Line();
    if (!module.ok()) return module.status();
    absl::StatusOr<std::string> name = cursor_.Line();
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
      return Problem(
          absl::StrFormat("refused: the pickle names the Python object %s.%s; a "
                          "state dict holds only tensors in a dict, and nothing "
                          "else is read",
                          *module, *name));
    }
    auto value = std::make_shared<Value>();
    value->kind = Value::kGlobal;
    value->text = absl::StrCat(*module, ".", *name);
    Push(out_.size(), std::move(value));
    out_.append(in_.data() + start, cursor_.pos() - start);
    return absl::OkStatus();
  }

  // BINPUT / LONG_BINPUT: memoising the OrderedDict callable is dropped (its uses are rewritten).
  absl::Status Put(size_t start, size_t n) {
    absl::StatusOr<uint64_t> id = cursor_.Little(n);
    if (!id.ok()) return id.status();
    if (ordered_dict_ == kCallable) {
      ordered_dict_memo_.insert(*id);
      return absl::OkStatus();
    }
    if (stack_.empty()) return Malformed();
    ordered_dict_memo_.erase(*id);
    dropped_.erase(*id);
    memo_[*id] = out_.size();
    memo_values_[*id] = values_.back();
    out_.append(in_.data() + start, cursor_.pos() - start);
    return absl::OkStatus();
  }

  absl::Status Get(size_t start, size_t n) {
    absl::StatusOr<uint64_t> id = cursor_.Little(n);
    if (!id.ok()) return id.status();
    if (ordered_dict_memo_.count(*id) > 0) {
      ordered_dict_ = kCallable;
      return absl::OkStatus();
    }
    if (dropped_.count(*id) > 0) {
      return Problem("refused: the pickle reuses a value from an object's attributes");
    }
    if (memo_.count(*id) == 0) return Malformed();
    Push(out_.size(), memo_values_[*id]);
    out_.append(in_.data() + start, cursor_.pos() - start);
    return absl::OkStatus();
  }

  // SETITEM (2 values) and APPEND (1) as SETITEMS / APPENDS of one MARKed run.
  absl::Status Batched(int pops, char batched) {
    if (batched == 'u' && values_.size() >= 2) {
      if (absl::Status s = CheckEntry(*values_[values_.size() - 2], *values_.back()); !s.ok()) {
        return s;
      }
    }
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
        memo_values_.erase(it->first);
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
      case 0x80:
        return Copy(start, 1, 0);  // PROTO
      case 0x95:
        return Copy(start, 8, 0);  // FRAME
      case '.':
        return Copy(start, 0, 0);  // STOP
      case 'c':
        return Global(start);
      case 'q':
        return Put(start, 1);
      case 'r':
        return Put(start, 4);
      case 'h':
        return Get(start, 1);
      case 'j':
        return Get(start, 4);
      case 'J':
        return Copy(start, 4, 1);  // BININT
      case 'K':
        return Copy(start, 1, 1);  // BININT1
      case 'M':
        return Copy(start, 2, 1);  // BININT2
      case 'G':
        return Copy(start, 8, 1);  // BINFLOAT
      case 0x8a:
        return CopySized(start, 1);  // LONG1
      case 'X':
        return CopySized(start, 4);  // BINUNICODE
      case 0x8c:
        return CopySized(start, 1);  // SHORT_BINUNICODE
      case '}':
      case ')':
      case ']':
      case 'N':
      case 0x88:
      case 0x89:
        return Copy(start, 0, 1);  // EMPTY_DICT, EMPTY_TUPLE, EMPTY_LIST, NONE, NEWTRUE, NEWFALSE
      case '(':                    // MARK
        marks_.emplace_back(stack_.size(), out_.size());
        return Copy(start, 0, 0);
      case 't': {  // TUPLE
        absl::StatusOr<ValuePtr> tuple = pickle::Tuple(AboveMark());
        if (!tuple.ok()) return tuple.status();
        absl::StatusOr<size_t> mark = PopMark();
        if (!mark.ok()) return mark.status();
        Push(*mark, *std::move(tuple));
        return Copy(start, 0, 0);
      }
      case 'u':
      case 'e': {  // SETITEMS, APPENDS
        if (op == 'u') {
          const std::vector<ValuePtr> pairs = AboveMark();
          for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
            if (absl::Status s = CheckEntry(*pairs[i], *pairs[i + 1]); !s.ok()) return s;
          }
        }
        if (absl::StatusOr<size_t> mark = PopMark(); !mark.ok()) return mark.status();
        if (stack_.empty()) return Malformed();
        return Copy(start, 0, 0);
      }
      case 0x85:
        return Combine(start, 1);  // TUPLE1
      case 0x86:
        return Combine(start, 2);  // TUPLE2
      case 0x87:
        return Combine(start, 3);  // TUPLE3
      case 'R':
        return Combine(start, 2);  // REDUCE
      case 'Q':
        return Combine(start, 1);  // BINPERSID
      case 's':
        return Batched(2, 'u');  // SETITEM
      case 'a':
        return Batched(1, 'e');  // APPEND
      case 'b':
        return Build();
      default:
        return Problem(
            absl::StrFormat("refused: pickle opcode 0x%02x at byte %d is not one a "
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
      Push(out_.size(), nullptr);
      out_.push_back('}');  // EMPTY_DICT
      return absl::OkStatus();
    }
    return Problem("refused: collections.OrderedDict is called other than as OrderedDict()");
  }

  enum OrderedDictState { kNone, kCallable, kArguments };

  absl::string_view in_;
  pickle::Cursor cursor_;
  const RecordSizes& records_;
  std::string out_;
  std::vector<size_t> stack_;                     // out_ offset where each value begins
  std::vector<ValuePtr> values_;                  // each value on stack_, as far as known
  ValuePtr popped_;                               // the value Pop() took last
  std::map<uint64_t, ValuePtr> memo_values_;      // memo id → its value
  std::string unnamed_problem_;                   // the first damaged tensor's problem
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

absl::StatusOr<NamedTensors> ReadArchive(const std::string& path, const std::vector<char>& bytes,
                                         const RecordSizes& records) {
  caffe2::serialize::PyTorchStreamReader reader(
      std::make_shared<MemoryReadAdapter>(absl::string_view(bytes.data(), bytes.size())));
  if (!reader.hasRecord("data.pkl")) {
    return FileError(path, "no data.pkl in the archive: not a file torch.save wrote");
  }
  at::DataPtr pickle;
  size_t pickle_size = 0;
  std::tie(pickle, pickle_size) = reader.getRecord("data.pkl");
  const absl::string_view pickled(static_cast<const char*>(pickle.get()), pickle_size);
  // The scan every torch pickle goes through first (nesting, storages, views), then the
  // rewriter's own rules for a state dict.
  if (absl::Status s = CheckPickledTensors(pickled, records, "data/"); !s.ok()) {
    return FileError(path, s.message());
  }
  absl::StatusOr<std::string> rewritten = PickleRewriter(pickled, records).Run();
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
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return FileError(path, "no such file");
    if (errno == EACCES) {
      return FileError(path, "permission denied: mpsd's user cannot search a folder on its path");
    }
    return FileError(path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return FileError(path, "not a regular file");
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK); fd >= 0) {
    ::close(fd);
  } else if (errno == EACCES) {
    return FileError(path, "permission denied: mpsd's user cannot read it");
  }
  // Read once: the bytes checked here are the bytes LibTorch reads.
  absl::StatusOr<std::vector<char>> bytes = ReadWholeFile(path);
  if (!bytes.ok()) return absl::InvalidArgumentError(bytes.status().message());
  absl::StatusOr<std::vector<ZipEntry>> index =
      CheckedArchiveIndex(absl::string_view(bytes->data(), bytes->size()), {"data/"});
  if (!index.ok()) {
    return FileError(path, absl::StrCat("not a state dict this LibTorch reads (torch.save's zip "
                                        "format, PyTorch >= 1.6): ",
                                        index.status().message()));
  }
  const RecordSizes records = RecordSizesUnder(*index, "data/");
  absl::StatusOr<NamedTensors> tensors;
  const absl::Status status = CatchTorchErrors([&] {
    tensors = ReadArchive(path, *bytes, records);
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
      const std::string shapes = absl::StrFormat("the file has %s, the model %s", ShapeText(tensor),
                                                 ShapeText(target->second));
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
  // A file wrapped by DataParallel/DistributedDataParallel names everything "module.…".
  bool wrapped = !file.empty();
  for (const auto& [name, tensor] : file) wrapped = wrapped && absl::StartsWith(name, "module.");
  const std::string wrapped_hint =
      wrapped ? "; its names start with \"module.\", as a DataParallel or "
                "DistributedDataParallel model's do: save model.module.state_dict() instead"
              : "";
  // Nothing in common loads nothing, strict or not: a random model is not a fine-tune.
  if (seen.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "none of the file's ", file.size(), " names is a parameter or buffer of the model (file: ",
        Listed(load.unexpected), "; model: ", Listed(load.missing), ")", wrapped_hint));
  }
  if (strict && (!load.missing.empty() || !load.unexpected.empty())) {
    std::vector<std::string> parts;
    if (!load.missing.empty()) parts.push_back("missing from the file: " + Listed(load.missing));
    if (!load.unexpected.empty()) {
      parts.push_back("not in the model: " + Listed(load.unexpected));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        absl::StrJoin(parts, "; "), " (strict: false loads the names both have)", wrapped_hint));
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, tensor] : copies) target.copy_(tensor);
  load.loaded = static_cast<int64_t>(copies.size());
  return load;
}

}  // namespace mpsd::trainer
