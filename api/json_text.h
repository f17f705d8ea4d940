// JSON text that mpsd writes by hand where protobuf's JSON mapping does not apply (mpsctl's
// tables as JSON, the dashboard's series answers). Thread-safety: pure function.
#ifndef MPSD_API_JSON_TEXT_H_
#define MPSD_API_JSON_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace mpsd::api {

// `text` as a JSON string literal, quotes included (RFC 8259 §7): '"' and '\' escaped, \n, \r
// and \t by name, the other bytes below 0x20 as \u00XX; every other byte (UTF-8 included) kept.
std::string JsonString(absl::string_view text);

}  // namespace mpsd::api

#endif  // MPSD_API_JSON_TEXT_H_
