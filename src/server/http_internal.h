// Internals of HttpServer shared by http_server.cc (setup, auth, small endpoints), generation.cc
// (starting and serving a generation) and api_handlers.cc (the three APIs' adapters).
#pragma once

#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"
#include "server/cors.h"
#include "server/gated_server.h"
#include "server/generation.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/prefix_cache.h"
#include "server/responses_api.h"
#include "server/scheduler.h"

namespace deltafin::server {

// Serialises JSON for the wire; invalid UTF-8 (never expected) becomes U+FFFD instead of throwing.
inline std::string JsonText(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

struct HttpServer::Impl {
  Impl(const Engine& e, const tokenizer::Tokenizer& t, ServerOptions o)
      : engine(e), tok(t), opt(std::move(o)), cors(opt.cors_origins) {}

  void Routes();
  bool Authorized(const httplib::Request& req) const;
  // Sends the 401 (in the path's API shape) unless the request carries the key.
  bool RequireAuth(const httplib::Request& req, httplib::Response& res);
  void SendError(httplib::Response& res, const ApiError& error, const std::string& endpoint);
  // POST /v1/chat/completions and /v1/completions (api_handlers.cc).
  void HandleGeneration(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  // Sends an error in the calling API's shape (OpenAI's or Anthropic's).
  using ErrorSender = std::function<void(const ApiError&)>;
  // Renders the prompt, checks it against the model and queues the job (ids: id_prefix + hex).
  // On failure sends the error and returns null.
  std::shared_ptr<Gen> StartGeneration(const httplib::Request& req, httplib::Response& res,
                                       GenerationRequest parsed, const char* id_prefix,
                                       const ErrorSender& send);
  // Waits for or streams a started generation, any API: the one path every answer takes, with
  // `sink` formatting its events (generation.h). `ep` names the endpoint in /metrics.
  void ServeGeneration(const std::shared_ptr<Gen>& g, const std::shared_ptr<GenerationSink>& sink,
                       httplib::Response& res, const std::string& ep, const ErrorSender& send);
  // POST /v1/messages, /v1/messages/count_tokens (api_handlers.cc).
  void HandleMessages(const httplib::Request& req, httplib::Response& res, bool count_only);
  // POST /v1/responses (api_handlers.cc).
  void HandleResponses(const httplib::Request& req, httplib::Response& res);
  // Anthropic-shaped errors for /v1/messages.
  void SendAnthropicError(httplib::Response& res, const ApiError& error,
                          const std::string& endpoint);
  // Answers a CORS preflight (true: handled); see server/cors.h.
  bool HandlePreflight(const httplib::Request& req, httplib::Response& res);
  static GateOptions GateOptionsFor(const ServerOptions& opt);

  const Engine& engine;
  const tokenizer::Tokenizer& tok;
  ServerOptions opt;
  CorsPolicy cors;
  Metrics metrics;
  std::unique_ptr<PrefixCache> prefix_cache;  // null: --no-prefix-cache
  // The vocabulary's token trie for constrained decoding, built by the first JSON request.
  std::once_flag trie_once;
  std::shared_ptr<const constrain::TokenTrie> trie;
  std::unique_ptr<Scheduler> scheduler;
  GatedServer svr{GateOptionsFor(opt)};
  std::atomic<int> port{0};
  ResponseStore responses;  // previous_response_id state of /v1/responses
};

}  // namespace deltafin::server
