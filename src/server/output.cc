// OutputAssembler: token -> deltas, with stop sequences and finish reasons.
#include "server/output.h"

namespace deltafin::server {

OutputAssembler::OutputAssembler(const GenerationRequest& request,
                                 const tokenizer::Tokenizer& tokenizer, int32_t eos_id)
    : tok_(tokenizer),
      chat_(request.endpoint == Endpoint::kChat),
      eos_id_(eos_id),
      parser_(tokenizer, request.chat.thinking),
      stop_(request.stop) {}

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
    if (!ended_) {
      for (auto& call : d.tool_calls) {
        call.index = static_cast<int>(tool_calls_++);
        delta->tool_calls.push_back(std::move(call));
      }
    }
    if (!ended_ && (d.done || id == eos_id_)) {
      tokenizer::ChatDelta rest;
      parser_.Finish(&rest);
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
  } else {
    Content(decoder_.Flush(), delta);
  }
  delta->content += stop_.Flush();
  ended_ = true;
}

std::string OutputAssembler::FinishReason() const {
  if (!natural_end_) return "length";
  if (tool_calls_ > 0 && !stop_.stopped()) return "tool_calls";
  return "stop";
}

}  // namespace deltafin::server
