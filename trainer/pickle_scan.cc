// Checking a torch pickle's tensors against its archive's records (pickle_scan.h).
#include "trainer/pickle_scan.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace mpsd::trainer {

RecordSizes RecordSizesUnder(const std::vector<ZipEntry>& index, absl::string_view folder) {
  RecordSizes sizes;
  if (index.empty()) return sizes;
  const std::string& first = index.front().name;
  const std::string prefix = absl::StrCat(first.substr(0, first.find('/')), "/", folder);
  for (const ZipEntry& entry : index) {
    if (absl::StartsWith(entry.name, prefix)) {
      sizes[entry.name.substr(prefix.size())] = entry.uncompressed_size;
    }
  }
  return sizes;
}

absl::Status CheckArchiveClaims(const std::vector<ZipEntry>& index,
                                const std::vector<std::string>& storage_folders,
                                uint64_t max_unpacked_bytes) {
  const std::string top =
      index.empty() ? "" : index.front().name.substr(0, index.front().name.find('/') + 1);
  uint64_t total = 0;
  for (const ZipEntry& entry : index) {
    if (entry.method == 0 && entry.uncompressed_size != entry.compressed_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("its entry %s is stored uncompressed in %d bytes but claims %d",
                          entry.name, entry.compressed_size, entry.uncompressed_size));
    }
    if (entry.method != 0) {
      for (const std::string& folder : storage_folders) {
        if (absl::StartsWith(entry.name, absl::StrCat(top, folder))) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "its tensor data %s is compressed (%d bytes claiming %d), which torch never "
              "writes; save it again with torch.save or torch.jit.save",
              entry.name, entry.compressed_size, entry.uncompressed_size));
        }
      }
    }
    total += std::min(entry.uncompressed_size, max_unpacked_bytes + 1);
    if (total > max_unpacked_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("its entries unpack to more than %d bytes (at %s, which claims %d bytes)",
                          max_unpacked_bytes, entry.name, entry.uncompressed_size));
    }
  }
  return absl::OkStatus();
}

int64_t StorageElementSize(absl::string_view type) {
  static const auto* sizes = new std::map<std::string, int64_t, std::less<>>{
      {"DoubleStorage", 8},   {"FloatStorage", 4},        {"HalfStorage", 2},
      {"BFloat16Storage", 2}, {"LongStorage", 8},         {"IntStorage", 4},
      {"ShortStorage", 2},    {"CharStorage", 1},         {"ByteStorage", 1},
      {"BoolStorage", 1},     {"ComplexFloatStorage", 8}, {"ComplexDoubleStorage", 16},
      {"QInt8Storage", 1},    {"QUInt8Storage", 1},       {"QInt32Storage", 4},
      {"QUInt4x2Storage", 1}, {"QUInt2x4Storage", 1}};
  const auto it = sizes->find(absl::StripPrefix(type, "torch."));
  return it == sizes->end() ? 0 : it->second;
}

namespace pickle {
namespace {

absl::Status Problem(absl::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

// Why a tensor of `sizes` and `strides` at `offset` reaches outside `storage`; "" if it does not.
std::string OutOfStorage(const Value& storage, int64_t offset, const std::vector<int64_t>& sizes,
                         const std::vector<int64_t>& strides) {
  const std::string shape =
      absl::StrFormat("offset %d, size [%s], stride [%s]", offset, absl::StrJoin(sizes, ", "),
                      absl::StrJoin(strides, ", "));
  const std::string where =
      absl::StrFormat("its storage %s of %d elements", storage.text, storage.numel);
  if (sizes.size() != strides.size() || offset < 0) {
    return absl::StrCat(shape, " is not a view of ", where);
  }
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0) return absl::StrCat(shape, " is not a view of ", where);
    empty = empty || sizes[i] == 0;
  }
  // The last element's index + 1 (none for an empty tensor), in 128 bits: each term is below
  // 2^126 and the sum stops once it passes the storage.
  __int128 end = offset;
  if (!empty) {
    end += 1;
    for (size_t i = 0; i < sizes.size() && end <= storage.numel; ++i) {
      end += static_cast<__int128>(sizes[i] - 1) * strides[i];
    }
  }
  if (end <= storage.numel) return "";
  return absl::StrCat(shape, " reaches past the end of ", where);
}

}  // namespace

absl::StatusOr<absl::string_view> Cursor::Take(uint64_t n) {
  if (n > in_.size() - pos_) return Problem("the pickle is truncated");
  absl::string_view bytes = in_.substr(pos_, n);
  pos_ += n;
  return bytes;
}

absl::StatusOr<uint64_t> Cursor::Little(size_t n) {
  absl::StatusOr<absl::string_view> bytes = Take(n);
  if (!bytes.ok()) return bytes.status();
  uint64_t value = 0;
  for (size_t i = 0; i < n; ++i) value |= uint64_t{static_cast<uint8_t>((*bytes)[i])} << (8 * i);
  return value;
}

absl::StatusOr<std::string> Cursor::Line() {
  const size_t end = in_.find('\n', pos_);
  if (end == absl::string_view::npos) return Problem("the pickle is truncated");
  std::string line(in_.substr(pos_, end - pos_));
  pos_ = end + 1;
  return line;
}

std::optional<int64_t> IntArgument(uint8_t op, absl::string_view arg) {
  if (op != 'K' && op != 'M' && op != 'J' && op != 0x8a) return std::nullopt;
  if (arg.empty() || arg.size() > 8) return std::nullopt;  // an int beyond int64 is no size
  const auto* p = reinterpret_cast<const unsigned char*>(arg.data());
  uint64_t bits = 0;
  for (size_t i = 0; i < arg.size(); ++i) bits |= uint64_t{p[i]} << (8 * i);
  const bool is_signed = op == 'J' || op == 0x8a;
  if (is_signed && arg.size() < 8 && (p[arg.size() - 1] & 0x80) != 0) {
    bits |= ~uint64_t{0} << (8 * arg.size());  // sign-extend
  }
  return static_cast<int64_t>(bits);
}

absl::StatusOr<ValuePtr> Tuple(std::vector<ValuePtr> items) {
  auto value = std::make_shared<Value>();
  value->kind = Value::kTuple;
  for (const ValuePtr& item : items) value->depth = std::max(value->depth, item->depth);
  if (++value->depth > kMaxNesting) {
    return Problem(absl::StrCat("refused: values nested more than ", kMaxNesting, " deep"));
  }
  value->items = std::move(items);
  return value;
}

absl::StatusOr<ValuePtr> PersistentStorage(const Value& id, const RecordSizes& records,
                                           absl::string_view folder) {
  const auto is = [&](size_t i, Value::Kind kind) {
    return id.items.size() > i && id.items[i]->kind == kind;
  };
  if (id.kind != Value::kTuple || id.items.size() != 5 || !is(0, Value::kString) ||
      id.items[0]->text != "storage" || !is(1, Value::kGlobal) || !is(2, Value::kString) ||
      !is(3, Value::kString) || !is(4, Value::kInt)) {
    return Problem(
        "refused: a persistent id that is not a storage's ('storage', type, key, "
        "location, size)");
  }
  auto storage = std::make_shared<Value>();
  storage->kind = Value::kStorage;
  storage->text = absl::StrCat(folder, id.items[2]->text);
  storage->numel = id.items[4]->integer;
  const std::string& type = id.items[1]->text;
  storage->element_size = StorageElementSize(type);
  if (storage->element_size == 0) {
    return Problem(absl::StrCat("refused: storage type ", type, " is not one mpsd reads"));
  }
  const auto found = records.find(id.items[2]->text);
  if (storage->numel < 0 ||
      storage->numel > std::numeric_limits<int64_t>::max() / storage->element_size) {
    storage->problem = absl::StrFormat("the pickle gives its storage %s a size of %d elements",
                                       storage->text, storage->numel);
  } else if (found == records.end()) {
    // LibTorch reads no record for an empty storage.
    if (storage->numel > 0) {
      storage->problem =
          absl::StrFormat("its storage %s (%d elements of %d bytes) is missing from the archive",
                          storage->text, storage->numel, storage->element_size);
    }
  } else if (found->second != static_cast<uint64_t>(storage->numel * storage->element_size)) {
    storage->problem = absl::StrFormat(
        "its storage %s holds %d bytes, but the pickle says %d elements of %d bytes (%d bytes)",
        storage->text, found->second, storage->numel, storage->element_size,
        storage->numel * storage->element_size);
  }
  return storage;
}

absl::StatusOr<ValuePtr> RebuiltTensor(const Value& args) {
  const auto ints = [](const Value& v, std::vector<int64_t>& out) {
    if (v.kind != Value::kTuple) return false;
    for (const ValuePtr& item : v.items) {
      if (item->kind != Value::kInt) return false;
      out.push_back(item->integer);
    }
    return true;
  };
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  if (args.kind != Value::kTuple || args.items.size() < 4 ||
      args.items[0]->kind != Value::kStorage || args.items[1]->kind != Value::kInt ||
      !ints(*args.items[2], sizes) || !ints(*args.items[3], strides)) {
    return Problem("refused: a tensor rebuilt from other than (storage, offset, size, stride)");
  }
  const Value& storage = *args.items[0];
  auto tensor = std::make_shared<Value>();
  tensor->kind = Value::kTensor;
  tensor->problem = storage.problem;
  if (tensor->problem.empty()) {
    tensor->problem = OutOfStorage(storage, args.items[1]->integer, sizes, strides);
  }
  return tensor;
}

namespace {

// The pickle machine, following values only as far as storages and tensors need: what each
// opcode pops and pushes (pickletools' stack effects), the memo, and MARKs.
class Scanner {
 public:
  Scanner(absl::string_view in, const RecordSizes& records, absl::string_view folder)
      : cursor_(in), records_(records), folder_(folder) {}

  absl::Status Run() {
    while (!cursor_.done()) {
      const size_t start = cursor_.pos();
      const uint8_t op = cursor_.Next();
      if (op == '.') {  // STOP
        if (!unnamed_problem_.empty()) return Problem(unnamed_problem_);
        return absl::OkStatus();
      }
      if (absl::Status s = Step(op, start); !s.ok()) return s;
    }
    return Problem("the pickle ends without STOP");
  }

 private:
  static absl::Status Malformed() { return Problem("a malformed pickle"); }

  size_t Floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void Push(ValuePtr value) {
    stack_.push_back(value != nullptr ? std::move(value) : std::make_shared<const Value>());
  }
  absl::StatusOr<ValuePtr> Pop() {
    if (stack_.size() <= Floor()) return Malformed();
    ValuePtr value = std::move(stack_.back());
    stack_.pop_back();
    return value;
  }
  // Pops to the topmost MARK and returns the values above it, bottom first.
  absl::StatusOr<std::vector<ValuePtr>> PopMark() {
    if (marks_.empty()) return Malformed();
    const size_t depth = marks_.back();
    marks_.pop_back();
    if (stack_.size() < depth) return Malformed();
    std::vector<ValuePtr> items(std::make_move_iterator(stack_.begin() + depth),
                                std::make_move_iterator(stack_.end()));
    stack_.resize(depth);
    return items;
  }
  absl::Status NeedTop() const { return stack_.size() > Floor() ? absl::OkStatus() : Malformed(); }

  // A new container (list, dict, set, or an object a call made) holding values of `depth`.
  static ValuePtr Container(int depth = 0) {
    auto value = std::make_shared<Value>();
    value->depth = depth + 1;
    return value;
  }
  // `item` put into `container`: the container nests one deeper than it.
  static absl::Status Nest(const Value& container, const Value& item) {
    container.depth = std::max(container.depth, item.depth + 1);
    if (container.depth > kMaxNesting) {
      return Problem(absl::StrCat("refused: values nested more than ", kMaxNesting, " deep"));
    }
    return absl::OkStatus();
  }
  // The values of `items` put into the value on top of the stack.
  absl::Status NestInTop(const std::vector<ValuePtr>& items) {
    if (absl::Status s = NeedTop(); !s.ok()) return s;
    for (const ValuePtr& item : items) {
      if (absl::Status s = Nest(*stack_.back(), *item); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // A dict entry: a damaged tensor is told by its key.
  absl::Status CheckEntry(const Value& key, const Value& value) const {
    if (value.kind != Value::kTensor || value.problem.empty()) return absl::OkStatus();
    const std::string name = key.kind == Value::kString ? key.text : "(a key that is no name)";
    return Problem(absl::StrFormat("tensor \"%s\": %s: the file is damaged or was altered", name,
                                   value.problem));
  }

  // An opcode with a constant argument of `n` bytes that pushes one value.
  absl::Status Constant(uint8_t op, size_t n) {
    absl::StatusOr<absl::string_view> arg = cursor_.Take(n);
    if (!arg.ok()) return arg.status();
    Push(IntValue(op, *arg));
    return absl::OkStatus();
  }
  // The value of an integer opcode (IntArgument), or of unknown kind.
  static ValuePtr IntValue(uint8_t op, absl::string_view arg) {
    auto value = std::make_shared<Value>();
    if (const std::optional<int64_t> integer = IntArgument(op, arg)) {
      value->kind = Value::kInt;
      value->integer = *integer;
    }
    return value;
  }
  // An opcode whose argument is a little-endian length of `n` bytes and that many bytes.
  absl::Status Sized(uint8_t op, size_t n) {
    absl::StatusOr<uint64_t> length = cursor_.Little(n);
    if (!length.ok()) return length.status();
    absl::StatusOr<absl::string_view> arg = cursor_.Take(*length);
    if (!arg.ok()) return arg.status();
    if (op == 'X' || op == 0x8c || op == 0x8d) {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
      auto value = std::make_shared<Value>();
      value->kind = Value::kString;
      value->text = std::string(*arg);
      Push(std::move(value));
    } else {
      Push(IntValue(op, *arg));  // LONG1 within int64; anything else of unknown kind
    }
    return absl::OkStatus();
  }

  absl::Status Global(std::string module, std::string name) {
    auto value = std::make_shared<Value>();
    value->kind = Value::kGlobal;
    value->text = absl::StrCat(module, ".", name);
    Push(std::move(value));
    return absl::OkStatus();
  }

  // REDUCE, NEWOBJ: callable and arguments → the result. A storage passed to anything but
  // _rebuild_tensor_v2 is refused: its size would be unchecked.
  absl::Status Call() {
    absl::StatusOr<ValuePtr> args = Pop();
    if (!args.ok()) return args.status();
    absl::StatusOr<ValuePtr> callable = Pop();
    if (!callable.ok()) return callable.status();
    const bool rebuild = (*callable)->kind == Value::kGlobal &&
                         (*callable)->text == "torch._utils._rebuild_tensor_v2";
    if (rebuild) {
      absl::StatusOr<ValuePtr> tensor = RebuiltTensor(**args);
      if (!tensor.ok()) return tensor.status();
      if (!(*tensor)->problem.empty() && unnamed_problem_.empty()) {
        unnamed_problem_ =
            absl::StrCat("a tensor: ", (*tensor)->problem, ": the file is damaged or was altered");
      }
      Push(*std::move(tensor));
      return absl::OkStatus();
    }
    for (const ValuePtr& item : (*args)->items) {
      if (item->kind == Value::kStorage) {
        return Problem(absl::StrCat(
            "refused: the storage ", item->text, " is used by ",
            (*callable)->kind == Value::kGlobal ? (*callable)->text : "a computed callable",
            " (only plain dense tensors are read)"));
      }
    }
    ValuePtr result = Container();
    if (absl::Status s = Nest(*result, **args); !s.ok()) return s;
    Push(std::move(result));
    return absl::OkStatus();
  }

  absl::Status Memo(uint64_t id) {
    if (absl::Status s = NeedTop(); !s.ok()) return s;
    memo_[id] = stack_.back();
    return absl::OkStatus();
  }

  absl::Status Step(uint8_t op, size_t start) {
    switch (op) {
      case 0x80:
        return cursor_.Take(1).status();  // PROTO
      case 0x95:
        return cursor_.Take(8).status();  // FRAME
      case '(':
        marks_.push_back(stack_.size());
        return absl::OkStatus();  // MARK
      case 'N':
      case 0x88:
      case 0x89:  // NONE, NEWTRUE, NEWFALSE
        Push(nullptr);
        return absl::OkStatus();
      case ']':
      case '}':
      case 0x8f:  // EMPTY_LIST, EMPTY_DICT, EMPTY_SET
        Push(Container());
        return absl::OkStatus();
      case ')': {  // EMPTY_TUPLE
        Push(Tuple({}).value());
        return absl::OkStatus();
      }
      case 'K':
        return Constant(op, 1);  // BININT1
      case 'M':
        return Constant(op, 2);  // BININT2
      case 'J':
        return Constant(op, 4);  // BININT
      case 'G':
        return Constant(op, 8);  // BINFLOAT
      case 0x8a:
        return Sized(op, 1);  // LONG1
      case 0x8b:
        return Sized(op, 4);  // LONG4
      case 'X':
        return Sized(op, 4);  // BINUNICODE
      case 0x8c:
        return Sized(op, 1);  // SHORT_BINUNICODE
      case 0x8d:
        return Sized(op, 8);  // BINUNICODE8
      case 'T':
        return Sized(op, 4);  // BINSTRING
      case 'U':
        return Sized(op, 1);  // SHORT_BINSTRING
      case 'B':
        return Sized(op, 4);  // BINBYTES
      case 'C':
        return Sized(op, 1);  // SHORT_BINBYTES
      case 0x8e:
        return Sized(op, 8);  // BINBYTES8
      case 'c': {             // GLOBAL
        absl::StatusOr<std::string> module = cursor_.Line();
        if (!module.ok()) return module.status();
        absl::StatusOr<std::string> name = cursor_.Line();
        if (!name.ok()) return name.status();
        return Global(*std::move(module), *std::move(name));
      }
      case 0x93: {  // STACK_GLOBAL
        absl::StatusOr<ValuePtr> name = Pop();
        if (!name.ok()) return name.status();
        absl::StatusOr<ValuePtr> module = Pop();
        if (!module.ok()) return module.status();
        return Global((*module)->text, (*name)->text);
      }
      case 'q':
      case 'r': {  // BINPUT, LONG_BINPUT
        absl::StatusOr<uint64_t> id = cursor_.Little(op == 'q' ? 1 : 4);
        if (!id.ok()) return id.status();
        return Memo(*id);
      }
      case 0x94:
        return Memo(memo_.size());  // MEMOIZE
      case 'h':
      case 'j': {  // BINGET, LONG_BINGET
        absl::StatusOr<uint64_t> id = cursor_.Little(op == 'h' ? 1 : 4);
        if (!id.ok()) return id.status();
        const auto found = memo_.find(*id);
        if (found == memo_.end()) return Malformed();
        Push(found->second);
        return absl::OkStatus();
      }
      case '0':
        return Pop().status();  // POP
      case '1':
        return PopMark().status();  // POP_MARK
      case '2': {                   // DUP
        if (absl::Status s = NeedTop(); !s.ok()) return s;
        Push(stack_.back());
        return absl::OkStatus();
      }
      case 't':
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE, TUPLE1-3
        std::vector<ValuePtr> items;
        if (op == 't') {
          absl::StatusOr<std::vector<ValuePtr>> above = PopMark();
          if (!above.ok()) return above.status();
          items = *std::move(above);
        } else {
          items.resize(op - 0x84);
          for (size_t i = items.size(); i-- > 0;) {
            absl::StatusOr<ValuePtr> item = Pop();
            if (!item.ok()) return item.status();
            items[i] = *std::move(item);
          }
        }
        absl::StatusOr<ValuePtr> tuple = Tuple(std::move(items));
        if (!tuple.ok()) return tuple.status();
        Push(*std::move(tuple));
        return absl::OkStatus();
      }
      case 'l':
      case 'd':
      case 0x91: {  // LIST, DICT, FROZENSET
        absl::StatusOr<std::vector<ValuePtr>> items = PopMark();
        if (!items.ok()) return items.status();
        if (op == 'd') {
          for (size_t i = 0; i + 1 < items->size(); i += 2) {
            if (absl::Status s = CheckEntry(*(*items)[i], *(*items)[i + 1]); !s.ok()) return s;
          }
        }
        ValuePtr container = Container();
        for (const ValuePtr& item : *items) {
          if (absl::Status s = Nest(*container, *item); !s.ok()) return s;
        }
        Push(std::move(container));
        return absl::OkStatus();
      }
      case 'a': {  // APPEND
        absl::StatusOr<ValuePtr> item = Pop();
        if (!item.ok()) return item.status();
        return NestInTop({*item});
      }
      case 's': {  // SETITEM
        absl::StatusOr<ValuePtr> value = Pop();
        if (!value.ok()) return value.status();
        absl::StatusOr<ValuePtr> key = Pop();
        if (!key.ok()) return key.status();
        if (absl::Status s = CheckEntry(**key, **value); !s.ok()) return s;
        return NestInTop({*key, *value});
      }
      case 'e':
      case 'u':
      case 0x90: {  // APPENDS, SETITEMS, ADDITEMS
        absl::StatusOr<std::vector<ValuePtr>> items = PopMark();
        if (!items.ok()) return items.status();
        if (op == 'u') {
          for (size_t i = 0; i + 1 < items->size(); i += 2) {
            if (absl::Status s = CheckEntry(*(*items)[i], *(*items)[i + 1]); !s.ok()) return s;
          }
        }
        return NestInTop(*items);
      }
      case 'R':
      case 0x81:
        return Call();  // REDUCE, NEWOBJ
      case 'b': {       // BUILD: the object stays, its state is consumed
        absl::StatusOr<ValuePtr> state = Pop();
        if (!state.ok()) return state.status();
        return NestInTop({*state});
      }
      case 'Q': {  // BINPERSID
        absl::StatusOr<ValuePtr> id = Pop();
        if (!id.ok()) return id.status();
        absl::StatusOr<ValuePtr> storage = PersistentStorage(**id, records_, folder_);
        if (!storage.ok()) return storage.status();
        Push(*std::move(storage));
        return absl::OkStatus();
      }
      default:
        return Problem(absl::StrFormat(
            "refused: pickle opcode 0x%02x at byte %d is not one torch writes", op, start));
    }
  }

  Cursor cursor_;
  const RecordSizes& records_;
  absl::string_view folder_;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;  // the stack's depth at each MARK
  std::map<uint64_t, ValuePtr> memo_;
  std::string unnamed_problem_;  // the first damaged tensor outside a dict's values
};

}  // namespace
}  // namespace pickle

absl::Status CheckPickledTensors(absl::string_view pickle, const RecordSizes& records,
                                 absl::string_view folder) {
  return pickle::Scanner(pickle, records, folder).Run();
}

}  // namespace mpsd::trainer
