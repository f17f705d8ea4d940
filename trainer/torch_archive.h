// Torch archives (torch.save, torch.jit.save, mpsd's checkpoints) read once into memory and
// checked before LibTorch parses them, so that what was checked is exactly what LibTorch reads
// and no file costs more than the executor's input limits (api/input_limits.h). Internal to
// trainer/: includes LibTorch's serialization headers.
#ifndef MPSD_TRAINER_TORCH_ARCHIVE_H_
#define MPSD_TRAINER_TORCH_ARCHIVE_H_

#include <caffe2/serialize/read_adapter_interface.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/zip_index.h"

namespace mpsd::trainer {

// PyTorchStreamReader's (and torch::jit::load's) view of bytes in memory. Borrows `bytes`, which
// must outlive every reader made from it. Thread-compatible.
class MemoryReadAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit MemoryReadAdapter(absl::string_view bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what = "") const override;

 private:
  absl::string_view bytes_;
};

// Reads the regular file `path` whole: INVALID_ARGUMENT naming it when it is larger than
// executor.max_file_bytes (checked on the open file, before reading), NOT_FOUND when it does
// not exist, PERMISSION_DENIED when it cannot be read.
absl::StatusOr<std::vector<char>> ReadWholeFile(const std::string& path);

// A pickle of an archive and the folder its storages live in ("data.pkl" → "data/").
struct ArchivePickle {
  std::string record;
  std::string folder;
};

// The pickles torch.jit.save writes (a TorchScript module, and the state record inside an
// mpsd checkpoint): data.pkl over data/, constants.pkl over constants/.
const std::vector<ArchivePickle>& ScriptPickles();

// The zip index of a torch archive in memory (bounded), with every entry's claimed size checked
// (CheckArchiveClaims: at most executor.max_unpacked_bytes in all; the records under
// `storage_folders`, e.g. {"data/"}, stored as torch writes them). INVALID_ARGUMENT with the
// problem, without the file's name. Thread-safe.
absl::StatusOr<std::vector<ZipEntry>> CheckedArchiveIndex(
    absl::string_view bytes, const std::vector<std::string>& storage_folders);

// Checks a torch archive in memory before LibTorch reads it: its zip index (bounded), every
// entry's claimed size (CheckArchiveClaims, at most executor.max_unpacked_bytes in all, storage
// records stored as torch writes them), and each of `pickles` present in it against its
// storage records (CheckPickledTensors). INVALID_ARGUMENT with the problem, without the file's
// name (the caller adds it). Thread-safe.
absl::Status CheckTorchArchive(absl::string_view bytes, const std::vector<ArchivePickle>& pickles);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_TORCH_ARCHIVE_H_
