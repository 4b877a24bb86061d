// The HTTP glue of the agent APIs: POST /v1/messages (+ /count_tokens) and POST /v1/responses.
// Each parses its body into a GenerationRequest (anthropic_api.h, responses_api.h), starts it
// through the same StartGeneration as chat/completions, and shows the output through an
// AgentRenderer of its own, in its own error shape.
#include <memory>

#include "server/anthropic_api.h"
#include "server/http_internal.h"
#include "server/responses_api.h"

namespace deltafin::server {

namespace {

using ojson = nlohmann::ordered_json;

class AnthropicRenderer : public AgentRenderer {
 public:
  explicit AnthropicRenderer(const ResponseMeta& meta) : events_(meta) {}

  ojson Whole(const Gen& g, const OutputDelta& all) override {
    return AnthropicMessage(g.meta, all, StopReason(g), g.out->matched_stop(), g.GetUsage());
  }
  std::string Begin(const Gen& g) override { return events_.Start(g.GetUsage()); }
  std::string Delta(const Gen&, const OutputDelta& d) override { return events_.Delta(d); }
  std::string Ping() override { return AnthropicEvents::Ping(); }
  std::string End(const Gen& g) override {
    return events_.Finish(StopReason(g), g.out->matched_stop(), g.GetUsage());
  }
  std::string StreamError(const Gen&, const ApiError& e) override {
    return AnthropicEvents::Event("error", AnthropicErrorBody(e));
  }

 private:
  static std::string StopReason(const Gen& g) {
    return AnthropicStopReason(g.out->FinishReason(), g.out->matched_stop());
  }
  AnthropicEvents events_;
};

class ResponsesRenderer : public AgentRenderer {
 public:
  ResponsesRenderer(const Gen& g, ResponsesContext context, ResponseStore* store)
      : context_(std::move(context)), store_(store), events_(g.meta, &context_, &g.request) {}

  ojson Whole(const Gen& g, const OutputDelta&) override {
    const Usage u = g.GetUsage();
    return ResponseObject(g.meta, context_, g.request, Status(g), output_, &u);
  }
  std::string Begin(const Gen&) override { return events_.Start(); }
  std::string Delta(const Gen&, const OutputDelta& d) override { return events_.Delta(d); }
  std::string Ping() override { return ": ping\n\n"; }
  std::string End(const Gen& g) override {
    std::string tail = events_.Finish(Status(g), g.GetUsage());
    output_ = events_.output();
    Store(g);
    return tail;
  }
  std::string StreamError(const Gen&, const ApiError& e) override { return events_.Error(e); }
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
  ServeAgentGeneration(g, std::make_shared<AnthropicRenderer>(g->meta), res, ep, send);
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
  ServeAgentGeneration(g, std::make_shared<ResponsesRenderer>(*g, std::move(context), &responses),
                       res, ep, send);
}

}  // namespace deltafin::server
