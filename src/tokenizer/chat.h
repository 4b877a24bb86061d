// K3's chat template (XTML, docs/MODEL.md §5.4) and its reverse: splitting generated ids into
// reasoning, response content and tool calls.
//
// A rendered chat is a list of segments. Structural markers (<|open|>, <|close|>, <|sep|>,
// <|end_of_msg|>) are special segments and become their ids directly; every other piece (tag
// names, ` key`, `="`, values, message text) is its own ordinary segment, BPE-encoded separately
// so that no merge crosses a segment boundary and user text never yields special ids.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deltafin::tokenizer {

struct ChatOptions {
  bool thinking = true;
  // low | medium | high | max; "" = no thinking-effort message. Ignored when thinking is off.
  std::string reasoning_effort = "max";
  bool add_generation_prompt = true;
};

struct ChatSegment {
  std::string text;
  bool special = false;
};

// Renders an OpenAI-style messages array (roles system, user, assistant, tool) and an optional
// tools array (null or absent = none). Errors name the message index and field.
Result<std::vector<ChatSegment>> RenderChat(const nlohmann::ordered_json& messages,
                                            const nlohmann::ordered_json& tools,
                                            const ChatOptions& options);
// Parses a chat request file: either a messages array or an object with "messages" and optional
// "tools", "thinking" (bool) and "reasoning_effort"; the options found override *options.
Result<std::vector<ChatSegment>> RenderChatRequest(const std::string& json_text,
                                                   ChatOptions* options);
// The rendered string (segments concatenated), for display and tests.
std::string ChatText(const std::vector<ChatSegment>& segments);
Result<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer,
                                        const std::vector<ChatSegment>& segments);

// Python json.dumps(value, ensure_ascii=False, separators=(item_sep, key_sep),
// sort_keys=sort_keys) for the JSON the template serialises.
std::string PyJsonDumps(const nlohmann::ordered_json& value, const char* item_sep,
                        const char* key_sep, bool sort_keys);

struct ToolCall {
  int index = 0;
  std::string name;
  std::string arguments;  // a JSON object as text
};

// What one generated token added. Text is complete UTF-8 (partial characters are held back).
struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;  // calls completed by this token
  bool done = false;                 // <|end_of_msg|> seen
};

// Streaming reverse parser. Starts in the think channel (thinking) or the response channel, as
// the generation prompt leaves the model.
class ChatOutputParser {
 public:
  ChatOutputParser(const Tokenizer& tokenizer, bool thinking);
  Status Feed(int32_t id, ChatDelta* delta);
  void Finish(ChatDelta* delta);  // flushes held-back bytes
  // Generation ended inside a <call> (a token budget cut it off): reports that call with the
  // arguments completed so far (a cut-off argument is dropped). The server uses it when the
  // prompt forced the call's opening, so that a forced call is never lost. False: no open call.
  bool FlushOpenCall(ChatDelta* delta);

 private:
  enum class Channel { kNone, kReasoning, kContent, kArgument, kJson };
  void SetChannel(Channel c, ChatDelta* delta);
  void EmitText(const std::string& text, ChatDelta* delta);
  void OnTag(bool open, const std::string& header, ChatDelta* delta);

  const Tokenizer& tok_;
  int32_t open_id_, close_id_, sep_id_, eom_id_;
  Channel channel_;
  Utf8StreamDecoder decoder_;
  bool in_header_ = false, header_open_ = false;
  std::string header_;
  // The call being parsed.
  ToolCall call_;
  std::vector<std::pair<std::string, std::string>> args_;  // (key, JSON value)
  std::string arg_key_, arg_type_, arg_text_, json_text_;
  bool call_has_json_ = false;
  bool in_call_ = false;
  void EndCall(ChatDelta* delta);
};

struct ChatOutput {
  std::string reasoning, content;
  std::vector<ToolCall> tool_calls;
  bool done = false;
};
Result<ChatOutput> ParseChatOutput(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                                   bool thinking);

}  // namespace deltafin::tokenizer
