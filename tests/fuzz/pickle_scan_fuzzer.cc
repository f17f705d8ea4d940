// libFuzzer target: the pickle scan every torch file a job names goes through before LibTorch's
// Unpickler (trainer/pickle_scan.h). Any bytes give OK or an error; none crashes, recurses
// without bound or reads outside the input. The records are fixed (the seed corpus' pickles,
// written by torch.save and torch.jit.save, mostly claim other sizes, so both paths are reached).
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "trainer/pickle_scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mpsd::trainer::RecordSizes* records =
      new mpsd::trainer::RecordSizes{{"0", 24}, {"1", 8}, {"2", 24}, {"3", 8}};
  const absl::Status status = mpsd::trainer::CheckPickledTensors(
      absl::string_view(reinterpret_cast<const char*>(data), size), *records, "data/");
  (void)status;
  return 0;
}
