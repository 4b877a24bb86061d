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

// kernels::ShortConvInPlace (kernels/short_conv.h) written position by position, first to last,
// over a copy of the whole sequence [history; x] (allocates: tests only).
void ShortConvInPlace(const float* weight, int64_t taps, float* history, float* x, int64_t n,
                      int64_t width, int64_t c0, int64_t c1);

}  // namespace deltafin::kernels::ref
