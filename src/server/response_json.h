// The JSON shapes of generation responses: chat.completion, chat.completion.chunk,
// text_completion (whole and streamed), and usage. Pure functions over plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "server/output.h"
#include "server/request.h"

namespace deltafin::server {

struct ResponseMeta {
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
  Endpoint endpoint = Endpoint::kChat;
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0, reasoning_tokens = 0;
};

nlohmann::ordered_json UsageJson(const Usage& usage);

// One tool call in OpenAI form; `id_prefix` + index makes the call id.
nlohmann::ordered_json ToolCallJson(const tokenizer::ToolCall& call, const std::string& call_id,
                                    bool with_index);

// The whole response (stream: false). `all` is everything the assembler produced.
nlohmann::ordered_json FullResponse(const ResponseMeta& meta, const OutputDelta& all,
                                    const std::string& finish_reason, const Usage& usage);

// One streamed chunk. finish_reason "" = null. `first` adds role "assistant" to a chat delta.
// with_usage_null: include "usage": null (when the client asked for a final usage chunk).
nlohmann::ordered_json Chunk(const ResponseMeta& meta, const OutputDelta& delta, bool first,
                             const std::string& finish_reason, bool with_usage_null);
// The usage chunk sent before [DONE] with stream_options.include_usage: empty choices.
nlohmann::ordered_json UsageChunk(const ResponseMeta& meta, const Usage& usage);

}  // namespace deltafin::server
