// Sampler implementation (see sampler.h for the exact procedure).
#include "deltafin/sampler.h"

#include <algorithm>
#include <cmath>

#include "deltafin/engine.h"

namespace deltafin {

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {
  if (params_.repetition_penalty != 1 && params_.repeat_last_n > 0) {
    window_.resize(static_cast<size_t>(params_.repeat_last_n));
  }
}

void Sampler::Size(size_t vocab) {
  if (counts_.size() >= vocab) return;
  counts_.resize(vocab, 0);
  applied_.resize(vocab, 0);
  work_.resize(vocab);
  produced_.reserve(vocab);
}

void Sampler::Reserve(size_t vocab) {
  cand_.reserve(vocab);
  probs_.reserve(vocab);
  if (params_.penalized()) Size(vocab);
}

void Sampler::SetPrompt(std::span<const int32_t> prompt) {
  if (window_.empty()) return;
  for (int32_t t : prompt) {
    window_[window_next_] = t;
    window_next_ = (window_next_ + 1) % window_.size();
    window_size_ = std::min(window_size_ + 1, window_.size());
  }
}

void Sampler::Record(int32_t token) {
  if (!params_.penalized() || token < 0) return;
  if (!window_.empty()) {
    window_[window_next_] = token;
    window_next_ = (window_next_ + 1) % window_.size();
    window_size_ = std::min(window_size_ + 1, window_.size());
  }
  if (params_.frequency_penalty == 0 && params_.presence_penalty == 0) return;
  Size(static_cast<size_t>(token) + 1);
  if (counts_[static_cast<size_t>(token)]++ == 0) produced_.push_back(token);
}

std::span<const float> Sampler::Penalize(std::span<const float> logits) {
  if (!params_.penalized()) return logits;
  Size(logits.size());
  std::copy(logits.begin(), logits.end(), work_.begin());
  const auto r = static_cast<float>(params_.repetition_penalty);
  for (size_t i = 0; i < window_size_; ++i) {
    const int32_t t = window_[i];
    if (t < 0 || static_cast<size_t>(t) >= logits.size() || applied_[static_cast<size_t>(t)]) {
      continue;
    }
    applied_[static_cast<size_t>(t)] = 1;
    float& l = work_[static_cast<size_t>(t)];
    l = l > 0 ? l / r : l * r;
  }
  for (size_t i = 0; i < window_size_; ++i) {
    const int32_t t = window_[i];
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) applied_[static_cast<size_t>(t)] = 0;
  }
  for (int32_t t : produced_) {
    if (static_cast<size_t>(t) >= logits.size()) continue;
    const int32_t n = counts_[static_cast<size_t>(t)];
    work_[static_cast<size_t>(t)] -=
        static_cast<float>(n * params_.frequency_penalty + params_.presence_penalty);
  }
  return {work_.data(), logits.size()};
}

// The processed distribution of a draw: the finite candidates (only ids with allowed[id] != 0 when
// `allowed` is non-empty) sorted best first in cand_, their unnormalised probabilities in probs_,
// and the nucleus size. 0: the draw is greedy, or there is no finite candidate.
size_t Sampler::Prepare(std::span<const float> logits, std::span<const uint8_t> allowed) {
  if (params_.temperature <= 0 || logits.empty()) return 0;
  const bool masked = !allowed.empty();
  cand_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (masked && (i >= allowed.size() || !allowed[i])) continue;
    if (std::isfinite(logits[i])) cand_.emplace_back(logits[i], static_cast<int32_t>(i));
  }
  if (cand_.empty()) return 0;
  auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t n = cand_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = static_cast<size_t>(params_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<ptrdiff_t>(n), cand_.end(),
                      better);
    cand_.resize(n);
  } else {
    std::sort(cand_.begin(), cand_.end(), better);
  }
  probs_.resize(n);
  const double max_logit = cand_[0].first;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    probs_[i] = std::exp((cand_[i].first - max_logit) / params_.temperature);
    sum += probs_[i];
  }
  // Nucleus: keep the smallest prefix whose probability reaches top_p (at least one token).
  size_t keep = n;
  if (params_.top_p < 1) {
    double mass = 0;
    for (size_t i = 0; i < n; ++i) {
      mass += probs_[i] / sum;
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  return keep;
}

int32_t Sampler::Sample(std::span<const float> logits) { return Sample(logits, {}); }

int32_t Sampler::Sample(std::span<const float> logits, std::span<const uint8_t> allowed) {
  const int32_t token = Peek(logits, allowed);
  Record(token);
  return token;
}

int32_t Sampler::Peek(std::span<const float> raw, std::span<const uint8_t> allowed) {
  const std::span<const float> logits = Penalize(raw);
  const size_t keep = Prepare(logits, allowed);
  if (keep == 0) {
    if (allowed.empty()) return ArgmaxToken(logits);
    // Greedy over the allowed ids (ties to the lowest; the first allowed one when every allowed
    // logit is non-finite); -1 when nothing is allowed.
    int32_t best = -1;
    for (size_t i = 0; i < logits.size() && i < allowed.size(); ++i) {
      if (allowed[i] && (best < 0 || logits[i] > logits[static_cast<size_t>(best)])) {
        best = static_cast<int32_t>(i);
      }
    }
    return best;
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += probs_[i];
  // A uniform double in [0, 1) from the top 53 bits.
  const double u = Uniform() * kept;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (u < acc) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

int32_t Sampler::AcceptOrResample(std::span<const float> logits, int32_t draft, bool* accepted) {
  // The token of this position is drawn exactly as Sample draws it (one uniform number, inverse
  // CDF over the processed distribution); the draft is kept iff it is that token. So the token
  // has distribution p (P(keep d) = p(d), as in the accept-then-resample rule), and, since every
  // emitted token takes exactly one draw whether it came from a verify row or a plain step, a
  // seed gives the same tokens with speculation on or off, however many drafts each pass checked
  // (the verify rows' logits are bit-identical to plain decoding's).
  const int32_t token = Sample(logits);  // penalised, drawn and recorded as in plain decoding
  *accepted = token == draft;
  return token;
}

}  // namespace deltafin
