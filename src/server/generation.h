// One generation request from queueing to the last byte, shared by the four generation endpoints
// (chat/completions, completions, Anthropic messages, OpenAI responses; docs/SERVER.md "One
// pipeline"): each API's adapter (api_handlers.cc) parses its body into a GenerationRequest,
// HttpServer::Impl::StartGeneration checks the prompt and queues the job, and
// HttpServer::Impl::ServeGeneration waits for or streams the output (read through Gen::Poll) for
// every API alike, handing the same events to the API's GenerationSink, which formats them.
#pragma once

#include <httplib.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/connection.h"
#include "server/output.h"
#include "server/response_json.h"
#include "server/scheduler.h"

namespace deltafin::server {

// prefix + 16 random hex digits (chatcmpl-..., msg_..., resp_...).
std::string NewId(const char* prefix);

inline void Append(OutputDelta* all, OutputDelta&& d) {
  all->reasoning += d.reasoning;
  all->content += d.content;
  for (auto& c : d.tool_calls) all->tool_calls.push_back(std::move(c));
  all->logprobs.insert(all->logprobs.end(), d.logprobs.begin(), d.logprobs.end());
}

ApiError EngineError(const std::string& message);

struct Gen {
  using Clock = std::chrono::steady_clock;
  Gen(const httplib::Request& req, GenerationRequest r) : request(std::move(r)), conn(req) {}
  GenerationRequest request;
  std::vector<int32_t> prompt;
  std::shared_ptr<Job> job;
  ResponseMeta meta;
  std::unique_ptr<OutputAssembler> out;
  ClientConnection conn;
  size_t cursor = 0;
  std::vector<StepTiming> steps;       // a copy of job->steps up to `cursor`
  std::vector<TokenLogprob> logprobs;  // a copy of job->logprobs up to `cursor`
  size_t steps_sent = 0;               // steps already sent as token_timings
  bool done = false;
  Job::End end = Job::End::kNone;
  std::string error;
  Clock::time_point start = Clock::now();
  double ttft_s = -1;

  // Waits up to `wait` for the worker, feeds new tokens to the assembler and appends what they
  // add to *delta. Sets `done` when the response is complete (or failed).
  void Poll(Clock::duration wait, OutputDelta* delta);
  Usage GetUsage() const;
  // Completions with echo and logprobs: the prompt's tokens with their logprobs (the first one's
  // is null); empty before the prefill has scored them.
  std::vector<LogprobEntry> PromptLogprobs() const;
  Timings GetTimings() const;
  // Adds `timings` (so far) and the `token_timings` not sent yet to a streamed chunk.
  void AddTimings(nlohmann::ordered_json* chunk);
  // The request log's detail: id, token counts and where the time went.
  std::string LogDetail() const;
};

// How one API shows a generation: ServeGeneration produces the same events for every API and a
// sink formats them in its API's shape (chat.completion chunks, Anthropic message events,
// Responses events). Stream events are returned as complete SSE text ("data: ...\n\n" or
// "event: ...\ndata: ...\n\n"); "" sends nothing. The sink may update the Gen's bookkeeping
// (timings already sent), never its job.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // stream: false. `all` is the whole output.
  virtual nlohmann::ordered_json Whole(Gen& g, const OutputDelta& all) = 0;
  // What is sent before the first token (message_start, response.created, ...).
  virtual std::string Begin(Gen& g) = 0;
  // After every poll of the job, with what the new tokens added (possibly nothing).
  virtual std::string Delta(Gen& g, const OutputDelta& delta) = 0;
  // A keep-alive while nothing else was sent for the ping interval.
  virtual std::string Ping() = 0;
  // The closing events after the last delta (the final chunk and [DONE], message_stop,
  // response.completed, ...).
  virtual std::string End(Gen& g) = 0;
  // An engine failure after the stream started (before, the API's ErrorSender answers).
  virtual std::string StreamError(Gen& g, const ApiError& error) = 0;
  // Called once with the whole output of a completed (not cancelled, not failed) request.
  virtual void Completed(const Gen& /*g*/, const OutputDelta& /*all*/) {}
};

}  // namespace deltafin::server
