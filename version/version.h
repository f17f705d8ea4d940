// What a binary was built from: mpsd's version, the git commit and the LibTorch it was built
// against, for `mpsd --version` and `mpsctl --version` (and the man pages help2man makes from
// them). The values are fixed at build time (version/CMakeLists.txt); no I/O, thread-safe.
#ifndef MPSD_VERSION_VERSION_H_
#define MPSD_VERSION_VERSION_H_

#include <string>

namespace mpsd {

struct BuildInfo {
  // CMake's project(mpsd VERSION ...), e.g. "0.1.0".
  const char* version;
  // `git describe --always --dirty` of the source tree at build time (e.g. "440ec36" or
  // "440ec36-dirty"); -DMPSD_GIT_COMMIT=... where the tree is no git checkout (a release
  // tarball); "unknown" when neither is there.
  const char* git_commit;
  // The LibTorch version CMake found (Torch_VERSION), which mpsd-executor links; mpsd itself
  // does not link LibTorch.
  const char* torch_version;
};

const BuildInfo& GetBuildInfo();

// The --version text: "PROGRAM VERSION" on the first line (what help2man reads), then
// "git commit: ..." and "LibTorch: ..."; no newline after the last (CLI11 adds one).
std::string VersionText(const std::string& program);

}  // namespace mpsd

#endif  // MPSD_VERSION_VERSION_H_
