// Element-wise and small reduction ops of the K3 forward pass (docs/MODEL.md §4), in fp32.
// Each one is written to match the reference's operation order; comments say where that matters.
#pragma once

#include <cstdint>
#include <span>

namespace deltafin {

// Sigmoid, SiLU, exp and softmax are kernels (kernels/activation.h): the engine's own exp,
// vectorised, the same bits on every CPU.

// 1/sqrt(mean(x²) + eps) over x[0, n), in fp32: RMSNorm's statistic, and AttnRes's for a source.
float InvRms(const float* x, int64_t n, float eps);
// out = w ⊙ (x · InvRms(x)); `w` may be null (no weight). In-place (out == x) is allowed.
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out);
// RmsNorm of each of `rows` rows of width `width` (a wave's positions, split over the pool).
void RmsNormRows(const float* x, const float* w, int64_t rows, int64_t width, float eps,
                 float* out);
// out[i] = out[i] + v[i] for i in [0, count) (one IEEE add each; split over the pool).
void AddRows(const float* v, int64_t count, float* out);

// SiTU is a kernel (kernels/activation.h): a wave applies it to every FFN's whole rows.

// Block Attention Residuals mix (docs/MODEL.md §4.3): sources[j] are n_sources vectors of width
// `width` (the running partial last); score_j = Σ_d rms_normalise(v_j)[d]·query[d]; α =
// softmax(score); out = Σ_j α_j·v_j over the un-normalised sources. `alpha` receives the weights if
// non-null. `inv_rms`, if non-null, holds 1/sqrt(mean(v_j²) + eps) of the first n_sources − 1
// sources, computed by InvRms (a wave's anchors: each is mixed by every later layer).
void AttnResMix(const float* const* sources, int64_t n_sources, const float* query, int64_t width,
                float eps, float* out, float* alpha = nullptr, const float* inv_rms = nullptr);

// Router (docs/MODEL.md §4.7): sigmoid scores, correction bias for selection only, optional grouped
// top-k (group score = sum of the group's 2 best selection scores; best groups kept, ties to the
// lower group id), top-k among experts of kept groups (ties to the lower expert id), weights from
// the raw scores renormalised with +1e-20 and multiplied by the scaling factor.
struct RouterConfig {
  int64_t num_experts;
  int64_t top_k;
  int64_t num_groups;
  int64_t topk_groups;
  bool renormalize;
  float scaling_factor;
};
// `logits`: [num_experts] router logits. Writes ids/weights [top_k] in selection order.
// `scratch`: at least 2*num_experts + num_groups floats. No allocation.
void Route(const RouterConfig& rc, const float* logits, const float* correction_bias,
           float* scratch, int32_t* ids, float* weights);

}  // namespace deltafin
