// Minimal logging to stderr. Progress and diagnostics go to stderr so stdout stays machine-readable
// (token ids, JSON) for scripts and tests.
#pragma once

#include <string>

namespace deltafin {

void LogInfo(const std::string& message);
void LogError(const std::string& message);

}  // namespace deltafin
