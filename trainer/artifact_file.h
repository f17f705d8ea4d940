// Writing a job's artifact (a checkpoint, the finished model) whose bytes are already in memory:
// checked against the free space of its file system before anything is written, written to
// "<path>.tmp", flushed to the disk and renamed into place, and the temporary removed whenever a
// step fails. A full disk is then a clear error naming the file and the sizes, never a half
// file, a crash inside LibTorch's archive writer (which aborts on a short write), or a temporary
// left behind. Torch-free; internal to trainer/.
#ifndef MPSD_TRAINER_ARTIFACT_FILE_H_
#define MPSD_TRAINER_ARTIFACT_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {

// Room kept free beyond an artifact's own size, bytes: the file system's own metadata for it,
// and the job store's next commits on the same disk (the state dir holds both).
inline constexpr int64_t kArtifactFreeMargin = 1 << 20;

// Writes `bytes` to `path` as above. Errors carry the failure reason DISK_FULL
// (api/failure_reason.h) and RESOURCE_EXHAUSTED when the file does not fit: "disk full: <path>
// needs N bytes (+1 MiB kept free), M bytes are free on its file system", when the write or
// flush fails with ENOSPC, EDQUOT or EFBIG, or when the file would exceed the process's file
// size limit (RLIMIT_FSIZE); INTERNAL naming the file for any other failure. Thread-compatible
// (one writer per path).
absl::Status WriteArtifactFile(const std::string& path, absl::string_view bytes);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_ARTIFACT_FILE_H_
