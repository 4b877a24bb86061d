// Row-int8 kernels (docs/MODEL.md §3.6: int8 weights, one fp32 scale per row, fp32 activations),
// compiled once per Highway target (simd_targets.h). HWY_SCALAR calls the scalar reference.
#include "kernels/simd_targets.h"
// Highway's per-target recompilation of this file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_i8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/dispatch.h"
#include "kernels/matvec-inl.h"
#include "kernels/ref/matvec_ref.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {

void I8RowsImpl(const int8_t* q, const float* scales, int64_t rows, int64_t cols, const float* x,
                int64_t n, int64_t r0, int64_t r1, float* y) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t v = 0; v < n; ++v) {
    ref::MatVecI8(q + r0 * cols, scales + r0, r1 - r0, cols, x + v * cols, y + v * rows + r0);
  }
#else
  if (n == 1) {
    // A single vector decodes every weight for one multiply-add: the column-order decoder (two
    // widenings and two conversions per 32 weights) is cheaper than the even/odd pairs.
    I8Decoder dec{q, cols};
    DotRows(dec, rows, cols, x, n, r0, r1, y,
            [scales](int64_t r, float s) { return scales[r] * s; });
    return;
  }
  const auto bind = [&](I8PairDecoder& dec, int64_t r) { dec.Bind(q, cols, r); };
  if constexpr (kHalvesTiles) {
    if (n >= kHalvesMinVectors) {
      TiledRows<kHalvesRows, kHalvesVecs, kTileRowsSingle, true, I8PairDecoder>(
          bind, rows, cols, x, n, r0, r1, y, scales);
      return;
    }
  }
  TiledRows<kTileRows, kTileVecs, kTileRowsSingle, false, I8PairDecoder>(bind, rows, cols, x, n, r0,
                                                                         r1, y, scales);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::kernels {
HWY_EXPORT(I8RowsImpl);
namespace internal {
I8RowsFn ChooseI8Rows() { return &HWY_DYNAMIC_DISPATCH(I8RowsImpl); }
}  // namespace internal
}  // namespace deltafin::kernels
#endif  // HWY_ONCE
