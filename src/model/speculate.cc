// Speculator, the drafters and the policy (see deltafin/speculate.h and docs/SPECULATION.md).
#include "deltafin/speculate.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace deltafin {

int64_t NgramDrafter::Propose(std::span<const int32_t> context, std::span<int32_t> out) {
  const auto len = static_cast<int64_t>(context.size());
  if (out.empty()) return 0;
  for (int64_t n = std::min(max_n_, len - 1); n >= std::max<int64_t>(min_n_, 1); --n) {
    const int32_t* suffix = context.data() + (len - n);
    // Most recent earlier occurrence: start j with j + n < len (something follows it).
    for (int64_t j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix, suffix + n, context.data() + j)) continue;
      const int64_t from = j + n;
      const int64_t count = std::min<int64_t>(static_cast<int64_t>(out.size()), len - from);
      std::copy_n(context.data() + from, count, out.data());
      return count;
    }
  }
  return 0;
}

int64_t ReplayDrafter::Propose(std::span<const int32_t> context, std::span<int32_t> out) {
  const int64_t at = static_cast<int64_t>(context.size()) - prompt_length_;
  if (at < 0 || at >= static_cast<int64_t>(continuation_.size())) return 0;
  const int64_t count = std::min<int64_t>(static_cast<int64_t>(out.size()),
                                          static_cast<int64_t>(continuation_.size()) - at);
  std::copy_n(continuation_.data() + at, count, out.data());
  return count;
}

Speculator::Speculator(Session* session, Drafter* drafter, const SpeculateOptions& options,
                       int64_t capacity)
    : session_(session), drafter_(drafter), options_(options), capacity_(capacity) {
  const int64_t rows = session->max_verify_rows();
  options_.draft_max = std::clamp<int64_t>(options_.draft_max, 0, std::max<int64_t>(rows - 1, 0));
  if (options_.draft_max == 0) drafter_ = nullptr;
  context_.reserve(static_cast<size_t>(capacity) + 1);
  rows_.resize(static_cast<size_t>(std::max<int64_t>(rows, 1)));
  cost_of_rows_.assign(rows_.size() + 1, 0);
  positions_.assign(rows_.size(), {});
  if (drafter_ != nullptr) {
    logits_.resize(static_cast<size_t>(rows) * session->Logits().size());
  }
}

double Speculator::Now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::span<const float> Speculator::EmittedLogits(size_t i) const {
  if (last_.rows <= 1) return session_->Logits();
  const size_t vocab = session_->Logits().size();
  return {logits_.data() + i * vocab, vocab};
}

void Speculator::Start(std::span<const int32_t> prompt) {
  context_.assign(prompt.begin(), prompt.end());
  has_next_ = false;
}

// Expected tokens per pass with k drafts: 1 + a1 + a1·a2 + ... + a1···ak, where ai is the measured
// chance that draft i is accepted once drafts 1..i-1 were (copied text is accepted in long runs,
// so the later drafts of a pass are likelier than the first; a single rate would undervalue them).
// Cost of a pass of r rows: its measured mean when passes of r rows ran, else c1 + (r-1)·cr (the
// line through what was measured: batched rows are not linear in cost on every machine). The k
// with the best expected tokens per second wins (k = 0: a plain decode).
int64_t Speculator::ChooseDrafts(int64_t proposed) {
  if (!options_.adaptive) return proposed;
  if (proposed == 0) return 0;
  // Measure first: a plain decode step for c1, then one verify pass for the per-row cost; the
  // measurements decide from then on.
  if (!have_one_) return 0;
  if (!have_row_) return proposed;
  // Re-measure the 1-row cost every 32 passes: a policy that always drafts would otherwise judge
  // every verify pass against its first (often cold) decode step.
  if (++since_one_ >= 32) return 0;
  const double a = (acc_ + 1) / (drafted_ + 2);
  // A pass with drafts must promise at least 3 % more tokens per second than a plain step: below
  // that the promise is inside the noise of single timed passes (a 2-row pass of a tiny model can
  // time as fast as a 1-row one), and drafts that are almost never accepted would go on being
  // verified for a gain that is not there (the bound on such text is 3 %). With the cost
  // floor below, drafts whose expected yield is under 3 % are never verified, whatever the timings.
  constexpr double kMinGain = 1.03;
  int64_t best = 0;
  double best_rate = kMinGain / cost_one_;
  double expected = 1, power = 1;
  for (int64_t k = 1; k <= proposed; ++k) {
    const auto i = static_cast<size_t>(k);
    // Position k's own rate, pulled towards the overall one while it has few samples.
    power *= (positions_[i].accepted + a) / (positions_[i].reached + 1);
    expected += power;
    // A pass of more rows is never cheaper than a plain step; a timing that says so is noise.
    const double cost =
        std::max(cost_one_, cost_of_rows_[i + 1] > 0 ? cost_of_rows_[i + 1]
                                                     : cost_one_ + double(k) * cost_row_);
    const double rate = expected / cost;
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  // Keep the estimates alive: a probe now and then (1 pass in 64 when the policy has stopped
  // drafting). While drafts are mostly rejected it verifies one draft (bound: one extra row per
  // 64 tokens); while they are mostly accepted it verifies all proposed, so one slow (cold) pass
  // of many rows cannot stop drafting for good (such a pass still yields most of its rows).
  if (best == 0 && ++since_probe_ >= 64) {
    since_probe_ = 0;
    return a > 0.5 ? proposed : 1;
  }
  return best;
}

void Speculator::Observe(int64_t rows, int64_t drafted, int64_t accepted, double seconds) {
  constexpr double kKeep = 0.9;  // exponential decay of the measurements (per pass)
  if (rows == 1) {
    // Decayed faster than the rest: these samples are rarer while the policy drafts.
    cost_one_ = have_one_ ? 0.5 * cost_one_ + 0.5 * seconds : seconds;
    have_one_ = true;
    since_one_ = 0;
  } else if (have_one_) {
    const double per_row = std::max(0.0, (seconds - cost_one_) / double(rows - 1));
    cost_row_ = have_row_ ? kKeep * cost_row_ + (1 - kKeep) * per_row : per_row;
    have_row_ = true;
  }
  if (rows > 1) {
    double& mean = cost_of_rows_[static_cast<size_t>(rows)];
    mean = mean > 0 ? kKeep * mean + (1 - kKeep) * seconds : seconds;
  }
  if (drafted > 0) {
    acc_ = kKeep * acc_ + double(accepted);
    drafted_ = kKeep * drafted_ + double(drafted);
    // Drafts 1..accepted+1 were reached (the one after the accepted run, if any, was rejected).
    for (int64_t i = 1; i <= std::min(drafted, accepted + 1); ++i) {
      DraftPosition& position = positions_[static_cast<size_t>(i)];
      position.reached = kKeep * position.reached + 1;
      position.accepted = kKeep * position.accepted + (i <= accepted ? 1 : 0);
    }
  }
  last_ = {rows, drafted, accepted, seconds};
  totals_.passes += 1;
  totals_.tokens += accepted + 1;
  totals_.drafted += drafted;
  totals_.accepted += accepted;
  totals_.seconds += seconds;
}

Status Speculator::Step(Sampler& sampler, int64_t max_tokens, std::vector<int32_t>* out) {
  out->clear();
  if (max_tokens < 1) return Status::Error("Step needs max_tokens >= 1");
  if (!has_next_) {
    // The first token comes from the prompt's logits: no pass (last_pass() says so).
    last_ = {};
    next_ = sampler.Sample(session_->Logits());
    has_next_ = true;
    context_.push_back(next_);
    out->push_back(next_);
    return Status::Ok();
  }
  const int32_t t0 = next_;
  // Room: the verify rows, the tokens still wanted and the context capacity.
  const int64_t room =
      std::max<int64_t>(0, std::min({session_->max_verify_rows() - 1, max_tokens - 1,
                                     capacity_ - session_->position() - 1}));
  int64_t proposed = 0;
  if (drafter_ != nullptr && room > 0) {
    const int64_t limit = std::min(options_.draft_max, room);
    proposed = drafter_->Propose(context_, {rows_.data() + 1, static_cast<size_t>(limit)});
  }
  const int64_t k = ChooseDrafts(proposed);
  const double t_start = Now();
  const auto elapsed = [&] { return Now() - t_start; };
  if (k == 0) {
    DF_RETURN_IF_ERROR(session_->Decode(t0));
    const double seconds = elapsed();
    next_ = sampler.Sample(session_->Logits());
    context_.push_back(next_);
    out->push_back(next_);
    Observe(1, 0, 0, seconds);
    return Status::Ok();
  }
  rows_[0] = t0;
  const size_t vocab = session_->Logits().size();
  const std::span<const int32_t> fed(rows_.data(), static_cast<size_t>(k + 1));
  const std::span<float> rows_logits(logits_.data(), static_cast<size_t>(k + 1) * vocab);
  DF_RETURN_IF_ERROR(session_->Verify(fed, rows_logits));
  int64_t accepted = 0;
  int32_t token = 0;
  bool all = true;
  for (int64_t i = 1; i <= k; ++i) {
    bool ok = false;
    token = sampler.AcceptOrResample({logits_.data() + static_cast<size_t>(i - 1) * vocab, vocab},
                                     rows_[i], &ok);
    if (!ok) {
      all = false;
      break;
    }
    ++accepted;
    context_.push_back(token);
    out->push_back(token);
  }
  DF_RETURN_IF_ERROR(session_->Commit(accepted));
  const double seconds = elapsed();
  // All accepted: the next token comes from the last row (Logits() after the commit); else the
  // residual draw already made is the next token.
  next_ = all ? sampler.Sample(session_->Logits()) : token;
  context_.push_back(next_);
  out->push_back(next_);
  Observe(k + 1, k, accepted, seconds);
  return Status::Ok();
}

}  // namespace deltafin
