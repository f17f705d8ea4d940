// Checking what a torch pickle claims about its tensors against the bytes its archive holds,
// before LibTorch's Unpickler builds anything. Torch-free (mpsd_trainer_base); fuzzed by
// tests/fuzz/pickle_scan_fuzzer.cc.
//
// Why: LibTorch's Unpickler (1.13 and 2.x) trusts the pickle. For each persistent id
// ('storage', torch.<Type>Storage, key, location, numel) it makes a storage of numel × element
// size bytes over the record <archive>/<folder>/<key>, whatever that record holds, and for each
// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, ...) a tensor of those
// sizes and strides. A storage that claims more than its record, or a tensor that reaches past
// its storage, is read out of bounds later (copying weights, moving a model to a device,
// comparing a script's constants). Every torch file a submitter names goes through these checks
// first: a state dict (trainer/state_dict.h), a tensors file (trainer/tensor_file.h) and a
// TorchScript model's data.pkl and constants.pkl (trainer/models/torchscript.h).
//
// Formats: Python's pickle opcodes (CPython Lib/pickletools.py); torch's persistent ids and
// _rebuild_tensor_v2 (torch/serialization.py, torch/_utils.py); torch.jit.save's archive layout
// (torch/csrc/jit/serialization/export_module.cpp: data.pkl's storages under data/, constants.pkl's
// under constants/).
#ifndef MPSD_TRAINER_PICKLE_SCAN_H_
#define MPSD_TRAINER_PICKLE_SCAN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/zip_index.h"

namespace mpsd::trainer {

// The bytes of each storage record of one folder of a torch archive, by key: "0" → the size of
// <archive>/data/0 as the zip's central directory states it.
using RecordSizes = std::map<std::string, uint64_t>;

// The records of `index` (ReadZipIndex of a torch.save or torch.jit.save archive) under
// `folder` ("data/" or "constants/") of the archive's top folder (the first entry's, as
// PyTorchStreamReader takes it), by key.
RecordSizes RecordSizesUnder(const std::vector<ZipEntry>& index, absl::string_view folder);

// Checks the whole archive before a reader that loads records whole (PyTorchStreamReader)
// touches it, so that its memory is bounded by what the file really holds: each entry's
// uncompressed size at most `max_unpacked_bytes` in all (a deflated entry — torch.jit.save
// compresses its code files — is allocated at the size it claims, so a few kilobytes can claim
// gigabytes), a stored entry's claimed size equal to its stored size, and no storage record
// (`storage_folders`, e.g. {"data/"}) deflated, which torch never writes. INVALID_ARGUMENT
// saying which entry and both sizes; the caller names the file and the limit's config key.
absl::Status CheckArchiveClaims(const std::vector<ZipEntry>& index,
                                const std::vector<std::string>& storage_folders,
                                uint64_t max_unpacked_bytes);

// Bytes per element of a storage type as a pickle names it ("FloatStorage" → 4, with or without
// "torch."); 0 for a type mpsd does not read.
int64_t StorageElementSize(absl::string_view type);

namespace pickle {

// What a pickle scan knows of a value on the pickle machine's stack: enough to follow a storage
// into the tensor made of it. Internal to trainer/ (state_dict.cc's rewriter shares it).
struct Value {
  enum Kind { kOther, kInt, kString, kTuple, kGlobal, kStorage, kTensor };
  Kind kind = kOther;
  int64_t integer = 0;                              // kInt
  std::string text;                                 // kString; kGlobal "module.name"; kStorage key
  std::vector<std::shared_ptr<const Value>> items;  // kTuple
  int64_t numel = 0;                                // kStorage: elements, as the pickle claims
  int64_t element_size = 0;                         // kStorage: bytes per element
  std::string problem;  // kStorage, kTensor: why its data does not fit ("" if it fits)
  // Containers (tuples, lists, dicts, objects): 1 + the deepest value put in them so far. Mutable:
  // a list grows after it was made (APPEND), through every reference to it (the memo's too).
  mutable int depth = 0;
};
using ValuePtr = std::shared_ptr<const Value>;

// Values nest at most this deep: LibTorch frees a nested IValue recursively, so a pickle of a
// million nested lists (a few megabytes) would overflow the executor's stack. A state dict nests
// 3 deep, a TorchScript module a few levels per submodule.
inline constexpr int kMaxNesting = 1000;

// The reading position in a pickle's bytes (borrowed; they must outlive it): each opcode and
// its argument in turn. Past the end: INVALID_ARGUMENT "the pickle is truncated". Not
// thread-safe (one reader).
class Cursor {
 public:
  explicit Cursor(absl::string_view in) : in_(in) {}
  bool done() const { return pos_ >= in_.size(); }
  // The offset of the next byte.
  size_t pos() const { return pos_; }
  // The next byte (an opcode); the caller checks !done() first.
  uint8_t Next() { return static_cast<uint8_t>(in_[pos_++]); }
  // The next `n` bytes.
  absl::StatusOr<absl::string_view> Take(uint64_t n);
  // The next `n` bytes (at most 8) as a little-endian unsigned number.
  absl::StatusOr<uint64_t> Little(size_t n);
  // The bytes up to the next newline (GLOBAL's arguments), which is skipped.
  absl::StatusOr<std::string> Line();

 private:
  absl::string_view in_;
  size_t pos_ = 0;
};

// The integer BININT1, BININT2 (unsigned), BININT or LONG1 (signed, little-endian) pushes, from
// its argument bytes; nullopt for another opcode or a LONG1 beyond int64 (no size is).
std::optional<int64_t> IntArgument(uint8_t op, absl::string_view arg);

// A tuple of `items`; INVALID_ARGUMENT when it would nest deeper than kMaxNesting.
absl::StatusOr<ValuePtr> Tuple(std::vector<ValuePtr> items);

// The storage a BINPERSID of `id` makes: ('storage', torch.<Type>Storage, key, location,
// numel) whose record data/<key> in `records` must hold exactly numel × element size bytes (or
// be absent for numel 0); a mismatch is kept in the storage's `problem`. INVALID_ARGUMENT for an
// id of another form or an unknown storage type. `folder` ("data/") names the record in
// messages.
absl::StatusOr<ValuePtr> PersistentStorage(const Value& id, const RecordSizes& records,
                                           absl::string_view folder);

// The tensor _rebuild_tensor_v2(storage, offset, size, stride, ...) makes of `args`; its
// `problem` says why it does not lie inside its storage (or the storage's own problem).
// INVALID_ARGUMENT for arguments of another form.
absl::StatusOr<ValuePtr> RebuiltTensor(const Value& args);

}  // namespace pickle

// Follows `pickle` (a torch.save or torch.jit.save pickle: data.pkl, constants.pkl) without
// building anything and checks every storage against `records` (the records of `folder`, e.g.
// RecordSizesUnder(index, "data/")) and every tensor against its storage, as
// pickle::PersistentStorage and pickle::RebuiltTensor say. A storage may be used only by
// torch._utils._rebuild_tensor_v2 (quantized and sparse tensors are refused). Python objects
// are followed, not refused: which globals a loader accepts is the loader's business (LibTorch's
// Unpickler executes no Python). Errors: INVALID_ARGUMENT for a damaged tensor (named by its
// dict key where it has one, with its offset, sizes, strides and the storage's size), a pickle
// that is truncated or malformed, or an opcode torch never writes (named with its byte offset).
// Linear in the pickle's size; memory bounded by it. Thread-safe.
absl::Status CheckPickledTensors(absl::string_view pickle, const RecordSizes& records,
                                 absl::string_view folder);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_PICKLE_SCAN_H_
