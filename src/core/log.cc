#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lowbit {
namespace {

LogLevel level_from_environment() {
  const char* value = std::getenv("LOWBIT_LOG");
  if (value == nullptr) return LogLevel::INFO;
  if (std::strcmp(value, "debug") == 0) return LogLevel::DEBUG;
  if (std::strcmp(value, "warn") == 0) return LogLevel::WARN;
  if (std::strcmp(value, "error") == 0) return LogLevel::ERROR;
  if (std::strcmp(value, "off") == 0) return LogLevel::OFF;
  return LogLevel::INFO;
}

// The process-wide verbosity: set once by the application, read by every log call.
std::atomic<LogLevel>& current_level() {
  static std::atomic<LogLevel> level{level_from_environment()};
  return level;
}

}  // namespace

void set_log_level(LogLevel level) { current_level().store(level); }
LogLevel log_level() { return current_level().load(); }

void log_message(LogLevel level, const std::string& message) {
  if (level < log_level()) return;
  static const char* const kPrefix[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "[lowbit %s] %s\n", kPrefix[static_cast<int>(level)], message.c_str());
}

}  // namespace lowbit
