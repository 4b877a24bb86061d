#include "base/byte_size.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace deltafin {

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

Result<uint64_t> ParseByteSize(const std::string& text, bool allow_zero) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    return Status::Error("cannot parse the size '" + text + "' (e.g. 24G, 512M, 1.5GiB)");
  }
  std::string unit = text.substr(pos);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();
  double scale = 1;
  if (unit == "K" || unit == "k") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "m") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "t") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (!unit.empty()) {
    return Status::Error("unknown size unit in '" + text + "' (use K, M, G or T)");
  }
  if (allow_zero && value == 0) return uint64_t{0};
  if (!(value > 0) || !std::isfinite(value * scale) || value * scale > 1e18) {
    return Status::Error("size '" + text + "' must be " +
                         (allow_zero ? "zero or positive" : "positive"));
  }
  return static_cast<uint64_t>(value * scale);
}

}  // namespace deltafin
