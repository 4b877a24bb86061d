// Internals of HttpServer shared by http_server.cc (setup, auth, small endpoints) and
// generation.cc (the chat and completion handlers).
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"
#include "server/cors.h"
#include "server/gated_server.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/prefix_cache.h"
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
  void SendError(httplib::Response& res, const ApiError& error, const std::string& endpoint);
  void HandleGeneration(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
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
};

}  // namespace deltafin::server
