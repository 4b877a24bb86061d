// HttpServer: configuration checks, cpp-httplib setup, authentication, CORS, the request log, and
// the non-generation endpoints (the chat page at /, /v1/models, /health, /metrics).
#include <arpa/inet.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "base/log.h"
#include "server/anthropic_api.h"
#include "server/http_internal.h"
#include "server/request_log.h"
#include "server/web_page.h"

namespace deltafin::server {

using ojson = nlohmann::ordered_json;

bool IsLoopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

HttpServer::HttpServer(const Engine& engine, const tokenizer::Tokenizer& tokenizer,
                       ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(options))) {}

HttpServer::~HttpServer() = default;

void HttpServer::Stop() { impl_->svr.stop(); }

int HttpServer::port() const { return impl_->port.load(); }

bool HttpServer::Impl::Authorized(const httplib::Request& req) const {
  if (opt.api_key.empty()) return true;
  // Authorization: Bearer KEY, or Anthropic's x-api-key: KEY.
  const std::string want = "Bearer " + opt.api_key;
  const std::string got = req.has_header("x-api-key")
                              ? "Bearer " + req.get_header_value("x-api-key")
                              : req.get_header_value("Authorization");
  // Compare without an early exit, so the time taken does not reveal a matching prefix.
  unsigned diff = got.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned>(i < got.size() ? got[i] ^ want[i] : 1);
  }
  return diff == 0;
}

// Anthropic's clients get errors in Anthropic's shape (auth, 404, 413 on /v1/messages...).
static bool IsAnthropicPath(const std::string& path) {
  return path.find("/v1/messages") != std::string::npos;
}

bool HttpServer::Impl::RequireAuth(const httplib::Request& req, httplib::Response& res) {
  if (Authorized(req)) return true;
  const ApiError e{401,
                   "invalid or missing API key (send Authorization: Bearer <key> or "
                   "x-api-key: <key>)",
                   "invalid_request_error", "", "invalid_api_key"};
  if (IsAnthropicPath(req.path)) {
    SendAnthropicError(res, e, "auth");
  } else {
    SendError(res, e, "auth");
  }
  return false;
}

GateOptions HttpServer::Impl::GateOptionsFor(const ServerOptions& opt) {
  GateOptions g;
  g.header_timeout_s = opt.header_timeout_s;
  g.max_connections = opt.max_connections;
  g.threads = std::max(4, opt.http_threads);
  g.error_body = [](int status, const std::string& message, const std::string& code) {
    return JsonText(ApiError{status, message,
                             status >= 500 ? "server_error" : "invalid_request_error", "", code}
                        .Body());
  };
  return g;
}

void HttpServer::Impl::SendError(httplib::Response& res, const ApiError& error,
                                 const std::string& endpoint) {
  res.status = error.status;
  res.set_content(JsonText(error.Body()), "application/json");
  metrics.CountRequest(endpoint, error.status);
}

bool HttpServer::Impl::HandlePreflight(const httplib::Request& req, httplib::Response& res) {
  if (!cors.enabled() || req.method != "OPTIONS" ||
      !req.has_header("Access-Control-Request-Method")) {
    return false;
  }
  const auto allow = cors.AllowOrigin(req.get_header_value("Origin"));
  if (!allow || !CorsPolicy::AllowedMethod(req.get_header_value("Access-Control-Request-Method"))) {
    SendError(res,
              ApiError{403, "cross-origin request not allowed (see serve --cors-origin)",
                       "invalid_request_error", "", "cors_forbidden"},
              "preflight");
    return true;
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  res.set_header("Access-Control-Allow-Headers",
                 "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
  res.set_header("Access-Control-Max-Age", "600");
  metrics.CountRequest("preflight", 204);
  return true;
}

void HttpServer::Impl::Routes() {
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  auto model_json = [this, created] {
    return ojson{{"id", opt.model_name},
                 {"object", "model"},
                 {"created", created},
                 {"owned_by", "deltafin"},
                 {"context_length", engine.info().context_capacity}};
  };
  // Authentication first; /health stays open so that load balancers can probe it, and the chat
  // page so that a browser can load it (the page holds no data; it sends the key it is given).
  // CORS preflights come before it: browsers send them without credentials.
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    BeginRequestLog(req);
    if (HandlePreflight(req, res)) return httplib::Server::HandlerResponse::Handled;
    // POST routes check the key themselves (RequireAuth), once their body has been read: a 401
    // sent here would leave the body unread on a kept-alive connection, to be parsed as the next
    // request (Node's fetch reuses connections across clients).
    if (req.path.find("health") != std::string::npos || (opt.web_ui && req.path == "/") ||
        req.method == "POST" || Authorized(req)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    RequireAuth(req, res);
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (const auto allow = cors.AllowOrigin(req.get_header_value("Origin"))) {
      res.set_header("Access-Control-Allow-Origin", *allow);
      res.set_header("Vary", "Origin");
      res.set_header("Access-Control-Expose-Headers", "Retry-After");
    }
  });
  svr.set_logger(LogRequest);
  if (opt.web_ui) {
    svr.Get("/", [this](const httplib::Request&, httplib::Response& res) {
      const std::string_view page = ChatPage();
      // The page loads nothing from anywhere: say so to the browser too.
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                     "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                     "frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
      metrics.CountRequest("page", 200);
    });
  }
  svr.Get(R"(/+health/*)", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
    metrics.CountRequest("health", 200);
  });
  svr.Get(R"(/+metrics/*)", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Render(scheduler->queued()), "text/plain; version=0.0.4");
    metrics.CountRequest("metrics", 200);
  });
  svr.Get(R"(/+v1/+models/*)", [this, model_json](const httplib::Request&, httplib::Response& res) {
    res.set_content(JsonText({{"object", "list"}, {"data", ojson::array({model_json()})}}),
                    "application/json");
    metrics.CountRequest("models", 200);
  });
  svr.Get(R"(/+v1/+models/+([^/]+)/*)",
          [this, model_json](const httplib::Request& req, httplib::Response& res) {
            if (req.matches[1] != opt.model_name) {
              return SendError(
                  res,
                  ApiError{404, "the model '" + std::string(req.matches[1]) + "' does not exist",
                           "invalid_request_error", "model", "model_not_found"},
                  "models");
            }
            res.set_content(JsonText(model_json()), "application/json");
            metrics.CountRequest("models", 200);
          });
  svr.Post(R"(/+v1/+chat/+completions/*)",
           [this](const httplib::Request& req, httplib::Response& res) {
             if (RequireAuth(req, res)) HandleGeneration(req, res, Endpoint::kChat);
           });
  svr.Post(R"(/+v1/+completions/*)", [this](const httplib::Request& req, httplib::Response& res) {
    if (RequireAuth(req, res)) HandleGeneration(req, res, Endpoint::kCompletion);
  });
  svr.Post(R"(/+v1/+messages/*)", [this](const httplib::Request& req, httplib::Response& res) {
    if (RequireAuth(req, res)) HandleMessages(req, res, /*count_only=*/false);
  });
  svr.Post(R"(/+v1/+messages/+count_tokens/*)",
           [this](const httplib::Request& req, httplib::Response& res) {
             if (RequireAuth(req, res)) HandleMessages(req, res, /*count_only=*/true);
           });
  svr.Post(R"(/+v1/+responses/*)", [this](const httplib::Request& req, httplib::Response& res) {
    if (RequireAuth(req, res)) HandleResponses(req, res);
  });
  // httplib's own errors (404, 413 body too large, 400 bad request line) get an OpenAI body.
  svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, "", "invalid_request_error", "", ""};
    if (res.status == 404) {
      e.message = "no route for " + req.method + " " + req.path;
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message =
          "the request body exceeds the limit of " + std::to_string(opt.max_body_bytes) + " bytes";
      e.code = "request_too_large";
    } else {
      e.message = "HTTP error " + std::to_string(res.status);
      if (res.status >= 500) e.type = "server_error";
    }
    res.set_content(JsonText(IsAnthropicPath(req.path) ? AnthropicErrorBody(e) : e.Body()),
                    "application/json");
    metrics.CountRequest("other", res.status);
  });
  svr.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, const std::exception_ptr& ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what += std::string(": ") + e.what();
        } catch (...) {
        }
        LogError(what);
        SendError(res, ApiError{500, what, "server_error", "", ""}, "other");
      });
}

Status HttpServer::Run() {
  Impl& s = *impl_;
  if (!IsLoopback(s.opt.host) && s.opt.api_key.empty() && !s.opt.insecure_no_auth) {
    return Status::Error("refusing to listen on non-loopback address " + s.opt.host +
                         " without --api-key (use --insecure-no-auth to allow it)");
  }
  for (const std::string& origin : s.opt.cors_origins) {
    if (std::string why = CheckCorsOrigin(origin); !why.empty()) return Status::Error(why);
  }
  if (s.opt.model_name.empty()) s.opt.model_name = "kimi-k3";
  if (s.opt.prefix_cache) {
    PrefixCacheOptions pc;
    pc.dir = s.opt.cache_dir;
    pc.disk_bytes = s.opt.cache_disk_bytes;
    pc.ram_bytes = s.opt.cache_ram_bytes;
    const ModelInfo& info = s.engine.info();
    pc.model_identity = ModelIdentity(info.model_dir, info.spine_int8);
    s.prefix_cache = std::make_unique<PrefixCache>(std::move(pc));
  }
  s.scheduler = std::make_unique<Scheduler>(s.engine, s.opt.max_queue, s.opt.prefill_piece,
                                            &s.metrics, s.prefix_cache.get(), s.opt.draft_max);
  s.svr.set_payload_max_length(s.opt.max_body_bytes);
  const auto rt = std::chrono::duration<double>(s.opt.read_timeout_s);
  s.svr.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(rt));
  s.svr.set_write_timeout(std::chrono::seconds(30));
  s.svr.set_keep_alive_max_count(1000);
  s.svr.set_tcp_nodelay(true);
  s.Routes();
  const int port = s.opt.port == 0                              ? s.svr.bind_to_any_port(s.opt.host)
                   : s.svr.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port
                                                                : -1;
  if (port < 0) {
    const int err = errno;  // from the failed bind
    s.scheduler.reset();
    return Status::Error("cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port) +
                         ": " + std::strerror(err) +
                         (err == EADDRINUSE ? " (another server has that port: stop it or choose "
                                              "another --port)"
                                            : ""));
  }
  s.port.store(port);
  LogInfo("serving " + s.opt.model_name + " on http://" + s.opt.host + ":" + std::to_string(port) +
          "/v1 (queue " + std::to_string(s.opt.max_queue) +
          (s.opt.api_key.empty() ? ", no API key)" : ", API key required)"));
  const bool ok = s.svr.listen_after_bind();
  s.scheduler.reset();
  return ok ? Status::Ok() : Status::Error("the HTTP server stopped with an error");
}

}  // namespace deltafin::server
