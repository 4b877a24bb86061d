// Rendering of K3's XTML chat template (docs/MODEL.md §5.4) into segments, and their encoding.
#include <algorithm>
#include <map>

#include "tokenizer/chat.h"

namespace deltafin::tokenizer {

namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kToolsHeader =
    "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n";
constexpr const char* kToolsFooter = "\n```";
constexpr const char* kEffortBody =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the "
    "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
    "Now the system is invoked with `thinking_effort=";
constexpr const char* kEffortTail = "`.";

std::string EscapeAttr(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

// A string field, or "" when absent or not a string (nlohmann's value() would throw on the
// latter, and no exception may leave this module).
std::string StrField(const ojson& obj, const char* key) {
  if (!obj.is_object()) return "";
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

// Python str() of an attribute value.
std::string PyStr(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  return PyJsonDumps(v, ", ", ": ", false);
}

class Renderer {
 public:
  std::vector<ChatSegment> segs;

  void Special(const char* s) { segs.push_back({s, true}); }
  void Text(std::string s) {
    if (!s.empty()) segs.push_back({std::move(s), false});
  }
  void Open(const std::string& tag,
            const std::vector<std::pair<std::string, std::string>>& attrs = {}) {
    Special("<|open|>");
    Text(tag);
    for (const auto& [k, v] : attrs) {
      Text(" " + k);
      Text("=\"");
      Text(EscapeAttr(v));
      Text("\"");
    }
    Special("<|sep|>");
  }
  void Close(const std::string& tag) {
    Special("<|close|>");
    Text(tag);
    Special("<|sep|>");
  }
  void Message(const std::vector<std::pair<std::string, std::string>>& attrs, std::string body) {
    Open("message", attrs);
    Text(std::move(body));
    Close("message");
    Special("<|end_of_msg|>");
  }
};

// Message content: a string, null, or an array of {"type": "text", "text": ...} parts.
Result<std::string> ContentText(const ojson& msg, const char* field, const std::string& where) {
  const auto it = msg.find(field);
  if (it == msg.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string out;
    for (const auto& part : *it) {
      if (!part.is_object() || StrField(part, "type") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        return Status::Error(where + "." + field + ": only text parts are supported");
      }
      out += part["text"].get<std::string>();
    }
    return out;
  }
  return Status::Error(where + "." + field + ": must be a string, an array of text parts or null");
}

bool IsBlank(const std::string& s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (!IsPythonSpace(NextCodePoint(s, &pos))) return false;
  }
  return true;
}

const char* JsonTypeName(const ojson& v) {
  if (v.is_string()) return "string";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_object()) return "object";
  return "array";
}

Status RenderToolCalls(const ojson& calls, const std::string& where, Renderer* r) {
  if (!calls.is_array()) return Status::Error(where + ".tool_calls: must be an array");
  r->Open("tools");
  for (size_t i = 0; i < calls.size(); ++i) {
    const ojson& call = calls[i];
    const std::string cw = where + ".tool_calls[" + std::to_string(i) + "]";
    const ojson* fn = call.is_object() && call.contains("function") ? &call["function"] : &call;
    if (!fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return Status::Error(cw + ": missing function.name");
    }
    r->Open("call", {{"tool", (*fn)["name"].get<std::string>()}, {"index", std::to_string(i)}});
    ojson args = ojson::object();
    std::string raw;
    bool parsed = true;
    if (fn->contains("arguments")) {
      const ojson& a = (*fn)["arguments"];
      if (a.is_string()) {
        raw = a.get<std::string>();
        args = ojson::parse(raw, nullptr, /*allow_exceptions=*/false);
        parsed = !args.is_discarded() && args.is_object();
      } else if (a.is_object()) {
        args = a;
      } else if (!a.is_null()) {
        return Status::Error(cw + ".function.arguments: must be a string or an object");
      }
    }
    if (parsed) {
      for (const auto& [key, value] : args.items()) {
        r->Open("argument", {{"key", key}, {"type", JsonTypeName(value)}});
        r->Text(value.is_string() ? value.get<std::string>()
                                  : PyJsonDumps(value, ", ", ": ", false));
        r->Close("argument");
      }
    } else {
      r->Open("json", {{"type", "object"}});
      r->Text(raw);
      r->Close("json");
    }
    r->Close("call");
  }
  r->Close("tools");
  return Status::Ok();
}

}  // namespace

std::string PyJsonDumps(const ojson& v, const char* item_sep, const char* key_sep, bool sort_keys) {
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += item_sep;
      out += PyJsonDumps(v[i], item_sep, key_sep, sort_keys);
    }
    return out + "]";
  }
  if (v.is_object()) {
    std::vector<std::pair<std::string, const ojson*>> items;
    for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(it.key(), &it.value());
    // Byte order of UTF-8 equals code point order, which is Python's sort order for str keys.
    if (sort_keys) {
      std::stable_sort(items.begin(), items.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    std::string out = "{";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      out += ojson(items[i].first).dump(-1, ' ', false, ojson::error_handler_t::replace);
      out += key_sep;
      out += PyJsonDumps(*items[i].second, item_sep, key_sep, sort_keys);
    }
    return out + "}";
  }
  // Scalars: nlohmann's escaping without ensure_ascii matches Python's (\n, \t, \u001f, ...).
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

Result<std::vector<ChatSegment>> RenderChat(const ojson& messages, const ojson& tools,
                                            const ChatOptions& options) {
  if (!messages.is_array()) return Status::Error("messages: must be an array");
  Renderer r;
  if (!tools.is_null()) {
    if (!tools.is_array()) return Status::Error("tools: must be an array");
    if (!tools.empty()) {
      r.Message({{"role", "system"}, {"type", "tool-declare"}},
                kToolsHeader + PyJsonDumps(tools, ",", ":", true) + kToolsFooter);
    }
  }
  if (options.thinking && !options.reasoning_effort.empty()) {
    const std::string& e = options.reasoning_effort;
    if (e != "low" && e != "medium" && e != "high" && e != "max") {
      return Status::Error("reasoning_effort '" + e + "': expected low, medium, high or max");
    }
    r.Message({{"role", "system"}, {"type", "thinking-effort"}}, kEffortBody + e + kEffortTail);
  }
  // Tool results are matched to the latest assistant message's tool_calls by tool_call_id.
  std::vector<std::pair<std::string, std::string>> last_calls;  // (id, name) in call order
  for (size_t i = 0; i < messages.size();) {
    const ojson& msg = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) {
      return Status::Error(where + ": missing string 'role'");
    }
    const std::string role = msg["role"].get<std::string>();
    if (role == "user" || role == "system") {
      if (role == "system" && msg.contains("tools")) {
        return Status::Error(where +
                             ": system messages carrying 'tools' (dynamic tool "
                             "declarations) are not supported yet");
      }
      std::vector<std::pair<std::string, std::string>> attrs = {{"role", role}};
      if (msg.contains("name") && !msg["name"].is_null())
        attrs.emplace_back("name", PyStr(msg["name"]));
      DF_ASSIGN_OR_RETURN(std::string body, ContentText(msg, "content", where));
      r.Message(attrs, std::move(body));
      ++i;
    } else if (role == "assistant") {
      std::vector<std::pair<std::string, std::string>> attrs = {{"role", role}};
      if (msg.contains("name") && !msg["name"].is_null())
        attrs.emplace_back("name", PyStr(msg["name"]));
      r.Open("message", attrs);
      if (options.thinking) {
        r.Open("think");
        DF_ASSIGN_OR_RETURN(std::string reasoning, ContentText(msg, "reasoning_content", where));
        if (!IsBlank(reasoning)) r.Text(reasoning);
        r.Close("think");
      }
      r.Open("response");
      DF_ASSIGN_OR_RETURN(std::string content, ContentText(msg, "content", where));
      r.Text(content);
      r.Close("response");
      last_calls.clear();
      if (msg.contains("tool_calls") && !msg["tool_calls"].is_null()) {
        DF_RETURN_IF_ERROR(RenderToolCalls(msg["tool_calls"], where, &r));
        for (const auto& call : msg["tool_calls"]) {
          const ojson* fn = call.contains("function") ? &call["function"] : &call;
          last_calls.emplace_back(StrField(call, "id"), (*fn)["name"].get<std::string>());
        }
      }
      r.Close("message");
      r.Special("<|end_of_msg|>");
      ++i;
    } else if (role == "tool") {
      // A run of tool results, re-ordered to the assistant's tool_calls order (stable for ids
      // that are not found, which keep their relative order at the end).
      size_t end = i;
      while (end < messages.size() && messages[end].is_object() &&
             StrField(messages[end], "role") == "tool") {
        ++end;
      }
      std::vector<std::pair<size_t, size_t>> order;  // (call position, message index)
      for (size_t k = i; k < end; ++k) {
        const std::string id = StrField(messages[k], "tool_call_id");
        size_t pos = last_calls.size();
        for (size_t c = 0; c < last_calls.size(); ++c) {
          if (!id.empty() && last_calls[c].first == id) pos = c;
        }
        order.emplace_back(pos, k);
      }
      std::stable_sort(order.begin(), order.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t n = 0; n < order.size(); ++n) {
        const auto [pos, k] = order[n];
        const ojson& tm = messages[k];
        const std::string tw = "messages[" + std::to_string(k) + "]";
        std::string name;
        if (pos < last_calls.size()) {
          name = last_calls[pos].second;
        } else if (tm.contains("name") && tm["name"].is_string()) {
          name = tm["name"].get<std::string>();
        } else {
          return Status::Error(tw +
                               ": tool result whose tool_call_id matches no call of the "
                               "preceding assistant message, and no 'name'");
        }
        DF_ASSIGN_OR_RETURN(std::string body, ContentText(tm, "content", tw));
        r.Message({{"role", "tool"}, {"tool", name}, {"index", std::to_string(n)}},
                  std::move(body));
      }
      i = end;
    } else {
      return Status::Error(where + ": unknown role '" + role +
                           "' (expected system, user, assistant or tool)");
    }
  }
  if (options.add_generation_prompt) {
    r.Open("message", {{"role", "assistant"}});
    r.Open(options.thinking ? "think" : "response");
  }
  return std::move(r.segs);
}

Result<std::vector<ChatSegment>> RenderChatRequest(const std::string& json_text,
                                                   ChatOptions* options) {
  const ojson doc = ojson::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::Error("chat request: not valid JSON");
  if (doc.is_array()) return RenderChat(doc, ojson(), *options);
  if (!doc.is_object() || !doc.contains("messages")) {
    return Status::Error("chat request: expected a messages array or an object with 'messages'");
  }
  if (doc.contains("thinking")) {
    if (!doc["thinking"].is_boolean())
      return Status::Error("chat request: 'thinking' must be a bool");
    options->thinking = doc["thinking"].get<bool>();
  }
  if (doc.contains("reasoning_effort")) {
    if (!doc["reasoning_effort"].is_string()) {
      return Status::Error("chat request: 'reasoning_effort' must be a string");
    }
    options->reasoning_effort = doc["reasoning_effort"].get<std::string>();
  }
  return RenderChat(doc["messages"], doc.contains("tools") ? doc["tools"] : ojson(), *options);
}

std::string ChatText(const std::vector<ChatSegment>& segments) {
  std::string out;
  for (const auto& s : segments) out += s.text;
  return out;
}

Result<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer,
                                        const std::vector<ChatSegment>& segments) {
  std::vector<int32_t> ids;
  EncodeOptions plain;
  for (const auto& s : segments) {
    if (s.special) {
      const int32_t id = tokenizer.SpecialId(s.text);
      if (id < 0) return Status::Error("the vocabulary has no special token '" + s.text + "'");
      ids.push_back(id);
    } else {
      DF_ASSIGN_OR_RETURN(std::vector<int32_t> part, tokenizer.Encode(s.text, plain));
      ids.insert(ids.end(), part.begin(), part.end());
    }
  }
  return ids;
}

}  // namespace deltafin::tokenizer
