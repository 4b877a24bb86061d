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

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
// The x86 paths below compute against x de-interleaved per 32-column group,
// [x0 x2 … x30 | x1 x3 … x31], so that the codes of a group's 16 bytes (low nibble = even column,
// high nibble = odd column) line up with x without any shuffle back into column order. The
// partial sums keep their column index, so the documented order is unchanged.

// 64 KB of de-interleaved x on the stack: up to 4 vectors of K3's expert widths (3584).
constexpr int64_t kMaxDeinterleavedFloats = 16384;

HWY_INLINE void DeinterleaveGroups(const float* src, int64_t groups, float* dst) {
  for (int64_t g = 0; g < groups; ++g) {
    for (int j = 0; j < 16; ++j) {
      dst[g * 32 + j] = src[g * 32 + 2 * j];
      dst[g * 32 + 16 + j] = src[g * 32 + 2 * j + 1];
    }
  }
}

// Vectors are taken kMaxTile at a time (fewer when cols is large); each tile's x is de-interleaved
// once, then tile_rows(xd, count, y) does every row of the part for it. The weights are read once
// per tile: from cache after the first tile when the thread's rows fit the last-level cache.
template <int64_t kMaxTile, class TileRows>
HWY_INLINE void ForEachDeinterleavedTile(const float* x, int64_t n, int64_t cols, int64_t rows,
                                         float* y, const TileRows& tile_rows) {
  alignas(64) float xd[kMaxDeinterleavedFloats];
  int64_t per_tile = kMaxDeinterleavedFloats / cols;
  if (per_tile > kMaxTile) per_tile = kMaxTile;
  for (int64_t v0 = 0; v0 < n; v0 += per_tile) {
    const int64_t count = n - v0 < per_tile ? n - v0 : per_tile;
    for (int64_t v = 0; v < count; ++v)
      DeinterleaveGroups(x + (v0 + v) * cols, cols / 32, xd + v * cols);
    tile_rows(xd, count, y + v0 * rows);
  }
}

// The documented tree's levels w = 8, 4, 2 within one 8-lane vector whose lane j holds partial
// 2j (or 2j + 1) after level 16: lanes j and j + 4, then j and j + 2, then 0 and 1. Returns the
// sum in lane 0.
HWY_INLINE __m128 TreeOfEight(__m256 v8) {
  const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
  const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
  return _mm_add_ss(v2, _mm_movehdup_ps(v2));
}

// Rows [r0, r1) in tiles of kR rows, the remainder one row at a time: tile.operator()<rows>(r).
template <size_t kR, class Tile>
HWY_INLINE void ForEachRowTile(int64_t r0, int64_t r1, const Tile& tile) {
  int64_t r = r0;
  for (; r + static_cast<int64_t>(kR) <= r1; r += static_cast<int64_t>(kR)) {
    tile.template operator()<kR>(r);
  }
  for (; r < r1; ++r) tile.template operator()<1>(r);
}
#endif

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
    return TreeOfEight(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
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

template <size_t kR, size_t kT>
HWY_INLINE void Mxfp4TileRowsAvx3(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                                  int64_t cols, const float* xd, int64_t r0, int64_t r1, float* y) {
  const int64_t groups = cols / 32;
  ForEachRowTile<kR>(r0, r1, [&]<size_t kRows>(int64_t r) {
    Mxfp4TileAvx3<kRows, kT>(packed + r * groups * 16, scales + r * groups, groups, xd, cols, y + r,
                             rows);
  });
}

// One vector: 4 rows per tile (more FMA chains, one x load for 4 rows); small batches: 2 rows × 4
// vectors (2 × 4 × 2 accumulators and the weights fill the 32 registers). Larger batches take
// TiledRows (Mxfp4RowsImpl).
void Mxfp4RowsAvx3(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   const float* x, int64_t n, int64_t r0, int64_t r1, float* y) {
  ForEachDeinterleavedTile<4>(x, n, cols, rows, y, [&](const float* xd, int64_t count, float* yv) {
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
  });
}
#endif  // HWY_AVX3

#if HWY_TARGET == HWY_AVX2
// AVX2 path (8 fp32 lanes; no 16-entry fp32 permute). The 16 bytes of a group are split into low
// and high nibbles and looked up with pshufb in a table of 2·E2M1 as int8 (exact small integers),
// widened to fp32 and multiplied by 2^(s-128) = scale/2, so each weight is E2M1·2^(s-127) exactly,
// as in the reference. Per row and vector four accumulators hold partials {0,2,…,14},
// {16,18,…,30}, {1,3,…,15} and {17,19,…,31}, matching x de-interleaved as above.

alignas(16) static constexpr int8_t kDoubledE2m1[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                        0, -1, -2, -3, -4, -6, -8, -12};

// scale/2 of up to 16 consecutive groups (E8m0ToF32 vectorised, times an exact 0.5).
HWY_INLINE void HalfScalesToF32Avx2(const uint8_t* s, int64_t count, float* out) {
  alignas(16) uint8_t bytes[16] = {};
  for (int64_t k = 0; k < count; ++k) bytes[k] = s[k];
  for (int half = 0; half < 2; ++half) {
    const __m256i v =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + 8 * half)));
    __m256i bits = _mm256_slli_epi32(v, 23);
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000),
                              _mm256_cmpeq_epi32(v, _mm256_setzero_si256()));
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7fc00000),
                              _mm256_cmpeq_epi32(v, _mm256_set1_epi32(255)));
    _mm256_store_ps(out + 8 * half, _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0.5f)));
  }
}

// The documented tree: level "p[i] += p[i + 16]" adds the two vectors of each parity, then each
// 8-lane sum is halved as on AVX-512, and partials 0 (even) and 1 (odd) are added last.
HWY_INLINE float ReduceAvx2(__m256 even_lo, __m256 even_hi, __m256 odd_lo, __m256 odd_hi) {
  return _mm_cvtss_f32(_mm_add_ss(TreeOfEight(_mm256_add_ps(even_lo, even_hi)),
                                  TreeOfEight(_mm256_add_ps(odd_lo, odd_hi))));
}

// kR rows × kT vectors (16 ymm registers: kR·kT·4 accumulators + 4 weights).
template <size_t kR, size_t kT>
HWY_INLINE void Mxfp4TileAvx2(const uint8_t* prow, const uint8_t* srow, int64_t groups,
                              const float* xd, int64_t cols, float* y, int64_t rows) {
  const __m128i table = _mm_load_si128(reinterpret_cast<const __m128i*>(kDoubledE2m1));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  __m256 acc[kR][kT][4];
  for (size_t i = 0; i < kR; ++i) {
    for (size_t t = 0; t < kT; ++t) {
      for (int k = 0; k < 4; ++k) acc[i][t][k] = _mm256_setzero_ps();
    }
  }
  const int64_t row_bytes = groups * 16;
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int64_t count = groups - g0 < 16 ? groups - g0 : 16;
    alignas(32) float half_scale[kR][16];
    for (size_t i = 0; i < kR; ++i) {
      HalfScalesToF32Avx2(srow + static_cast<int64_t>(i) * groups + g0, count, half_scale[i]);
    }
    for (int64_t g = 0; g < count; ++g) {
      // The next tile's rows follow this tile's in memory (see the AVX-512 path).
      _mm_prefetch(reinterpret_cast<const char*>(prow + kR * row_bytes + (g0 + g) * 16 * kR),
                   _MM_HINT_T0);
      const float* xg = xd + (g0 + g) * 32;
      HWY_UNROLL(2)
      for (size_t i = 0; i < kR; ++i) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
            prow + static_cast<int64_t>(i) * row_bytes + (g0 + g) * 16));
        const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(b, low4));
        const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), low4));
        const __m256 scale = _mm256_set1_ps(half_scale[i][g]);
        const auto widen = [&](__m128i v) {
          return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), scale);
        };
        const __m256 w[4] = {widen(lo), widen(_mm_unpackhi_epi64(lo, lo)), widen(hi),
                             widen(_mm_unpackhi_epi64(hi, hi))};
        HWY_UNROLL(4)
        for (size_t t = 0; t < kT; ++t) {
          const float* xt = xg + static_cast<int64_t>(t) * cols;
          HWY_UNROLL(4)
          for (int k = 0; k < 4; ++k) {
            acc[i][t][k] = _mm256_fmadd_ps(w[k], _mm256_load_ps(xt + 8 * k), acc[i][t][k]);
          }
        }
      }
    }
  }
  for (size_t i = 0; i < kR; ++i) {
    for (size_t t = 0; t < kT; ++t) {
      y[static_cast<int64_t>(t) * rows + static_cast<int64_t>(i)] =
          ReduceAvx2(acc[i][t][0], acc[i][t][1], acc[i][t][2], acc[i][t][3]);
    }
  }
}

template <size_t kR, size_t kT>
HWY_INLINE void Mxfp4TileRowsAvx2(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                                  int64_t cols, const float* xd, int64_t r0, int64_t r1, float* y) {
  const int64_t groups = cols / 32;
  ForEachRowTile<kR>(r0, r1, [&]<size_t kRows>(int64_t r) {
    Mxfp4TileAvx2<kRows, kT>(packed + r * groups * 16, scales + r * groups, groups, xd, cols, y + r,
                             rows);
  });
}

// One vector: 2 rows per tile; batches: 1 row × 2 vectors (8 accumulators either way).
void Mxfp4RowsAvx2(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   const float* x, int64_t n, int64_t r0, int64_t r1, float* y) {
  ForEachDeinterleavedTile<2>(x, n, cols, rows, y, [&](const float* xd, int64_t count, float* yv) {
    if (count == 1) {
      Mxfp4TileRowsAvx2<2, 1>(packed, scales, rows, cols, xd, r0, r1, yv);
    } else {
      Mxfp4TileRowsAvx2<1, 2>(packed, scales, rows, cols, xd, r0, r1, yv);
    }
  });
}
#endif  // HWY_AVX2

void Mxfp4RowsImpl(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   const float* x, int64_t n, int64_t r0, int64_t r1, float* y) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t v = 0; v < n; ++v) {
    ref::MatVecMxfp4(packed + r0 * (cols / 2), scales + r0 * (cols / 32), r1 - r0, cols,
                     x + v * cols, y + v * rows + r0);
  }
#else
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // The register-blocked tiles on fp32-decoded weights (matvec-inl.h) from 16 vectors, or from 4
  // when a row fits one column block; below that, the 2-row × 4-vector tiles below, which
  // prefetch the next rows and are faster while the weights stream once per few vectors
  // (measured, 2026-12-06: K3's 3072×3584 at 8 vectors 68 % against 51 % of the FMA peak).
  if (n >= 16 || (n >= 4 && cols <= 1024)) {
    TiledRows<kTileRows, kTileVecs, kTileRowsSingle, false, Mxfp4PairDecoder>(
        [&](Mxfp4PairDecoder& dec, int64_t r) { dec.Bind(packed, scales, cols, r); }, rows, cols, x,
        n, r0, r1, y, nullptr);
    return;
  }
  if (cols <= kMaxDeinterleavedFloats) {
    Mxfp4RowsAvx3(packed, scales, rows, cols, x, n, r0, r1, y);
    return;
  }
#elif HWY_TARGET == HWY_AVX2
  if (cols <= kMaxDeinterleavedFloats) {
    Mxfp4RowsAvx2(packed, scales, rows, cols, x, n, r0, r1, y);
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
