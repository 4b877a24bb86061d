// The OpenAI Responses API (POST /v1/responses): the request body turned into the shared
// GenerationRequest (input items: messages, function_call and function_call_output, reasoning;
// instructions; function tools), the response object and stream events built from the output,
// and the in-memory store that previous_response_id continues from. Parsing and rendering are
// pure functions (unit tested and fuzzed like request.h); the store is thread-safe.
//
// A stored response is its whole conversation as Responses items (the input items after those
// of its own previous response, then its output items), so a continuation renders exactly the
// conversation the client would have sent. Instructions are not carried over (as OpenAI's).
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "server/api_error.h"
#include "server/output.h"
#include "server/request.h"
#include "server/response_json.h"

namespace deltafin::server {

// Bounded LRU map of response id -> conversation items.
class ResponseStore {
 public:
  explicit ResponseStore(size_t max_entries = 256, size_t max_bytes = size_t{64} << 20)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}
  void Put(const std::string& id, nlohmann::ordered_json items);
  // The items, and marks the entry most recently used; nullopt when unknown or evicted.
  std::optional<nlohmann::ordered_json> Get(const std::string& id);
  size_t size() const;

 private:
  struct Entry {
    std::string id;
    nlohmann::ordered_json items;
    size_t bytes = 0;
  };
  const size_t max_entries_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

// What a response echoes back and what is stored, besides the GenerationRequest.
struct ResponsesContext {
  nlohmann::ordered_json items;  // the whole conversation so far (previous + this input)
  std::string instructions;      // "" = none
  std::string previous_response_id;
  bool store = true;
  bool include_encrypted_reasoning = false;  // include: ["reasoning.encrypted_content"]
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // as the client sent them
  nlohmann::ordered_json tool_choice = "auto";
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  std::optional<int64_t> max_output_tokens;
  std::string effort;  // as sent, "" = absent
  // include: ["message.output_text.logprobs"]: the output text's tokens' logprobs (the request's
  // `logprobs` is then top_logprobs, default 0), spelled with this tokenizer (set by the handler).
  const tokenizer::Tokenizer* logprobs_tok = nullptr;
};

// Parses a /v1/responses body. previous_response_id is looked up in `store` (400 naming the field
// when unknown).
std::optional<ApiError> ParseResponsesRequest(std::string_view body,
                                              const RequestDefaults& defaults, ResponseStore* store,
                                              GenerationRequest* out, ResponsesContext* context);

// Converts Responses items to chat-template messages (exposed for tests). `path` names the
// field in errors ("input"); items before `first_new` come from the store.
std::optional<ApiError> ItemsToMessages(const nlohmann::ordered_json& items, size_t first_new,
                                        nlohmann::ordered_json* messages);

// The response's output items for the generated output (reasoning, message, function_call).
nlohmann::ordered_json ResponseOutputItems(const ResponseMeta& meta,
                                           const ResponsesContext& context, const OutputDelta& all);

// {input_tokens, input_tokens_details.cached_tokens, output_tokens,
//  output_tokens_details.reasoning_tokens, total_tokens}.
nlohmann::ordered_json ResponsesUsage(const Usage& usage);

// The response object. status: in_progress, completed or incomplete (max_output_tokens); output
// and usage are null-free: in_progress has an empty output and null usage.
nlohmann::ordered_json ResponseObject(const ResponseMeta& meta, const ResponsesContext& context,
                                      const GenerationRequest& request, const std::string& status,
                                      const nlohmann::ordered_json& output, const Usage* usage);

// The stream events of one response, each with its sequence_number: response.created and
// response.in_progress; per output item response.output_item.added, then for a message
// response.content_part.added, response.output_text.delta..., response.output_text.done,
// response.content_part.done; for reasoning response.reasoning_text.delta... and
// response.reasoning_text.done; for a call response.function_call_arguments.delta and .done;
// then response.output_item.done; finally response.completed (or response.incomplete).
class ResponsesEvents {
 public:
  ResponsesEvents(ResponseMeta meta, const ResponsesContext* context,
                  const GenerationRequest* request)
      : meta_(std::move(meta)), context_(context), request_(request) {}
  std::string Start();
  std::string Delta(const OutputDelta& delta);
  std::string Finish(const std::string& status, const Usage& usage);
  std::string Error(const ApiError& error);
  // The output items streamed so far (what response.completed carries and the store keeps).
  const nlohmann::ordered_json& output() const { return output_; }

 private:
  enum class Item { kNone, kReasoning, kMessage };
  std::string Event(const std::string& type, nlohmann::ordered_json data);
  std::string Open(Item kind);
  std::string CloseItem();

  ResponseMeta meta_;
  const ResponsesContext* context_;
  const GenerationRequest* request_;
  int64_t sequence_ = 0;
  Item open_ = Item::kNone;
  int output_index_ = -1;
  std::string item_id_, text_;
  nlohmann::ordered_json logprobs_ = nlohmann::ordered_json::array();  // the open message's
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();    // finished items
};

}  // namespace deltafin::server
