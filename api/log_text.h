// Text that reaches a log line: control characters escaped, so that nothing a submitter names
// (a path, a model's exception or print() output, a token name) can forge a line, move the
// cursor or recolour a terminal. Used by the daemon's log sinks (server/core/escaping_sink.h) and
// the executor's trainer::Log. Thread-safety: pure function.
#ifndef MPSD_API_LOG_TEXT_H_
#define MPSD_API_LOG_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace mpsd::api {

// `text` with every byte below 0x20 and 0x7F (DEL) written as \n, \r, \t or \xNN, and
// backslashes left as they are; bytes of 0x80 and above (UTF-8) are kept.
std::string EscapeForLog(absl::string_view text);

}  // namespace mpsd::api

#endif  // MPSD_API_LOG_TEXT_H_
