// Lossless speculative decoding over a Session (docs/SPECULATION.md): a Drafter proposes the next
// tokens, one Session::Verify pass checks them all (the spine read once for every row, each
// expert once for the rows that chose it), and Session::Commit keeps the accepted prefix exactly.
//
// Greedy output is identical to plain decoding. With sampling, each emitted position's token is
// drawn as plain decoding draws it (one random number from the sampler's stream per emitted token,
// the verify row's logits being bit-identical to a plain step's), and a draft d is kept iff it is
// that token: P(keep d) = p(d), the token has distribution p, and a seed gives the same tokens with
// speculation on or off, whatever number of drafts the policy verified (Sampler::AcceptOrResample).
//
// The policy measures, while it runs, the time of a pass as a function of its rows and the
// drafts' acceptance rate, and drafts the k (0 included) that maximises expected tokens per second.
// The clock is injectable (SpeculateOptions::clock) so the policy can be tested without wall time;
// the timings decide only how many drafts are verified, never which tokens come out.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "deltafin/engine.h"
#include "deltafin/sampler.h"

namespace deltafin {

// Proposes continuations of a token context. Must not allocate in Propose (decode loops are
// allocation-free after warm-up).
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Writes up to out.size() proposed next tokens of `context` (everything fed so far plus the
  // token about to be fed), returns how many.
  virtual int64_t Propose(std::span<const int32_t> context, std::span<int32_t> out) = 0;
};

// Prompt lookup: the longest suffix of the context (max_n tokens down to min_n) that occurred
// earlier in the context, most recent occurrence first; proposes the tokens that followed it.
class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(int64_t max_n = 4, int64_t min_n = 2) : max_n_(max_n), min_n_(min_n) {}
  int64_t Propose(std::span<const int32_t> context, std::span<int32_t> out) override;

 private:
  int64_t max_n_, min_n_;
};

// Offers a known continuation (bench decode --speculate replay): after `prompt_length` tokens of
// context, proposes continuation[context.size() - prompt_length ...], so every draft is accepted
// when the continuation is the model's own greedy output.
class ReplayDrafter : public Drafter {
 public:
  ReplayDrafter(std::vector<int32_t> continuation, int64_t prompt_length)
      : continuation_(std::move(continuation)), prompt_length_(prompt_length) {}
  int64_t Propose(std::span<const int32_t> context, std::span<int32_t> out) override;

 private:
  std::vector<int32_t> continuation_;
  int64_t prompt_length_;
};

struct SpeculateOptions {
  int64_t draft_max = 8;  // capped by Session::max_verify_rows() - 1
  // true: the measured policy chooses k per pass; false: always draft as many as proposed (up to
  // draft_max), for replay measurements and tests.
  bool adaptive = true;
  // Monotonic time in seconds that the policy times passes with; empty: std::chrono::steady_clock.
  // Tests inject a deterministic clock. Called twice per pass; must not allocate.
  std::function<double()> clock;
};

// One verify (or decode) pass, for --stats.
struct SpeculativePass {
  int64_t rows = 0;      // tokens fed by the pass (1 = a plain decode step)
  int64_t drafted = 0;   // drafts verified (rows - 1)
  int64_t accepted = 0;  // of those, kept
  double seconds = 0;    // wall time of the pass and its commit
};

struct SpeculativeTotals {
  int64_t passes = 0;
  int64_t tokens = 0;  // tokens emitted (accepted drafts + one per pass)
  int64_t drafted = 0;
  int64_t accepted = 0;
  double seconds = 0;
  double tokens_per_pass() const { return passes > 0 ? double(tokens) / double(passes) : 0; }
  double acceptance() const { return drafted > 0 ? double(accepted) / double(drafted) : 0; }
  double seconds_per_token() const { return tokens > 0 ? seconds / double(tokens) : 0; }
};

// Drives a session: after the prompt is prefilled, each Step emits the next tokens. Invariant: the
// session has been fed everything emitted except the last emitted token (as in the plain loop,
// where a token is fed after it is printed).
class Speculator {
 public:
  // `drafter` null: plain decoding (one Decode per token, one Sample per token: exactly the plain
  // loop). `capacity`: context tokens reserved for the drafter's history.
  Speculator(Session* session, Drafter* drafter, const SpeculateOptions& options, int64_t capacity);
  // The prompt just prefilled (the drafter's context starts with it).
  void Start(std::span<const int32_t> prompt);
  // Emits 1..(1 + draft) tokens into `out` (cleared first), at most `max_tokens` (>= 1).
  Status Step(Sampler& sampler, int64_t max_tokens, std::vector<int32_t>* out);

  // The pass of the last Step (rows 0 after the first Step of a Start: that token needed none).
  const SpeculativePass& last_pass() const { return last_; }
  const SpeculativeTotals& totals() const { return totals_; }
  // The logits the last Step drew its i-th token from (logprobs): the verify pass's row i, or
  // Session::Logits() after a plain step. Valid until the next Step.
  std::span<const float> EmittedLogits(size_t i) const;
  // Draft length the policy would choose for `proposed` available drafts now (for tests).
  int64_t ChooseDrafts(int64_t proposed);

 private:
  void Observe(int64_t rows, int64_t drafted, int64_t accepted, double seconds);
  double Now() const;  // options_.clock, or steady_clock, in seconds

  Session* session_;
  Drafter* drafter_;
  SpeculateOptions options_;
  int64_t capacity_;
  std::vector<int32_t> context_;  // everything emitted or prompted, reserved to capacity
  std::vector<int32_t> rows_;     // [max rows] tokens of a verify pass
  std::vector<float> logits_;     // [max rows, vocab]
  bool has_next_ = false;         // the last emitted token, not fed yet
  int32_t next_ = 0;
  SpeculativePass last_;
  SpeculativeTotals totals_;
  // Policy state: cost of a 1-row pass, extra cost per further row, decayed acceptance counts.
  double cost_one_ = 0, cost_row_ = 0;
  bool have_one_ = false, have_row_ = false;
  double acc_ = 0, drafted_ = 0;
  // Sized at construction. cost_of_rows_[r]: decayed mean wall time of passes of r rows (0 = none
  // yet). positions_[i], draft position i = 1..rows-1: decayed counts of the passes that reached
  // it (every earlier draft accepted) and of those that accepted it.
  struct DraftPosition {
    double reached = 0, accepted = 0;
  };
  std::vector<double> cost_of_rows_;
  std::vector<DraftPosition> positions_;
  int64_t since_probe_ = 0;
  int64_t since_one_ = 0;  // passes since the last 1-row pass
};

}  // namespace deltafin
