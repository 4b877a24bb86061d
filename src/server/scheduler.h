// The engine worker and its bounded FIFO queue.
//
// One worker thread owns the Session (the model is never touched by HTTP threads). Requests are
// Jobs: the HTTP thread submits one (refused when the queue is full), then reads the tokens the
// worker pushes into the Job and may cancel it at any time (client gone, stop sequence seen).
// The worker checks for cancellation before every decode step and between prefill chunks, and a
// queued Job that is cancelled leaves the queue at once.
//
// Conversation state reuse: the worker remembers every token the Session has been fed. When a
// new prompt starts with exactly those tokens (a growing chat whose client sent back the previous
// answer), only the rest of the prompt is prefilled; anything else resets the Session. This is
// exact: the state after feeding a sequence does not depend on how it was split.
//
// Decoding: the worker prefills, then hands the session to the engine's decode driver
// (deltafin/generator.h), which samples, applies the job's constraint, speculates when its rule
// allows (n-gram drafts over the whole prompt, earlier turns included; never for a constrained
// job) and stops at EOS or max_tokens; the worker passes each token, its timing and logprob to
// the reader and stops the driver when the job is cancelled or the reader has all it needs.
//
// Prefix cache (prefix_cache.h, optional): before prefilling, the worker restores the longest
// cached prefix of the prompt when it is longer than the reusable conversation state; the prefill
// then stops at each of the job's cache points (the end of the system/tools preamble) and after the
// whole prompt to snapshot the state into the cache (the whole prompt's snapshot is taken after the
// first token has been handed to the reader, so it does not delay it).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "constrain/json_constraint.h"
#include "deltafin/engine.h"
#include "deltafin/generator.h"
#include "deltafin/sampler.h"
#include "server/metrics.h"
#include "server/output.h"
#include "server/prefix_cache.h"
#include "server/request.h"
#include "server/timings.h"

namespace deltafin::server {

struct Job {
  // Set by the submitter before Submit().
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 0;  // > 0
  // Logprobs: -1 = none; else each generated token's (with this many alternatives) in `logprobs`,
  // from the logits it was drawn from (a verify row's are bit for bit a plain decode's).
  int top_logprobs = -1;
  // The prompt's own logprobs (completions echo): positions 1.. in `prompt_logprobs`, with
  // prompt_top alternatives. The whole prompt is then prefilled (no reuse, no prefix cache), its
  // logits kept for each piece of the wave.
  bool want_prompt_logprobs = false;
  int prompt_top = 0;
  // Prompt prefix lengths to snapshot into the prefix cache besides the whole prompt (ascending,
  // each < prompt.size()): the end of the system/tools preamble.
  std::vector<size_t> cache_points;
  // Constrained decoding (response_format, tool calls): every token is drawn from the ones it
  // allows, and it is advanced by each; null = unconstrained. The worker owns it while the job
  // runs. The worker keeps its shortest ending within the remaining budget (max_tokens, which
  // already counts the context's room), and emits that ending when they meet (budget_closed).
  std::unique_ptr<constrain::TokenConstraint> constraint;

  enum class End { kNone, kEos, kLength, kCancelled, kError };

  // Worker -> reader. Guarded by mu; cv signals every change.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;                // generated so far (reader keeps its own cursor)
  std::vector<StepTiming> steps;              // steps[i]: the engine work that produced tokens[i]
  std::vector<TokenLogprob> logprobs;         // logprobs[i]: tokens[i]'s (top_logprobs >= 0)
  std::vector<TokenLogprob> prompt_logprobs;  // [i]: prompt[i + 1]'s (set with `prefilled`)
  bool started = false;                       // the worker took the job (prefill running)
  bool prefilled = false;                     // prompt processed; first token follows
  int64_t cached_tokens = 0;                  // prompt tokens reused from the saved state
  End end = End::kNone;
  std::string error;
  double prefill_seconds = 0;  // the prefill of the uncached prompt (set with `prefilled`)
  // The budget ran out inside a constrained answer, which was then ended by its shortest valid
  // completion (the answer still reports finish_reason "length").
  bool budget_closed = false;

  // The client is gone: counted as cancelled in /metrics.
  void Cancel() { cancelled.store(true); }
  // The reader has all it needs (a stop sequence completed): generation ends normally.
  void Stop() { stop_requested.store(true); }
  bool IsCancelled() const { return cancelled.load(); }

 private:
  friend class Scheduler;
  std::atomic<bool> cancelled{false};
  std::atomic<bool> stop_requested{false};
};

class Scheduler {
 public:
  // prefill_piece: prompt tokens fed per Prefill call (cancellation is checked between pieces).
  // `cache` (optional, not owned) is the prefix cache.
  // `draft_max` > 0: decode with lossless speculation (deltafin/speculate.h, n-gram drafts over
  // the whole prompt, earlier turns included) when the driver's rule allows it; the engine's
  // sessions must reserve that many drafts (EngineOptions::max_draft).
  Scheduler(const Engine& engine, int max_queue, int64_t prefill_piece, Metrics* metrics,
            PrefixCache* cache = nullptr, int64_t draft_max = 0);
  ~Scheduler();  // stops the worker (running and queued jobs end as cancelled)

  // Queues the job; false when max_queue jobs are already waiting (a job the idle worker takes at
  // once does not wait, so max_queue 0 still runs one request at a time).
  bool Submit(const std::shared_ptr<Job>& job);
  // Cancels the job and removes it from the queue if it is still waiting.
  void Cancel(const std::shared_ptr<Job>& job);
  int queued() const;

 private:
  void Run();
  void Process(Job& job);
  void Finish(Job& job, Job::End end, const std::string& error = "");
  // Marks the worker idle, then finishes the job it was running.
  void EndRunningJob(Job& job, Job::End end, const std::string& error = "");
  void PublishStats();
  // Snapshots the session (after the first `n` prompt tokens) into the prefix cache.
  void Snapshot(std::span<const int32_t> prefix);
  // The generation after the prefill, by the decode driver. The first token's timing starts at
  // `since` with stats `before` (the prefill's start). Returns how the answer ended; sets *error
  // for kError.
  Job::End Generate(Job& job, size_t reuse, const SessionStats& before,
                    std::chrono::steady_clock::time_point since, int64_t* generated,
                    std::string* error);

  const Engine& engine_;
  const int max_queue_;
  const int64_t prefill_piece_;
  Metrics* metrics_;
  PrefixCache* cache_;
  std::unique_ptr<Session> session_;
  // One driver for the worker's whole life, so its speculation policy's measured pass costs and
  // acceptance carry from one request to the next, and its buffers are allocated once.
  std::unique_ptr<Generator> generator_;
  std::vector<int32_t> fed_;        // every token the session has been fed, in order
  std::vector<float> wave_logits_;  // a prefill piece's logits (prompt logprobs only)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  bool busy_ = false;  // the worker holds a job
  std::thread worker_;
};

}  // namespace deltafin::server
