// The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens): the request body
// turned into the shared GenerationRequest (system, user and assistant turns with text,
// thinking, tool_use and tool_result blocks become the chat template's messages), and the
// response and stream-event JSON built back from the generated output. Pure functions and a
// small event state machine (no I/O), unit tested and fuzzed like request.h.
//
// Policy (docs/SERVER.md): unknown fields are ignored; unknown content-block types, a
// tool_result whose tool_use_id no earlier tool_use has, non-text blocks (images, documents) and
// server tools get a 400 naming the field; max_tokens is required (except for count_tokens).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/output.h"
#include "server/request.h"
#include "server/response_json.h"

namespace deltafin::server {

// Parses a /v1/messages body (count_tokens: the /count_tokens body, where max_tokens is not
// needed). *out is a chat GenerationRequest; thinking is off unless the body enables it.
std::optional<ApiError> ParseAnthropicRequest(std::string_view body,
                                              const RequestDefaults& defaults, bool count_tokens,
                                              GenerationRequest* out);

// K3's reasoning effort for a thinking budget: < 2,048 tokens low, < 8,192 medium, < 24,576
// high, else max.
std::string EffortForBudget(int64_t budget_tokens);

// {"type": "error", "error": {"type": ..., "message": ...}}; the type follows the status
// (400 invalid_request_error, 401 authentication_error, 403 permission_error, 404
// not_found_error, 413 request_too_large, 429 rate_limit_error, 503 overloaded_error, other 5xx
// api_error).
nlohmann::ordered_json AnthropicErrorBody(const ApiError& error);

// end_turn, max_tokens, stop_sequence or tool_use.
std::string AnthropicStopReason(const std::string& finish_reason, const std::string& matched_stop);

// {input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens}; input
// tokens exclude the cached ones, as Anthropic counts them.
nlohmann::ordered_json AnthropicUsage(const Usage& usage);

// The id of the response's tool_use block `index`: toolu_<message id hex>_<index>.
std::string ToolUseId(const std::string& message_id, int index);

// A tool call's arguments (JSON text) as the tool_use block's `input` object; text that is not a
// JSON object (a cut-off or malformed call) becomes {}.
nlohmann::ordered_json ToolInput(const std::string& arguments);

// The whole message (stream: false).
nlohmann::ordered_json AnthropicMessage(const ResponseMeta& meta, const OutputDelta& all,
                                        const std::string& stop_reason,
                                        const std::string& stop_sequence, const Usage& usage);

// The streamed events of one message, in the order Anthropic sends them: message_start, then
// per content block content_block_start, content_block_delta (thinking_delta, text_delta,
// input_json_delta) and content_block_stop, then message_delta and message_stop. Blocks are
// opened as output of their kind arrives and closed when another kind starts.
class AnthropicEvents {
 public:
  explicit AnthropicEvents(ResponseMeta meta) : meta_(std::move(meta)) {}
  std::string Start(const Usage& usage);
  std::string Delta(const OutputDelta& delta);
  static std::string Ping();
  std::string Finish(const std::string& stop_reason, const std::string& stop_sequence,
                     const Usage& usage);
  static std::string Event(const std::string& type, const nlohmann::ordered_json& data);

 private:
  enum class Block { kNone, kThinking, kText };
  std::string Open(Block kind);
  std::string CloseBlock();

  ResponseMeta meta_;
  Block open_ = Block::kNone;
  int index_ = -1;  // the last block's index
};

}  // namespace deltafin::server
