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
// AVX-512 paths. Byte j of a group holds columns 2j (low nibble) and 2j+1 (high nibble). The 16
// bytes of a group, widened to 16 dword lanes, are table indices: vpermps looks up the E2M1 table
// (pre-multiplied by the group's power-of-two scale, exact) and reads only the low 4 bits of each
// index, so the low nibble needs no mask and the high nibble one shift. Every product is added
// into the partial sum of its column by one fused multiply-add in increasing column order, and the
// 32 partials are combined by the documented tree, so results are bit-identical to the reference.

alignas(64) static constexpr float kE2m1Table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                                     4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                                     -2.0f, -3.0f, -4.0f, -6.0f};

// Scales of up to 16 consecutive groups as fp32 (E8m0ToF32, vectorised): s << 23, with s = 0 the
// subnormal 2^-127 and s = 255 NaN. Bytes past `count` are not read.
HWY_INLINE void ScalesToF32(const uint8_t* s, int64_t count, float* out) {
  const __mmask16 live = static_cast<__mmask16>((1u << count) - 1u);
  const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(live, s));
  __m512i bits = _mm512_slli_epi32(v, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512()),
                               _mm512_set1_epi32(0x00400000));
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(v, _mm512_set1_epi32(255)),
                               _mm512_set1_epi32(0x7fc00000));
  _mm512_store_si512(out, bits);
}

// The documented tree over 32 partials held as `even` = partials {0, 2, …, 30} and `odd` =
// {1, 3, …, 31}. Level "p[i] += p[i + w]" pairs even lane j with even lane j + w/2 (and odd with
// odd) for w = 16, 8, 4, 2, and the last level adds partial 0 (even) and partial 1 (odd): halving
// each vector reproduces the scalar tree's additions exactly.
HWY_INLINE float ReduceEvenOdd(__m512 even, __m512 odd) {
  const auto halve = [](__m512 v) {
    const __m256 v8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
    const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    return _mm_add_ss(v2, _mm_movehdup_ps(v2));
  };
  return _mm_cvtss_f32(_mm_add_ss(halve(even), halve(odd)));
}

// kR rows × kT vectors per call. xd holds the kT vectors de-interleaved per group,
// [x0 x2 … x30 | x1 x3 … x31], `cols` floats apart; each group's weights are decoded once per row
// and used for the kT vectors, and each x load serves the kR rows. y[t*rows + i] for row i of the
// tile and vector t.
template <size_t kR, size_t kT>
HWY_INLINE void Mxfp4TileAvx3(const uint8_t* prow, const uint8_t* srow, int64_t groups,
                              const float* xd, int64_t cols, float* y, int64_t rows) {
  const __m512 table = _mm512_load_ps(kE2m1Table);
  __m512 even[kR][kT], odd[kR][kT];
  for (size_t i = 0; i < kR; ++i) {
    for (size_t t = 0; t < kT; ++t) even[i][t] = odd[i][t] = _mm512_setzero_ps();
  }
  const int64_t row_bytes = groups * 16;
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int64_t count = groups - g0 < 16 ? groups - g0 : 16;
    _mm_prefetch(reinterpret_cast<const char*>(srow + kR * groups + g0 * kR), _MM_HINT_T0);
    alignas(64) float scale[kR][16];
    for (size_t i = 0; i < kR; ++i) {
      ScalesToF32(srow + static_cast<int64_t>(i) * groups + g0, count, scale[i]);
    }
    for (int64_t g = 0; g < count; ++g) {
      // The next tile's rows follow this tile's in memory; fetching them a line per group keeps
      // DRAM busy while this tile computes (kR interleaved rows defeat the stream prefetcher).
      _mm_prefetch(reinterpret_cast<const char*>(prow + kR * row_bytes + (g0 + g) * 16 * kR),
                   _MM_HINT_T0);
      __m512 w_even[kR], w_odd[kR];
      HWY_UNROLL(4)
      for (size_t i = 0; i < kR; ++i) {
        const __m512 scaled = _mm512_mul_ps(table, _mm512_set1_ps(scale[i][g]));
        const __m512i codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
            prow + static_cast<int64_t>(i) * row_bytes + (g0 + g) * 16)));
        w_even[i] = _mm512_permutexvar_ps(codes, scaled);
        w_odd[i] = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), scaled);
      }
      const float* xg = xd + (g0 + g) * 32;
      HWY_UNROLL(4)
      for (size_t t = 0; t < kT; ++t) {
        __m512 x_even = _mm512_load_ps(xg + static_cast<int64_t>(t) * cols);
        __m512 x_odd = _mm512_load_ps(xg + static_cast<int64_t>(t) * cols + 16);
        if constexpr (kR > 1) {
          // Keep x in registers for the kR rows: folded into each FMA it would load kR times.
          asm("" : "+v"(x_even), "+v"(x_odd));
        }
        HWY_UNROLL(4)
        for (size_t i = 0; i < kR; ++i) {
          even[i][t] = _mm512_fmadd_ps(w_even[i], x_even, even[i][t]);
          odd[i][t] = _mm512_fmadd_ps(w_odd[i], x_odd, odd[i][t]);
        }
      }
    }
  }
  for (size_t i = 0; i < kR; ++i) {
    for (size_t t = 0; t < kT; ++t) {
      y[static_cast<int64_t>(t) * rows + static_cast<int64_t>(i)] =
          ReduceEvenOdd(even[i][t], odd[i][t]);
    }
  }
}

// Rows [r0, r1) for kT de-interleaved vectors, kR rows at a time.
template <size_t kR, size_t kT>
HWY_INLINE void Mxfp4TileRowsAvx3(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                                  int64_t cols, const float* xd, int64_t r0, int64_t r1, float* y) {
  const int64_t groups = cols / 32;
  int64_t r = r0;
  for (; r + static_cast<int64_t>(kR) <= r1; r += static_cast<int64_t>(kR)) {
    Mxfp4TileAvx3<kR, kT>(packed + r * groups * 16, scales + r * groups, groups, xd, cols, y + r,
                          rows);
  }
  for (; r < r1; ++r) {
    Mxfp4TileAvx3<1, kT>(packed + r * groups * 16, scales + r * groups, groups, xd, cols, y + r,
                         rows);
  }
}

// 64 KB of de-interleaved x on the stack: up to 4 vectors of K3's expert widths (3584).
constexpr int64_t kMaxDeinterleavedFloats = 16384;
constexpr int64_t kMaxTileVectors = 4;  // 2 rows × 4 vectors × 2 accumulators fill the registers

// Vectors are taken kMaxTileVectors at a time (fewer when cols is large); each tile's x is
// de-interleaved once, then every row of [r0, r1) is done for it. The weights are read once per
// tile: from cache after the first tile when the thread's rows fit the last-level cache.
void Mxfp4RowsAvx3(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   const float* x, int64_t n, int64_t r0, int64_t r1, float* y) {
  alignas(64) float xd[kMaxDeinterleavedFloats];
  const int64_t groups = cols / 32;
  int64_t per_tile = kMaxDeinterleavedFloats / cols;
  if (per_tile > kMaxTileVectors) per_tile = kMaxTileVectors;
  for (int64_t v0 = 0; v0 < n; v0 += per_tile) {
    const int64_t count = n - v0 < per_tile ? n - v0 : per_tile;
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
    float* yv = y + v0 * rows;
    switch (count) {
      case 1:
        Mxfp4TileRowsAvx3<4, 1>(packed, scales, rows, cols, xd, r0, r1, yv);
        break;
      case 2:
        Mxfp4TileRowsAvx3<2, 2>(packed, scales, rows, cols, xd, r0, r1, yv);
        break;
      case 3:
        Mxfp4TileRowsAvx3<2, 3>(packed, scales, rows, cols, xd, r0, r1, yv);
        break;
      default:
        Mxfp4TileRowsAvx3<2, 4>(packed, scales, rows, cols, xd, r0, r1, yv);
        break;
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
