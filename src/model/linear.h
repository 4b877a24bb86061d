// Linear: y = W·x for a whole spine matrix over n positions, in the matrix's runtime format.
//
// The row-int8 spine (--spine int8, docs/INT8.md) attaches an int8 copy to a SpineMatrix; this is
// the one place that chooses between it and the BF16 weights, so the forward pass does not care.
// Sub-block reads of a matrix (MLA's absorbed kv_b_proj) do not go through here and stay BF16.
#pragma once

#include <cstdint>

#include "kernels/matvec.h"
#include "weights/weights.h"

namespace deltafin {

// x: [n, w.cols], y: [n, w.rows], row-major (n == 1 is the matrix-vector product).
inline void Linear(const SpineMatrix& w, const float* x, int64_t n, float* y) {
  if (w.q != nullptr) {
    kernels::MatMulI8(w.q, w.q_scales, w.rows, w.cols, x, n, y);
  } else {
    kernels::MatMulBf16(w.data, w.rows, w.cols, x, n, y);
  }
}

}  // namespace deltafin
