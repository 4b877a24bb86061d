// Scalar references of kernels/attn_res.h: the definition every SIMD target repeats.
#pragma once

#include <cstdint>

namespace deltafin::kernels::ref {

float AttnResScore(const float* v, float inv_rms, const float* q, int64_t width);
void AddScaled(float* out, float a, const float* v, int64_t width);
void RmsScale(const float* x, float inv, const float* w, int64_t width, float* out);
void AddThenScale(float* x, const float* b, float a, int64_t width);

}  // namespace deltafin::kernels::ref
