// Metrics: counters and their Prometheus rendering.
#include "server/metrics.h"

#include <cstdio>

namespace deltafin::server {

void Metrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::AddPrompt(int64_t prompt_tokens, int64_t cached_tokens, double prefill_seconds) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += static_cast<uint64_t>(prompt_tokens);
  cached_prompt_tokens_ += static_cast<uint64_t>(cached_tokens);
  prefill_seconds_ += prefill_seconds;
}

void Metrics::AddDecode(int64_t tokens, double seconds) {
  std::lock_guard lock(mu_);
  completion_tokens_ += static_cast<uint64_t>(tokens);
  decode_seconds_ += seconds;
}

void Metrics::CountCancelled() {
  std::lock_guard lock(mu_);
  ++cancelled_;
}

void Metrics::CountReuse(bool hit) {
  std::lock_guard lock(mu_);
  ++(hit ? reuse_hits_ : reuse_misses_);
}

void Metrics::AddSpeculation(int64_t rows, int64_t drafted, int64_t accepted) {
  if (rows <= 0) return;
  std::lock_guard lock(mu_);
  ++spec_passes_;
  spec_drafted_ += static_cast<uint64_t>(drafted);
  spec_accepted_ += static_cast<uint64_t>(accepted);
}

void Metrics::SetRunning(bool running) {
  std::lock_guard lock(mu_);
  running_ = running;
}

void Metrics::SetSessionStats(const SessionStats& stats) {
  std::lock_guard lock(mu_);
  session_ = stats;
}

std::string Metrics::Render(int queue_length) const {
  std::lock_guard lock(mu_);
  std::string out;
  char line[512];
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    std::snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name,
                  type, name, value);
    out += line;
  };
  out += "# HELP deltafin_requests_total HTTP requests answered, by endpoint and status code.\n";
  out += "# TYPE deltafin_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    std::snprintf(line, sizeof(line), "deltafin_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n",
                  key.first.c_str(), key.second, static_cast<unsigned long long>(n));
    out += line;
  }
  metric("deltafin_queue_length", "gauge", "Generation requests waiting for the engine.",
         queue_length);
  metric("deltafin_requests_running", "gauge", "Generation requests the engine is working on.",
         running_ ? 1 : 0);
  metric("deltafin_requests_cancelled_total", "counter",
         "Generation requests cancelled (client gone) before they finished.",
         static_cast<double>(cancelled_));
  metric("deltafin_prompt_tokens_total", "counter", "Prompt tokens of generation requests.",
         static_cast<double>(prompt_tokens_));
  metric("deltafin_prompt_tokens_cached_total", "counter",
         "Prompt tokens not prefilled because the saved conversation state already held them.",
         static_cast<double>(cached_prompt_tokens_));
  metric("deltafin_completion_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(completion_tokens_));
  metric("deltafin_prefill_seconds_total", "counter", "Time spent in prefill.", prefill_seconds_);
  metric("deltafin_decode_seconds_total", "counter", "Time spent in decode steps.",
         decode_seconds_);
  metric("deltafin_session_reuse_total", "counter",
         "Requests that continued from the saved conversation state.",
         static_cast<double>(reuse_hits_));
  metric("deltafin_session_fresh_total", "counter", "Requests that started from an empty state.",
         static_cast<double>(reuse_misses_));
  metric("deltafin_speculative_passes_total", "counter",
         "Forward passes of speculative decoding (each feeds one token plus its drafts).",
         static_cast<double>(spec_passes_));
  metric("deltafin_speculative_drafted_total", "counter", "Draft tokens verified.",
         static_cast<double>(spec_drafted_));
  metric("deltafin_speculative_accepted_total", "counter", "Draft tokens accepted.",
         static_cast<double>(spec_accepted_));
  metric("deltafin_positions_total", "counter", "Token positions the engine processed.",
         static_cast<double>(session_.positions));
  metric("deltafin_expert_loads_total", "counter", "Experts the forward passes needed.",
         static_cast<double>(session_.expert_loads));
  metric("deltafin_expert_cache_hits_total", "counter", "Needed experts already in memory.",
         static_cast<double>(session_.expert_cache_hits));
  metric("deltafin_expert_cache_hit_rate", "gauge", "expert_cache_hits / expert_loads (0 if none).",
         session_.expert_loads ? static_cast<double>(session_.expert_cache_hits) /
                                     static_cast<double>(session_.expert_loads)
                               : 0.0);
  metric("deltafin_expert_bytes_read_total", "counter", "Expert bytes read from disk or network.",
         static_cast<double>(session_.expert_bytes_read));
  metric("deltafin_io_wait_seconds_total", "counter", "Time forward passes waited for reads.",
         session_.io_wait_seconds);
  out += "# HELP deltafin_op_seconds_total Forward-pass time by op family (docs/BREAKDOWN.md).\n";
  out += "# TYPE deltafin_op_seconds_total counter\n";
  for (size_t f = 0; f < kOpFamilyCount; ++f) {
    std::snprintf(line, sizeof(line), "deltafin_op_seconds_total{family=\"%s\"} %.17g\n",
                  OpFamilyName(static_cast<OpFamily>(f)), session_.op_seconds[f]);
    out += line;
  }
  return out;
}

}  // namespace deltafin::server
