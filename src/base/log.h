// Logging to stderr. Progress and diagnostics go to stderr so stdout stays machine-readable
// (token ids, JSON) for scripts and tests.
//
// Two formats: the CLI's plain lines ("message", "warning: message", "error: message"), and the
// server's timestamped lines ("2026-12-01T22:40:01.123Z INFO message", UTC, milliseconds; each
// line of a multi-line message gets the prefix) that `serve` turns on, so that a long-running log
// can be read against the clock and filtered by level. Lines below the minimum level are dropped.
// Each line is written with one call, so lines from different threads never interleave. Level and
// format are set once at startup.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace deltafin {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// "debug", "info", "warn", "error" (as `--log-level` takes them); nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(std::string_view name);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void SetLogTimestamps(bool on);

void Log(LogLevel level, const std::string& message);
inline void LogDebug(const std::string& message) { Log(LogLevel::kDebug, message); }
inline void LogInfo(const std::string& message) { Log(LogLevel::kInfo, message); }
inline void LogWarn(const std::string& message) { Log(LogLevel::kWarn, message); }
inline void LogError(const std::string& message) { Log(LogLevel::kError, message); }

}  // namespace deltafin
