#include "kernels/ref/matvec_ref.h"

#include <cmath>

#include "quant/bf16.h"
#include "quant/mxfp4.h"

namespace deltafin::kernels::ref {

namespace {

constexpr int kLanes = 32;

// Balanced pairwise reduction of the 32 partial sums (the documented order).
inline float ReduceLanes(float* p) {
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) p[i] += p[i + width];
  }
  return p[0];
}

// Accumulates a[c]*b[c] into partial c % 32 with a fused multiply-add (one rounding per step, as
// every SIMD target does it).
template <typename LoadA>
inline float DotLanes(LoadA load_a, const float* b, int64_t n) {
  float p[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) p[l] = std::fma(load_a(c + l), b[c + l], p[l]);
  }
  for (int l = 0; c < n; ++c, ++l) p[l] = std::fma(load_a(c), b[c], p[l]);
  return ReduceLanes(p);
}

}  // namespace

float DotF32(const float* a, const float* b, int64_t n) {
  return DotLanes([a](int64_t i) { return a[i]; }, b, n);
}

void MatTMulF32(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y) {
  MatTMulF32Part(w, cols, rows, cols, x, rows, n, true, y, cols);
}

void MatTMulF32Part(const float* w, int64_t w_stride, int64_t rows, int64_t cols, const float* x,
                    int64_t x_stride, int64_t n, bool first, float* y, int64_t y_stride) {
  for (int64_t v = 0; v < n; ++v) {
    float* yv = y + v * y_stride;
    const float* xv = x + v * x_stride;
    if (first) {
      for (int64_t c = 0; c < cols; ++c) yv[c] = 0.0f;
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) yv[c] = std::fma(w[r * w_stride + c], xv[r], yv[c]);
    }
  }
}

void MatVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = w + r * cols;
    y[r] = DotLanes([row](int64_t i) { return Bf16ToF32(row[i]); }, x, cols);
  }
}

void MatTVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
  for (int64_t c = 0; c < cols; ++c) y[c] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = w + r * cols;
    const float xr = x[r];
    for (int64_t c = 0; c < cols; ++c) y[c] = std::fma(Bf16ToF32(row[c]), xr, y[c]);
  }
}

void MatVecMxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* x, float* y) {
  const int64_t packed_cols = cols / 2, groups = cols / kMxfp4GroupSize;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* prow = packed + r * packed_cols;
    const uint8_t* srow = scales + r * groups;
    float p[kLanes] = {};
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = E8m0ToF32(srow[g]);
      const uint8_t* bytes = prow + g * (kMxfp4GroupSize / 2);
      const float* xg = x + g * kMxfp4GroupSize;
      for (int t = 0; t < kMxfp4GroupSize; t += 2) {
        const uint8_t b = bytes[t / 2];
        // Exact: a 2-bit-mantissa value times a power of two.
        p[t] = std::fma(kE2m1Values[b & 0x0f] * scale, xg[t], p[t]);
        p[t + 1] = std::fma(kE2m1Values[b >> 4] * scale, xg[t + 1], p[t + 1]);
      }
    }
    y[r] = ReduceLanes(p);
  }
}

void MatVecI8(const int8_t* q, const float* scales, int64_t rows, int64_t cols, const float* x,
              float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* row = q + r * cols;
    y[r] = scales[r] * DotLanes([row](int64_t i) { return static_cast<float>(row[i]); }, x, cols);
  }
}

}  // namespace deltafin::kernels::ref
