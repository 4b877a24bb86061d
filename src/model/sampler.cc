// Sampler implementation (see sampler.h for the exact procedure).
#include "deltafin/sampler.h"

#include <algorithm>
#include <cmath>

#include "deltafin/engine.h"

namespace deltafin {

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {}

int32_t Sampler::Sample(std::span<const float> logits) { return Sample(logits, {}); }

int32_t Sampler::Sample(std::span<const float> logits, std::span<const uint8_t> allowed) {
  const bool masked = !allowed.empty();
  if (!masked && (params_.temperature <= 0 || logits.empty())) return ArgmaxToken(logits);
  if (masked && params_.temperature <= 0) {
    int32_t best = -1;
    for (size_t i = 0; i < logits.size() && i < allowed.size(); ++i) {
      if (allowed[i] && (best < 0 || logits[i] > logits[static_cast<size_t>(best)])) {
        best = static_cast<int32_t>(i);
      }
    }
    return best;
  }
  cand_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (masked && (i >= allowed.size() || !allowed[i])) continue;
    if (std::isfinite(logits[i])) cand_.push_back({logits[i], static_cast<int32_t>(i)});
  }
  if (cand_.empty()) {
    if (!masked) return ArgmaxToken(logits);
    for (size_t i = 0; i < allowed.size(); ++i) {
      if (allowed[i]) return static_cast<int32_t>(i);  // only non-finite logits are allowed
    }
    return -1;
  }
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
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += probs_[i];
  // A uniform double in [0, 1) from the top 53 bits.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * kept;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (u < acc) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace deltafin
