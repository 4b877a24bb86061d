// Fused MXFP4 kernels (never materialise the fp32 matrix), compiled once per Highway target
// (simd_targets.h). HWY_SCALAR calls the scalar reference.
#include "kernels/simd_targets.h"
// Highway's per-target recompilation of this file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_mxfp4.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/dispatch.h"
#include "kernels/matvec-inl.h"
#include "kernels/ref/matvec_ref.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {

void Mxfp4RowsImpl(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   const float* x, int64_t n, int64_t r0, int64_t r1, float* y) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t v = 0; v < n; ++v) {
    ref::MatVecMxfp4(packed + r0 * (cols / 2), scales + r0 * (cols / 32), r1 - r0, cols,
                     x + v * cols, y + v * rows + r0);
  }
#else
  Mxfp4Decoder dec(packed, scales, cols);
  DotRows(dec, rows, cols, x, n, r0, r1, y, [](int64_t, float s) { return s; });
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::kernels {
HWY_EXPORT(Mxfp4RowsImpl);
namespace internal {
Mxfp4RowsFn ChooseMxfp4Rows() { return &HWY_DYNAMIC_DISPATCH(Mxfp4RowsImpl); }
}  // namespace internal
}  // namespace deltafin::kernels
#endif  // HWY_ONCE
