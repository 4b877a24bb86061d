#include "base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace deltafin {

namespace {

std::atomic<LogLevel> min_level{LogLevel::kInfo};
std::atomic<bool> timestamps{false};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

// "2026-12-01T22:40:01.123Z"
std::string UtcTimestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) %
                  std::chrono::seconds(1);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof(buf) - n, ".%03dZ", static_cast<int>(ms.count()));
  return buf;
}

}  // namespace

std::optional<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  return std::nullopt;
}

void SetLogLevel(LogLevel level) { min_level.store(level); }
bool LogEnabled(LogLevel level) { return level >= min_level.load(); }
void SetLogTimestamps(bool on) { timestamps.store(on); }

void Log(LogLevel level, const std::string& message) {
  if (!LogEnabled(level)) return;
  std::string text;
  if (timestamps.load()) {
    // Every line of a multi-line message gets the prefix, so that each line can be filtered and
    // placed in time on its own.
    const std::string prefix = UtcTimestamp() + " " + LevelName(level) + " ";
    size_t start = 0;
    for (;;) {
      const size_t end = message.find('\n', start);
      text += prefix;
      text.append(message, start, end == std::string::npos ? std::string::npos : end - start);
      text += '\n';
      if (end == std::string::npos) break;
      start = end + 1;
    }
  } else {
    if (level == LogLevel::kWarn) text = "warning: ";
    if (level == LogLevel::kError) text = "error: ";
    text += message;
    text += '\n';
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace deltafin
