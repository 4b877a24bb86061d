#include "kernels/ref/kda_ref.h"

#include <cstddef>
#include <vector>

namespace deltafin::kernels::ref {

void KdaUpdate(float* S, const float* g, const float* k, const float* v, float beta, int64_t dim,
               float* delta) {
  for (int64_t kk = 0; kk < dim; ++kk) {
    for (int64_t vv = 0; vv < dim; ++vv) S[kk * dim + vv] *= g[kk];
  }
  for (int64_t vv = 0; vv < dim; ++vv) delta[vv] = v[vv];
  for (int64_t kk = 0; kk < dim; ++kk) {
    for (int64_t vv = 0; vv < dim; ++vv) delta[vv] -= k[kk] * S[kk * dim + vv];
  }
  for (int64_t kk = 0; kk < dim; ++kk) {
    const float bk = beta * k[kk];
    for (int64_t vv = 0; vv < dim; ++vv) S[kk * dim + vv] += bk * delta[vv];
  }
}

void KdaRead(const float* S, const float* q, int64_t dim, float* out) {
  for (int64_t vv = 0; vv < dim; ++vv) out[vv] = 0.0f;
  for (int64_t kk = 0; kk < dim; ++kk) {
    for (int64_t vv = 0; vv < dim; ++vv) out[vv] += q[kk] * S[kk * dim + vv];
  }
}

void ShortConvInPlace(const float* weight, int64_t taps, float* history, float* x, int64_t n,
                      int64_t width, int64_t c0, int64_t c1) {
  const int64_t past = taps - 1;
  std::vector<float> seq(static_cast<size_t>((past + n) * width));
  for (int64_t i = 0; i < past * width; ++i) seq[static_cast<size_t>(i)] = history[i];
  for (int64_t i = 0; i < n * width; ++i) seq[static_cast<size_t>(past * width + i)] = x[i];
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      float acc = 0.0f;
      for (int64_t j = 0; j < taps; ++j) {
        acc += weight[ch * taps + j] * seq[static_cast<size_t>((t + j) * width + ch)];
      }
      x[t * width + ch] = acc;
    }
  }
  for (int64_t r = 0; r < past; ++r) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      history[r * width + ch] = seq[static_cast<size_t>((n + r) * width + ch)];
    }
  }
}

}  // namespace deltafin::kernels::ref
