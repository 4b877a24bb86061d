// Response shapes (OpenAI chat.completion / chat.completion.chunk / text_completion).
#include "server/response_json.h"

#include <algorithm>

#include "tokenizer/utf8.h"

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

namespace {

// A token's bytes and its text (invalid UTF-8, such as half a character, is replaced).
void TokenText(const tokenizer::Tokenizer& tok, int32_t id, std::string* text, ojson* bytes) {
  std::string_view raw;
  if (id < 0 || !tok.vocab().IdBytes(static_cast<uint32_t>(id), &raw)) raw = {};
  *text = tokenizer::DecodeUtf8Lossy(raw);
  if (bytes != nullptr) {
    *bytes = ojson::array();
    for (char c : raw) bytes->push_back(static_cast<int>(static_cast<uint8_t>(c)));
  }
}

}  // namespace

ojson TokenLogprobJson(const tokenizer::Tokenizer& tok, const LogprobEntry& e) {
  std::string text;
  ojson bytes;
  TokenText(tok, e.token, &text, &bytes);
  ojson top = ojson::array();
  for (int32_t j = 0; j < e.lp.n; ++j) {
    std::string t;
    ojson b;
    TokenText(tok, e.lp.top_ids[static_cast<size_t>(j)], &t, &b);
    top.push_back({{"token", t},
                   {"logprob", e.lp.top_logprobs[static_cast<size_t>(j)]},
                   {"bytes", std::move(b)}});
  }
  return {{"token", text},
          {"logprob", e.lp.logprob},
          {"bytes", std::move(bytes)},
          {"top_logprobs", std::move(top)}};
}

ojson ChatLogprobs(const tokenizer::Tokenizer& tok, std::span<const LogprobEntry> entries) {
  ojson content = ojson::array();
  for (const auto& e : entries) content.push_back(TokenLogprobJson(tok, e));
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

ojson CompletionLogprobs(const tokenizer::Tokenizer& tok, std::span<const LogprobEntry> entries,
                         bool leading_null, int64_t* offset) {
  ojson tokens = ojson::array(), values = ojson::array(), tops = ojson::array(),
        offsets = ojson::array();
  for (size_t i = 0; i < entries.size(); ++i) {
    const LogprobEntry& e = entries[i];
    std::string text;
    TokenText(tok, e.token, &text, nullptr);
    tokens.push_back(text);
    offsets.push_back(*offset);
    *offset += static_cast<int64_t>(text.size());
    if (i == 0 && leading_null) {
      values.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    values.push_back(e.lp.logprob);
    ojson top = ojson::object();
    for (int32_t j = 0; j < e.lp.n; ++j) {
      std::string t;
      TokenText(tok, e.lp.top_ids[static_cast<size_t>(j)], &t, nullptr);
      if (!top.contains(t)) top[t] = e.lp.top_logprobs[static_cast<size_t>(j)];
    }
    tops.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(values)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

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

Timings SumTimings(int64_t prompt_tokens, int64_t cached_tokens, double prefill_s,
                   int64_t completion_tokens, std::span<const StepTiming> steps) {
  Timings t;
  t.cache_n = cached_tokens;
  t.prompt_n = prompt_tokens - cached_tokens;
  t.prompt_ms = prefill_s * 1e3;
  t.predicted_n = completion_tokens;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i > 0) t.predicted_ms += steps[i].wall_s * 1e3;
    t.io_wait_ms += steps[i].io_wait_s * 1e3;
    t.compute_ms += steps[i].compute_s * 1e3;
    t.expert_bytes_read += steps[i].expert_bytes_read;
  }
  return t;
}

namespace {
double PerSecond(double n, double ms) { return ms > 0 && n > 0 ? n * 1e3 / ms : 0; }
double PerTokenMs(double n, double ms) { return n > 0 ? ms / n : 0; }
}  // namespace

ojson TimingsJson(const Timings& t) {
  // The first completion token's logits come from the prefill, so predicted_ms covers
  // predicted_n - 1 decode steps.
  const double decode_steps = static_cast<double>(std::max<int64_t>(0, t.predicted_n - 1));
  const double prompt_n = static_cast<double>(t.prompt_n);
  return {{"cache_n", t.cache_n},
          {"prompt_n", t.prompt_n},
          {"prompt_ms", t.prompt_ms},
          {"prompt_per_token_ms", PerTokenMs(prompt_n, t.prompt_ms)},
          {"prompt_per_second", PerSecond(prompt_n, t.prompt_ms)},
          {"predicted_n", t.predicted_n},
          {"predicted_ms", t.predicted_ms},
          {"predicted_per_token_ms", PerTokenMs(decode_steps, t.predicted_ms)},
          {"predicted_per_second", PerSecond(decode_steps, t.predicted_ms)},
          {"io_wait_ms", t.io_wait_ms},
          {"compute_ms", t.compute_ms},
          {"expert_bytes_read", t.expert_bytes_read}};
}

ojson TokenTimingsJson(std::span<const StepTiming> steps, size_t first_index) {
  ojson out = ojson::array();
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepTiming& s = steps[i];
    const size_t index = first_index + i;
    out.push_back({{"index", index},
                   {"phase", index == 0 ? "prefill" : "decode"},
                   {"ms", s.wall_s * 1e3},
                   {"io_wait_ms", s.io_wait_s * 1e3},
                   {"compute_ms", s.compute_s * 1e3},
                   {"other_ms", std::max(0.0, (s.wall_s - s.io_wait_s - s.compute_s) * 1e3)},
                   {"positions", s.positions},
                   {"expert_bytes_read", s.expert_bytes_read},
                   {"experts_needed", s.experts_needed},
                   {"experts_in_ram", s.experts_in_ram}});
  }
  return out;
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
