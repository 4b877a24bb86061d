// The JSON shapes of generation responses: chat.completion, chat.completion.chunk,
// text_completion (whole and streamed), and usage. Pure functions over plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "server/output.h"
#include "server/request.h"
#include "server/timings.h"

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

// Logprobs (docs/SERVER.md "Logprobs"). One token in the chat / Responses shape: token, logprob,
// bytes, top_logprobs [{token, logprob, bytes}].
nlohmann::ordered_json TokenLogprobJson(const tokenizer::Tokenizer& tok, const LogprobEntry& e);
// chat.completion's choices[].logprobs: {content: [...], refusal: null}.
nlohmann::ordered_json ChatLogprobs(const tokenizer::Tokenizer& tok,
                                    std::span<const LogprobEntry> entries);
// text_completion's choices[].logprobs: {tokens, token_logprobs, top_logprobs, text_offset}.
// `leading_null`: the first entry is the prompt's first token, which has no logprob (echo);
// offsets start at *offset and advance it.
nlohmann::ordered_json CompletionLogprobs(const tokenizer::Tokenizer& tok,
                                          std::span<const LogprobEntry> entries, bool leading_null,
                                          int64_t* offset);

// One streamed chunk. finish_reason "" = null. `first` adds role "assistant" to a chat delta.
// with_usage_null: include "usage": null (when the client asked for a final usage chunk).
nlohmann::ordered_json Chunk(const ResponseMeta& meta, const OutputDelta& delta, bool first,
                             const std::string& finish_reason, bool with_usage_null);
// llama-server's `timings` object (prompt_n, prompt_ms, prompt_per_token_ms, prompt_per_second,
// predicted_n, predicted_ms, predicted_per_token_ms, predicted_per_second, cache_n) plus
// io_wait_ms, compute_ms and expert_bytes_read. Rates are 0 when there is nothing to divide.
nlohmann::ordered_json TimingsJson(const Timings& timings);
// `token_timings`: one object per step, for completion tokens first_index, first_index + 1, ...
// {"index", "phase": "prefill"|"decode", "ms", "io_wait_ms", "compute_ms", "other_ms",
//  "positions", "expert_bytes_read", "experts_needed", "experts_in_ram"}.
nlohmann::ordered_json TokenTimingsJson(std::span<const StepTiming> steps, size_t first_index);

// The usage chunk sent before [DONE] with stream_options.include_usage: empty choices.
nlohmann::ordered_json UsageChunk(const ResponseMeta& meta, const Usage& usage);

}  // namespace deltafin::server
