// The shared request model of the generation endpoints (docs/SERVER.md "One pipeline"): the
// GenerationRequest every API's parser produces (chat/completions here, anthropic_api.h,
// responses_api.h), the parsers of what the APIs spell differently but mean alike (tool
// declarations, tool_choice, reasoning effort), the /v1/chat/completions and /v1/completions body
// parser, and turning a request into prompt token ids. Pure functions (no I/O, no engine), so
// they are unit tested directly and fuzzed (tests/server/fuzz_request.cc).
//
// Policy (docs/SERVER.md): unknown fields are ignored; known fields with the wrong type or an
// out-of-range value get a 400 naming the field; fields whose meaning we cannot honour (n > 1,
// logit_bias, best_of, ...) get a 400 with code "unsupported_parameter".
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "constrain/json_constraint.h"
#include "constrain/tool_constraint.h"
#include "deltafin/sampler.h"
#include "server/api_error.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::server {

// Temperature, top-p, top-k and seed: the engine API's (deltafin/sampler.h), shared with `run`.
using SamplingParams = deltafin::SamplingParams;

enum class Endpoint { kChat, kCompletion };

// Whether K3 may, must or must not call a tool (chat tool_choice, Anthropic tool_choice, Responses
// tool_choice all map here). kRequired and kNamed are forced through the prompt: see
// ForcedToolSegments.
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

// Server-wide defaults a request can override.
struct RequestDefaults {
  int64_t completion_max_tokens = 256;  // /v1/completions without max_tokens
  bool thinking = true;
  std::string reasoning_effort = "max";
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  bool stream = false;
  bool include_usage = false;
  // llama-server's extension: every streamed chunk carries the cumulative `timings` and this
  // chunk's tokens' `token_timings` (docs/SERVER.md), not only the final chunk.
  bool timings_per_token = false;
  std::optional<int64_t> max_tokens;  // max_completion_tokens or max_tokens (smaller if both)
  std::vector<std::string> stop;
  SamplingParams sampling;
  // Chat.
  nlohmann::ordered_json messages;  // roles already normalised (developer -> system)
  nlohmann::ordered_json tools;     // null when there are none
  tokenizer::ChatOptions chat;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kNamed: the function that must be called
  // parallel_tool_calls (chat, responses) / !disable_parallel_tool_use (Anthropic): more than one
  // call per answer.
  bool parallel_tool_calls = true;
  // Completions: the prompt as text, or as token ids.
  std::string prompt_text;
  std::vector<int64_t> prompt_ids;
  bool prompt_is_ids = false;
  bool echo = false;
  // Logprobs (docs/SERVER.md): -1 = none; else every generated token's, with this many
  // alternatives (chat top_logprobs 0-20, completions logprobs 0-5, Responses top_logprobs with
  // include message.output_text.logprobs). Completions with echo also get the prompt's.
  int logprobs = -1;
  // Constrained JSON output (response_format json_object / json_schema; any endpoint may set it
  // with CompileOutputSchema): null = free text. Chats turn thinking off with it.
  std::shared_ptr<const constrain::JsonSchema> output_schema;
};

// Compiles a JSON schema for constrained output into out->output_schema; a 400 naming `param`
// (and the unsupported keyword) when it is outside the supported subset.
std::optional<ApiError> CompileOutputSchema(const nlohmann::ordered_json& schema,
                                            const std::string& param, GenerationRequest* out);

// The three APIs whose bodies become a GenerationRequest. Where they spell the same thing
// differently (a tool declaration, tool_choice), one parser reads every spelling.
enum class Api { kOpenAIChat, kAnthropic, kResponses };

// `tools` of a body, validated, into out->tools in the chat template's (OpenAI chat) shape:
//   kOpenAIChat  {"type": "function", "function": {"name", "description"?, "parameters"?}}
//                (kept exactly as sent, so the template renders what the client declared)
//   kAnthropic   {"type"?: "custom", "name", "description"?, "input_schema"}
//   kResponses   {"type": "function", "name", "description"?, "parameters"?}
// Errors name the field by its path ("tools[1].function.name"); other tool types (Anthropic's
// server tools, Responses' web search, ...) are unsupported. An empty list declares none.
std::optional<ApiError> ParseTools(const nlohmann::ordered_json& body, Api api,
                                   GenerationRequest* out);
// tool_choice (and whether several calls may come) into out->tool_choice, checked against the
// declared tools (call after ParseTools):
//   kOpenAIChat  "auto" | "none" | "required" | {"type": "function", "function": {"name"}};
//                parallel_tool_calls beside it
//   kResponses   "auto" | "none" | "required" | {"type": "function", "name"};
//                parallel_tool_calls beside it
//   kAnthropic   {"type": "auto" | "any" | "none" | "tool", "name"?, "disable_parallel_tool_use"?}
std::optional<ApiError> ParseToolChoice(const nlohmann::ordered_json& body, Api api,
                                        GenerationRequest* out);
// A reasoning effort as OpenAI names them (none, minimal, low, medium, high, xhigh; and K3's max)
// onto K3's thinking switch and effort; `param` names the field in the 400.
std::optional<ApiError> ApplyReasoningEffort(const std::string& effort, const std::string& param,
                                             tokenizer::ChatOptions* chat);

// Parses `body` for `endpoint`. On error returns the 400 to send and leaves *out unspecified.
std::optional<ApiError> ParseGenerationRequest(std::string_view body, Endpoint endpoint,
                                               const RequestDefaults& defaults,
                                               GenerationRequest* out);

// Checks a tool choice against `tools` (OpenAI shape, null = none): kRequired and kNamed need
// tools, and kNamed a tool of that name. `param` names the field in the error.
std::optional<ApiError> CheckToolChoice(const GenerationRequest& request, const std::string& param);

// Each declared tool's parameters schema compiled for constrained tool calls (an absent or empty
// schema is any object); a 400 naming the tool and the unsupported keyword otherwise.
std::optional<ApiError> CompileToolSchemas(const GenerationRequest& request,
                                           std::vector<constrain::ToolSchema>* out);

// What the prompt appends after the generation prompt to force a tool call: the assistant's
// reasoning and response channels are closed empty and K3's tool section is opened
// (<|open|>tools<|sep|>); when the call's function is known (ForcedToolName) its header
// <|open|>call tool="NAME" index="0"<|sep|> and the opening of its JSON arguments
// <|open|>json type="object"<|sep|> follow, so the model generates only the arguments. Empty for
// kAuto and kNone. The output assembler feeds the same segments to its parser first, as if the
// model had written them.
std::vector<tokenizer::ChatSegment> ForcedToolSegments(const GenerationRequest& request);
// The function a forced call must be: the named one, or the only declared tool under "required"
// ("" when the model chooses among several, or nothing is forced).
std::string ForcedToolName(const GenerationRequest& request);

// The prompt's token ids: the rendered chat template, or the completion prompt encoded as plain
// text (special spellings stay ordinary text) or checked against the vocabulary.
std::optional<ApiError> BuildPrompt(const GenerationRequest& request,
                                    const tokenizer::Tokenizer& tokenizer,
                                    std::vector<int32_t>* ids);

// The prefix cache's preamble point: how many leading tokens of a chat `prompt` are the system
// (and developer) messages and tools before the first user turn, i.e. the longest common prefix
// of `prompt` and the rendering of those messages alone. 0 for completions and for chats that
// have no such preamble.
size_t PreambleTokens(const GenerationRequest& request, const tokenizer::Tokenizer& tokenizer,
                      const std::vector<int32_t>& prompt);

}  // namespace deltafin::server
