// What reading one file a job names may cost the executor, whatever the file says about
// itself: the config's `executor.max_file_bytes`, `executor.max_unpacked_bytes` and
// `executor.max_image_pixels` (docs/operations.md, "Files that lie"), passed to mpsd-executor as
// flags. Torch-free: mpsd checks the config with it, the executor applies it
// (trainer/input_limits.h).
#ifndef MPSD_API_INPUT_LIMITS_H_
#define MPSD_API_INPUT_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mpsd::api {

// A plain value; every bound is inclusive.
struct InputLimits {
  // Bytes on disk of a file the executor reads whole into memory: a tensors file, a state dict
  // (model.weights), a TorchScript model, a checkpoint; checked with stat before it is opened.
  // In [1 MiB, 1 TiB].
  int64_t max_file_bytes = int64_t{16} << 30;
  // Bytes a file unpacks to, as the file itself claims before anything is allocated: the sum
  // of a zip archive's (torch.save, torch.jit.save) uncompressed entry sizes, an IDX file's
  // data as its header's dimensions describe it (gzip or not). In [1 MiB, 1 TiB].
  int64_t max_unpacked_bytes = int64_t{16} << 30;
  // Pixels (width × height) of one image, as its PNG or JPEG header claims before it is
  // decoded. In [1, 2^32].
  int64_t max_image_pixels = int64_t{1} << 28;
};

// OK, or INVALID_ARGUMENT "WHERE.KEY: must be in [..], got VALUE" for the first bound out of
// range (keys: max_file_bytes, max_unpacked_bytes, max_image_pixels).
absl::Status CheckInputLimits(const InputLimits& limits, absl::string_view where);

}  // namespace mpsd::api

#endif  // MPSD_API_INPUT_LIMITS_H_
