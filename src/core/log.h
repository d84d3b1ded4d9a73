// The one leveled logger. Writes to stderr; the level comes from LOWBIT_LOG (debug, info, warn,
// error; default info) read once, or from set_log_level (the CLI's --verbose/--quiet).
#pragma once

#include <string>

namespace lowbit {

enum class LogLevel { DEBUG = 0, INFO = 1, WARN = 2, ERROR = 3, OFF = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const std::string& message);

inline void log_debug(const std::string& m) { log_message(LogLevel::DEBUG, m); }
inline void log_info(const std::string& m) { log_message(LogLevel::INFO, m); }
inline void log_warn(const std::string& m) { log_message(LogLevel::WARN, m); }

}  // namespace lowbit
