// Server counters for GET /metrics, rendered in the Prometheus text format (version 0.0.4).
// Every counter is cumulative since the server started; the session counters come from the
// engine's SessionStats, copied by the worker after each step (so HTTP threads never read the
// Session). Thread-safe: one mutex, taken briefly.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "deltafin/engine.h"

namespace deltafin::server {

class Metrics {
 public:
  void CountRequest(const std::string& endpoint, int status);
  void AddPrompt(int64_t prompt_tokens, int64_t cached_tokens, double prefill_seconds);
  void AddDecode(int64_t tokens, double seconds);
  void CountCancelled();
  void CountReuse(bool hit);
  // One speculative decode pass (rows fed, drafts verified, drafts accepted); rows 0: nothing
  // was fed (the answer's first token, drawn from the prompt's logits).
  void AddSpeculation(int64_t rows, int64_t drafted, int64_t accepted);
  void SetRunning(bool running);
  void SetSessionStats(const SessionStats& stats);
  // queue_length: jobs waiting now (read from the scheduler at render time).
  std::string Render(int queue_length) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_prompt_tokens_ = 0, completion_tokens_ = 0;
  uint64_t cancelled_ = 0, reuse_hits_ = 0, reuse_misses_ = 0;
  double prefill_seconds_ = 0, decode_seconds_ = 0;
  uint64_t spec_passes_ = 0, spec_drafted_ = 0, spec_accepted_ = 0;
  bool running_ = false;
  SessionStats session_;
};

}  // namespace deltafin::server
