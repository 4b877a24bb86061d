// The thin adapters of the three APIs (docs/SERVER.md "One pipeline"): POST /v1/chat/completions
// and /v1/completions (OpenAI), POST /v1/messages (+ /count_tokens, Anthropic) and POST
// /v1/responses (OpenAI Responses). Each parses its body into the shared GenerationRequest
// (request.h, anthropic_api.h, responses_api.h), starts it with StartGeneration and serves it with
// ServeGeneration, the one path every answer takes; all that differs is the GenerationSink that
// formats the events and the shape of the API's errors.
#include <memory>

#include "server/anthropic_api.h"
#include "server/http_internal.h"
#include "server/responses_api.h"
#include "tokenizer/utf8.h"

namespace deltafin::server {

namespace {

using ojson = nlohmann::ordered_json;

// chat.completion / text_completion: `data: {chunk}` events ending with `data: [DONE]`, the
// llama-server timings, logprobs, stream_options.include_usage and completions' echo.
class OpenAISink : public GenerationSink {
 public:
  // `echo`: the prompt's text, which a completion with echo sends before its own; with logprobs
  // it waits for the prefill that scores the prompt.
  OpenAISink(const tokenizer::Tokenizer& tok, std::string echo)
      : tok_(tok), echo_(std::move(echo)), echo_pending_(!echo_.empty()) {}

  ojson Whole(Gen& g, const OutputDelta& generated) override {
    OutputDelta all = generated;
    all.content = echo_ + generated.content;
    ojson body = FullResponse(g.meta, all, g.out->FinishReason(), g.GetUsage());
    if (g.request.logprobs >= 0) {
      ojson& lp = body["choices"][0]["logprobs"];
      if (g.request.endpoint == Endpoint::kChat) {
        lp = ChatLogprobs(tok_, generated.logprobs);
      } else {
        std::vector<LogprobEntry> entries = g.PromptLogprobs();
        entries.insert(entries.end(), generated.logprobs.begin(), generated.logprobs.end());
        int64_t offset = 0;
        lp = CompletionLogprobs(tok_, entries, g.job->want_prompt_logprobs, &offset);
      }
    }
    body["timings"] = TimingsJson(g.GetTimings());
    return body;
  }
  std::string Begin(Gen& g) override {
    return echo_pending_ && !g.job->want_prompt_logprobs ? Echo(g) : "";
  }
  std::string Delta(Gen& g, const OutputDelta& d) override {
    std::string out;
    if (echo_pending_ && (g.cursor > 0 || g.done)) out += Echo(g);
    // The first chunk (role "assistant") goes out with the first token even when it adds no
    // text yet, so a client sees the answer start.
    if (!d.empty() || (first_ && g.end == Job::End::kNone && g.cursor > 0)) {
      ojson chunk = ChunkOf(g, d, first_, false);
      if (g.request.timings_per_token) g.AddTimings(&chunk);
      out += Event(chunk);
      first_ = false;
    }
    return out;
  }
  std::string Ping() override { return ": ping\n\n"; }
  std::string End(Gen& g) override {
    std::string out = echo_pending_ ? Echo(g) : "";
    // The final chunk carries the timings (and the last tokens' token_timings), as
    // llama-server's does.
    ojson last =
        Chunk(g.meta, OutputDelta{}, first_, g.out->FinishReason(), g.request.include_usage);
    g.AddTimings(&last);
    out += Event(last);
    if (g.request.include_usage) out += Event(UsageChunk(g.meta, g.GetUsage()));
    return out + "data: [DONE]\n\n";
  }
  std::string StreamError(Gen&, const ApiError& e) override {
    return Event(e.Body()) + "data: [DONE]\n\n";
  }

 private:
  static std::string Event(const ojson& j) { return "data: " + JsonText(j) + "\n\n"; }
  // A chunk for `d`, with its tokens' logprobs when asked for.
  ojson ChunkOf(const Gen& g, const OutputDelta& d, bool first, bool leading_null) {
    ojson chunk = Chunk(g.meta, d, first, "", g.request.include_usage);
    if (g.request.logprobs >= 0 && !d.logprobs.empty()) {
      chunk["choices"][0]["logprobs"] =
          g.request.endpoint == Endpoint::kChat
              ? ChatLogprobs(tok_, d.logprobs)
              : CompletionLogprobs(tok_, d.logprobs, leading_null, &text_offset_);
    }
    return chunk;
  }
  // The echoed prompt as the first chunk of text (with the prompt's logprobs when asked for).
  std::string Echo(const Gen& g) {
    echo_pending_ = false;
    OutputDelta d;
    d.content = echo_;
    d.logprobs = g.PromptLogprobs();
    return Event(ChunkOf(g, d, true, true));
  }

  const tokenizer::Tokenizer& tok_;
  const std::string echo_;
  bool echo_pending_;
  bool first_ = true;
  int64_t text_offset_ = 0;  // completions' logprobs text_offset
};

class AnthropicSink : public GenerationSink {
 public:
  explicit AnthropicSink(const ResponseMeta& meta) : events_(meta) {}

  ojson Whole(Gen& g, const OutputDelta& all) override {
    return AnthropicMessage(g.meta, all, StopReason(g), g.out->matched_stop(), g.GetUsage());
  }
  std::string Begin(Gen& g) override { return events_.Start(g.GetUsage()); }
  std::string Delta(Gen&, const OutputDelta& d) override { return events_.Delta(d); }
  std::string Ping() override { return AnthropicEvents::Ping(); }
  std::string End(Gen& g) override {
    return events_.Finish(StopReason(g), g.out->matched_stop(), g.GetUsage());
  }
  std::string StreamError(Gen&, const ApiError& e) override {
    return AnthropicEvents::Event("error", AnthropicErrorBody(e));
  }

 private:
  static std::string StopReason(const Gen& g) {
    return AnthropicStopReason(g.out->FinishReason(), g.out->matched_stop());
  }
  AnthropicEvents events_;
};

class ResponsesSink : public GenerationSink {
 public:
  ResponsesSink(const Gen& g, ResponsesContext context, ResponseStore* store)
      : context_(std::move(context)), store_(store), events_(g.meta, &context_, &g.request) {}

  ojson Whole(Gen& g, const OutputDelta&) override {
    const Usage u = g.GetUsage();
    return ResponseObject(g.meta, context_, g.request, Status(g), output_, &u);
  }
  std::string Begin(Gen&) override { return events_.Start(); }
  std::string Delta(Gen&, const OutputDelta& d) override { return events_.Delta(d); }
  std::string Ping() override { return ": ping\n\n"; }
  std::string End(Gen& g) override {
    std::string tail = events_.Finish(Status(g), g.GetUsage());
    output_ = events_.output();
    Store(g);
    return tail;
  }
  std::string StreamError(Gen&, const ApiError& e) override { return events_.Error(e); }
  void Completed(const Gen& g, const OutputDelta& all) override {
    if (g.request.stream) return;  // End() stores the streamed items
    output_ = ResponseOutputItems(g.meta, context_, all);
    Store(g);
  }

 private:
  static std::string Status(const Gen& g) {
    return g.out->FinishReason() == "length" ? "incomplete" : "completed";
  }
  void Store(const Gen& g) {
    if (!context_.store) return;
    ojson items = context_.items;
    for (const auto& item : output_) items.push_back(item);
    store_->Put(g.meta.id, std::move(items));
  }

  ResponsesContext context_;
  ResponseStore* store_;
  ResponsesEvents events_;
  ojson output_ = ojson::array();
};

}  // namespace

void HttpServer::Impl::HandleGeneration(const httplib::Request& req, httplib::Response& res,
                                        Endpoint endpoint) {
  const std::string ep = endpoint == Endpoint::kChat ? "chat" : "completions";
  auto send = [&](const ApiError& e) { SendError(res, e, ep); };
  GenerationRequest parsed;
  if (auto err = ParseGenerationRequest(req.body, endpoint, opt.defaults, &parsed)) {
    return send(*err);
  }
  auto g = StartGeneration(req, res, std::move(parsed),
                           endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", send);
  if (g == nullptr) return;
  std::string echo;
  if (endpoint == Endpoint::kCompletion && g->request.echo) {
    auto text = tok.Decode(g->prompt);
    echo = tokenizer::DecodeUtf8Lossy(text.ok() ? *text : "");
  }
  ServeGeneration(g, std::make_shared<OpenAISink>(tok, std::move(echo)), res, ep, send);
}

void HttpServer::Impl::SendAnthropicError(httplib::Response& res, const ApiError& error,
                                          const std::string& endpoint) {
  res.status = error.status;
  res.set_content(JsonText(AnthropicErrorBody(error)), "application/json");
  metrics.CountRequest(endpoint, error.status);
}

void HttpServer::Impl::HandleMessages(const httplib::Request& req, httplib::Response& res,
                                      bool count_only) {
  const std::string ep = count_only ? "messages_count_tokens" : "messages";
  auto send = [&](const ApiError& e) { SendAnthropicError(res, e, ep); };
  GenerationRequest parsed;
  if (auto err = ParseAnthropicRequest(req.body, opt.defaults, count_only, &parsed)) {
    return send(*err);
  }
  if (count_only) {
    std::vector<int32_t> ids;
    if (auto err = BuildPrompt(parsed, tok, &ids)) return send(*err);
    res.set_content(JsonText({{"input_tokens", ids.size()}}), "application/json");
    metrics.CountRequest(ep, 200);
    return;
  }
  auto g = StartGeneration(req, res, std::move(parsed), "msg_", send);
  if (g == nullptr) return;
  ServeGeneration(g, std::make_shared<AnthropicSink>(g->meta), res, ep, send);
}

void HttpServer::Impl::HandleResponses(const httplib::Request& req, httplib::Response& res) {
  const std::string ep = "responses";
  auto send = [&](const ApiError& e) { SendError(res, e, ep); };
  GenerationRequest parsed;
  ResponsesContext context;
  if (auto err = ParseResponsesRequest(req.body, opt.defaults, &responses, &parsed, &context)) {
    return send(*err);
  }
  if (parsed.logprobs >= 0) context.logprobs_tok = &tok;
  auto g = StartGeneration(req, res, std::move(parsed), "resp_", send);
  if (g == nullptr) return;
  ServeGeneration(g, std::make_shared<ResponsesSink>(*g, std::move(context), &responses), res, ep,
                  send);
}

}  // namespace deltafin::server
