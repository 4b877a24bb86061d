#include "kernels/ref/attn_res_ref.h"

namespace deltafin::kernels::ref {

float AttnResScore(const float* v, float inv_rms, const float* q, int64_t width) {
  float p[32] = {};
  for (int64_t d = 0; d < width; ++d) p[d % 32] += (v[d] * inv_rms) * q[d];
  for (int w = 16; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) p[i] += p[i + w];
  }
  return p[0];
}

void AddScaled(float* out, float a, const float* v, int64_t width) {
  for (int64_t d = 0; d < width; ++d) out[d] += a * v[d];
}

void RmsScale(const float* x, float inv, const float* w, int64_t width, float* out) {
  for (int64_t d = 0; d < width; ++d) {
    const float normed = x[d] * inv;
    out[d] = w != nullptr ? w[d] * normed : normed;
  }
}

void AddThenScale(float* x, const float* b, float a, int64_t width) {
  for (int64_t d = 0; d < width; ++d) x[d] = a * (x[d] + b[d]);
}

}  // namespace deltafin::kernels::ref
