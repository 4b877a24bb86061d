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
#include "quant/mxfp4.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// AVX-512 path. Byte j of a group holds columns 2j (low nibble) and 2j+1 (high nibble), so the
// 16 bytes of a group, widened to 16 dword lanes, index the even columns by their low nibble and
// the odd columns by their high nibble. Instead of interleaving the decoded weights back into
// column order (a byte shuffle and two unpacks per group), the activations are de-interleaved
// once per call — per group [x0 x2 … x30 | x1 x3 … x31] — and the two accumulators hold partials
// {0, 2, …, 30} and {1, 3, …, 31}. The partial sums are the same 32 as the reference's, each
// updated by the same fused multiply-adds in the same column order, so results are bit-identical.
// vpermps reads only the low 4 bits of each index, so the low nibble needs no mask.
constexpr int64_t kMaxDeinterleavedFloats = 16384;  // 64 KB of de-interleaved x on the stack

// Dot products of one row with kT de-interleaved vectors xs[t] (groups of 32 floats).
template <size_t kT>
HWY_INLINE void Mxfp4RowTileAvx3(const uint8_t* prow, const uint8_t* srow, int64_t groups,
                                 const float* const* xs, float* out) {
  const DF df;
  alignas(64) static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                                    4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                                    -2.0f, -3.0f, -4.0f, -6.0f};
  const VF table = hn::Load(df, kValues);
  VF even[kT], odd[kT];
  for (size_t t = 0; t < kT; ++t) even[t] = odd[t] = hn::Zero(df);
  for (int64_t g = 0; g < groups; ++g) {
    const VF scaled = hn::Mul(table, hn::Set(df, E8m0ToF32(srow[g])));  // exact: power of two
    const __m512i codes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(prow + g * 16)));
    const VF w_even = VF{_mm512_permutexvar_ps(codes, scaled.raw)};
    const VF w_odd = VF{_mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), scaled.raw)};
    HWY_UNROLL(8)
    for (size_t t = 0; t < kT; ++t) {
      even[t] = hn::MulAdd(w_even, hn::Load(df, xs[t] + g * 32), even[t]);
      odd[t] = hn::MulAdd(w_odd, hn::Load(df, xs[t] + g * 32 + 16), odd[t]);
    }
  }
  for (size_t t = 0; t < kT; ++t) {
    alignas(64) float e[16], o[16], p[32];
    hn::Store(even[t], df, e);
    hn::Store(odd[t], df, o);
    for (int j = 0; j < 16; ++j) {
      p[2 * j] = e[j];
      p[2 * j + 1] = o[j];
    }
    out[t] = ReducePartials(p);
  }
}

void Mxfp4RowsAvx3(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   const float* x, int64_t n, int64_t r0, int64_t r1, float* y) {
  alignas(64) float xd[kMaxDeinterleavedFloats];
  const int64_t groups = cols / 32;
  const int64_t per_pass = kMaxDeinterleavedFloats / cols;  // vectors de-interleaved at once
  constexpr size_t kTileVectors = 4;  // 8 accumulators + weights stay in registers
  for (int64_t v0 = 0; v0 < n; v0 += per_pass) {
    const int64_t count = n - v0 < per_pass ? n - v0 : per_pass;
    for (int64_t v = 0; v < count; ++v) {
      const float* src = x + (v0 + v) * cols;
      float* dst = xd + v * cols;
      for (int64_t g = 0; g < groups; ++g) {
        for (int j = 0; j < 16; ++j) {
          dst[g * 32 + j] = src[g * 32 + 2 * j];
          dst[g * 32 + 16 + j] = src[g * 32 + 2 * j + 1];
        }
      }
    }
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* prow = packed + r * (cols / 2);
      const uint8_t* srow = scales + r * groups;
      int64_t v = 0;
      for (; v + static_cast<int64_t>(kTileVectors) <= count; v += kTileVectors) {
        const float* xs[kTileVectors];
        float out[kTileVectors];
        for (size_t t = 0; t < kTileVectors; ++t) xs[t] = xd + (v + static_cast<int64_t>(t)) * cols;
        Mxfp4RowTileAvx3<kTileVectors>(prow, srow, groups, xs, out);
        for (size_t t = 0; t < kTileVectors; ++t) {
          y[(v0 + v + static_cast<int64_t>(t)) * rows + r] = out[t];
        }
      }
      for (; v < count; ++v) {
        const float* xs[1] = {xd + v * cols};
        float out[1];
        Mxfp4RowTileAvx3<1>(prow, srow, groups, xs, out);
        y[(v0 + v) * rows + r] = out[0];
      }
    }
  }
}
#endif  // HWY_AVX3

void Mxfp4RowsImpl(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   const float* x, int64_t n, int64_t r0, int64_t r1, float* y) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t v = 0; v < n; ++v) {
    ref::MatVecMxfp4(packed + r0 * (cols / 2), scales + r0 * (cols / 32), r1 - r0, cols,
                     x + v * cols, y + v * rows + r0);
  }
#else
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (cols <= kMaxDeinterleavedFloats) {
    Mxfp4RowsAvx3(packed, scales, rows, cols, x, n, r0, r1, y);
    return;
  }
#endif
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
