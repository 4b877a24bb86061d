// Cross-origin access (CORS), off unless `serve --cors-origin` names the origins allowed (or
// "*"). Without it no Access-Control-* header is ever sent, so browsers keep pages on other
// origins from reading responses; the chat page at GET / is same-origin and needs none.
//
// With it: a request whose Origin is allowed gets Access-Control-Allow-Origin (the origin itself,
// or "*" when "*" is configured), Vary: Origin, and Access-Control-Expose-Headers: Retry-After.
// A preflight (OPTIONS with Access-Control-Request-Method) is answered before authentication
// (browsers send it without the Authorization header): 204 with the allowed methods and headers
// when the origin and method are allowed, 403 otherwise.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace deltafin::server {

class CorsPolicy {
 public:
  CorsPolicy() = default;
  explicit CorsPolicy(std::vector<std::string> origins) : origins_(std::move(origins)) {}
  bool enabled() const { return !origins_.empty(); }
  // The Access-Control-Allow-Origin value for a request from `origin`; nullopt: no CORS headers.
  std::optional<std::string> AllowOrigin(const std::string& origin) const;
  // Methods a preflight may ask for.
  static bool AllowedMethod(const std::string& method);

 private:
  std::vector<std::string> origins_;
};

// Checks a --cors-origin value: "*" or scheme://host[:port] without a path. Returns an error
// message, or "" when it is fine.
std::string CheckCorsOrigin(const std::string& origin);

}  // namespace deltafin::server
