// libFuzzer target: the daemon's config file (server/config.h). Any bytes give a Config or an
// error; none crashes, hangs or reads past the file.
#include <cstdint>

#include "server/config.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpsd::fuzz::WriteScratchFile("mpsd.yaml", data, size);
  mpsd::server::LoadConfig(path).IgnoreError();
  return 0;
}
