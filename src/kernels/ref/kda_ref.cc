#include "kernels/ref/kda_ref.h"

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

}  // namespace deltafin::kernels::ref
