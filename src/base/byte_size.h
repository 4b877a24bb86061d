// Byte sizes for people: the one formatter of sizes in messages (the memory plan, setup's plans
// and progress lines, make-model's progress) and the one parser of sizes given on the command line
// (--mem-limit, --expert-cache). Both use binary units (1 KiB = 1024 B), so a size printed by one
// reads back through the other.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace deltafin {

// "512 B", "1.50 GiB": B, KiB, MiB, GiB, TiB, two decimals above bytes.
std::string HumanBytes(uint64_t bytes);
// "24G", "512M", "1073741824", "1.5GiB" -> bytes (K/M/G/T, optional "i"/"B", base 1024).
// Zero is refused unless `allow_zero` (for budgets where 0 has a meaning, e.g. serve's
// --cache-bytes 0: no disk tier).
Result<uint64_t> ParseByteSize(const std::string& text, bool allow_zero = false);

}  // namespace deltafin
