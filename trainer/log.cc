// Log() on spdlog's default logger. This file may include spdlog because it never sees torch's
// include path (target mpsd_trainer_base); see log.h.
#include "trainer/log.h"

#include "api/log_text.h"
#include "spdlog/spdlog.h"

namespace mpsd::trainer {
namespace {

spdlog::level::level_enum ToSpdlogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarning:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

}  // namespace

void Log(LogLevel level, std::string_view message) {
  // default_logger_raw() avoids a shared_ptr copy per line; it is null only after
  // spdlog::set_default_logger(nullptr), in which case the line has nowhere to go.
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (logger == nullptr) return;
  // "{}" so that braces in the message are not read as format fields; control characters
  // escaped, so that what a job names or its model says cannot forge a line.
  logger->log(ToSpdlogLevel(level), "{}",
              api::EscapeForLog(absl::string_view(message.data(), message.size())));
}

}  // namespace mpsd::trainer
