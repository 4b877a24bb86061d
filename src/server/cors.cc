// CorsPolicy (cors.h).
#include "server/cors.h"

#include <algorithm>

namespace deltafin::server {

std::optional<std::string> CorsPolicy::AllowOrigin(const std::string& origin) const {
  if (origin.empty() || origins_.empty()) return std::nullopt;
  if (std::find(origins_.begin(), origins_.end(), "*") != origins_.end()) return "*";
  // Origins are compared exactly, as browsers send them (scheme://host[:port], lower case).
  if (std::find(origins_.begin(), origins_.end(), origin) != origins_.end()) return origin;
  return std::nullopt;
}

bool CorsPolicy::AllowedMethod(const std::string& method) {
  return method == "GET" || method == "POST" || method == "OPTIONS";
}

std::string CheckCorsOrigin(const std::string& origin) {
  if (origin == "*") return "";
  const size_t scheme_end = origin.find("://");
  const bool scheme_ok = origin.rfind("http://", 0) == 0 || origin.rfind("https://", 0) == 0;
  if (!scheme_ok || scheme_end == std::string::npos || origin.size() == scheme_end + 3 ||
      origin.find('/', scheme_end + 3) != std::string::npos || origin.back() == ':') {
    return "--cors-origin '" + origin +
           "' is not an origin: give scheme://host[:port] without a path (e.g. "
           "http://localhost:3000), or * for any origin";
  }
  for (char c : origin) {
    if (c >= 'A' && c <= 'Z') {
      return "--cors-origin '" + origin + "': write the origin in lower case, as browsers send it";
    }
  }
  return "";
}

}  // namespace deltafin::server
