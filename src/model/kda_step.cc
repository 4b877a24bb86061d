#include "model/kda_step.h"

namespace deltafin {

void KdaUpdateState(float* __restrict S, const float* __restrict g, const float* __restrict k,
                    const float* __restrict v, float beta, int64_t dim, float* __restrict delta) {
  for (int64_t kk = 0; kk < dim; ++kk) {
    float* __restrict row = S + kk * dim;
    const float gk = g[kk];
    for (int64_t vv = 0; vv < dim; ++vv) row[vv] *= gk;
  }
  for (int64_t vv = 0; vv < dim; ++vv) delta[vv] = v[vv];
  for (int64_t kk = 0; kk < dim; ++kk) {
    const float* __restrict row = S + kk * dim;
    const float kv = k[kk];
    for (int64_t vv = 0; vv < dim; ++vv) delta[vv] -= kv * row[vv];
  }
  for (int64_t kk = 0; kk < dim; ++kk) {
    float* __restrict row = S + kk * dim;
    const float bk = beta * k[kk];
    for (int64_t vv = 0; vv < dim; ++vv) row[vv] += bk * delta[vv];
  }
}

void KdaReadState(const float* __restrict S, const float* __restrict q, int64_t dim,
                  float* __restrict out) {
  for (int64_t vv = 0; vv < dim; ++vv) out[vv] = 0.0f;
  for (int64_t kk = 0; kk < dim; ++kk) {
    const float* __restrict row = S + kk * dim;
    const float qk = q[kk];
    for (int64_t vv = 0; vv < dim; ++vv) out[vv] += qk * row[vv];
  }
}

}  // namespace deltafin
