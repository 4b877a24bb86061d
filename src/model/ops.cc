#include "model/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/attn_res.h"
#include "kernels/matvec.h"
#include "weights/config.h"

namespace deltafin {

float InvRms(const float* x, int64_t n, float eps) {
  return 1.0f / std::sqrt(kernels::DotF32(x, x, n) / static_cast<float>(n) + eps);
}

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  // Normalise first, then weight (reference order).
  kernels::RmsScale(x, InvRms(x, n, eps), w, n, out);
}

void RmsNormRows(const float* x, const float* w, int64_t rows, int64_t width, float eps,
                 float* out) {
  constexpr int64_t kRowGrain = 32;  // rows per part: a decode step stays on its thread
  DefaultPool().ParallelRanges(rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) RmsNorm(x + r * width, w, width, eps, out + r * width);
  });
}

void AddRows(const float* v, int64_t count, float* out) {
  constexpr int64_t kGrain = 32 * 1024;  // elements per part
  DefaultPool().ParallelRanges(count, kGrain, [&](int64_t i0, int64_t i1) {
    kernels::AddScaled(out + i0, 1.0f, v + i0, i1 - i0);  // 1·v is v exactly: out + v
  });
}

void AttnResMix(const float* const* sources, int64_t n_sources, const float* query, int64_t width,
                float eps, float* out, float* alpha, const float* inv_rms_known) {
  // K3 has at most 9 sources (8 anchors + partial); a fixed array keeps this allocation-free
  // (config parsing refuses more than kMaxAttnResSources).
  float scores[kMaxAttnResSources];
  for (int64_t j = 0; j < n_sources && j < kMaxAttnResSources; ++j) {
    const float* v = sources[j];
    const float inv_rms =
        inv_rms_known != nullptr && j + 1 < n_sources ? inv_rms_known[j] : InvRms(v, width, eps);
    // Σ (v·inv_rms)·q = inv_rms · Σ v·q up to rounding; keep the reference order: normalise
    // element-wise, then dot (kernels/attn_res.h).
    scores[j] = kernels::AttnResScore(v, inv_rms, query, width);
  }
  kernels::SoftmaxInPlace(scores, n_sources);
  for (int64_t d = 0; d < width; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < n_sources; ++j) {
    const float a = scores[j];
    const float* v = sources[j];
    kernels::AddScaled(out, a, v, width);
    if (alpha) alpha[j] = a;
  }
}

void Route(const RouterConfig& rc, const float* logits, const float* correction_bias,
           float* scratch, int32_t* ids, float* weights) {
  const int64_t n = rc.num_experts;
  float* scores = scratch;         // [n] raw sigmoid scores (for weights)
  float* selection = scratch + n;  // [n] scores + bias (for choosing); -inf = not eligible
  float* group_scores = scratch + 2 * n;
  constexpr float kIneligible = -std::numeric_limits<float>::infinity();
  std::copy(logits, logits + n, scores);
  kernels::SigmoidInPlace(scores, n);
  for (int64_t e = 0; e < n; ++e) selection[e] = scores[e] + correction_bias[e];
  if (rc.num_groups > 1 && rc.num_groups > rc.topk_groups) {
    const int64_t per_group = n / rc.num_groups;
    for (int64_t g = 0; g < rc.num_groups; ++g) {
      float best = -std::numeric_limits<float>::infinity(), second = best;
      for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
        if (selection[e] > best) {
          second = best;
          best = selection[e];
        } else if (selection[e] > second) {
          second = selection[e];
        }
      }
      group_scores[g] = best + second;
    }
    // Keep the topk_groups best groups (ties: lower group id), mask the others out of selection.
    for (int64_t kept = 0; kept < rc.topk_groups; ++kept) {
      int64_t best_g = -1;
      for (int64_t g = 0; g < rc.num_groups; ++g) {
        if (std::isnan(group_scores[g])) continue;  // already kept
        if (best_g < 0 || group_scores[g] > group_scores[best_g]) best_g = g;
      }
      group_scores[best_g] = std::numeric_limits<float>::quiet_NaN();
    }
    for (int64_t g = 0; g < rc.num_groups; ++g) {
      if (std::isnan(group_scores[g])) continue;
      for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) selection[e] = kIneligible;
    }
  }
  // Top-k by selection score, ties to the lower id, in one pass: ids[0, count) holds the best of
  // the experts seen so far, best first; an expert enters behind every one with a score at least
  // its own, so equal scores keep the lower id first (what k passes of "highest score, lowest id"
  // choose). NaN scores are never chosen while other experts remain.
  const int64_t top_k = rc.top_k;
  int64_t count = 0;
  for (int64_t e = 0; e < n; ++e) {
    const float v = selection[e];
    if (std::isnan(v)) continue;
    if (count == top_k && !(v > selection[ids[top_k - 1]])) continue;
    int64_t pos = count < top_k ? count++ : top_k - 1;
    for (; pos > 0 && v > selection[ids[pos - 1]]; --pos) ids[pos] = ids[pos - 1];
    ids[pos] = static_cast<int32_t>(e);
  }
  for (int64_t e = 0; count < top_k && e < n; ++e) {
    if (std::isnan(selection[e])) ids[count++] = static_cast<int32_t>(e);
  }
  float sum = 0.0f;
  for (int64_t k = 0; k < top_k; ++k) {
    weights[k] = scores[ids[k]];
    sum += scores[ids[k]];
  }
  for (int64_t k = 0; k < rc.top_k; ++k) {
    if (rc.renormalize) weights[k] = weights[k] / (sum + 1e-20f);
    weights[k] *= rc.scaling_factor;
  }
}

}  // namespace deltafin
