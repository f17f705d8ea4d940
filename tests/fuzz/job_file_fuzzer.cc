// libFuzzer target: job files (client/job_file.h). Any text gets a request or INVALID_ARGUMENT,
// and every request it accepts survives FormatJobFile and a second parse unchanged (the
// header's promise: ParseJobFile(FormatJobFile(r)) == r).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "client/job_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<mpsd::v1::SubmitJobRequest> request =
      mpsd::client::ParseJobFile(text, "fuzz.yaml");
  if (!request.ok()) {
    if (request.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const std::string formatted = mpsd::client::FormatJobFile(*request);
  absl::StatusOr<mpsd::v1::SubmitJobRequest> again =
      mpsd::client::ParseJobFile(formatted, "formatted.yaml");
  if (!again.ok() || again->SerializeAsString() != request->SerializeAsString()) {
    std::fprintf(stderr, "round trip changed the request\n--- formatted:\n%s\n--- error: %s\n",
                 formatted.c_str(), again.ok() ? "none" : again.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
