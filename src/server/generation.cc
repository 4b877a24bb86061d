// A generation from the parsed request to the last byte, for every API (generation.h): render and
// queue (StartGeneration), then wait for the whole answer or stream it as server-sent events
// (ServeGeneration), the API's GenerationSink formatting what is sent. While a request waits or
// streams, its HTTP thread polls the client connection every 50 ms and cancels the job when the
// client is gone.
#include "server/generation.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>

#include "base/log.h"
#include "server/http_internal.h"
#include "server/request_log.h"
#include "tokenizer/utf8.h"

namespace deltafin::server {

namespace {

using ToolCallConstraint = constrain::ToolCallConstraint;
using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;
constexpr auto kPollStep = std::chrono::milliseconds(50);

}  // namespace

std::string NewId(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard lock(mu);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

void Gen::Poll(Clock::duration wait, OutputDelta* delta) {
  std::vector<int32_t> fresh;
  {
    std::unique_lock lock(job->mu);
    job->cv.wait_for(lock, wait,
                     [&] { return job->tokens.size() > cursor || job->end != Job::End::kNone; });
    fresh.assign(job->tokens.begin() + static_cast<ptrdiff_t>(cursor), job->tokens.end());
    steps.insert(steps.end(), job->steps.begin() + static_cast<ptrdiff_t>(cursor),
                 job->steps.end());
    if (job->logprobs.size() > cursor) {
      logprobs.insert(logprobs.end(), job->logprobs.begin() + static_cast<ptrdiff_t>(cursor),
                      job->logprobs.end());
    }
    cursor = job->tokens.size();
    end = job->end;
    error = job->error;
    if (job->budget_closed) out->SetBudgetClosed();
  }
  if (!fresh.empty() && ttft_s < 0) {
    ttft_s = std::chrono::duration<double>(Clock::now() - start).count();
  }
  const size_t first = cursor - fresh.size();
  for (size_t i = 0; i < fresh.size(); ++i) {
    const int32_t id = fresh[i];
    OutputDelta d;
    const bool stop = out->Feed(id, &d);
    if (first + i < logprobs.size()) {
      d.logprobs.push_back(LogprobEntry{id, !d.content.empty(), logprobs[first + i]});
    }
    Append(delta, std::move(d));
    if (stop) {
      job->Stop();
      done = true;
      return;
    }
  }
  if (end != Job::End::kNone) {
    OutputDelta d;
    out->Finish(&d);
    Append(delta, std::move(d));
    done = true;
  }
}

std::vector<LogprobEntry> Gen::PromptLogprobs() const {
  std::vector<LogprobEntry> entries;
  if (!job->want_prompt_logprobs) return entries;
  std::lock_guard lock(job->mu);
  if (!job->prefilled) return entries;
  for (size_t i = 0; i < prompt.size(); ++i) {
    LogprobEntry e;
    e.token = prompt[i];
    e.text = true;
    if (i > 0 && i - 1 < job->prompt_logprobs.size()) e.lp = job->prompt_logprobs[i - 1];
    entries.push_back(e);
  }
  return entries;
}

Usage Gen::GetUsage() const {
  Usage u;
  u.prompt_tokens = static_cast<int64_t>(prompt.size());
  u.completion_tokens = out->completion_tokens();
  u.reasoning_tokens = out->reasoning_tokens();
  std::lock_guard lock(job->mu);
  u.cached_tokens = job->cached_tokens;
  return u;
}

Timings Gen::GetTimings() const {
  const Usage u = GetUsage();
  double prefill_s = 0;
  {
    std::lock_guard lock(job->mu);
    prefill_s = job->prefill_seconds;
  }
  return SumTimings(u.prompt_tokens, u.cached_tokens, prefill_s, u.completion_tokens, steps);
}

void Gen::AddTimings(ojson* chunk) {
  (*chunk)["timings"] = TimingsJson(GetTimings());
  if (!request.timings_per_token) return;
  (*chunk)["token_timings"] =
      TokenTimingsJson(std::span<const StepTiming>(steps).subspan(steps_sent), steps_sent);
  steps_sent = steps.size();
}

std::string Gen::LogDetail() const {
  const Usage u = GetUsage();
  const Timings t = GetTimings();
  char line[320];
  std::snprintf(line, sizeof(line),
                "%s prompt=%lld cached=%lld completion=%lld ttft=%.3fs prefill=%lld/%.3fs "
                "decode=%lld/%.3fs io_wait=%.3fs",
                meta.id.c_str(), static_cast<long long>(u.prompt_tokens),
                static_cast<long long>(u.cached_tokens),
                static_cast<long long>(u.completion_tokens), ttft_s,
                static_cast<long long>(t.prompt_n), t.prompt_ms / 1e3,
                static_cast<long long>(std::max<int64_t>(0, t.predicted_n - 1)),
                t.predicted_ms / 1e3, t.io_wait_ms / 1e3);
  return line;
}

ApiError EngineError(const std::string& message) {
  return ApiError{500, "generation failed: " + message, "server_error", "", "engine_error"};
}

std::shared_ptr<Gen> HttpServer::Impl::StartGeneration(const httplib::Request& req,
                                                       httplib::Response& res,
                                                       GenerationRequest parsed,
                                                       const char* id_prefix,
                                                       const ErrorSender& send) {
  auto g = std::make_shared<Gen>(req, std::move(parsed));
  const Endpoint endpoint = g->request.endpoint;
  if (auto err = BuildPrompt(g->request, tok, &g->prompt)) return send(*err), nullptr;
  const ModelInfo& info = engine.info();
  const int64_t n = static_cast<int64_t>(g->prompt.size());
  for (int32_t id : g->prompt) {
    if (id >= info.vocab_size) {
      return send(BadRequest("token id " + std::to_string(id) +
                                 " is outside the model's "
                                 "vocabulary",
                             "prompt")),
             nullptr;
    }
  }
  if (n >= info.context_capacity) {
    return send(BadRequest("the prompt has " + std::to_string(n) +
                               " tokens; this server's context holds " +
                               std::to_string(info.context_capacity),
                           "messages", "context_length_exceeded")),
           nullptr;
  }
  g->meta = ResponseMeta{NewId(id_prefix), static_cast<int64_t>(std::time(nullptr)), opt.model_name,
                         endpoint};
  g->out =
      std::make_unique<OutputAssembler>(g->request, tok, static_cast<int32_t>(info.eos_token_id));
  g->job = std::make_shared<Job>();
  g->job->prompt = g->prompt;
  g->job->sampling = g->request.sampling;
  g->job->top_logprobs = g->request.logprobs;
  g->job->want_prompt_logprobs =
      endpoint == Endpoint::kCompletion && g->request.echo && g->request.logprobs >= 0;
  g->job->prompt_top = std::max(0, g->request.logprobs);
  g->job->max_tokens =
      std::min(g->request.max_tokens.value_or(INT64_MAX), info.context_capacity - n);
  // Tool calls bound to their schemas (constrain/tool_constraint.h): a forced call always, and
  // with tool_choice auto from the moment the model opens its tool section; a JSON answer
  // (response_format) otherwise.
  const GenerationRequest& r = g->request;
  const bool forced = r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed;
  const bool tools = endpoint == Endpoint::kChat && r.tools.is_array() && !r.tools.empty() &&
                     r.tool_choice != ToolChoice::kNone && (forced || !r.output_schema);
  if (tools || r.output_schema) {
    std::call_once(trie_once,
                   [this] { trie = std::make_shared<const constrain::TokenTrie>(tok.vocab()); });
  }
  if (tools) {
    std::vector<constrain::ToolSchema> schemas;
    if (auto err = CompileToolSchemas(r, &schemas)) return send(*err), nullptr;
    const std::string forced_name = ForcedToolName(r);
    size_t named = 0;
    while (named < schemas.size() && schemas[named].name != forced_name) ++named;
    const auto mode = !forced_name.empty()                     ? ToolCallConstraint::Mode::kNamed
                      : r.tool_choice == ToolChoice::kRequired ? ToolCallConstraint::Mode::kRequired
                                                               : ToolCallConstraint::Mode::kAuto;
    auto c = ToolCallConstraint::Create(tok, trie, info.vocab_size, std::move(schemas), mode, named,
                                        r.parallel_tool_calls);
    if (!c.ok()) return send(BadRequest(c.status().message(), "tools")), nullptr;
    g->job->constraint = std::move(*c);
  } else if (r.output_schema) {
    g->job->constraint = std::make_unique<constrain::JsonConstraint>(
        r.output_schema, trie, &tok.vocab(), info.vocab_size,
        static_cast<int32_t>(info.eos_token_id));
  }
  if (prefix_cache) {
    const size_t preamble = PreambleTokens(g->request, tok, g->prompt);
    if (preamble > 0 && preamble < g->prompt.size()) g->job->cache_points.push_back(preamble);
  }
  if (opt.log_prompts) {
    auto text = tok.Decode(g->prompt);
    LogInfo(g->meta.id + " prompt: " + tokenizer::DecodeUtf8Lossy(text.ok() ? *text : ""));
  }
  if (!scheduler->Submit(g->job)) {
    res.set_header("Retry-After", std::to_string(opt.retry_after_s));
    return send(ApiError{429,
                         "the server is busy: " + std::to_string(opt.max_queue) +
                             " requests are already waiting; retry later",
                         "rate_limit_exceeded", "", "queue_full"}),
           nullptr;
  }
  if (LogEnabled(LogLevel::kDebug)) {
    LogDebug(g->meta.id + " queued: " + std::to_string(n) + " prompt tokens, max_tokens " +
             std::to_string(g->job->max_tokens) + ", " + std::to_string(scheduler->queued()) +
             " waiting");
  }
  return g;
}

void HttpServer::Impl::ServeGeneration(const std::shared_ptr<Gen>& g,
                                       const std::shared_ptr<GenerationSink>& sink,
                                       httplib::Response& res, const std::string& ep,
                                       const ErrorSender& send) {
  // Counts the request and hands its detail to the request log line (request_log.h); 499 = the
  // client left, so the job was cancelled.
  auto finish_log = [this, g, ep](int status) {
    metrics.CountRequest(ep, status);
    AnnotateRequestLog(status, g->LogDetail() + (status == 499 ? " cancelled" : ""));
  };
  if (!g->request.stream) {
    OutputDelta all;
    while (!g->done) {
      if (!g->conn.Alive()) {
        scheduler->Cancel(g->job);
        return finish_log(499);
      }
      g->Poll(kPollStep, &all);
    }
    if (g->end == Job::End::kError) {
      send(EngineError(g->error));
      return finish_log(500);
    }
    if (opt.log_prompts) LogInfo(g->meta.id + " output: " + all.reasoning + all.content);
    sink->Completed(*g, all);
    res.set_content(JsonText(sink->Whole(*g, all)), "application/json");
    return finish_log(200);
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const auto ping = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(opt.ping_interval_s));
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, g, sink, ping, finish_log](size_t, httplib::DataSink& out) {
        auto last_write = Clock::now();
        auto write = [&](const std::string& s) {
          if (s.empty()) return true;
          if (!out.write(s.data(), s.size())) return false;
          last_write = Clock::now();
          return true;
        };
        OutputDelta all;
        bool ok = write(sink->Begin(*g));
        while (ok && !g->done) {
          if (!g->conn.Alive()) break;
          OutputDelta d;
          const auto until_ping = last_write + ping - Clock::now();
          g->Poll(
              std::max(Clock::duration::zero(), std::min<Clock::duration>(kPollStep, until_ping)),
              &d);
          if (!write(sink->Delta(*g, d))) break;
          if (!d.empty()) Append(&all, std::move(d));
          if (!g->done && Clock::now() - last_write >= ping && !write(sink->Ping())) break;
        }
        if (!g->done) {  // the client is gone
          scheduler->Cancel(g->job);
          finish_log(499);
          return false;
        }
        if (g->end == Job::End::kError) {
          ok = write(sink->StreamError(*g, EngineError(g->error)));
        } else {
          const std::string tail = sink->End(*g);
          sink->Completed(*g, all);
          ok = write(tail);
        }
        if (ok) out.done();
        finish_log(ok ? (g->end == Job::End::kError ? 500 : 200) : 499);
        return ok;
      },
      [this, g](bool) {
        if (!g->done) scheduler->Cancel(g->job);
      });
}

}  // namespace deltafin::server
