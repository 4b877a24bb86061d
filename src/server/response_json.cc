// Response shapes (OpenAI chat.completion / chat.completion.chunk / text_completion).
#include "server/response_json.h"

namespace deltafin::server {

using ojson = nlohmann::ordered_json;

ojson UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
}

ojson ToolCallJson(const tokenizer::ToolCall& call, const std::string& call_id, bool with_index) {
  ojson j = ojson::object();
  if (with_index) j["index"] = call.index;
  j["id"] = call_id;
  j["type"] = "function";
  j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
  return j;
}

namespace {

ojson Dump(const std::string& s) { return ojson(s); }

std::string CallId(const ResponseMeta& meta, int index) {
  return "call_" + meta.id.substr(meta.id.find('-') + 1) + "_" + std::to_string(index);
}

ojson Reason(const std::string& finish_reason) {
  return finish_reason.empty() ? ojson() : ojson(finish_reason);
}

}  // namespace

ojson FullResponse(const ResponseMeta& meta, const OutputDelta& all,
                   const std::string& finish_reason, const Usage& usage) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  ojson choice = ojson::object();
  choice["index"] = 0;
  if (chat) {
    ojson msg = {{"role", "assistant"}};
    msg["content"] = all.content.empty() && !all.tool_calls.empty() ? ojson() : Dump(all.content);
    if (!all.reasoning.empty()) msg["reasoning_content"] = all.reasoning;
    if (!all.tool_calls.empty()) {
      msg["tool_calls"] = ojson::array();
      for (const auto& c : all.tool_calls) {
        msg["tool_calls"].push_back(ToolCallJson(c, CallId(meta, c.index), false));
      }
    }
    choice["message"] = std::move(msg);
  } else {
    choice["text"] = Dump(all.content);
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = Reason(finish_reason);
  return {{"id", meta.id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", ojson::array({std::move(choice)})},
          {"usage", UsageJson(usage)}};
}

ojson Chunk(const ResponseMeta& meta, const OutputDelta& delta, bool first,
            const std::string& finish_reason, bool with_usage_null) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  ojson choice = ojson::object();
  choice["index"] = 0;
  if (chat) {
    ojson d = ojson::object();
    if (first) d["role"] = "assistant";
    if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
    if (!delta.content.empty() || (first && delta.tool_calls.empty())) {
      d["content"] = delta.content;
    }
    if (!delta.tool_calls.empty()) {
      d["tool_calls"] = ojson::array();
      for (const auto& c : delta.tool_calls) {
        d["tool_calls"].push_back(ToolCallJson(c, CallId(meta, c.index), true));
      }
    }
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = Dump(delta.content);
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = Reason(finish_reason);
  ojson j = {{"id", meta.id},
             {"object", chat ? "chat.completion.chunk" : "text_completion"},
             {"created", meta.created},
             {"model", meta.model},
             {"choices", ojson::array({std::move(choice)})}};
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

ojson UsageChunk(const ResponseMeta& meta, const Usage& usage) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  return {{"id", meta.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", ojson::array()},
          {"usage", UsageJson(usage)}};
}

}  // namespace deltafin::server
