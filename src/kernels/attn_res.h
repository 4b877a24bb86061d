// The two passes of a Block Attention Residuals mix (docs/MODEL.md §4.3) over one source vector,
// as kernels: a 2,048-position wave mixes up to 9 sources of the hidden width twice per layer,
// about 4 G multiply-adds of scalar code at the bench width before these were vectorised.
// model/ops.cc (AttnResMix) composes them with RmsNorm's statistic and the softmax. Both keep the
// reference's operation order (ref/attn_res_ref.h), so every target gives the same bits.
// AddScaled is also LatentMoE's combine (model/moe.cc: r += w_e·y_e per selected expert), and
// RmsScale the element-wise pass of every RMSNorm (model/ops.cc), which a wave runs per position.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// Σ_d (v[d]·inv_rms)·q[d], normalising element-wise first (the reference's order): each term a
// multiply, a multiply and an add (no fused multiply-add), term d into partial d % 32 in increasing
// d, the 32 partials then combined by the balanced tree of kernels/matvec.h.
float AttnResScore(const float* v, float inv_rms, const float* q, int64_t width);

// out[d] += a·v[d] for d in [0, width): a multiply, then an add.
void AddScaled(float* out, float a, const float* v, int64_t width);

// out[d] = w[d]·(x[d]·inv) for d in [0, width), or x[d]·inv when w is null: two multiplies in that
// order (normalise first, then weight). out may be x. (Without w: any vector times a scalar, e.g.
// KDA's l2norm and gate bound.)
void RmsScale(const float* x, float inv, const float* w, int64_t width, float* out);

// x[d] = a·(x[d] + b[d]) for d in [0, width): an add, then a multiply (KDA's decay logits,
// exp(A_log)·(f + dt_bias), one head at a time).
void AddThenScale(float* x, const float* b, float a, int64_t width);

}  // namespace deltafin::kernels
