// OutputAssembler: token -> deltas, with stop sequences and finish reasons.
#include "server/output.h"

namespace deltafin::server {

OutputAssembler::OutputAssembler(const GenerationRequest& request,
                                 const tokenizer::Tokenizer& tokenizer, int32_t eos_id)
    : tok_(tokenizer),
      chat_(request.endpoint == Endpoint::kChat),
      eos_id_(eos_id),
      parser_(tokenizer, request.chat.thinking),
      stop_(request.stop),
      drop_calls_(request.tool_choice == ToolChoice::kNone),
      forced_call_(request.tool_choice == ToolChoice::kRequired ||
                   request.tool_choice == ToolChoice::kNamed) {
  // The prompt ends with the forced opening of a tool call (request.h): the parser reads it as if
  // generated, so it knows it is inside K3's tool section (and which call, for a named one).
  if (!chat_) return;
  auto forced = tokenizer::EncodeChat(tokenizer, ForcedToolSegments(request));
  if (!forced.ok()) return;  // BuildPrompt encoded the same segments, so this cannot fail
  tokenizer::ChatDelta ignored;
  for (int32_t id : *forced) (void)parser_.Feed(id, &ignored);
}

void OutputAssembler::Calls(std::vector<tokenizer::ToolCall>* calls, OutputDelta* delta) {
  if (ended_ || drop_calls_) return;
  for (auto& call : *calls) {
    call.index = static_cast<int>(tool_calls_++);
    delta->tool_calls.push_back(std::move(call));
  }
}

void OutputAssembler::Content(const std::string& text, OutputDelta* delta) {
  if (text.empty()) return;
  bool stopped = false;
  delta->content += stop_.Feed(text, &stopped);
  if (stopped) ended_ = natural_end_ = true;
}

bool OutputAssembler::Feed(int32_t id, OutputDelta* delta) {
  *delta = OutputDelta{};
  if (ended_) return true;
  ++completion_tokens_;
  if (chat_) {
    tokenizer::ChatDelta d;
    // An id outside the vocabulary cannot come from the engine (logits are vocabulary-sized);
    // if it did, it is skipped rather than ending the response.
    (void)parser_.Feed(id, &d);
    if (!d.reasoning.empty()) reasoning_tokens_ = completion_tokens_;
    delta->reasoning = std::move(d.reasoning);
    Content(d.content, delta);
    Calls(&d.tool_calls, delta);
    if (!ended_ && (d.done || id == eos_id_)) {
      tokenizer::ChatDelta rest;
      parser_.Finish(&rest);
      if (forced_call_ && parser_.FlushOpenCall(&rest)) Calls(&rest.tool_calls, delta);
      delta->reasoning += rest.reasoning;
      Content(rest.content, delta);
      delta->content += stop_.Flush();
      ended_ = natural_end_ = true;
    }
    return ended_;
  }
  if (id == eos_id_) {
    Content(decoder_.Flush(), delta);
    delta->content += stop_.Flush();
    ended_ = natural_end_ = true;
    return true;
  }
  std::string_view bytes;
  if (id >= 0 && tok_.vocab().IdBytes(static_cast<uint32_t>(id), &bytes)) {
    Content(decoder_.Feed(bytes), delta);
  }
  return ended_;
}

void OutputAssembler::Finish(OutputDelta* delta) {
  *delta = OutputDelta{};
  if (ended_) return;
  if (chat_) {
    tokenizer::ChatDelta rest;
    parser_.Finish(&rest);
    delta->reasoning = std::move(rest.reasoning);
    Content(rest.content, delta);
    if (forced_call_ && parser_.FlushOpenCall(&rest)) Calls(&rest.tool_calls, delta);
  } else {
    Content(decoder_.Flush(), delta);
  }
  delta->content += stop_.Flush();
  ended_ = true;
}

std::string OutputAssembler::FinishReason() const {
  if (!natural_end_ || budget_closed_) return "length";
  if (tool_calls_ > 0 && !stop_.stopped()) return "tool_calls";
  return "stop";
}

}  // namespace deltafin::server
