#include "kernels/ref/activation_ref.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/activation_constants.h"

namespace deltafin::kernels::ref {

float ExpF32(float x) {
  using namespace activation;  // NOLINT(google-build-using-namespace): the constants' own header
  // fmin/fmax keep a NaN away from the integer conversion below (SituInPlace restores NaN).
  x = std::fmin(std::fmax(x, kExpMin), kExpMax);
  const float n = (x * kLog2E + kRoundMagic) - kRoundMagic;
  float r = std::fma(n, kMinusLn2Hi, x);
  r = std::fma(n, kMinusLn2Lo, r);
  float p = kExpC7;
  p = std::fma(p, r, kExpC6);
  p = std::fma(p, r, kExpC5);
  p = std::fma(p, r, kExpC4);
  p = std::fma(p, r, kExpC3);
  p = std::fma(p, r, kExpC2);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) * (int32_t{1} << 23);
  float scale = 0;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

float TanhF32(float x) {
  using namespace activation;  // NOLINT(google-build-using-namespace)
  const float a = std::fabs(x);
  if (a < kTanhSmall) {
    const float s = x * x;
    float q = kTanhQ5;
    q = std::fma(q, s, kTanhQ4);
    q = std::fma(q, s, kTanhQ3);
    q = std::fma(q, s, kTanhQ2);
    q = std::fma(q, s, kTanhQ1);
    q = std::fma(q, s, kTanhQ0);
    return std::fma(x * s, q, x);
  }
  const float e = ExpF32(2.0f * std::fmin(a, kTanhSaturate));
  const float t = 1.0f - 2.0f / (e + 1.0f);
  return x < 0 ? -t : t;
}

float Situ(float gate, float up, float beta, float linear_beta) {
  if (std::isnan(gate) || std::isnan(up)) return gate + up;
  const float bounded_gate = TanhF32(gate / beta) * beta;
  const float sigmoid = 1.0f / (1.0f + ExpF32(-gate));
  const float bounded_up = TanhF32(up / linear_beta) * linear_beta;
  return (bounded_gate * sigmoid) * bounded_up;
}

float Exp(float x) {
  using namespace activation;  // NOLINT(google-build-using-namespace)
  if (std::isnan(x)) return x;
  if (x < kExpMin) return 0.0f;
  if (x > kExpMax) return std::numeric_limits<float>::infinity();
  return ExpF32(x);
}

float Sigmoid(float x) { return 1.0f / (1.0f + Exp(-x)); }

float Silu(float x) { return x * Sigmoid(x); }

void Softmax(float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > m) m = x[i];  // false for NaN
  }
  float p[32] = {};
  for (int64_t i = 0; i < n; ++i) {
    x[i] = Exp(x[i] - m);
    p[i % 32] += x[i];
  }
  for (int w = 16; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) p[i] += p[i + w];
  }
  const float inv = 1.0f / p[0];
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace deltafin::kernels::ref
