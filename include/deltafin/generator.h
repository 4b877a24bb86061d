// The one decode driver of the engine API: a Generator turns a prefilled Session into generated
// tokens, for `deltafin run`, `bench decode` and the server's worker alike, so that the stepping
// of a session (Decode, or a speculative Verify and Commit), the sampling, the speculation rule,
// the constraint mask and the stop rules live in one place (docs/SPECULATION.md "One driver").
//
// The caller prefills the session (the server restores prefix-cache state first; the prompt's
// logits must be in Session::Logits()), then calls Generate with the whole prompt (the drafter's
// context and the repetition penalty's window). Each step emits one or more tokens: step 0 draws
// the first token from the prompt's logits (no pass); every later step feeds the last emitted
// token, either by one Decode or, when the generation speculates, by one Verify pass over it and
// the drafts and a Commit of the accepted ones (deltafin/speculate.h). The callbacks see every
// step (its pass, wall time and SessionStats difference, for `run --stats`, `bench decode` and
// the server's timings) and every emitted token with the logits it was drawn from (logprobs).
//
// The speculation rule, decided here and only here: a generation speculates when the Generator
// has a drafter, the session reserves verify rows, and no token constraint is set. A constraint's
// mask must be applied to every emitted token's own draw, which a verify pass does not do. Seeded
// sampling and logprobs do speculate: every emitted token takes exactly one draw from the
// sampler's stream (Sampler::AcceptOrResample) from logits bit-identical to a plain step's, so
// the tokens and their logprobs are those of plain decoding.
//
// Stop rules, checked after each emitted token has been handed to the callback, in this order:
// an end token (GenerationParams::end_tokens), the constraint complete, max_tokens, the context
// full (the token could not be fed), the callback's stop. Tokens a verify pass drew past a stop
// are never handed out (the session has been fed them: fed() says which tokens it holds).
//
// Construction sizes the buffers for the model's vocabulary, the session's verify rows and the
// context capacity; Generate sets up a sampler for the generation's SamplingParams with its
// buffers sized for the vocabulary; after that, no step of the generation allocates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "deltafin/engine.h"
#include "deltafin/sampler.h"
#include "deltafin/speculate.h"

namespace deltafin {

// A grammar that narrows every draw (the server's JSON schemas and tool calls adapt theirs to
// it). The Generator draws from the tokens Mask allows and advances the constraint with Accept.
// Budget-aware closing (docs/SERVER.md "Budget-aware closing"): a constraint that knows the
// length in tokens of its shortest valid ending (CloseCost >= 0) is kept within the tokens the
// generation may still emit: a drawn token is kept only when its own shortest ending still fits,
// and when the ending takes the whole budget the Generator calls BeginClosing and emits it.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // False while the output is free: the draw is not masked (and nothing is closed), but Accept
  // still follows every token.
  virtual bool Active() const { return true; }
  // The output is complete: the generation ends after this token (kConstraintComplete).
  virtual bool Ended() const { return false; }
  // allowed[id] = 1 iff token id may come next (allowed has the vocabulary's size); returns how
  // many are allowed.
  virtual int64_t Mask(std::span<uint8_t> allowed) = 0;
  // Advances by the drawn token; false when it was not allowed.
  virtual bool Accept(int32_t token) = 0;
  // Tokens of the shortest valid ending from here (0: the output may end now); -1: not known, no
  // budget is kept.
  virtual int64_t CloseCost() { return -1; }
  // The same after `token`, without advancing; -1 when the token is not allowed.
  virtual int64_t CloseCostAfter(int32_t /*token*/) { return -1; }
  // From now on Mask allows only the next token of the shortest ending.
  virtual void BeginClosing() {}
  virtual bool closing() const { return false; }
};

struct GeneratorOptions {
  // Proposes the drafts of speculative decoding (NgramDrafter, ReplayDrafter); null: every step
  // is one plain decode. Speculation also needs Session::max_verify_rows() > 1.
  std::shared_ptr<Drafter> drafter;
  SpeculateOptions speculate;  // draft_max, the adaptive policy, its clock
};

struct GenerationParams {
  SamplingParams sampling{};
  int64_t max_tokens = 1;  // >= 1: tokens to emit at most (kLength)
  // Emitting one of these ends the generation (kEos); the token is handed out first. Empty: none
  // (generation then runs to max_tokens, the context, or the callback's stop). The caller keeps
  // the ids alive for the generation.
  std::span<const int32_t> end_tokens{};
  // Null: unconstrained. Not owned; a constrained generation never speculates.
  TokenConstraint* constraint = nullptr;
};

enum class FinishReason {
  kEos,                 // an end token was emitted
  kLength,              // max_tokens emitted
  kContext,             // the context is full: the last token could not be fed
  kStopped,             // the callback asked to stop (stop string, cancellation, caller's end)
  kConstraintComplete,  // the constraint's output is complete
  kError,               // the session failed, or no token satisfied the constraint
};
const char* FinishReasonName(FinishReason reason);  // "eos", "length", ...

// One step of a generation, for statistics.
struct GenerationStep {
  int64_t index = 0;     // 0: the first token, drawn from the prompt's logits (pass.rows = 0)
  SpeculativePass pass;  // the session pass: rows 1 = a plain decode, more = a verify pass
  std::span<const int32_t> tokens;  // drawn by the step (the stop rules may hand out fewer)
  int64_t position = 0;             // Session::position() after the step
  double seconds = 0;               // wall time of the step: its pass, commit and draws
  SessionStats delta;               // the session's counters over the step
};

class GenerationCallbacks {
 public:
  virtual ~GenerationCallbacks() = default;
  // Before each step touches the session (for counters the engine does not keep: /proc I/O).
  virtual void OnStepStart() {}
  // After each step, before its tokens are handed out.
  virtual void OnStep(const GenerationStep& /*step*/) {}
  // Each emitted token, in order, with the logits it was drawn from (valid during the call; the
  // raw model logits, before penalties). False: stop after this token (kStopped).
  virtual bool OnToken(int32_t token, std::span<const float> logits) = 0;
};

struct GenerationResult {
  FinishReason reason = FinishReason::kLength;
  Status status = Status::Ok();  // the error of kError
  int64_t tokens = 0;            // tokens handed out
};

class Generator {
 public:
  // `session` must outlive the Generator; `info` is its engine's (vocabulary, context capacity).
  Generator(Session* session, const ModelInfo& info, GeneratorOptions options);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Generates after `prompt`, which the session has been fed (its last logits are the prompt's).
  // A speculating Generator keeps its policy's measurements from one generation to the next.
  GenerationResult Generate(std::span<const int32_t> prompt, const GenerationParams& params,
                            GenerationCallbacks& callbacks);

  // The last generation: whether it speculated, its passes (step 0 is none), and the tokens it
  // fed the session, in order (every drawn token but the last, also those drawn past a stop).
  bool speculated() const { return speculating_; }
  const SpeculativeTotals& totals() const { return totals_; }
  std::span<const int32_t> fed() const;

 private:
  // Draws one token from `logits` (masked when the constraint is active); -1: nothing allowed.
  int32_t Draw(std::span<const float> logits, int64_t budget);
  // Runs one step; fills step_ and step_tokens_.
  Status Step(int64_t index, int64_t budget);

  Session* session_;
  const int64_t vocab_;
  const int64_t capacity_;
  GeneratorOptions options_;
  std::unique_ptr<Speculator> speculator_;  // null without a drafter or verify rows
  std::optional<Sampler> sampler_;
  TokenConstraint* constraint_ = nullptr;
  bool speculating_ = false;
  std::vector<uint8_t> allowed_;      // the constraint's mask
  std::vector<int32_t> step_tokens_;  // one step's tokens
  std::vector<int32_t> drawn_;        // every token drawn this generation
  bool last_fed_ = false;             // the last drawn token has been fed too (an error after it)
  GenerationStep step_;
  SpeculativeTotals totals_;
};

// The difference of two snapshots of a session's counters (after - before).
SessionStats StatsSince(const SessionStats& after, const SessionStats& before);

}  // namespace deltafin
