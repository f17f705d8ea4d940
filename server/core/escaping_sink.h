// A spdlog sink that escapes control characters in each message (api/log_text.h) before passing
// it to another sink: the daemon's log lines quote what clients send (paths in refusals, token
// names, the executor's messages), and none of it may forge a line or reach a terminal as an
// escape sequence. Thread-safe as spdlog's sinks are (the wrapped sink's own mutex).
#ifndef MPSD_SERVER_CORE_ESCAPING_SINK_H_
#define MPSD_SERVER_CORE_ESCAPING_SINK_H_

#include <memory>
#include <string>
#include <utility>

#include "api/log_text.h"
#include "spdlog/details/log_msg.h"
#include "spdlog/sinks/sink.h"

namespace mpsd::server {

class EscapingSink final : public spdlog::sinks::sink {
 public:
  explicit EscapingSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override {
    const std::string escaped =
        api::EscapeForLog(absl::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
    inner_->log(copy);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  const std::shared_ptr<spdlog::sinks::sink> inner_;
};

}  // namespace mpsd::server

#endif  // MPSD_SERVER_CORE_ESCAPING_SINK_H_
