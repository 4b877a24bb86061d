// Scalar references of kernels/kda_state.h: the KDA state step written as the plain loops of
// docs/MODEL.md §4.4, four passes over S, every product and sum its own IEEE operation. The SIMD
// kernels must match them bit for bit (kernels_test).
#pragma once

#include <cstdint>

namespace deltafin::kernels::ref {

// kernels::KdaUpdate.
void KdaUpdate(float* S, const float* g, const float* k, const float* v, float beta, int64_t dim,
               float* delta);
// out = Σ_kk q[kk]·S[kk][:] (increasing kk, from +0).
void KdaRead(const float* S, const float* q, int64_t dim, float* out);

}  // namespace deltafin::kernels::ref
