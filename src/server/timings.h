// Where a request's time went, as the server reports it: one StepTiming per generated token (the
// engine work between the previous token and this one, split by the engine's SessionStats into
// I/O wait and compute), and the request's llama-server style totals (Timings).
//
// Token 0's step is the prefill of the uncached prompt plus its sampling; token i > 0's step is
// the decode of token i-1 plus sampling. So the steps' wall times add up to the request's engine
// time, and each step's io_wait + compute is its forward passes' wall time (the rest, `other`, is
// sampling and bookkeeping).
#pragma once

#include <cstdint>
#include <span>

namespace deltafin::server {

struct StepTiming {
  double wall_s = 0;
  double io_wait_s = 0;            // SessionStats::io_wait_seconds over the step
  double compute_s = 0;            // SessionStats::compute_seconds over the step
  uint64_t expert_bytes_read = 0;  // expert bytes read from disk or network
  uint64_t experts_needed = 0;     // SessionStats::expert_loads
  uint64_t experts_in_ram = 0;     // SessionStats::expert_cache_hits
  int64_t positions = 0;           // tokens fed (prompt tokens for the prefill, 1 for decode)
};

// The llama-server `timings` object plus the I/O split. prompt_* covers the prefill of the
// uncached prompt; predicted_* the decode steps after the first token (whose logits came from the
// prefill), so predicted_per_second is decode steps per second.
struct Timings {
  int64_t cache_n = 0;                    // prompt tokens reused from the saved conversation state
  int64_t prompt_n = 0;                   // prompt tokens prefilled
  double prompt_ms = 0;                   // prefill wall time
  int64_t predicted_n = 0;                // completion tokens
  double predicted_ms = 0;                // decode steps' wall time
  double io_wait_ms = 0, compute_ms = 0;  // over the prefill and every decode step so far
  uint64_t expert_bytes_read = 0;
};

// Totals over `steps` (steps[0] = the prefill) for a request with `prompt_tokens` and
// `cached_tokens`; `prefill_s` is the prefill alone (steps[0] also holds the first sampling).
Timings SumTimings(int64_t prompt_tokens, int64_t cached_tokens, double prefill_s,
                   int64_t completion_tokens, std::span<const StepTiming> steps);

}  // namespace deltafin::server
