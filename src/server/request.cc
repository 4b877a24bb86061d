// The request model: body parsing for chat/completions, the three APIs' shared tool and
// tool_choice parsers, prompt building (see request.h for the policy).
#include "server/request.h"

#include <algorithm>
#include <cmath>

#include "server/json_fields.h"

namespace deltafin::server {

namespace fields {

// Why the limit: json_fields.h (kMaxJsonDepth).
int NestingDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

ApiError TooDeep(const std::string& what, const std::string& param) {
  return BadRequest(
      what + " nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) + " levels",
      param, "too_deep");
}

std::optional<ApiError> ParseBody(std::string_view body, ojson* out) {
  if (NestingDepth(body) > kMaxJsonDepth) return TooDeep("the request body", "");
  *out = ojson::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    return BadRequest("the request body is not valid JSON", "", "invalid_json");
  }
  if (!out->is_object()) return BadRequest("the request body must be a JSON object");
  return std::nullopt;
}

}  // namespace fields

namespace {

using ojson = nlohmann::ordered_json;
using fields::Get;
using fields::Index;
using fields::Path;
using fields::WrongType;

// The top-level fields of a chat/completions body: their path is their name.
std::optional<ApiError> GetBool(const ojson& obj, const char* key, bool* out) {
  return fields::GetBool(obj, key, key, out);
}
std::optional<ApiError> GetNumber(const ojson& obj, const char* key, double lo, double hi,
                                  double* out) {
  return fields::GetNumber(obj, key, key, lo, hi, out);
}
std::optional<ApiError> GetInt(const ojson& obj, const char* key, int64_t lo, int64_t hi,
                               std::optional<int64_t>* out) {
  return fields::GetInt(obj, key, key, lo, hi, out);
}

// Fields we cannot honour: accepted only at their neutral value.
std::optional<ApiError> CheckUnsupported(const ojson& obj) {
  if (const ojson* n = Get(obj, "n"); n != nullptr) {
    if (!n->is_number_integer()) return WrongType("n", "an integer");
    if (n->get<int64_t>() != 1) return Unsupported("n", "only one choice per request (n = 1)");
  }
  if (const ojson* b = Get(obj, "best_of"); b != nullptr) {
    if (!b->is_number_integer()) return WrongType("best_of", "an integer");
    if (b->get<int64_t>() != 1) return Unsupported("best_of", "only best_of = 1");
  }
  if (const ojson* lb = Get(obj, "logit_bias"); lb != nullptr) {
    if (!lb->is_object()) return WrongType("logit_bias", "an object");
    if (!lb->empty()) return Unsupported("logit_bias", "logit biases are not implemented");
  }
  if (const ojson* s = Get(obj, "suffix"); s != nullptr) {
    if (!s->is_string()) return WrongType("suffix", "a string");
    if (!s->get<std::string>().empty()) return Unsupported("suffix", "insertion is not supported");
  }
  for (const char* key : {"functions", "function_call", "audio", "prediction"}) {
    if (Get(obj, key) != nullptr) return Unsupported(key, "not implemented");
  }
  if (const ojson* m = Get(obj, "modalities"); m != nullptr) {
    if (!m->is_array()) return WrongType("modalities", "an array");
    for (const auto& x : *m) {
      if (x != "text") return Unsupported("modalities", "only text output");
    }
  }
  return std::nullopt;
}

// response_format: text, json_object or json_schema (docs/SERVER.md "JSON output").
std::optional<ApiError> ParseResponseFormat(const ojson& obj, GenerationRequest* out) {
  const ojson* rf = Get(obj, "response_format");
  if (rf == nullptr) return std::nullopt;
  if (!rf->is_object()) return WrongType("response_format", "an object");
  const ojson* type = Get(*rf, "type");
  if (type == nullptr || !type->is_string()) {
    return WrongType("response_format.type", "\"text\", \"json_object\" or \"json_schema\"");
  }
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") {
    out->output_schema = constrain::JsonSchema::AnyObject();
    return std::nullopt;
  }
  if (*type != "json_schema") {
    return BadRequest(
        "'response_format.type' must be \"text\", \"json_object\" or "
        "\"json_schema\"",
        "response_format.type");
  }
  const ojson* js = Get(*rf, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return WrongType("response_format.json_schema", "an object with a 'schema'");
  }
  const ojson* schema = Get(*js, "schema");
  if (schema == nullptr) {
    return BadRequest("'response_format.json_schema.schema' is required",
                      "response_format.json_schema.schema");
  }
  return CompileOutputSchema(*schema, "response_format.json_schema.schema", out);
}

std::optional<ApiError> ParseStop(const ojson& obj, std::vector<std::string>* stop) {
  const ojson* s = Get(obj, "stop");
  if (s == nullptr) return std::nullopt;
  if (s->is_string()) {
    if (!s->get<std::string>().empty()) stop->push_back(s->get<std::string>());
    return std::nullopt;
  }
  if (!s->is_array()) return WrongType("stop", "a string or an array of strings");
  if (s->size() > 4) return BadRequest("'stop' allows at most 4 sequences", "stop");
  for (const auto& x : *s) {
    if (!x.is_string()) return WrongType("stop", "a string or an array of strings");
    if (!x.get<std::string>().empty()) stop->push_back(x.get<std::string>());
  }
  for (const auto& x : *stop) {
    if (!tokenizer::ValidateUtf8(x).ok()) return BadRequest("'stop' must be valid UTF-8", "stop");
  }
  return std::nullopt;
}

// reasoning_effort, "thinking" and chat_template_kwargs.
std::optional<ApiError> ParseThinking(const ojson& obj, tokenizer::ChatOptions* chat) {
  std::string effort;
  if (auto err = fields::GetString(obj, "reasoning_effort", "reasoning_effort", &effort)) {
    return err;
  }
  if (!effort.empty()) {
    if (auto err = ApplyReasoningEffort(effort, "reasoning_effort", chat)) return err;
  }
  if (auto err = GetBool(obj, "thinking", &chat->thinking)) return err;
  if (const ojson* k = Get(obj, "chat_template_kwargs"); k != nullptr) {
    if (!k->is_object()) return WrongType("chat_template_kwargs", "an object");
    for (const char* key : {"thinking", "enable_thinking"}) {
      if (auto err = fields::GetBool(*k, key, Path("chat_template_kwargs", key), &chat->thinking)) {
        return err;
      }
    }
  }
  return std::nullopt;
}

// Chat: logprobs (bool) and top_logprobs (0-20, needs logprobs); completions: logprobs (0-5
// alternatives), which with echo also scores the prompt.
std::optional<ApiError> ParseLogprobs(const ojson& obj, Endpoint endpoint, GenerationRequest* out) {
  std::optional<int64_t> top;
  if (endpoint == Endpoint::kChat) {
    bool on = false;
    if (auto err = GetBool(obj, "logprobs", &on)) return err;
    if (auto err = GetInt(obj, "top_logprobs", 0, 20, &top)) return err;
    if (top && !on) {
      return BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    }
    if (on) out->logprobs = static_cast<int>(top.value_or(0));
    return std::nullopt;
  }
  if (auto err = GetInt(obj, "logprobs", 0, 5, &top)) return err;
  if (top) out->logprobs = static_cast<int>(*top);
  return std::nullopt;
}

// OpenAI's frequency/presence penalties and llama-server's repetition penalty (repeat_penalty,
// or repetition_penalty as vLLM and Hugging Face call it) with its window repeat_last_n.
std::optional<ApiError> ParsePenalties(const ojson& obj, SamplingParams* s) {
  if (auto err = GetNumber(obj, "frequency_penalty", -2, 2, &s->frequency_penalty)) return err;
  if (auto err = GetNumber(obj, "presence_penalty", -2, 2, &s->presence_penalty)) return err;
  if (Get(obj, "repeat_penalty") != nullptr && Get(obj, "repetition_penalty") != nullptr) {
    return BadRequest("give 'repeat_penalty' or 'repetition_penalty', not both", "repeat_penalty");
  }
  for (const char* key : {"repeat_penalty", "repetition_penalty"}) {
    if (auto err = GetNumber(obj, key, 0, 10, &s->repetition_penalty)) return err;
  }
  if (s->repetition_penalty <= 0) {
    return BadRequest("the repetition penalty must be greater than 0", "repetition_penalty");
  }
  std::optional<int64_t> last_n;
  if (auto err = GetInt(obj, "repeat_last_n", 0, 65536, &last_n)) return err;
  if (last_n) s->repeat_last_n = *last_n;
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const ojson& obj, GenerationRequest* out) {
  const ojson* m = Get(obj, "messages");
  if (m == nullptr) return fields::Missing("messages");
  if (!m->is_array()) return WrongType("messages", "an array");
  if (m->empty()) return BadRequest("'messages' must not be empty", "messages");
  out->messages = *m;
  // Tool-call arguments are JSON inside a string, parsed again when the template renders them.
  for (const auto& msg : out->messages) {
    if (!msg.is_object() || !msg.contains("tool_calls") || !msg["tool_calls"].is_array()) continue;
    for (const auto& call : msg["tool_calls"]) {
      const ojson* fn = call.is_object() && call.contains("function") ? &call["function"] : &call;
      if (fn->is_object() && fn->contains("arguments") && (*fn)["arguments"].is_string() &&
          fields::NestingDepth((*fn)["arguments"].get_ref<const std::string&>()) >
              fields::kMaxJsonDepth) {
        return fields::TooDeep("a tool call's arguments", "messages");
      }
    }
  }
  for (auto& msg : out->messages) {
    if (msg.is_object() && msg.contains("role") && msg["role"] == "developer") {
      msg["role"] = "system";
    }
  }
  if (auto err = ParseTools(obj, Api::kOpenAIChat, out)) return err;
  return ParseToolChoice(obj, Api::kOpenAIChat, out);
}

std::optional<ApiError> ParsePrompt(const ojson& obj, GenerationRequest* out) {
  const ojson* p = Get(obj, "prompt");
  if (p == nullptr) return BadRequest("'prompt' is required", "prompt", "missing_required");
  const ojson* one = p;
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) one = &(*p)[0];
  if (one->is_string()) {
    out->prompt_text = one->get<std::string>();
    if (out->prompt_text.empty()) return BadRequest("'prompt' must not be empty", "prompt");
    if (!tokenizer::ValidateUtf8(out->prompt_text).ok()) {
      return BadRequest("'prompt' must be valid UTF-8", "prompt");
    }
    return std::nullopt;
  }
  if (!p->is_array()) return WrongType("prompt", "a string or an array of token ids");
  if (p->empty()) return BadRequest("'prompt' must not be empty", "prompt");
  for (const auto& x : *p) {
    if (x.is_string() || x.is_array()) {
      return Unsupported("prompt", "one prompt per request (no batches)");
    }
    if (!x.is_number_integer()) return WrongType("prompt", "a string or an array of token ids");
    if (x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return BadRequest("'prompt' has a token id outside the vocabulary", "prompt");
    }
    out->prompt_ids.push_back(x.get<int64_t>());
  }
  out->prompt_is_ids = true;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> CompileOutputSchema(const nlohmann::ordered_json& schema,
                                            const std::string& param, GenerationRequest* out) {
  auto compiled = constrain::JsonSchema::Compile(schema);
  if (!compiled.ok()) {
    const std::string& m = compiled.status().message();
    return BadRequest(
        m, param,
        m.find("not supported") != std::string::npos ? "unsupported_parameter" : "invalid_value");
  }
  out->output_schema = *compiled;
  return std::nullopt;
}

std::optional<ApiError> ParseGenerationRequest(std::string_view body, Endpoint endpoint,
                                               const RequestDefaults& defaults,
                                               GenerationRequest* out) {
  *out = GenerationRequest{};
  out->endpoint = endpoint;
  out->chat.thinking = defaults.thinking;
  out->chat.reasoning_effort = defaults.reasoning_effort;
  ojson obj;
  if (auto err = fields::ParseBody(body, &obj)) return err;
  if (auto err = fields::GetString(obj, "model", "model", &out->model)) return err;
  if (auto err = GetBool(obj, "stream", &out->stream)) return err;
  if (auto err = GetBool(obj, "timings_per_token", &out->timings_per_token)) return err;
  if (const ojson* so = Get(obj, "stream_options"); so != nullptr) {
    if (!so->is_object()) return WrongType("stream_options", "an object");
    if (auto err = fields::GetBool(*so, "include_usage", "stream_options.include_usage",
                                   &out->include_usage)) {
      return err;
    }
  }
  constexpr int64_t kMaxTokens = int64_t{1} << 31;
  std::optional<int64_t> a, b;
  if (auto err = GetInt(obj, "max_tokens", 1, kMaxTokens, &a)) return err;
  if (auto err = GetInt(obj, "max_completion_tokens", 1, kMaxTokens, &b)) return err;
  out->max_tokens = a && b ? std::min(*a, *b) : a ? a : b;
  if (!out->max_tokens && endpoint == Endpoint::kCompletion) {
    out->max_tokens = defaults.completion_max_tokens;
  }
  if (auto err = GetNumber(obj, "temperature", 0, 2, &out->sampling.temperature)) return err;
  if (auto err = GetNumber(obj, "top_p", 0, 1, &out->sampling.top_p)) return err;
  if (out->sampling.top_p <= 0) return BadRequest("'top_p' must be greater than 0", "top_p");
  std::optional<int64_t> top_k;
  if (auto err = GetInt(obj, "top_k", -1, INT32_MAX, &top_k)) return err;
  out->sampling.top_k = top_k && *top_k > 0 ? *top_k : 0;
  if (auto err = fields::GetSeed(obj, "seed", "seed", &out->sampling.seed)) return err;
  if (auto err = ParseStop(obj, &out->stop)) return err;
  if (auto err = ParsePenalties(obj, &out->sampling)) return err;
  if (auto err = ParseLogprobs(obj, endpoint, out)) return err;
  if (auto err = CheckUnsupported(obj)) return err;
  if (auto err = ParseResponseFormat(obj, out)) return err;
  if (endpoint == Endpoint::kChat) {
    if (auto err = ParseThinking(obj, &out->chat)) return err;
    // The constraint applies to the whole answer, so a JSON answer has no thinking part.
    if (out->output_schema) out->chat.thinking = false;
    return ParseMessages(obj, out);
  }
  if (auto err = GetBool(obj, "echo", &out->echo)) return err;
  return ParsePrompt(obj, out);
}

std::optional<ApiError> CheckToolChoice(const GenerationRequest& request,
                                        const std::string& param) {
  if (request.tool_choice == ToolChoice::kAuto || request.tool_choice == ToolChoice::kNone) {
    return std::nullopt;
  }
  if (request.tools.is_null() || request.tools.empty()) {
    return BadRequest("'" + param + "' requires a tool call but the request declares no tools",
                      param);
  }
  if (request.tool_choice == ToolChoice::kRequired) return std::nullopt;
  for (const auto& tool : request.tools) {
    const ojson* fn = Get(tool, "function");
    if (fn != nullptr && fn->is_object() && Get(*fn, "name") != nullptr &&
        (*fn)["name"] == request.tool_choice_name) {
      return std::nullopt;
    }
  }
  return BadRequest("'" + param + "' names '" + request.tool_choice_name +
                        "', which is not one of the declared tools",
                    param);
}

std::optional<ApiError> ParseTools(const ojson& body, Api api, GenerationRequest* out) {
  const ojson* tools = Get(body, "tools");
  if (tools == nullptr) return std::nullopt;
  if (!tools->is_array()) return WrongType("tools", "an array");
  ojson declared = ojson::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& t = (*tools)[i];
    const std::string p = Index("tools", i);
    if (!t.is_object()) return WrongType(p, "an object");
    // The tool's type: "function" (chat: may be left out), Anthropic's client tools none or
    // "custom"; anything else (web search, code execution, ...) runs on the provider's side.
    const ojson* type = Get(t, "type");
    const char* own_type = api == Api::kAnthropic ? "custom" : "function";
    if (type == nullptr && api == Api::kResponses) return fields::Missing(Path(p, "type"));
    if (type != nullptr && !(type->is_string() && *type == own_type)) {
      return Unsupported(Path(p, "type"),
                         api == Api::kAnthropic
                             ? "only client tools with an input_schema (server tools such as web "
                               "search run on Anthropic's side)"
                             : "only function tools, not '" +
                                   (type->is_string() ? type->get<std::string>() : type->dump()) +
                                   "'");
    }
    // Chat nests the function's fields under "function"; the others keep them on the tool.
    const ojson* fn = &t;
    std::string fp = p;
    if (api == Api::kOpenAIChat) {
      fn = Get(t, "function");
      fp = Path(p, "function");
      if (fn == nullptr) return fields::Missing(fp);
      if (!fn->is_object()) return WrongType(fp, "an object");
    }
    const ojson* name = Get(*fn, "name");
    if (name == nullptr) return fields::Missing(Path(fp, "name"));
    if (!name->is_string()) return WrongType(Path(fp, "name"), "a string");
    const ojson* description = Get(*fn, "description");
    if (description != nullptr && !description->is_string()) {
      return WrongType(Path(fp, "description"), "a string");
    }
    const char* schema_key = api == Api::kAnthropic ? "input_schema" : "parameters";
    const ojson* schema = Get(*fn, schema_key);
    if (schema == nullptr && api == Api::kAnthropic) {
      return fields::Missing(Path(fp, schema_key));
    }
    if (schema != nullptr && !schema->is_object()) {
      return WrongType(Path(fp, schema_key), "an object");
    }
    if (api == Api::kOpenAIChat) {
      declared.push_back(t);
      continue;
    }
    ojson function = {{"name", *name}};
    if (description != nullptr) function["description"] = *description;
    if (schema != nullptr) function["parameters"] = *schema;
    declared.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  if (!declared.empty()) out->tools = std::move(declared);
  return std::nullopt;
}

std::optional<ApiError> ParseToolChoice(const ojson& body, Api api, GenerationRequest* out) {
  if (api != Api::kAnthropic) {
    if (auto err = GetBool(body, "parallel_tool_calls", &out->parallel_tool_calls)) return err;
  }
  const ojson* tc = Get(body, "tool_choice");
  if (tc == nullptr) return std::nullopt;
  // The mode's name as the API spells it, and for a named call where the name is.
  std::string mode;
  const ojson* name = nullptr;
  std::string name_path;
  if (api == Api::kAnthropic) {
    if (!tc->is_object()) return WrongType("tool_choice", "an object");
    const ojson* type = Get(*tc, "type");
    if (type == nullptr || !type->is_string()) return fields::Missing("tool_choice.type");
    mode = type->get<std::string>();
    name = Get(*tc, "name");
    name_path = "tool_choice.name";
    bool no_parallel = false;
    if (auto err = fields::GetBool(*tc, "disable_parallel_tool_use",
                                   "tool_choice.disable_parallel_tool_use", &no_parallel)) {
      return err;
    }
    out->parallel_tool_calls = !no_parallel;
  } else if (tc->is_string()) {
    mode = tc->get<std::string>();
    if (mode == "tool" || mode == "any" || mode == "function") mode.clear();  // not these spellings
  } else if (tc->is_object()) {
    const ojson* type = Get(*tc, "type");
    if (api == Api::kResponses) {
      if (type == nullptr || *type != "function") {
        return Unsupported("tool_choice.type", "only {\"type\": \"function\", \"name\": ...}");
      }
      name = Get(*tc, "name");
      name_path = "tool_choice.name";
    } else {
      const ojson* fn = Get(*tc, "function");
      name = fn != nullptr && fn->is_object() ? Get(*fn, "name") : nullptr;
      if (type == nullptr || *type != "function" || name == nullptr || !name->is_string()) {
        return BadRequest(
            "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
            "tool_choice.function.name");
      }
    }
    mode = "function";
  } else {
    return WrongType("tool_choice", "a string or an object");
  }
  const bool anthropic = api == Api::kAnthropic;
  if (mode == "auto") {
    out->tool_choice = ToolChoice::kAuto;
  } else if (mode == "none") {
    out->tool_choice = ToolChoice::kNone;
  } else if (mode == (anthropic ? "any" : "required")) {
    out->tool_choice = ToolChoice::kRequired;
  } else if (mode == (anthropic ? "tool" : "function")) {
    if (name == nullptr) return fields::Missing(name_path);
    if (!name->is_string()) return WrongType(name_path, "a string");
    out->tool_choice = ToolChoice::kNamed;
    out->tool_choice_name = name->get<std::string>();
  } else if (anthropic) {
    return BadRequest("'tool_choice.type' must be auto, any, tool or none", "tool_choice.type");
  } else {
    return BadRequest("'tool_choice' must be auto, none, required or a named function",
                      "tool_choice");
  }
  return CheckToolChoice(*out, "tool_choice");
}

std::optional<ApiError> ApplyReasoningEffort(const std::string& effort, const std::string& param,
                                             tokenizer::ChatOptions* chat) {
  if (effort == "none") {
    chat->thinking = false;
  } else if (effort == "minimal" || effort == "low") {
    chat->thinking = true, chat->reasoning_effort = "low";
  } else if (effort == "medium" || effort == "high") {
    chat->thinking = true, chat->reasoning_effort = effort;
  } else if (effort == "xhigh" || effort == "max") {
    chat->thinking = true, chat->reasoning_effort = "max";
  } else {
    return BadRequest("'" + param + "' must be none, minimal, low, medium, high, xhigh or max",
                      param);
  }
  return std::nullopt;
}

std::optional<ApiError> CompileToolSchemas(const GenerationRequest& request,
                                           std::vector<constrain::ToolSchema>* out) {
  out->clear();
  if (!request.tools.is_array()) return std::nullopt;
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const ojson& fn = request.tools[i]["function"];
    constrain::ToolSchema tool;
    tool.name = fn["name"].get<std::string>();
    const std::string where = "tools[" + std::to_string(i) + "] ('" + tool.name + "')";
    const ojson* params = Get(fn, "parameters");
    if (params == nullptr || (params->is_object() && params->empty())) {
      tool.parameters = constrain::JsonSchema::AnyObject();
    } else {
      auto compiled = constrain::JsonSchema::Compile(*params);
      if (!compiled.ok() && request.tool_choice == ToolChoice::kAuto) {
        // A call the model may choose (auto): a schema the automaton cannot bind (anyOf, $ref,
        // pattern, ...) still gets an object, just not a schema-bound one, so agents whose tool
        // lists use such keywords keep working; a forced call needs the guarantee: 400 below.
        tool.parameters = constrain::JsonSchema::AnyObject();
        out->push_back(std::move(tool));
        continue;
      }
      if (!compiled.ok()) {
        std::string m = compiled.status().message();
        const std::string prefix = "response_format: ";
        if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
        return BadRequest(where + " parameters: " + m, "tools",
                          m.find("not supported") != std::string::npos ? "unsupported_parameter"
                                                                       : "invalid_value");
      }
      tool.parameters = *compiled;
      if (tool.parameters->node(tool.parameters->root()).kind ==
          constrain::JsonSchema::Kind::kAny) {
        tool.parameters = constrain::JsonSchema::AnyObject();
      }
      if (tool.parameters->node(tool.parameters->root()).kind !=
          constrain::JsonSchema::Kind::kObject) {
        return BadRequest(where + " parameters: the schema must be of type 'object'", "tools",
                          "invalid_value");
      }
    }
    out->push_back(std::move(tool));
  }
  return std::nullopt;
}

std::vector<tokenizer::ChatSegment> ForcedToolSegments(const GenerationRequest& request) {
  std::vector<tokenizer::ChatSegment> segs;
  if (request.endpoint != Endpoint::kChat ||
      (request.tool_choice != ToolChoice::kRequired && request.tool_choice != ToolChoice::kNamed)) {
    return segs;
  }
  auto special = [&](const char* s) { segs.push_back({s, true}); };
  auto text = [&](std::string s) { segs.push_back({std::move(s), false}); };
  auto close = [&](const char* tag) {
    special("<|close|>");
    text(tag);
    special("<|sep|>");
  };
  // The generation prompt left the model inside <think> (thinking) or <response>.
  if (request.chat.thinking) {
    close("think");
    special("<|open|>");
    text("response");
    special("<|sep|>");
  }
  close("response");
  special("<|open|>");
  text("tools");
  special("<|sep|>");
  const std::string named = ForcedToolName(request);
  if (!named.empty()) {
    // The same pieces as the template's attribute rendering (tokenizer/chat_template.cc), then the
    // opening of the call's JSON arguments (the `json` form, which the tool constraint binds).
    std::string name;
    for (char c : named) name += c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
    special("<|open|>");
    for (std::string piece :
         {std::string("call"), std::string(" tool"), std::string("=\""), name, std::string("\""),
          std::string(" index"), std::string("=\""), std::string("0"), std::string("\"")}) {
      if (!piece.empty()) text(std::move(piece));
    }
    special("<|sep|>");
    special("<|open|>");
    for (const char* piece : {"json", " type", "=\"", "object", "\""}) text(piece);
    special("<|sep|>");
  }
  return segs;
}

std::string ForcedToolName(const GenerationRequest& request) {
  if (request.tool_choice == ToolChoice::kNamed) return request.tool_choice_name;
  if (request.tool_choice == ToolChoice::kRequired && request.tools.is_array() &&
      request.tools.size() == 1) {
    return request.tools[0]["function"]["name"].get<std::string>();
  }
  return "";
}

std::optional<ApiError> BuildPrompt(const GenerationRequest& request,
                                    const tokenizer::Tokenizer& tokenizer,
                                    std::vector<int32_t>* ids) {
  ids->clear();
  if (request.endpoint == Endpoint::kChat) {
    // tool_choice none: the tools are not declared, so K3 has nothing to call.
    const ojson no_tools;
    auto segs = tokenizer::RenderChat(
        request.messages, request.tool_choice == ToolChoice::kNone ? no_tools : request.tools,
        request.chat);
    if (!segs.ok()) return BadRequest(segs.status().message(), "messages");
    for (auto& seg : ForcedToolSegments(request)) segs->push_back(std::move(seg));
    auto encoded = tokenizer::EncodeChat(tokenizer, *segs);
    if (!encoded.ok()) return BadRequest(encoded.status().message(), "messages");
    *ids = std::move(*encoded);
    return std::nullopt;
  }
  if (request.prompt_is_ids) {
    const int64_t vocab = static_cast<int64_t>(tokenizer.vocab().vocab_size());
    for (int64_t id : request.prompt_ids) {
      if (id < 0 || id >= vocab) {
        return BadRequest("'prompt' has token id " + std::to_string(id) +
                              ", outside the vocabulary [0, " + std::to_string(vocab) + ")",
                          "prompt");
      }
      ids->push_back(static_cast<int32_t>(id));
    }
    return std::nullopt;
  }
  auto encoded = tokenizer.Encode(request.prompt_text);
  if (!encoded.ok()) return BadRequest(encoded.status().message(), "prompt");
  *ids = std::move(*encoded);
  if (ids->empty()) return BadRequest("'prompt' encodes to no tokens", "prompt");
  return std::nullopt;
}

size_t PreambleTokens(const GenerationRequest& request, const tokenizer::Tokenizer& tokenizer,
                      const std::vector<int32_t>& prompt) {
  if (request.endpoint != Endpoint::kChat || !request.messages.is_array()) return 0;
  nlohmann::ordered_json head = nlohmann::ordered_json::array();
  for (const auto& m : request.messages) {
    if (!m.is_object() || m.value("role", "") != "system") break;
    head.push_back(m);
  }
  if (head.empty() && request.tools.is_null()) return 0;
  tokenizer::ChatOptions options = request.chat;
  options.add_generation_prompt = false;
  auto segs = tokenizer::RenderChat(head, request.tools, options);
  if (!segs.ok()) return 0;
  auto ids = tokenizer::EncodeChat(tokenizer, *segs);
  if (!ids.ok()) return 0;
  const auto end = std::mismatch(ids->begin(), ids->end(), prompt.begin(), prompt.end());
  return static_cast<size_t>(end.second - prompt.begin());
}

}  // namespace deltafin::server
