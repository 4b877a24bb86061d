// OpenAI-shaped API errors: an HTTP status plus {"error": {message, type, param, code}}. Every
// error the server sends (400, 401, 404, 413, 429, 500, 503, and errors inside an SSE stream) is
// built here, so clients' SDKs map them to the right exception classes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace deltafin::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; "" = null
  std::string code;   // "" = null

  nlohmann::ordered_json Body() const {
    nlohmann::ordered_json e = {{"message", message}, {"type", type}};
    e["param"] = param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param);
    e["code"] = code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code);
    return {{"error", std::move(e)}};
  }
};

inline ApiError BadRequest(std::string message, std::string param = "",
                           std::string code = "invalid_value") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

inline ApiError Unsupported(const std::string& param, const std::string& why) {
  return ApiError{400, "'" + param + "' is not supported by this server: " + why,
                  "invalid_request_error", param, "unsupported_parameter"};
}

}  // namespace deltafin::server
