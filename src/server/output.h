// Turns the generated token stream of one request into what the client sees: reasoning, content
// and tool calls for chat (K3's channels via tokenizer::ChatOutputParser), plain text for
// completions, with stop sequences applied to the content/text and held back while they could
// still match. It also decides when generation must end and with which finish_reason.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "server/request.h"
#include "server/stop_matcher.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deltafin::server {

// One position's log probabilities (docs/SERVER.md "Logprobs"): the log-softmax of the model's raw
// logits there (before temperature, penalties and masks), for the token that came and the most
// likely `n` tokens (best first, ties to the lower id). Fixed size, so the decode loop's records
// do not allocate.
struct TokenLogprob {
  static constexpr int kMaxTop = 20;
  float logprob = 0;
  int32_t n = 0;
  std::array<int32_t, kMaxTop> top_ids{};
  std::array<float, kMaxTop> top_logprobs{};
};
// Fills *out for `token` at the position whose logits are given, with the top `k` (<= kMaxTop).
void ComputeLogprob(std::span<const float> logits, int32_t token, int k, TokenLogprob* out);

struct LogprobEntry {
  int32_t token = 0;
  bool text = false;  // the token added content (Responses reports only these)
  TokenLogprob lp;
};

struct OutputDelta {
  std::string reasoning;
  std::string content;                          // chat content, or completion text
  std::vector<tokenizer::ToolCall> tool_calls;  // index = position in the response's tool_calls
  std::vector<LogprobEntry> logprobs;           // the tokens' (when the request asks for them)
  bool empty() const {
    return reasoning.empty() && content.empty() && tool_calls.empty() && logprobs.empty();
  }
};

class OutputAssembler {
 public:
  OutputAssembler(const GenerationRequest& request, const tokenizer::Tokenizer& tokenizer,
                  int32_t eos_id);
  // Feeds one generated token; *delta receives what it adds (cleared first). Returns true when
  // generation must end here: end of message / EOS, or a completed stop sequence.
  bool Feed(int32_t id, OutputDelta* delta);
  // Generation ended for another reason (length, context, cancel): held-back text.
  void Finish(OutputDelta* delta);
  // "tool_calls" (ended with calls), "stop" (EOS or stop sequence) or "length" (also when the
  // budget ran out inside a constrained answer that was then closed by its shortest ending).
  std::string FinishReason() const;
  void SetBudgetClosed() { budget_closed_ = true; }
  // The stop sequence that ended generation ("" when none did).
  const std::string& matched_stop() const { return stop_.matched(); }

  int64_t completion_tokens() const { return completion_tokens_; }
  int64_t reasoning_tokens() const { return reasoning_tokens_; }
  int64_t tool_call_count() const { return tool_calls_; }

 private:
  void Content(const std::string& text, OutputDelta* delta);
  void Calls(std::vector<tokenizer::ToolCall>* calls, OutputDelta* delta);

  const tokenizer::Tokenizer& tok_;
  const bool chat_;
  const int32_t eos_id_;
  tokenizer::ChatOutputParser parser_;
  tokenizer::Utf8StreamDecoder decoder_;
  StopMatcher stop_;
  // tool_choice none drops calls; a forced call (required, named) is reported even if cut off.
  const bool drop_calls_, forced_call_;
  bool ended_ = false, natural_end_ = false, budget_closed_ = false;
  int64_t completion_tokens_ = 0, reasoning_tokens_ = 0, tool_calls_ = 0;
};

}  // namespace deltafin::server
