// For fuzz targets whose code under test reads files: one private scratch directory per
// process (under $TMPDIR, else /tmp), and the fuzzer's bytes written into a file in it.
#ifndef MPSD_TESTS_FUZZ_FUZZ_FILE_H_
#define MPSD_TESTS_FUZZ_FUZZ_FILE_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mpsd::fuzz {

// The process's scratch directory, created on first use (mkdtemp: mode 0700) and left behind
// at exit: libFuzzer ends a process with _exit, so no destructor would run anyway; it holds a
// few small files.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/mpsd-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    return pattern;
  }();
  return dir;
}

// Replaces `<ScratchDir()>/<name>` with exactly these bytes; returns its path.
inline std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, file) != size) std::abort();
  std::fclose(file);
  return path;
}

}  // namespace mpsd::fuzz

#endif  // MPSD_TESTS_FUZZ_FUZZ_FILE_H_
