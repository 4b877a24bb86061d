// Typed field access shared by the request parsers of all three APIs (request.cc for
// chat/completions and the request model, anthropic_api.cc, responses_api.cc): the body parsed as
// a JSON object under a nesting limit; a field that is absent or null counts as not given; a field
// of the wrong type or out of range is a 400 whose message and param name the field by its full
// path ("messages[2].content[0]").
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace deltafin::server::fields {

using ojson = nlohmann::ordered_json;

inline const ojson* Get(const ojson& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

inline std::string Path(const std::string& parent, const char* key) {
  return parent.empty() ? std::string(key) : parent + "." + key;
}

inline std::string Index(const std::string& parent, size_t i) {
  return parent + "[" + std::to_string(i) + "]";
}

inline ApiError WrongType(const std::string& field, const char* expected) {
  return BadRequest("'" + field + "' must be " + expected, field, "invalid_type");
}

inline ApiError Missing(const std::string& field) {
  return BadRequest("'" + field + "' is required", field, "missing_required");
}

inline std::optional<ApiError> GetBool(const ojson& obj, const char* key, const std::string& path,
                                       bool* out) {
  const ojson* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return WrongType(path, "a boolean");
  *out = v->get<bool>();
  return std::nullopt;
}

inline std::optional<ApiError> GetString(const ojson& obj, const char* key, const std::string& path,
                                         std::string* out) {
  const ojson* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return WrongType(path, "a string");
  *out = v->get<std::string>();
  return std::nullopt;
}

inline std::optional<ApiError> GetNumber(const ojson& obj, const char* key, const std::string& path,
                                         double lo, double hi, double* out) {
  const ojson* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return WrongType(path, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return BadRequest(
        "'" + path + "' must be between " + ojson(lo).dump() + " and " + ojson(hi).dump(), path);
  }
  *out = d;
  return std::nullopt;
}

inline std::optional<ApiError> GetInt(const ojson& obj, const char* key, const std::string& path,
                                      int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const ojson* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return WrongType(path, "an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return BadRequest("'" + path + "' is out of range", path);
  }
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) {
    return BadRequest(
        "'" + path + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi),
        path);
  }
  *out = i;
  return std::nullopt;
}

// An integer `seed` (not in the Anthropic or Responses APIs: an extension there, as in chat
// completions, for repeatable sampling). A negative seed wraps (-1 is UINT64_MAX), as OpenAI
// clients send it.
inline std::optional<ApiError> GetSeed(const ojson& obj, const char* key, const std::string& path,
                                       std::optional<uint64_t>* out) {
  const ojson* v = Get(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return WrongType(path, "an integer");
  *out = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
  return std::nullopt;
}

// Deepest nesting of arrays and objects the server accepts in a body or in tool-call arguments.
// nlohmann parses any depth without recursion, but copying, comparing and serialising a value
// recurse once per level, so a body nested 100,000 deep would overflow a thread's stack in the
// chat template. Real requests (tool schemas included) stay far below this.
constexpr int kMaxJsonDepth = 128;
// The deepest [ / { nesting in JSON text, outside strings (invalid JSON is the parser's business).
int NestingDepth(std::string_view text);
// The 400 (code too_deep) for `what` nesting deeper than kMaxJsonDepth.
ApiError TooDeep(const std::string& what, const std::string& param);
// A request body as a JSON object: a 400 when it nests deeper than kMaxJsonDepth, is not valid
// JSON, or is not an object. Every API's parser starts here.
std::optional<ApiError> ParseBody(std::string_view body, ojson* out);

}  // namespace deltafin::server::fields
