// Minimal leveled logging to stderr. Thread-safe (one line is written with one call).
//
//   MNEMO_LOG(kInfo) << "loaded " << n << " tensors";
//
// The level threshold comes from set_log_level() or the MNEMO_LOG environment variable
// (debug, info, warn, error). Default: info.
#pragma once

#include <sstream>

namespace mnemo {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kNone = 4 };

/// Sets the minimum level that is printed.
void set_log_level(LogLevel level);
/// The current minimum level.
LogLevel log_level();

namespace internal {
/// Accumulates one log line and writes it to stderr in its destructor.
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};
}  // namespace internal

}  // namespace mnemo

#define MNEMO_LOG(level)                                 \
  if (::mnemo::LogLevel::level < ::mnemo::log_level()) { \
  } else                                                 \
    ::mnemo::internal::LogLine(::mnemo::LogLevel::level)
