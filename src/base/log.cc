#include "mnemo/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mnemo {
namespace {

LogLevel level_from_env() {
  const char* e = std::getenv("MNEMO_LOG");
  if (e == nullptr) return LogLevel::kInfo;
  if (std::strcmp(e, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(e, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(e, "error") == 0) return LogLevel::kError;
  if (std::strcmp(e, "none") == 0) return LogLevel::kNone;
  return LogLevel::kInfo;
}

std::atomic<int>& level_ref() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

}  // namespace

void set_log_level(LogLevel level) { level_ref().store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(level_ref().load()); }

namespace internal {
LogLine::~LogLine() {
  static const char* kTags[] = {"D", "I", "W", "E", "-"};
  std::string s = os_.str();
  std::fprintf(stderr, "[mnemo %s] %s\n", kTags[static_cast<int>(level_)], s.c_str());
}
}  // namespace internal

}  // namespace mnemo
