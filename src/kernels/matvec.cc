// Entry points of kernels/matvec.h: one Highway dispatch per call (dispatch.h), rows split over the
// default thread pool in contiguous parts. A part is at least kMinBytesPerPart of weights (scaled
// down for batches), so small matrices stay on the calling thread where waking workers would
// cost more than it saves.
#include "kernels/matvec.h"

#include "base/thread_pool.h"
#include "kernels/dispatch.h"

namespace deltafin::kernels {

namespace {

constexpr int64_t kMinBytesPerPart = 64 * 1024;

// Rows per part so that each part reads >= kMinBytesPerPart of weights, less for big batches
// (the work per weight byte grows with n).
int64_t Grain(int64_t row_bytes, int64_t n) {
  const int64_t work = row_bytes * (1 + n / 2);
  const int64_t g = work > 0 ? kMinBytesPerPart / work : 1;
  return g < 1 ? 1 : g;
}

}  // namespace

void MatVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
  MatMulBf16(w, rows, cols, x, 1, y);
}

void MatMulBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, int64_t n,
                float* y) {
  const internal::Bf16RowsFn fn = internal::ChooseBf16Rows();
  DefaultPool().ParallelRanges(rows, Grain(cols * 2, n),
                               [&](int64_t r0, int64_t r1) { fn(w, rows, cols, x, n, r0, r1, y); });
}

void MatTVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
  internal::ChooseMatTVecBf16()(w, rows, cols, x, y);
}

void MatVecMxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* x, float* y) {
  MatMulMxfp4(packed, scales, rows, cols, x, 1, y);
}

void MatMulMxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* x, int64_t n, float* y) {
  const internal::Mxfp4RowsFn fn = internal::ChooseMxfp4Rows();
  DefaultPool().ParallelRanges(rows, Grain(cols / 2 + cols / 32, n), [&](int64_t r0, int64_t r1) {
    fn(packed, scales, rows, cols, x, n, r0, r1, y);
  });
}

void MatVecI8(const int8_t* q, const float* scales, int64_t rows, int64_t cols, const float* x,
              float* y) {
  MatMulI8(q, scales, rows, cols, x, 1, y);
}

void MatMulI8(const int8_t* q, const float* scales, int64_t rows, int64_t cols, const float* x,
              int64_t n, float* y) {
  const internal::I8RowsFn fn = internal::ChooseI8Rows();
  DefaultPool().ParallelRanges(rows, Grain(cols, n), [&](int64_t r0, int64_t r1) {
    fn(q, scales, rows, cols, x, n, r0, r1, y);
  });
}

float DotF32(const float* a, const float* b, int64_t n) {
  return internal::ChooseDotF32()(a, b, n);
}

void MatTMulF32(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y) {
  MatTMulF32Part({w, cols}, rows, cols, x, rows, n, true, {y, cols});
}

void MatTMulF32Part(StridedRows<const float> w, int64_t rows, int64_t cols, const float* x,
                    int64_t x_stride, int64_t n, bool first, StridedRows<float> y) {
  // Parts are whole groups of kColGroup columns, so each part keeps the kernels' full-width steps.
  constexpr int64_t kColGroup = 64;
  const internal::MatTMulF32ColsFn fn = internal::ChooseMatTMulF32Cols();
  const int64_t groups = (cols + kColGroup - 1) / kColGroup;
  DefaultPool().ParallelRanges(groups, Grain(rows * kColGroup * 4, n), [&](int64_t g0, int64_t g1) {
    fn(w.data, w.stride, rows, x, x_stride, n, first, g0 * kColGroup,
       g1 * kColGroup < cols ? g1 * kColGroup : cols, y.data, y.stride);
  });
}

}  // namespace deltafin::kernels
