// `deltafin serve`: the OpenAI-compatible HTTP server (docs/SERVER.md).
//
// Routes: GET / (the web chat page, unless web_ui is off), POST /v1/chat/completions, POST
// /v1/completions, GET /v1/models[/{id}], GET /health, GET /metrics; a trailing slash and doubled
// slashes are tolerated. HTTP threads (cpp-httplib's pool) parse, render and tokenize; the single
// engine worker (scheduler.h) generates. Streaming responses send headers at once, SSE comment
// pings while nothing else is sent, and end with `data: [DONE]` and the end of the body. A closed
// client connection cancels its job.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltafin/engine.h"
#include "server/request.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;  // "" = no authentication
  bool insecure_no_auth = false;
  std::string model_name;  // the id in /v1/models and responses
  int max_queue = 8;
  double ping_interval_s = 10;
  int retry_after_s = 10;  // Retry-After of a 429
  size_t max_body_bytes = size_t{32} << 20;
  int http_threads = 32;
  double read_timeout_s = 30;    // per read of a request body
  double header_timeout_s = 15;  // for a whole request head (gated_server.h)
  int max_connections = 1024;    // open at once; then 503
  bool log_prompts = false;
  bool web_ui = true;                     // GET / serves the chat page (server/web_page.h)
  std::vector<std::string> cors_origins;  // empty: no CORS headers at all (server/cors.h)
  int64_t prefill_piece = 32;
  // Speculative decoding (server/scheduler.h): most drafts per verify pass; 0 = off. The engine's
  // sessions must reserve as many (EngineOptions::max_draft).
  int64_t draft_max = 0;
  RequestDefaults defaults;
  // The prefix cache (server/prefix_cache.h): off with prefix_cache false; cache_dir "" keeps it
  // in RAM only. `serve` defaults cache_dir to <model>/.deltafin/prefix-cache.
  bool prefix_cache = true;
  std::string cache_dir;
  uint64_t cache_disk_bytes = uint64_t{8} << 30;
  uint64_t cache_ram_bytes = uint64_t{1} << 30;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopback(const std::string& host);

class HttpServer {
 public:
  HttpServer(const Engine& engine, const tokenizer::Tokenizer& tokenizer, ServerOptions options);
  ~HttpServer();
  // Binds and serves until Stop(). Errors: refused configuration or a failed bind.
  Status Run();
  void Stop();
  // The bound port (after Run started listening; useful with port 0).
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deltafin::server
