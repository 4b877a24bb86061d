// The KDA recurrence's state step for one head and one position (docs/MODEL.md §4.4): the inner
// loop of every KDA layer, run positions × heads times per layer in a prefill wave. The state S is
// [dim k, dim v] fp32, row-major (row kk holds S[kk][0..dim)).
//
// Every state and output element gets its multiplies and adds as separate IEEE operations (no
// fused multiply-add), in the order of the scalar references in ref/kda_ref.h; the sums over k run
// in increasing k for each element on its own. Columns of S never mix, so the vector code (lanes
// across v) gives the same bits on every Highway target. The forward pass and the verify-pass
// replay (model/kda.cc) both use these functions, so a replayed state equals the decoded one.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// 1. decay rows S[kk][:] *= g[kk]; 2. δ = v − Σ_kk k[kk]·S[kk][:]; 3. S += β·k·δᵀ. Writes δ to
// `delta` [dim].
void KdaUpdate(float* S, const float* g, const float* k, const float* v, float beta, int64_t dim,
               float* delta);

// KdaUpdate, then out = Σ_kk q[kk]·S[kk][:] starting from +0, in two passes over S instead of four
// (each column block is decayed and read for δ, then updated and read for `out`). `delta` and `out`
// [dim] must not overlap each other or the inputs.
void KdaUpdateRead(float* S, const float* g, const float* k, const float* v, float beta,
                   const float* q, int64_t dim, float* delta, float* out);

}  // namespace deltafin::kernels
