// The two passes of a Block Attention Residuals mix (docs/MODEL.md §4.3) over one source vector,
// as kernels: a 2,048-position wave mixes up to 9 sources of the hidden width twice per layer,
// about 4 G multiply-adds of scalar code at the bench width before these were vectorised.
// model/ops.cc (AttnResMix) composes them with RmsNorm's statistic and the softmax. Both keep the
// reference's operation order (ref/attn_res_ref.h), so every target gives the same bits.
// AddScaled is also LatentMoE's combine (model/moe.cc: r += w_e·y_e per selected expert).
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// Σ_d (v[d]·inv_rms)·q[d], normalising element-wise first (the reference's order): each term a
// multiply, a multiply and an add (no fused multiply-add), term d into partial d % 32 in increasing
// d, the 32 partials then combined by the balanced tree of kernels/matvec.h.
float AttnResScore(const float* v, float inv_rms, const float* q, int64_t width);

// out[d] += a·v[d] for d in [0, width): a multiply, then an add.
void AddScaled(float* out, float a, const float* v, int64_t width);

}  // namespace deltafin::kernels
