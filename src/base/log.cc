#include "base/log.h"

#include <cstdio>

namespace deltafin {

void LogInfo(const std::string& message) { std::fprintf(stderr, "%s\n", message.c_str()); }
void LogError(const std::string& message) { std::fprintf(stderr, "error: %s\n", message.c_str()); }

}  // namespace deltafin
