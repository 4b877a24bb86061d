// OpenAI Responses API: body -> GenerationRequest, output -> response / events, and the store of
// previous responses (responses_api.h).
#include "server/responses_api.h"

#include <set>

#include "server/json_fields.h"

namespace deltafin::server {

namespace {

using ojson = nlohmann::ordered_json;
using fields::Get;
using fields::Index;
using fields::Path;
using fields::WrongType;

std::string Hex(const std::string& id) { return id.substr(id.find('_') + 1); }

std::string ItemId(const ResponseMeta& meta, const char* kind, int output_index) {
  return std::string(kind) + "_" + Hex(meta.id) + "_" + std::to_string(output_index);
}

std::string CallId(const ResponseMeta& meta, int call_index) {
  return "call_" + Hex(meta.id) + "_" + std::to_string(call_index);
}

// Text of a message item's content: a string or an array of input_text / output_text parts.
std::optional<ApiError> ContentText(const ojson& content, const std::string& path,
                                    std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return WrongType(path, "a string or an array of content parts");
  out->clear();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = Index(path, i);
    const ojson* type = Get(content[i], "type");
    if (type == nullptr || !type->is_string()) return fields::Missing(Path(p, "type"));
    const std::string t = type->get<std::string>();
    if (t == "input_text" || t == "output_text" || t == "text") {
      const ojson* text = Get(content[i], "text");
      if (text == nullptr || !text->is_string()) return WrongType(Path(p, "text"), "a string");
      *out += text->get<std::string>();
    } else if (t == "input_image" || t == "input_file" || t == "input_audio") {
      return Unsupported(Path(p, "type"), "K3 here reads text only, not '" + t + "'");
    } else {
      return BadRequest("'" + Path(p, "type") + "' is '" + t +
                            "', not a content part type (input_text, output_text)",
                        Path(p, "type"));
    }
  }
  return std::nullopt;
}

// The reasoning text of a reasoning item: its reasoning_text content, else its summary, else
// the encrypted_content this server wrote (plain text: nothing here is secret).
std::string ReasoningText(const ojson& item) {
  std::string text;
  for (const char* key : {"content", "summary"}) {
    if (const ojson* parts = Get(item, key); parts != nullptr && parts->is_array()) {
      for (const auto& part : *parts) {
        if (const ojson* t = Get(part, "text"); t != nullptr && t->is_string()) {
          text += t->get<std::string>();
        }
      }
    }
    if (!text.empty()) return text;
  }
  if (const ojson* e = Get(item, "encrypted_content"); e != nullptr && e->is_string()) {
    return e->get<std::string>();
  }
  return text;
}

// The tools and tool_choice as the client sent them, which the response object echoes back.
void KeepToolsAsSent(const ojson& obj, ResponsesContext* ctx) {
  if (const ojson* tools = Get(obj, "tools"); tools != nullptr) ctx->tools = *tools;
  if (const ojson* tc = Get(obj, "tool_choice"); tc != nullptr) ctx->tool_choice = *tc;
}

std::optional<ApiError> ParseReasoning(const ojson& obj, GenerationRequest* out,
                                       ResponsesContext* ctx) {
  const ojson* r = Get(obj, "reasoning");
  if (r == nullptr) return std::nullopt;
  if (!r->is_object()) return WrongType("reasoning", "an object");
  if (auto err = fields::GetString(*r, "effort", "reasoning.effort", &ctx->effort)) return err;
  if (ctx->effort.empty()) return std::nullopt;
  return ApplyReasoningEffort(ctx->effort, "reasoning.effort", &out->chat);
}

std::optional<ApiError> ParseInput(const ojson& obj, ojson* items) {
  const ojson* in = Get(obj, "input");
  if (in == nullptr) return fields::Missing("input");
  if (in->is_string()) {
    items->push_back({{"type", "message"}, {"role", "user"}, {"content", *in}});
    return std::nullopt;
  }
  if (!in->is_array()) return WrongType("input", "a string or an array of items");
  if (in->empty()) return BadRequest("'input' must not be empty", "input");
  for (const auto& item : *in) items->push_back(item);
  return std::nullopt;
}

}  // namespace

void ResponseStore::Put(const std::string& id, ojson items) {
  const size_t bytes = items.dump(-1, ' ', false, ojson::error_handler_t::replace).size();
  std::lock_guard lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (bytes > max_bytes_) return;  // larger than the whole store: not kept
  lru_.push_front(Entry{id, std::move(items), bytes});
  index_[id] = lru_.begin();
  bytes_ += bytes;
  while (lru_.size() > max_entries_ || bytes_ > max_bytes_) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().id);
    lru_.pop_back();
  }
}

std::optional<ojson> ResponseStore::Get(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->items;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

std::optional<ApiError> ItemsToMessages(const ojson& items, size_t first_new, ojson* messages) {
  *messages = ojson::array();
  std::set<std::string> call_ids;
  // Reasoning, assistant text and function calls that follow each other are one assistant turn.
  ojson assistant;
  auto flush = [&] {
    if (!assistant.is_null()) messages->push_back(std::move(assistant));
    assistant = ojson();
  };
  auto has_calls = [&] { return !assistant.is_null() && assistant.contains("tool_calls"); };
  auto turn = [&]() -> ojson& {
    if (assistant.is_null()) assistant = {{"role", "assistant"}, {"content", ""}};
    return assistant;
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const ojson& item = items[i];
    const std::string p = Index("input", i >= first_new ? i - first_new : i);
    if (!item.is_object()) return WrongType(p, "an object");
    std::string type = "message";
    if (auto err = fields::GetString(item, "type", Path(p, "type"), &type)) return err;
    if (type == "message") {
      std::string role;
      if (auto err = fields::GetString(item, "role", Path(p, "role"), &role)) return err;
      const ojson* content = Get(item, "content");
      if (content == nullptr) return fields::Missing(Path(p, "content"));
      std::string text;
      if (auto err = ContentText(*content, Path(p, "content"), &text)) return err;
      if (role == "assistant") {
        if (has_calls()) flush();  // text after calls starts a new turn
        turn()["content"] = turn()["content"].get<std::string>() + text;
        continue;
      }
      if (role != "user" && role != "system" && role != "developer") {
        return BadRequest("'" + Path(p, "role") + "' must be user, assistant, system or developer",
                          Path(p, "role"));
      }
      flush();
      messages->push_back({{"role", role == "developer" ? "system" : role}, {"content", text}});
    } else if (type == "reasoning") {
      if (has_calls()) flush();
      const std::string text = ReasoningText(item);
      ojson& t = turn();
      t["reasoning_content"] =
          (t.contains("reasoning_content") ? t["reasoning_content"].get<std::string>() : "") + text;
    } else if (type == "function_call") {
      std::string call_id, name, arguments = "{}";
      if (auto err = fields::GetString(item, "call_id", Path(p, "call_id"), &call_id)) return err;
      if (auto err = fields::GetString(item, "name", Path(p, "name"), &name)) return err;
      if (auto err = fields::GetString(item, "arguments", Path(p, "arguments"), &arguments)) {
        return err;
      }
      if (call_id.empty()) return fields::Missing(Path(p, "call_id"));
      if (name.empty()) return fields::Missing(Path(p, "name"));
      if (fields::NestingDepth(arguments) > fields::kMaxJsonDepth) {
        return BadRequest("'" + Path(p, "arguments") + "' nests too deep", Path(p, "arguments"),
                          "too_deep");
      }
      call_ids.insert(call_id);
      ojson& t = turn();
      if (!t.contains("tool_calls")) t["tool_calls"] = ojson::array();
      t["tool_calls"].push_back({{"id", call_id},
                                 {"type", "function"},
                                 {"function", {{"name", name}, {"arguments", arguments}}}});
    } else if (type == "function_call_output") {
      flush();
      std::string call_id;
      if (auto err = fields::GetString(item, "call_id", Path(p, "call_id"), &call_id)) return err;
      if (!call_ids.contains(call_id)) {
        return BadRequest(
            "'" + Path(p, "call_id") + "' is '" + call_id + "', which no earlier function_call has",
            Path(p, "call_id"));
      }
      const ojson* output = Get(item, "output");
      if (output == nullptr) return fields::Missing(Path(p, "output"));
      std::string text;
      if (auto err = ContentText(*output, Path(p, "output"), &text)) return err;
      messages->push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", text}});
    } else if (type == "item_reference") {
      return Unsupported(Path(p, "type"),
                         "item references (send the items, or use "
                         "previous_response_id)");
    } else {
      return BadRequest("'" + Path(p, "type") + "' is '" + type +
                            "', not an item type this server takes (message, function_call, "
                            "function_call_output, reasoning)",
                        Path(p, "type"));
    }
  }
  flush();
  if (messages->empty()) return BadRequest("'input' has no messages", "input");
  return std::nullopt;
}

std::optional<ApiError> ParseResponsesRequest(std::string_view body,
                                              const RequestDefaults& defaults, ResponseStore* store,
                                              GenerationRequest* out, ResponsesContext* ctx) {
  *out = GenerationRequest{};
  *ctx = ResponsesContext{};
  out->endpoint = Endpoint::kChat;
  out->chat.thinking = defaults.thinking;
  out->chat.reasoning_effort = defaults.reasoning_effort;
  ojson obj;
  if (auto err = fields::ParseBody(body, &obj)) return err;
  if (auto err = fields::GetString(obj, "model", "model", &out->model)) return err;
  if (auto err = fields::GetBool(obj, "stream", "stream", &out->stream)) return err;
  if (auto err = fields::GetBool(obj, "store", "store", &ctx->store)) return err;
  bool background = false;
  if (auto err = fields::GetBool(obj, "background", "background", &background)) return err;
  if (background) return Unsupported("background", "responses run in the foreground");
  constexpr int64_t kMaxTokens = int64_t{1} << 31;
  if (auto err = fields::GetInt(obj, "max_output_tokens", "max_output_tokens", 1, kMaxTokens,
                                &out->max_tokens)) {
    return err;
  }
  ctx->max_output_tokens = out->max_tokens;
  if (auto err =
          fields::GetNumber(obj, "temperature", "temperature", 0, 2, &out->sampling.temperature)) {
    return err;
  }
  if (auto err = fields::GetNumber(obj, "top_p", "top_p", 0, 1, &out->sampling.top_p)) return err;
  if (out->sampling.top_p <= 0) return BadRequest("'top_p' must be greater than 0", "top_p");
  // `seed`: not in this API; an extension (as in chat completions) for repeatable sampling.
  if (auto err = fields::GetSeed(obj, "seed", "seed", &out->sampling.seed)) return err;
  if (const ojson* text = Get(obj, "text"); text != nullptr) {
    if (!text->is_object()) return WrongType("text", "an object");
    // text.format: the Responses spelling of response_format ({type, name, schema, strict} flat,
    // not nested under json_schema); the same constrained decoder (docs/SERVER.md "JSON output").
    if (const ojson* f = Get(*text, "format"); f != nullptr) {
      const ojson* type = f->is_object() ? Get(*f, "type") : nullptr;
      if (type == nullptr || !type->is_string()) {
        return WrongType("text.format",
                         "an object with type \"text\", \"json_object\" or \"json_schema\"");
      }
      if (*type == "json_object") {
        out->output_schema = constrain::JsonSchema::AnyObject();
      } else if (*type == "json_schema") {
        const ojson* schema = Get(*f, "schema");
        if (schema == nullptr) {
          return BadRequest("'text.format.schema' is required", "text.format.schema",
                            "missing_required");
        }
        if (auto err = CompileOutputSchema(*schema, "text.format.schema", out)) return err;
      } else if (*type != "text") {
        return Unsupported("text.format", "type \"text\", \"json_object\" or \"json_schema\"");
      }
    }
  }
  bool logprobs = false;
  if (const ojson* inc = Get(obj, "include"); inc != nullptr) {
    if (!inc->is_array()) return WrongType("include", "an array of strings");
    for (const auto& x : *inc) {
      ctx->include_encrypted_reasoning |= x == "reasoning.encrypted_content";
      logprobs |= x == "message.output_text.logprobs";
    }
  }
  std::optional<int64_t> top;
  if (auto err = fields::GetInt(obj, "top_logprobs", "top_logprobs", 0, 20, &top)) return err;
  if (logprobs) out->logprobs = static_cast<int>(top.value_or(0));
  if (const ojson* md = Get(obj, "metadata"); md != nullptr) {
    if (!md->is_object()) return WrongType("metadata", "an object");
    ctx->metadata = *md;
  }
  if (auto err = fields::GetString(obj, "instructions", "instructions", &ctx->instructions)) {
    return err;
  }
  if (auto err = ParseReasoning(obj, out, ctx)) return err;
  if (auto err = ParseTools(obj, Api::kResponses, out)) return err;
  if (auto err = ParseToolChoice(obj, Api::kResponses, out)) return err;
  KeepToolsAsSent(obj, ctx);
  if (auto err = fields::GetString(obj, "previous_response_id", "previous_response_id",
                                   &ctx->previous_response_id)) {
    return err;
  }
  ctx->items = ojson::array();
  if (!ctx->previous_response_id.empty()) {
    auto prev = store->Get(ctx->previous_response_id);
    if (!prev) {
      return BadRequest("'previous_response_id': no stored response '" + ctx->previous_response_id +
                            "' (it was sent with store: false, evicted, or from before a restart)",
                        "previous_response_id", "previous_response_not_found");
    }
    ctx->items = std::move(*prev);
  }
  const size_t first_new = ctx->items.size();
  if (auto err = ParseInput(obj, &ctx->items)) return err;
  ojson messages;
  if (auto err = ItemsToMessages(ctx->items, first_new, &messages)) return err;
  if (!ctx->instructions.empty()) {
    messages.insert(messages.begin(), ojson{{"role", "system"}, {"content", ctx->instructions}});
  }
  out->messages = std::move(messages);
  // Thinking is off under a JSON constraint, as for chat completions (docs/SERVER.md).
  if (out->output_schema) out->chat.thinking = false;
  return std::nullopt;
}

namespace {

ojson ReasoningItem(const std::string& id, const std::string& text, bool encrypted) {
  ojson item = {{"type", "reasoning"},
                {"id", id},
                {"summary", ojson::array()},
                {"content", ojson::array({{{"type", "reasoning_text"}, {"text", text}}})}};
  if (encrypted) item["encrypted_content"] = text;
  return item;
}

// The output text's tokens' logprobs (Responses' Logprob shape), or [] when not asked for.
ojson TextLogprobs(const ResponsesContext& ctx, std::span<const LogprobEntry> entries) {
  ojson out = ojson::array();
  if (ctx.logprobs_tok == nullptr) return out;
  for (const auto& e : entries) {
    if (e.text) out.push_back(TokenLogprobJson(*ctx.logprobs_tok, e));
  }
  return out;
}

ojson MessageItem(const std::string& id, const std::string& text,
                  const ojson& logprobs = ojson::array()) {
  return {{"type", "message"},
          {"id", id},
          {"status", "completed"},
          {"role", "assistant"},
          {"content", ojson::array({{{"type", "output_text"},
                                     {"text", text},
                                     {"annotations", ojson::array()},
                                     {"logprobs", logprobs}}})}};
}

ojson CallItem(const ResponseMeta& meta, int output_index, const tokenizer::ToolCall& c) {
  return {{"type", "function_call"},          {"id", ItemId(meta, "fc", output_index)},
          {"call_id", CallId(meta, c.index)}, {"name", c.name},
          {"arguments", c.arguments},         {"status", "completed"}};
}

}  // namespace

ojson ResponseOutputItems(const ResponseMeta& meta, const ResponsesContext& ctx,
                          const OutputDelta& all) {
  ojson out = ojson::array();
  auto next = [&] { return static_cast<int>(out.size()); };
  if (!all.reasoning.empty()) {
    out.push_back(
        ReasoningItem(ItemId(meta, "rs", next()), all.reasoning, ctx.include_encrypted_reasoning));
  }
  if (!all.content.empty()) {
    out.push_back(
        MessageItem(ItemId(meta, "msg", next()), all.content, TextLogprobs(ctx, all.logprobs)));
  }
  for (const auto& c : all.tool_calls) out.push_back(CallItem(meta, next(), c));
  return out;
}

ojson ResponsesUsage(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

ojson ResponseObject(const ResponseMeta& meta, const ResponsesContext& ctx,
                     const GenerationRequest& request, const std::string& status,
                     const ojson& output, const Usage* usage) {
  auto opt = [](const std::string& s) { return s.empty() ? ojson() : ojson(s); };
  ojson r = {{"id", meta.id},
             {"object", "response"},
             {"created_at", meta.created},
             {"status", status},
             {"error", nullptr},
             {"incomplete_details",
              status == "incomplete" ? ojson{{"reason", "max_output_tokens"}} : ojson()},
             {"instructions", opt(ctx.instructions)},
             {"max_output_tokens", ctx.max_output_tokens ? ojson(*ctx.max_output_tokens) : ojson()},
             {"model", meta.model},
             {"output", output},
             {"parallel_tool_calls", request.parallel_tool_calls},
             {"previous_response_id", opt(ctx.previous_response_id)},
             {"reasoning", {{"effort", opt(ctx.effort)}, {"summary", nullptr}}},
             {"store", ctx.store},
             {"temperature", request.sampling.temperature},
             {"text", {{"format", {{"type", "text"}}}}},
             {"tool_choice", ctx.tool_choice},
             {"tools", ctx.tools},
             {"top_p", request.sampling.top_p},
             {"truncation", "disabled"},
             {"usage", usage != nullptr ? ResponsesUsage(*usage) : ojson()},
             {"metadata", ctx.metadata}};
  return r;
}

std::string ResponsesEvents::Event(const std::string& type, ojson data) {
  ojson j = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [k, v] : data.items()) j[k] = v;
  return "event: " + type + "\ndata: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) +
         "\n\n";
}

std::string ResponsesEvents::Start() {
  const ojson r =
      ResponseObject(meta_, *context_, *request_, "in_progress", ojson::array(), nullptr);
  std::string out = Event("response.created", {{"response", r}});  // numbered first
  return out + Event("response.in_progress", {{"response", r}});
}

std::string ResponsesEvents::CloseItem() {
  if (open_ == Item::kNone) return "";
  std::string out;
  ojson item;
  if (open_ == Item::kReasoning) {
    out += Event("response.reasoning_text.done", {{"item_id", item_id_},
                                                  {"output_index", output_index_},
                                                  {"content_index", 0},
                                                  {"text", text_}});
    item = ReasoningItem(item_id_, text_, context_->include_encrypted_reasoning);
  } else {
    const ojson part = {{"type", "output_text"},
                        {"text", text_},
                        {"annotations", ojson::array()},
                        {"logprobs", logprobs_}};
    out += Event("response.output_text.done", {{"item_id", item_id_},
                                               {"output_index", output_index_},
                                               {"content_index", 0},
                                               {"text", text_},
                                               {"logprobs", logprobs_}});
    out += Event("response.content_part.done", {{"item_id", item_id_},
                                                {"output_index", output_index_},
                                                {"content_index", 0},
                                                {"part", part}});
    item = MessageItem(item_id_, text_, logprobs_);
  }
  out += Event("response.output_item.done", {{"output_index", output_index_}, {"item", item}});
  output_.push_back(std::move(item));
  open_ = Item::kNone;
  text_.clear();
  logprobs_ = ojson::array();
  return out;
}

std::string ResponsesEvents::Open(Item kind) {
  if (open_ == kind) return "";
  std::string out = CloseItem();
  open_ = kind;
  output_index_ = static_cast<int>(output_.size());
  if (kind == Item::kReasoning) {
    item_id_ = ItemId(meta_, "rs", output_index_);
    ojson item = {{"type", "reasoning"}, {"id", item_id_}, {"summary", ojson::array()}};
    return out + Event("response.output_item.added",
                       {{"output_index", output_index_}, {"item", std::move(item)}});
  }
  item_id_ = ItemId(meta_, "msg", output_index_);
  ojson item = {{"type", "message"},
                {"id", item_id_},
                {"status", "in_progress"},
                {"role", "assistant"},
                {"content", ojson::array()}};
  out += Event("response.output_item.added", {{"output_index", output_index_}, {"item", item}});
  return out + Event("response.content_part.added", {{"item_id", item_id_},
                                                     {"output_index", output_index_},
                                                     {"content_index", 0},
                                                     {"part",
                                                      {{"type", "output_text"},
                                                       {"text", ""},
                                                       {"annotations", ojson::array()},
                                                       {"logprobs", ojson::array()}}}});
}

std::string ResponsesEvents::Delta(const OutputDelta& d) {
  std::string out;
  if (!d.reasoning.empty()) {
    out += Open(Item::kReasoning);
    text_ += d.reasoning;
    out += Event("response.reasoning_text.delta", {{"item_id", item_id_},
                                                   {"output_index", output_index_},
                                                   {"content_index", 0},
                                                   {"delta", d.reasoning}});
  }
  if (!d.content.empty()) {
    out += Open(Item::kMessage);
    text_ += d.content;
    ojson lp = TextLogprobs(*context_, d.logprobs);
    for (const auto& e : lp) logprobs_.push_back(e);
    out += Event("response.output_text.delta", {{"item_id", item_id_},
                                                {"output_index", output_index_},
                                                {"content_index", 0},
                                                {"delta", d.content},
                                                {"logprobs", std::move(lp)}});
  }
  for (const auto& c : d.tool_calls) {
    out += CloseItem();
    const int index = static_cast<int>(output_.size());
    ojson item = CallItem(meta_, index, c);
    ojson added = item;
    added["arguments"] = "";
    added["status"] = "in_progress";
    const std::string id = item["id"];
    out += Event("response.output_item.added", {{"output_index", index}, {"item", added}});
    out += Event("response.function_call_arguments.delta",
                 {{"item_id", id}, {"output_index", index}, {"delta", c.arguments}});
    out += Event(
        "response.function_call_arguments.done",
        {{"item_id", id}, {"output_index", index}, {"name", c.name}, {"arguments", c.arguments}});
    out += Event("response.output_item.done", {{"output_index", index}, {"item", item}});
    output_.push_back(std::move(item));
  }
  return out;
}

std::string ResponsesEvents::Finish(const std::string& status, const Usage& usage) {
  std::string out = CloseItem();
  const ojson r = ResponseObject(meta_, *context_, *request_, status, output_, &usage);
  return out + Event(status == "completed" ? "response.completed" : "response.incomplete",
                     {{"response", r}});
}

std::string ResponsesEvents::Error(const ApiError& e) {
  return Event("error", {{"code", e.code.empty() ? ojson() : ojson(e.code)},
                         {"message", e.message},
                         {"param", e.param.empty() ? ojson() : ojson(e.param)}});
}

}  // namespace deltafin::server
