// Anthropic Messages API: body -> GenerationRequest, output -> message / events (anthropic_api.h).
#include "server/anthropic_api.h"

#include <set>

#include "server/json_fields.h"
#include "tokenizer/utf8.h"

namespace deltafin::server {

namespace {

using ojson = nlohmann::ordered_json;
using fields::Get;
using fields::Index;
using fields::Path;
using fields::WrongType;

// Text of a string or an array of {"type": "text", "text": ...} blocks (system, tool_result
// content). Other block types are refused, naming the block.
std::optional<ApiError> TextOf(const ojson& v, const std::string& path, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType(path, "a string or an array of text blocks");
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = Index(path, i);
    const ojson* type = Get(v[i], "type");
    if (type == nullptr || !type->is_string()) return fields::Missing(Path(p, "type"));
    if (*type != "text") {
      return Unsupported(Path(p, "type"),
                         "only text blocks here, not '" + type->get<std::string>() + "'");
    }
    const ojson* text = Get(v[i], "text");
    if (text == nullptr || !text->is_string()) return WrongType(Path(p, "text"), "a string");
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> ParseThinkingConfig(const ojson& obj, GenerationRequest* out) {
  out->chat.thinking = false;  // Anthropic's default: no extended thinking unless asked for
  const ojson* th = Get(obj, "thinking");
  if (th == nullptr) return std::nullopt;
  if (!th->is_object()) return WrongType("thinking", "an object");
  const ojson* type = Get(*th, "type");
  if (type == nullptr || !type->is_string()) return fields::Missing("thinking.type");
  if (*type == "disabled") return std::nullopt;
  if (*type != "enabled") {
    return BadRequest("'thinking.type' must be enabled or disabled", "thinking.type");
  }
  std::optional<int64_t> budget;
  if (auto err =
          fields::GetInt(*th, "budget_tokens", "thinking.budget_tokens", 1, INT32_MAX, &budget)) {
    return err;
  }
  if (!budget) return fields::Missing("thinking.budget_tokens");
  out->chat.thinking = true;
  out->chat.reasoning_effort = EffortForBudget(*budget);
  return std::nullopt;
}

// Structured output: Anthropic's `output_config.format` (GA) or `output_format` (the
// structured-outputs-2025-11-13 beta spelling), {type: "json_schema", schema}; the same constrained
// decoder as chat completions' response_format (docs/SERVER.md "JSON output").
std::optional<ApiError> ParseOutputFormat(const ojson& obj, GenerationRequest* out) {
  const ojson* f = nullptr;
  std::string param;
  if (const ojson* cfg = Get(obj, "output_config"); cfg != nullptr) {
    if (!cfg->is_object()) return WrongType("output_config", "an object");
    f = Get(*cfg, "format");
    param = "output_config.format";
  }
  if (const ojson* beta = Get(obj, "output_format"); beta != nullptr) {
    if (f != nullptr) {
      return BadRequest("give either 'output_config.format' or 'output_format', not both",
                        "output_format");
    }
    f = beta;
    param = "output_format";
  }
  if (f == nullptr || f->is_null()) return std::nullopt;
  const ojson* type = f->is_object() ? Get(*f, "type") : nullptr;
  if (type == nullptr || !type->is_string() || *type != "json_schema") {
    return WrongType(param, "an object with type \"json_schema\"");
  }
  const ojson* schema = Get(*f, "schema");
  if (schema == nullptr) {
    return BadRequest("'" + param + ".schema' is required", param + ".schema", "missing_required");
  }
  if (auto err = CompileOutputSchema(*schema, param + ".schema", out)) return err;
  out->chat.thinking = false;  // as for chat completions under a JSON constraint
  return std::nullopt;
}

// One user turn: tool_result blocks become tool messages (in order, before the turn's text),
// text blocks the user message.
std::optional<ApiError> UserTurn(const ojson& content, const std::string& path,
                                 const std::set<std::string>& tool_use_ids, ojson* messages) {
  if (content.is_string()) {
    messages->push_back({{"role", "user"}, {"content", content}});
    return std::nullopt;
  }
  std::string text;
  bool has_text = false;
  for (size_t j = 0; j < content.size(); ++j) {
    const ojson& b = content[j];
    const std::string p = Index(path, j);
    const ojson* type = Get(b, "type");
    if (type == nullptr || !type->is_string()) return fields::Missing(Path(p, "type"));
    const std::string t = type->get<std::string>();
    if (t == "text") {
      const ojson* tx = Get(b, "text");
      if (tx == nullptr || !tx->is_string()) return WrongType(Path(p, "text"), "a string");
      text += tx->get<std::string>();
      has_text = true;
    } else if (t == "tool_result") {
      const ojson* id = Get(b, "tool_use_id");
      if (id == nullptr) return fields::Missing(Path(p, "tool_use_id"));
      if (!id->is_string()) return WrongType(Path(p, "tool_use_id"), "a string");
      if (!tool_use_ids.contains(id->get<std::string>())) {
        return BadRequest("'" + Path(p, "tool_use_id") + "' is '" + id->get<std::string>() +
                              "', which no earlier tool_use block has",
                          Path(p, "tool_use_id"));
      }
      std::string result;
      if (const ojson* c = Get(b, "content"); c != nullptr) {
        if (auto err = TextOf(*c, Path(p, "content"), &result)) return err;
      }
      bool is_error = false;
      if (auto err = fields::GetBool(b, "is_error", Path(p, "is_error"), &is_error)) return err;
      if (is_error) result = "Error: " + result;
      messages->push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else if (t == "image" || t == "document" || t == "search_result") {
      return Unsupported(Path(p, "type"), "K3 here reads text only, not '" + t + "' blocks");
    } else {
      return BadRequest("'" + Path(p, "type") + "' is '" + t +
                            "', not a block type a user turn can have (text, tool_result)",
                        Path(p, "type"));
    }
  }
  if (has_text) messages->push_back({{"role", "user"}, {"content", text}});
  return std::nullopt;
}

std::optional<ApiError> AssistantTurn(const ojson& content, const std::string& path,
                                      std::set<std::string>* tool_use_ids, ojson* messages) {
  ojson msg = {{"role", "assistant"}};
  if (content.is_string()) {
    msg["content"] = content;
    messages->push_back(std::move(msg));
    return std::nullopt;
  }
  std::string text, reasoning;
  ojson calls = ojson::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const ojson& b = content[j];
    const std::string p = Index(path, j);
    const ojson* type = Get(b, "type");
    if (type == nullptr || !type->is_string()) return fields::Missing(Path(p, "type"));
    const std::string t = type->get<std::string>();
    if (t == "text") {
      const ojson* tx = Get(b, "text");
      if (tx == nullptr || !tx->is_string()) return WrongType(Path(p, "text"), "a string");
      text += tx->get<std::string>();
    } else if (t == "thinking") {
      const ojson* th = Get(b, "thinking");
      if (th == nullptr || !th->is_string()) return WrongType(Path(p, "thinking"), "a string");
      reasoning += th->get<std::string>();
    } else if (t == "tool_use") {
      const ojson* id = Get(b, "id");
      const ojson* name = Get(b, "name");
      const ojson* input = Get(b, "input");
      if (id == nullptr || !id->is_string()) return WrongType(Path(p, "id"), "a string");
      if (name == nullptr || !name->is_string()) return WrongType(Path(p, "name"), "a string");
      if (input != nullptr && !input->is_object()) return WrongType(Path(p, "input"), "an object");
      tool_use_ids->insert(id->get<std::string>());
      calls.push_back(
          {{"id", *id},
           {"type", "function"},
           {"function", {{"name", *name}, {"arguments", input ? *input : ojson::object()}}}});
    } else if (t == "redacted_thinking") {
      return Unsupported(Path(p, "type"), "redacted thinking is Anthropic-encrypted");
    } else {
      return BadRequest("'" + Path(p, "type") + "' is '" + t +
                            "', not a block type an assistant turn can have (text, thinking, "
                            "tool_use)",
                        Path(p, "type"));
    }
  }
  msg["content"] = text;
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  messages->push_back(std::move(msg));
  return std::nullopt;
}

std::optional<ApiError> ParseTurns(const ojson& obj, GenerationRequest* out) {
  ojson messages = ojson::array();
  if (const ojson* sys = Get(obj, "system"); sys != nullptr) {
    std::string text;
    if (auto err = TextOf(*sys, "system", &text)) return err;
    if (!text.empty()) messages.push_back({{"role", "system"}, {"content", text}});
  }
  const ojson* m = Get(obj, "messages");
  if (m == nullptr) return fields::Missing("messages");
  if (!m->is_array()) return WrongType("messages", "an array");
  if (m->empty()) return BadRequest("'messages' must not be empty", "messages");
  std::set<std::string> tool_use_ids;
  for (size_t i = 0; i < m->size(); ++i) {
    const ojson& msg = (*m)[i];
    const std::string p = Index("messages", i);
    if (!msg.is_object()) return WrongType(p, "an object");
    const ojson* role = Get(msg, "role");
    if (role == nullptr || !role->is_string()) return fields::Missing(Path(p, "role"));
    const ojson* content = Get(msg, "content");
    if (content == nullptr) return fields::Missing(Path(p, "content"));
    if (!content->is_string() && !content->is_array()) {
      return WrongType(Path(p, "content"), "a string or an array of content blocks");
    }
    if (*role == "user") {
      if (auto err = UserTurn(*content, Path(p, "content"), tool_use_ids, &messages)) return err;
    } else if (*role == "assistant") {
      if (i + 1 == m->size()) {
        return Unsupported(p, "a final assistant turn (prefilling the answer) is not supported");
      }
      if (auto err = AssistantTurn(*content, Path(p, "content"), &tool_use_ids, &messages)) {
        return err;
      }
    } else {
      return BadRequest("'" + Path(p, "role") + "' must be user or assistant", Path(p, "role"));
    }
  }
  out->messages = std::move(messages);
  return std::nullopt;
}

}  // namespace

std::string EffortForBudget(int64_t budget) {
  if (budget < 2048) return "low";
  if (budget < 8192) return "medium";
  if (budget < 24576) return "high";
  return "max";
}

std::optional<ApiError> ParseAnthropicRequest(std::string_view body,
                                              const RequestDefaults& defaults, bool count_tokens,
                                              GenerationRequest* out) {
  *out = GenerationRequest{};
  out->endpoint = Endpoint::kChat;
  out->chat.reasoning_effort = defaults.reasoning_effort;
  ojson obj;
  if (auto err = fields::ParseBody(body, &obj)) return err;
  if (auto err = fields::GetString(obj, "model", "model", &out->model)) return err;
  if (auto err = fields::GetBool(obj, "stream", "stream", &out->stream)) return err;
  constexpr int64_t kMaxTokens = int64_t{1} << 31;
  if (auto err = fields::GetInt(obj, "max_tokens", "max_tokens", 1, kMaxTokens, &out->max_tokens)) {
    return err;
  }
  if (!out->max_tokens && !count_tokens) return fields::Missing("max_tokens");
  if (auto err =
          fields::GetNumber(obj, "temperature", "temperature", 0, 1, &out->sampling.temperature)) {
    return err;
  }
  if (auto err = fields::GetNumber(obj, "top_p", "top_p", 0, 1, &out->sampling.top_p)) return err;
  if (out->sampling.top_p <= 0) return BadRequest("'top_p' must be greater than 0", "top_p");
  std::optional<int64_t> top_k;
  if (auto err = fields::GetInt(obj, "top_k", "top_k", 0, INT32_MAX, &top_k)) return err;
  out->sampling.top_k = top_k.value_or(0);
  // `seed`: not in this API; an extension (as in chat completions) for repeatable sampling.
  if (auto err = fields::GetSeed(obj, "seed", "seed", &out->sampling.seed)) return err;
  if (const ojson* s = Get(obj, "stop_sequences"); s != nullptr) {
    if (!s->is_array()) return WrongType("stop_sequences", "an array of strings");
    for (size_t i = 0; i < s->size(); ++i) {
      const ojson& x = (*s)[i];
      if (!x.is_string()) return WrongType(Index("stop_sequences", i), "a string");
      if (!tokenizer::ValidateUtf8(x.get<std::string>()).ok()) {
        return BadRequest("'stop_sequences' must be valid UTF-8", Index("stop_sequences", i));
      }
      if (!x.get<std::string>().empty()) out->stop.push_back(x.get<std::string>());
    }
  }
  if (auto err = ParseThinkingConfig(obj, out)) return err;
  if (auto err = ParseOutputFormat(obj, out)) return err;
  if (auto err = ParseTools(obj, Api::kAnthropic, out)) return err;
  if (auto err = ParseToolChoice(obj, Api::kAnthropic, out)) return err;
  return ParseTurns(obj, out);
}

ojson AnthropicErrorBody(const ApiError& e) {
  const char* type = "api_error";
  switch (e.status) {
    case 400:
    case 408:
    case 431:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
    case 529:
      type = "overloaded_error";
      break;
    default:
      break;
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

std::string AnthropicStopReason(const std::string& finish_reason, const std::string& matched_stop) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls") return "tool_use";
  if (!matched_stop.empty()) return "stop_sequence";
  return "end_turn";
}

ojson AnthropicUsage(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
          {"output_tokens", u.completion_tokens},
          {"cache_read_input_tokens", u.cached_tokens},
          {"cache_creation_input_tokens", 0}};
}

std::string ToolUseId(const std::string& message_id, int index) {
  return "toolu_" + message_id.substr(message_id.find('_') + 1) + "_" + std::to_string(index);
}

ojson ToolInput(const std::string& arguments) {
  ojson v = ojson::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return !v.is_discarded() && v.is_object() ? v : ojson::object();
}

namespace {

ojson ToolUseBlock(const ResponseMeta& meta, const tokenizer::ToolCall& c, bool with_input) {
  return {{"type", "tool_use"},
          {"id", ToolUseId(meta.id, c.index)},
          {"name", c.name},
          {"input", with_input ? ToolInput(c.arguments) : ojson::object()}};
}

ojson StopSequence(const std::string& s) { return s.empty() ? ojson() : ojson(s); }

}  // namespace

ojson AnthropicMessage(const ResponseMeta& meta, const OutputDelta& all,
                       const std::string& stop_reason, const std::string& stop_sequence,
                       const Usage& usage) {
  ojson content = ojson::array();
  if (!all.reasoning.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", all.reasoning}, {"signature", ""}});
  }
  if (!all.content.empty()) content.push_back({{"type", "text"}, {"text", all.content}});
  for (const auto& c : all.tool_calls) content.push_back(ToolUseBlock(meta, c, true));
  return {{"id", meta.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", meta.model},
          {"content", std::move(content)},
          {"stop_reason", stop_reason},
          {"stop_sequence", StopSequence(stop_sequence)},
          {"usage", AnthropicUsage(usage)}};
}

std::string AnthropicEvents::Event(const std::string& type, const ojson& data) {
  return "event: " + type +
         "\ndata: " + data.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

std::string AnthropicEvents::Start(const Usage& usage) {
  return Event("message_start", {{"type", "message_start"},
                                 {"message",
                                  {{"id", meta_.id},
                                   {"type", "message"},
                                   {"role", "assistant"},
                                   {"model", meta_.model},
                                   {"content", ojson::array()},
                                   {"stop_reason", nullptr},
                                   {"stop_sequence", nullptr},
                                   {"usage", AnthropicUsage(usage)}}}});
}

std::string AnthropicEvents::Ping() { return Event("ping", {{"type", "ping"}}); }

std::string AnthropicEvents::CloseBlock() {
  if (open_ == Block::kNone) return "";
  open_ = Block::kNone;
  return Event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string AnthropicEvents::Open(Block kind) {
  if (open_ == kind) return "";
  std::string out = CloseBlock();
  open_ = kind;
  ++index_;
  const ojson block = kind == Block::kThinking
                          ? ojson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                          : ojson{{"type", "text"}, {"text", ""}};
  return out +
         Event("content_block_start",
               {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
}

std::string AnthropicEvents::Delta(const OutputDelta& d) {
  std::string out;
  auto delta = [&](const ojson& body) {
    out += Event("content_block_delta",
                 {{"type", "content_block_delta"}, {"index", index_}, {"delta", body}});
  };
  if (!d.reasoning.empty()) {
    out += Open(Block::kThinking);
    delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
  }
  if (!d.content.empty()) {
    out += Open(Block::kText);
    delta({{"type", "text_delta"}, {"text", d.content}});
  }
  // A tool call arrives whole (K3 closes the call before the server reports it): one block with
  // its arguments as a single input_json_delta.
  for (const auto& c : d.tool_calls) {
    out += CloseBlock();
    ++index_;
    out += Event("content_block_start", {{"type", "content_block_start"},
                                         {"index", index_},
                                         {"content_block", ToolUseBlock(meta_, c, false)}});
    delta({{"type", "input_json_delta"}, {"partial_json", ToolInput(c.arguments).dump()}});
    out += Event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }
  return out;
}

std::string AnthropicEvents::Finish(const std::string& stop_reason,
                                    const std::string& stop_sequence, const Usage& usage) {
  std::string out = CloseBlock();
  out += Event(
      "message_delta",
      {{"type", "message_delta"},
       {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", StopSequence(stop_sequence)}}},
       {"usage", AnthropicUsage(usage)}});
  return out + Event("message_stop", {{"type", "message_stop"}});
}

}  // namespace deltafin::server
