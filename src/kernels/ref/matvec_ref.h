// Scalar reference implementations of kernels/matvec.h: plain C++, the oracle every SIMD kernel is
// tested against. Same contracts and summation order as documented there.
#pragma once

#include <cstdint>

namespace deltafin::kernels::ref {

void MatVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y);
void MatTVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y);
void MatVecMxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* x, float* y);
float DotF32(const float* a, const float* b, int64_t n);
void MatTMulF32(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y);
void MatTMulF32Part(const float* w, int64_t w_stride, int64_t rows, int64_t cols, const float* x,
                    int64_t x_stride, int64_t n, bool first, float* y, int64_t y_stride);
// Row-int8 (docs/MODEL.md §3.6): y[r] = scales[r] · Σ_c q[r,c]·x[c], the sum in the documented
// order.
void MatVecI8(const int8_t* q, const float* scales, int64_t rows, int64_t cols, const float* x,
              float* y);

}  // namespace deltafin::kernels::ref
