// Logging for code that includes torch. LibTorch 2.x ships its own fmt headers, so translation
// units that see torch must not include spdlog; they format with absl and log through here.
// Thread-safe (spdlog's default logger).
#ifndef MPSD_TRAINER_LOG_H_
#define MPSD_TRAINER_LOG_H_

#include <string_view>

namespace mpsd::trainer {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// Writes one line to the process's default spdlog logger.
void Log(LogLevel level, std::string_view message);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_LOG_H_
