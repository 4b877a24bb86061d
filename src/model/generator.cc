// Generator: the decode driver (see deltafin/generator.h and docs/SPECULATION.md "One driver").
#include "deltafin/generator.h"

#include <algorithm>
#include <chrono>

namespace deltafin {

namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kContext:
      return "context";
    case FinishReason::kStopped:
      return "stopped";
    case FinishReason::kConstraintComplete:
      return "constraint_complete";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

SessionStats StatsSince(const SessionStats& a, const SessionStats& b) {
  SessionStats d;
  d.positions = a.positions - b.positions;
  d.forward_calls = a.forward_calls - b.forward_calls;
  d.expert_loads = a.expert_loads - b.expert_loads;
  d.expert_cache_hits = a.expert_cache_hits - b.expert_cache_hits;
  d.prefetch_hits = a.prefetch_hits - b.prefetch_hits;
  d.prefetch_issued = a.prefetch_issued - b.prefetch_issued;
  d.prefetch_wasted = a.prefetch_wasted - b.prefetch_wasted;
  d.expert_bytes_read = a.expert_bytes_read - b.expert_bytes_read;
  d.expert_bytes_needed = a.expert_bytes_needed - b.expert_bytes_needed;
  d.spine_bytes_read = a.spine_bytes_read - b.spine_bytes_read;
  d.io_wait_seconds = a.io_wait_seconds - b.io_wait_seconds;
  d.compute_seconds = a.compute_seconds - b.compute_seconds;
  for (size_t f = 0; f < kOpFamilyCount; ++f) d.op_seconds[f] = a.op_seconds[f] - b.op_seconds[f];
  return d;
}

Generator::Generator(Session* session, const ModelInfo& info, GeneratorOptions options)
    : session_(session),
      vocab_(info.vocab_size),
      capacity_(info.context_capacity),
      options_(std::move(options)) {
  const int64_t rows = session->max_verify_rows();
  if (options_.drafter != nullptr && rows > 1 && options_.speculate.draft_max > 0) {
    speculator_ = std::make_unique<Speculator>(session, options_.drafter.get(), options_.speculate,
                                               capacity_);
  }
  allowed_.resize(static_cast<size_t>(vocab_));
  step_tokens_.reserve(static_cast<size_t>(std::max<int64_t>(rows, 1)));
  drawn_.reserve(static_cast<size_t>(capacity_) + 1);
}

Generator::~Generator() = default;

std::span<const int32_t> Generator::fed() const {
  const size_t pending = drawn_.empty() || last_fed_ ? 0 : 1;
  return {drawn_.data(), drawn_.size() - pending};
}

// A constrained draw keeps the constraint's shortest ending within `budget` (the tokens the
// generation may still emit, this one included): the invariant is CloseCost() <= budget. A drawn
// token is kept only when its own shortest ending fits in the tokens after it (else it leaves the
// mask and the draw repeats: the same distribution restricted to the tokens that fit); when the
// shortest ending takes the whole budget, the constraint emits exactly that ending.
int32_t Generator::Draw(std::span<const float> logits, int64_t budget) {
  TokenConstraint* c = constraint_;
  if (c == nullptr) return sampler_->Sample(logits);
  if (!c->Active()) {
    const int32_t token = sampler_->Sample(logits);
    c->Accept(token);  // free output: the constraint only follows
    return token;
  }
  const int64_t cost = c->closing() ? -1 : c->CloseCost();
  if (cost >= 0 && cost >= budget) c->BeginClosing();
  int32_t next = -1;
  if (c->Mask(allowed_) > 0) {
    for (;;) {
      next = sampler_->Peek(logits, allowed_);
      if (next < 0 || c->closing() || cost < 0) break;
      const int64_t after = c->CloseCostAfter(next);
      if (after >= 0 && after <= budget - 1) break;
      allowed_[static_cast<size_t>(next)] = 0;  // its shortest ending no longer fits
    }
  }
  if (next < 0 && !c->closing() && cost >= 0) {
    // No drawn token fits: the shortest ending does (CloseCost() <= budget).
    c->BeginClosing();
    if (c->Mask(allowed_) > 0) next = sampler_->Peek(logits, allowed_);
  }
  if (next < 0 || !c->Accept(next)) return -1;
  sampler_->Record(next);
  return next;
}

Status Generator::Step(int64_t index, int64_t budget) {
  step_tokens_.clear();
  const SessionStats before = session_->stats();
  const double start = Now();
  if (speculating_) {
    DF_RETURN_IF_ERROR(speculator_->Step(*sampler_, budget, &step_tokens_));
    step_.pass = speculator_->last_pass();
    drawn_.insert(drawn_.end(), step_tokens_.begin(), step_tokens_.end());
  } else {
    step_.pass = {};
    if (index > 0) {
      const double fed_at = Now();
      DF_RETURN_IF_ERROR(session_->Decode(drawn_.back()));
      last_fed_ = true;
      step_.pass = {.rows = 1, .drafted = 0, .accepted = 0, .seconds = Now() - fed_at};
    }
    const int32_t token = Draw(session_->Logits(), budget);
    if (token < 0) {
      return Status::Error("constrained decoding: no token of the vocabulary continues the output");
    }
    drawn_.push_back(token);
    last_fed_ = false;
    step_tokens_.push_back(token);
  }
  step_.index = index;
  step_.tokens = step_tokens_;
  step_.position = session_->position();
  step_.seconds = Now() - start;
  step_.delta = StatsSince(session_->stats(), before);
  if (step_.pass.rows > 0) {
    totals_.passes += 1;
    totals_.tokens += step_.pass.accepted + 1;
    totals_.drafted += step_.pass.drafted;
    totals_.accepted += step_.pass.accepted;
    totals_.seconds += step_.pass.seconds;
  }
  return Status::Ok();
}

GenerationResult Generator::Generate(std::span<const int32_t> prompt,
                                     const GenerationParams& params,
                                     GenerationCallbacks& callbacks) {
  GenerationResult result;
  drawn_.clear();
  last_fed_ = false;
  totals_ = {};
  if (params.max_tokens < 1) {
    result.reason = FinishReason::kError;
    result.status = Status::Error("generation needs max_tokens >= 1");
    return result;
  }
  sampler_.emplace(params.sampling);
  sampler_->SetPrompt(prompt);
  sampler_->Reserve(static_cast<size_t>(vocab_));
  constraint_ = params.constraint;
  speculating_ = speculator_ != nullptr && constraint_ == nullptr;
  if (speculating_) speculator_->Start(prompt);
  // Tokens that can be emitted before the context is full: each one but the last is fed.
  const int64_t room = capacity_ - session_->position() + 1;
  const int64_t limit = std::min(params.max_tokens, room);
  auto ends = [&](int32_t token) {
    return std::find(params.end_tokens.begin(), params.end_tokens.end(), token) !=
           params.end_tokens.end();
  };
  for (int64_t index = 0;; ++index) {
    callbacks.OnStepStart();
    if (Status st = Step(index, limit - result.tokens); !st.ok()) {
      result.reason = FinishReason::kError;
      result.status = st;
      return result;
    }
    callbacks.OnStep(step_);
    for (size_t i = 0; i < step_tokens_.size(); ++i) {
      const int32_t token = step_tokens_[i];
      const bool go_on = callbacks.OnToken(
          token, speculating_ ? speculator_->EmittedLogits(i) : session_->Logits());
      ++result.tokens;
      std::optional<FinishReason> end;
      if (ends(token)) {
        end = FinishReason::kEos;
      } else if (constraint_ != nullptr && constraint_->Ended()) {
        end = FinishReason::kConstraintComplete;
      } else if (result.tokens >= limit) {
        end = result.tokens >= params.max_tokens ? FinishReason::kLength : FinishReason::kContext;
      } else if (!go_on) {
        end = FinishReason::kStopped;
      }
      if (end) {
        result.reason = *end;
        return result;
      }
    }
  }
}

}  // namespace deltafin
