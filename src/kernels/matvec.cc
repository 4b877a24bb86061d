// Entry points of kernels/matvec.h. Batched forms loop over vectors for now: correct and equal to
// the matrix-vector form by construction; the SIMD work replaces them with kernels that read each
// weight once for all vectors.
#include "kernels/matvec.h"

#include "kernels/ref/matvec_ref.h"

namespace deltafin::kernels {

void MatVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
  ref::MatVecBf16(w, rows, cols, x, y);
}

void MatMulBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, int64_t n,
                float* y) {
  for (int64_t i = 0; i < n; ++i) ref::MatVecBf16(w, rows, cols, x + i * cols, y + i * rows);
}

void MatTVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
  ref::MatTVecBf16(w, rows, cols, x, y);
}

void MatVecMxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* x, float* y) {
  ref::MatVecMxfp4(packed, scales, rows, cols, x, y);
}

void MatMulMxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    ref::MatVecMxfp4(packed, scales, rows, cols, x + i * cols, y + i * rows);
  }
}

float DotF32(const float* a, const float* b, int64_t n) { return ref::DotF32(a, b, n); }

}  // namespace deltafin::kernels
