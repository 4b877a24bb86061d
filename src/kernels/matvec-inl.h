// Per-target building blocks of the matrix kernels (Highway): decoders that turn 32 consecutive
// weights of a row into fp32 vectors, and the row dot product in the order documented in
// kernels/matvec.h. 32 partial sums are kept as 32/N vectors of N lanes (2 on AVX3, 4 on AVX2,
// 8 on NEON), lane l of vector k holding partial k*N + l; each step is one fused multiply-add,
// exactly as the scalar reference (std::fma) rounds, so every target is bit-identical to it.
// TiledRows (below) is the register-blocked form for batches (several rows × several vectors per
// tile, the partials held as even/odd column pairs, activations and columns blocked for the
// caches; on AVX-512 BF16 and int8 batches take the even and the odd partials in two passes, and
// the trees of 16 dot products are reduced at once); docs/PERFORMANCE.md "Batched kernels at the
// multiply-add roof", "Batched kernels in two passes" and "Short rows' tiles" describe the design.
//
// Included by the kernel TUs after hwy/foreach_target.h, so it has Highway's per-target include
// guard instead of #pragma once. Not compiled for HWY_SCALAR: there the TUs call the references.
#if defined(DELTAFIN_KERNELS_MATVEC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DELTAFIN_KERNELS_MATVEC_INL_H_
#undef DELTAFIN_KERNELS_MATVEC_INL_H_
#else
#define DELTAFIN_KERNELS_MATVEC_INL_H_
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "base/aligned_buffer.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "quant/mxfp4.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr size_t kN = hn::MaxLanes(DF());
constexpr int64_t kBlock = 32;  // columns per block = number of partial sums
constexpr size_t kAcc = kBlock / kN;
static_assert(kAcc >= 1 && kAcc * kN == kBlock, "vector width must divide 32 lanes");

// Vectors of one batch tile: about 8 (x86, 16 registers on AVX2) or 16 (NEON, 32 registers)
// accumulators live in registers; the weights are decoded once per tile.
#if HWY_ARCH_ARM
constexpr size_t kTile = (16 / kAcc) > 0 ? 16 / kAcc : 1;
#else
constexpr size_t kTile = (8 / kAcc) > 0 ? 8 / kAcc : 1;
#endif

// The documented balanced tree (p[i] += p[i + w] for w = 16, 8, ..., 1) on partials held as kAcc
// vectors, vector k holding partials k*kN .. k*kN+kN-1: the steps of width >= kN add whole
// vectors (every lane's p[i] += p[i + w] at once), the steps below kN run on one stored vector.
// Every addition has the operands the scalar tree gives it, so the result is bit-identical; there
// are only fewer scalar steps (on AVX3 15 instead of 31 per dot product, which matters for the
// 128-wide matrices of the demo model).
HWY_INLINE float ReduceAccumulators(VF* acc) {
  const DF df;
  HWY_UNROLL(8)
  for (size_t width = kAcc / 2; width >= 1; width /= 2) {
    HWY_UNROLL(8)
    for (size_t k = 0; k < width; ++k) acc[k] = hn::Add(acc[k], acc[k + width]);
  }
  alignas(64) float p[kN];
  hn::Store(acc[0], df, p);
  for (size_t width = kN / 2; width >= 1; width /= 2) {
    for (size_t i = 0; i < width; ++i) p[i] += p[i + width];
  }
  return p[0];
}

// The 32 partials of the dot products of one weight row (behind `dec`) with kT activation
// vectors xs[t], columns [0, cols), into acc[t][0..kAcc). Decoder: Block(c, w) fills kAcc vectors
// with the weights of columns [c, c+32); Tail(c, count, out) writes `count` < 32 weights from
// column c as scalars.
template <size_t kT, class Decoder>
HWY_INLINE void DotRowTilePartials(const Decoder& dec, int64_t cols, const float* const* xs,
                                   VF (*acc)[kAcc]) {
  const DF df;
  HWY_UNROLL(16)
  for (size_t t = 0; t < kT; ++t) {
    HWY_UNROLL(8)
    for (size_t k = 0; k < kAcc; ++k) acc[t][k] = hn::Zero(df);
  }
  VF w[kAcc];
  const int64_t full = cols / kBlock * kBlock;
  for (int64_t c = 0; c < full; c += kBlock) {
    dec.Block(c, w);
    HWY_UNROLL(16)
    for (size_t t = 0; t < kT; ++t) {
      HWY_UNROLL(8)
      for (size_t k = 0; k < kAcc; ++k) {
        acc[t][k] = hn::MulAdd(w[k], hn::LoadU(df, xs[t] + c + k * kN), acc[t][k]);
      }
    }
  }
  if (full < cols) {
    const int64_t rem = cols - full;
    alignas(64) float wt[kBlock] = {};
    alignas(64) float xt[kBlock] = {};
    dec.Tail(full, rem, wt);
    HWY_UNROLL(16)
    for (size_t t = 0; t < kT; ++t) {
      for (int64_t i = 0; i < rem; ++i) xt[i] = xs[t][full + i];
      HWY_UNROLL(8)
      for (size_t k = 0; k < kAcc; ++k) {
        const int64_t live = rem - static_cast<int64_t>(k * kN);
        // Lanes past the tail keep their partial (a zero-padded product would add +0 anyway).
        const auto m = hn::FirstN(df, static_cast<size_t>(live > 0 ? live : 0));
        const VF sum = hn::MulAdd(hn::Load(df, wt + k * kN), hn::Load(df, xt + k * kN), acc[t][k]);
        acc[t][k] = hn::IfThenElse(m, sum, acc[t][k]);
      }
    }
  }
}

// Dot products of one weight row (behind `dec`) with kT activation vectors xs[t], columns
// [0, cols), each reduced by the documented tree.
template <size_t kT, class Decoder>
HWY_INLINE void DotRowTile(const Decoder& dec, int64_t cols, const float* const* xs, float* out) {
  VF acc[kT][kAcc];
  DotRowTilePartials<kT>(dec, cols, xs, acc);
  HWY_UNROLL(16)
  for (size_t t = 0; t < kT; ++t) out[t] = ReduceAccumulators(acc[t]);
}

// Rows per step of the single-vector path: several independent rows give the core more
// accumulator chains and memory streams in flight, and each x vector is loaded once for all of
// them. Limited by the register file (kR·kAcc accumulators + kAcc x + kAcc weights). On AVX-512,
// 8 rows beat 4 by 10-20 % with weights cold in cache (more misses in flight; 2026-11-30 A/B in
// docs/PERFORMANCE.md); a software prefetch of the next rows instead measured slower.
constexpr size_t kRowsSingle = kAcc <= 2 ? 8 : (kAcc <= 4 ? 2 : 1);

// Dot products of kR consecutive rows (decoders dec[i] bound to them) with one vector x; cols a
// multiple of 32. Each row's partials see exactly the steps DotRowTile would give them.
template <size_t kR, class Decoder>
HWY_INLINE void DotRowsOneVector(Decoder* dec, int64_t cols, const float* x, float* out) {
  const DF df;
  VF acc[kR][kAcc];
  HWY_UNROLL(8)
  for (size_t i = 0; i < kR; ++i) {
    HWY_UNROLL(8)
    for (size_t k = 0; k < kAcc; ++k) acc[i][k] = hn::Zero(df);
  }
  for (int64_t c = 0; c < cols; c += kBlock) {
    VF xv[kAcc];
    HWY_UNROLL(8)
    for (size_t k = 0; k < kAcc; ++k) xv[k] = hn::LoadU(df, x + c + k * kN);
    HWY_UNROLL(8)
    for (size_t i = 0; i < kR; ++i) {
      VF w[kAcc];
      dec[i].Block(c, w);
      HWY_UNROLL(8)
      for (size_t k = 0; k < kAcc; ++k) acc[i][k] = hn::MulAdd(w[k], xv[k], acc[i][k]);
    }
  }
  HWY_UNROLL(8)
  for (size_t i = 0; i < kR; ++i) out[i] = ReduceAccumulators(acc[i]);
}

// kR copies of a decoder (decoders need not be default-constructible).
template <class Decoder, size_t... kI>
HWY_INLINE std::array<Decoder, sizeof...(kI)> Copies(const Decoder& d, std::index_sequence<kI...>) {
  return {((void)kI, d)...};
}

// Rows [r0, r1) for n vectors: y[v*rows + r] = finish(r, dot(row r, x_v)). MakeDecoder(r) binds
// the decoder to row r.
template <class Decoder, class Finish>
HWY_INLINE void DotRows(Decoder& dec, int64_t rows, int64_t cols, const float* x, int64_t n,
                        int64_t r0, int64_t r1, float* y, const Finish& finish) {
  if (n == 1 && kRowsSingle > 1 && cols % kBlock == 0) {
    int64_t r = r0;
    for (; r + static_cast<int64_t>(kRowsSingle) <= r1; r += kRowsSingle) {
      auto decs = Copies(dec, std::make_index_sequence<kRowsSingle>());
      float out[kRowsSingle];
      for (size_t i = 0; i < kRowsSingle; ++i) decs[i].SetRow(r + static_cast<int64_t>(i));
      DotRowsOneVector<kRowsSingle>(decs.data(), cols, x, out);
      for (size_t i = 0; i < kRowsSingle; ++i) {
        y[r + static_cast<int64_t>(i)] = finish(r + static_cast<int64_t>(i), out[i]);
      }
    }
    r0 = r;  // the remaining rows take the general path
  }
  for (int64_t r = r0; r < r1; ++r) {
    dec.SetRow(r);
    int64_t v = 0;
    for (; v + static_cast<int64_t>(kTile) <= n; v += kTile) {
      const float* xs[kTile];
      float out[kTile];
      for (size_t t = 0; t < kTile; ++t) xs[t] = x + (v + static_cast<int64_t>(t)) * cols;
      DotRowTile<kTile>(dec, cols, xs, out);
      for (size_t t = 0; t < kTile; ++t) {
        y[(v + static_cast<int64_t>(t)) * rows + r] = finish(r, out[t]);
      }
    }
    for (; v < n; ++v) {
      const float* xs[1] = {x + v * cols};
      float out[1];
      DotRowTile<1>(dec, cols, xs, out);
      y[v * rows + r] = finish(r, out[0]);
    }
  }
}

// ---- register-blocked tiles on even/odd de-interleaved columns (BF16, int8, AVX-512 MXFP4) ----
//
// A 32-column block is taken as kPairs chunks of kChunk = 2·kN columns. The weights of a chunk are
// decoded as two vectors, `even` (chunk columns 0, 2, …, 2kN-2) and `odd` (1, 3, …): for BF16 a
// shift and a mask of 32-bit lanes, for int8 shifts of sign-extended 16-bit pairs, for MXFP4 the
// low and high nibbles, so no decoder has to shuffle back into column order. The activations are
// de-interleaved the same way (DeinterleaveChunks), and accumulator acc[2j] holds partials
// {j·kChunk + 2l}, acc[2j+1] partials {j·kChunk + 2l + 1}: every column is still added into
// partial c % 32 by one fused multiply-add, in increasing c; only where the partials live changes,
// not the arithmetic. ReduceEvenOdd then runs the documented tree on that layout.

constexpr int64_t kChunk = 2 * static_cast<int64_t>(kN);
constexpr size_t kPairs = kAcc / 2;
static_assert(kPairs >= 1 && kPairs * 2 == kAcc, "32 partials must be whole even/odd pairs");

HWY_INLINE int64_t PaddedCols(int64_t cols) { return (cols + kBlock - 1) / kBlock * kBlock; }

// dst[j·kChunk + l] = x[j·kChunk + 2l], dst[j·kChunk + kN + l] = x[j·kChunk + 2l + 1], over
// [0, PaddedCols(cols)); columns past `cols` are +0 (TiledRows says why that is exact).
HWY_INLINE void DeinterleaveChunks(const float* x, int64_t cols, float* dst) {
  const DF df;
  int64_t c = 0;
  for (; c + kChunk <= cols; c += kChunk) {
    const VF lo = hn::LoadU(df, x + c), hi = hn::LoadU(df, x + c + kN);
    hn::Store(hn::ConcatEven(df, hi, lo), df, dst + c);
    hn::Store(hn::ConcatOdd(df, hi, lo), df, dst + c + kN);
  }
  const int64_t padded = PaddedCols(cols);
  for (; c < padded; c += kChunk) {
    for (int64_t l = 0; l < static_cast<int64_t>(kN); ++l) {
      dst[c + l] = c + 2 * l < cols ? x[c + 2 * l] : 0.0f;
      dst[c + static_cast<int64_t>(kN) + l] = c + 2 * l + 1 < cols ? x[c + 2 * l + 1] : 0.0f;
    }
  }
}

// The documented tree on partials in the even/odd layout. Levels of width >= kChunk add whole
// chunks (acc[2j] += acc[2j + 2w], odd likewise); the rest run inside the remaining pair, where
// level "p[i] += p[i + W]" (W <= kN) is even[l] += even[l + W/2] and odd[l] += odd[l + W/2], and
// the last level, p[0] += p[1], is even[0] + odd[0]. Same operands, same order: bit-identical.
HWY_INLINE float ReduceEvenOdd(VF* acc) {
  HWY_UNROLL(4)
  for (size_t width = kPairs / 2; width >= 1; width /= 2) {
    HWY_UNROLL(4)
    for (size_t j = 0; j < width; ++j) {
      acc[2 * j] = hn::Add(acc[2 * j], acc[2 * (j + width)]);
      acc[2 * j + 1] = hn::Add(acc[2 * j + 1], acc[2 * (j + width) + 1]);
    }
  }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  // Halving an 8-lane vector: lanes l and l + 4, then l and l + 2, then 0 and 1.
  const auto tree8 = [](__m256 v8) {
    const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
    const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    return _mm_add_ss(v2, _mm_movehdup_ps(v2));
  };
#if HWY_TARGET == HWY_AVX2
  return _mm_cvtss_f32(_mm_add_ss(tree8(acc[0].raw), tree8(acc[1].raw)));
#else
  const auto halve = [&](__m512 v) {
    return tree8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
  };
  return _mm_cvtss_f32(_mm_add_ss(halve(acc[0].raw), halve(acc[1].raw)));
#endif
#else
  const DF df;
  alignas(64) float e[kN], o[kN];
  hn::Store(acc[0], df, e);
  hn::Store(acc[1], df, o);
  for (size_t w = kN / 2; w >= 1; w /= 2) {
    for (size_t l = 0; l < w; ++l) {
      e[l] += e[l + w];
      o[l] += o[l + w];
    }
  }
  return e[0] + o[0];
#endif
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// ReduceEvenOdd for up to 16 dot products at once: each level of the documented tree adds, in
// every lane, the same two partials the one-product tree adds, but for several products per
// instruction (two 512-bit shuffles and one add per level and pair of vectors, instead of an
// extract and an add per level and product). Level 16 pairs 256-bit halves, level 8 128-bit
// quarters, levels 4 and 2 lanes within quarters. Lane 4q + j of the result holds product
// 4j + q. The same four steps are levels 8, 4, 2 and 1 of a product whose partials are in column
// order (DotRowTilePartials) once level 16 has added its two vectors: lane i then holds partial i.
HWY_INLINE __m512 TreeOfSixteen(const __m512* x) {
  __m512 t[8], u[4], v[2];
  HWY_UNROLL(8)
  for (int k = 0; k < 8; ++k) {
    t[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], 0xEE));
  }
  HWY_UNROLL(4)
  for (int k = 0; k < 4; ++k) {
    u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0xDD));
  }
  HWY_UNROLL(2)
  for (int k = 0; k < 2; ++k) {
    v[k] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * k], u[2 * k + 1], 0x44),
                         _mm512_shuffle_ps(u[2 * k], u[2 * k + 1], 0xEE));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD));
}
#endif

// Where a batch tile's dot products go: y[(t0 + t)·rows + r + i] for row i and vector t of the
// tile, the dot itself or, with the row-int8 scales in `row_scales`, row_scales[r + i] · dot (the
// scalar and the vector forms round the same single product).
struct TileStore {
  float* y;
  int64_t rows, r, t0;
  const float* row_scales;
  HWY_INLINE void operator()(size_t i, size_t t, float dot) const {
    const int64_t row = r + static_cast<int64_t>(i);
    y[(t0 + static_cast<int64_t>(t)) * rows + row] =
        row_scales == nullptr ? dot : row_scales[row] * dot;
  }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // Lanes i < kR of `dots` are rows r + i of vector t: one masked store (and one multiply).
  template <size_t kR>
  HWY_INLINE void Rows(size_t t, __m512 dots) const {
    const __mmask16 live = static_cast<__mmask16>((1u << kR) - 1u);
    float* dst = y + (t0 + static_cast<int64_t>(t)) * rows + r;
    if (row_scales != nullptr)
      dots = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, row_scales + r), dots);
    _mm512_mask_storeu_ps(dst, live, dots);
  }
#endif
};

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Where TreeOfSixteen leaves product k of a tile (k < 32; products 16..31 in the second sum,
// selected by index bit 4 of a two-source permute): lane 4·(k % 4) + (k % 16) / 4.
constexpr int32_t TreeLane(size_t k) {
  return static_cast<int32_t>((k / 16) * 16 + 4 * (k % 4) + (k % 16) / 4);
}

// Permute indices gathering vector t's products (i·kT + t, i < kR) into lanes 0..kR-1.
template <size_t kR, size_t kT>
struct TreeGather {
  alignas(64) int32_t idx[kT][16] = {};
  constexpr TreeGather() {
    for (size_t t = 0; t < kT; ++t) {
      for (size_t i = 0; i < kR; ++i) idx[t][i] = TreeLane(i * kT + t);
    }
  }
};

// A tile's kR × kT products (even[i·kT + t], odd[i·kT + t]: their partials in the even/odd
// layout, kR·kT <= 32), each reduced by the documented tree (TreeOfSixteen, 16 products per
// pair of trees: bit-identical to ReduceEvenOdd), then permuted in registers into one vector per
// activation vector and stored by store.Rows: no round trip through memory between the tree and
// y (a 64-byte store read back as scalars stalled the tiles of short rows).
template <size_t kR, size_t kT>
HWY_INLINE void StoreDots(const VF* even, const VF* odd, const TileStore& store) {
  constexpr size_t kCount = kR * kT;
  static_assert(kCount <= 32 && kR <= 16, "a tile's products fit two trees");
  __m512 sums[2];
  HWY_UNROLL(2)
  for (size_t k0 = 0; k0 < kCount; k0 += 16) {
    __m512 e[16], o[16];
    HWY_UNROLL(16)
    for (size_t k = 0; k < 16; ++k) {
      e[k] = k0 + k < kCount ? even[k0 + k].raw : _mm512_setzero_ps();
      o[k] = k0 + k < kCount ? odd[k0 + k].raw : _mm512_setzero_ps();
    }
    sums[k0 / 16] = _mm512_add_ps(TreeOfSixteen(e), TreeOfSixteen(o));
  }
  static constexpr TreeGather<kR, kT> kGather;
  HWY_UNROLL(8)
  for (size_t t = 0; t < kT; ++t) {
    const __m512i idx = _mm512_load_si512(kGather.idx[t]);
    if constexpr (kCount <= 16) {
      store.template Rows<kR>(t, _mm512_permutexvar_ps(idx, sums[0]));
    } else {
      store.template Rows<kR>(t, _mm512_permutex2var_ps(sums[0], idx, sums[1]));
    }
  }
}
constexpr bool kReduceMany = true;
#else
// Declared only: the tiles call it under `if constexpr (kReduceMany)`.
template <size_t kR, size_t kT>
void StoreDots(const VF* even, const VF* odd, const TileStore& store);
constexpr bool kReduceMany = false;  // one product at a time (ReduceEvenOdd)
#endif

// A decoder with PrefetchAhead(b) starts loading weights it will decode some way past block b:
// BF16 and int8 from the two-pass tiles (they decode on the fly), MXFP4 from TiledRows' fp32
// predecode (the only decoder that predecodes). Others do nothing. (A function of its own: clang
// 14 checks a discarded `if constexpr` branch inside the tiles' generic lambdas.)
template <class Decoder>
HWY_INLINE void PrefetchAheadIfAny(const Decoder& d, int64_t b) {
  if constexpr (requires { d.PrefetchAhead(b); }) d.PrefetchAhead(b);
}

// kR weight rows (decoders dec[i], each bound to its row) × kT de-interleaved activation vectors
// (xd + t·xstride), over blocks [b0, b1) of 32 columns and, if `tail`, the rows' zero-padded last
// block. Decoder::Pair<kTail>(b, j, even, odd) decodes chunk j of block b. Each weight chunk is
// decoded once for the kT vectors and each activation chunk loaded once for the kR rows.
//
// Column blocking: a product whose columns are split into several calls carries its 32 partials
// in `carry` (kAcc vectors per row and vector, [t][i][k]) from one call to the next: `first`
// starts them at +0, otherwise they are loaded; `last` reduces them and calls store(i, t, dot),
// otherwise they are saved. Every partial sees the same fused multiply-adds in the same order as
// in one call over all columns, so the split changes no bit.
template <size_t kR, size_t kT, class Decoder, class Store>
HWY_INLINE void TileKernel(const Decoder* dec, int64_t b0, int64_t b1, bool tail, const float* xd,
                           int64_t xstride, float* carry, bool first, bool last,
                           const Store& store) {
  const DF df;
  VF acc[kR][kT][kAcc];
  HWY_UNROLL(8)
  for (size_t i = 0; i < kR; ++i) {
    HWY_UNROLL(8)
    for (size_t t = 0; t < kT; ++t) {
      HWY_UNROLL(8)
      for (size_t k = 0; k < kAcc; ++k) {
        acc[i][t][k] = first ? hn::Zero(df) : hn::Load(df, carry + ((t * kR + i) * kAcc + k) * kN);
      }
    }
  }
  const auto block = [&]<bool kTail>(int64_t b) HWY_ATTR {
    HWY_UNROLL(4)
    for (size_t j = 0; j < kPairs; ++j) {
      VF we[kR], wo[kR];
      HWY_UNROLL(8)
      for (size_t i = 0; i < kR; ++i) dec[i].template Pair<kTail>(b, j, we[i], wo[i]);
      const float* xb = xd + b * kBlock + static_cast<int64_t>(j) * kChunk;
      HWY_UNROLL(8)
      for (size_t t = 0; t < kT; ++t) {
        VF xe = hn::Load(df, xb + static_cast<int64_t>(t) * xstride);
        VF xo = hn::Load(df, xb + static_cast<int64_t>(t) * xstride + kN);
#if HWY_ARCH_X86
        if constexpr (kR > 1) {
          // Keep x in registers for the kR rows: folded into each FMA it would load kR times.
          asm("" : "+v"(xe.raw), "+v"(xo.raw));
        }
#endif
        HWY_UNROLL(8)
        for (size_t i = 0; i < kR; ++i) {
          acc[i][t][2 * j] = hn::MulAdd(we[i], xe, acc[i][t][2 * j]);
          acc[i][t][2 * j + 1] = hn::MulAdd(wo[i], xo, acc[i][t][2 * j + 1]);
        }
      }
    }
  };
  for (int64_t b = b0; b < b1; ++b) block.template operator()<false>(b);
  if (tail) block.template operator()<true>(b1);
  if constexpr (kReduceMany && kR * kT >= 4) {
    if (last) {  // several products' trees at once
      VF even[kR * kT], odd[kR * kT];
      HWY_UNROLL(8)
      for (size_t i = 0; i < kR; ++i) {
        HWY_UNROLL(8)
        for (size_t t = 0; t < kT; ++t) {
          even[i * kT + t] = acc[i][t][0];
          odd[i * kT + t] = acc[i][t][1];
        }
      }
      StoreDots<kR, kT>(even, odd, store);
      return;
    }
  }
  HWY_UNROLL(8)
  for (size_t i = 0; i < kR; ++i) {
    HWY_UNROLL(8)
    for (size_t t = 0; t < kT; ++t) {
      if (last) {
        store(i, t, ReduceEvenOdd(acc[i][t]));
      } else {
        HWY_UNROLL(8)
        for (size_t k = 0; k < kAcc; ++k) {
          hn::Store(acc[i][t][k], df, carry + ((t * kR + i) * kAcc + k) * kN);
        }
      }
    }
  }
}

// TileKernel in two passes over the columns, the even partials first and then the odd ones (each
// partial's chain depends only on its own columns, so the order of the two passes changes no bit).
// A tile then holds one set of kPairs accumulators per row and vector instead of two, so twice as
// many rows × vectors fit the registers and each loaded weight and activation serves more
// multiply-adds. The even partials wait in `carry` (or a stack stash) for the reduction.
// Decoder::Half<kTail, kOdd>(b, j, w) decodes one half of chunk j of block b.
template <size_t kR, size_t kT, class Decoder, class Store>
HWY_INLINE void TileKernelHalves(const Decoder* dec, int64_t b0, int64_t b1, bool tail,
                                 const float* xd, int64_t xstride, float* carry, bool first,
                                 bool last, const Store& store) {
  const DF df;
  alignas(64) float stash[kR * kT * kPairs * kN];
  const auto pass = [&]<int kOdd>() HWY_ATTR {
    VF acc[kR][kT][kPairs];
    HWY_UNROLL(8)
    for (size_t i = 0; i < kR; ++i) {
      HWY_UNROLL(8)
      for (size_t t = 0; t < kT; ++t) {
        HWY_UNROLL(4)
        for (size_t j = 0; j < kPairs; ++j) {
          acc[i][t][j] = first ? hn::Zero(df)
                               : hn::Load(df, carry + ((t * kR + i) * kAcc + 2 * j + kOdd) * kN);
        }
      }
    }
    const auto block = [&]<bool kTail>(int64_t b) HWY_ATTR {
      if constexpr (kOdd == 0) {
        for (size_t i = 0; i < kR; ++i) PrefetchAheadIfAny(dec[i], b);
      }
      HWY_UNROLL(4)
      for (size_t j = 0; j < kPairs; ++j) {
        VF w[kR];
        HWY_UNROLL(8)
        for (size_t i = 0; i < kR; ++i) dec[i].template Half<kTail, kOdd>(b, j, w[i]);
        const float* xb = xd + b * kBlock + static_cast<int64_t>(j) * kChunk + kOdd * kN;
        HWY_UNROLL(8)
        for (size_t t = 0; t < kT; ++t) {
          VF xv = hn::Load(df, xb + static_cast<int64_t>(t) * xstride);
#if HWY_ARCH_X86
          if constexpr (kR > 1) asm("" : "+v"(xv.raw));  // one load for the kR rows
#endif
          HWY_UNROLL(8)
          for (size_t i = 0; i < kR; ++i) acc[i][t][j] = hn::MulAdd(w[i], xv, acc[i][t][j]);
        }
      }
    };
    for (int64_t b = b0; b < b1; ++b) block.template operator()<false>(b);
    if (tail) block.template operator()<true>(b1);
    HWY_UNROLL(8)
    for (size_t i = 0; i < kR; ++i) {
      HWY_UNROLL(8)
      for (size_t t = 0; t < kT; ++t) {
        HWY_UNROLL(4)
        for (size_t j = 0; j < kPairs; ++j) {
          if (!last) {
            hn::Store(acc[i][t][j], df, carry + ((t * kR + i) * kAcc + 2 * j + kOdd) * kN);
          } else if constexpr (kOdd == 0) {
            hn::Store(acc[i][t][j], df, stash + ((t * kR + i) * kPairs + j) * kN);
          }
        }
        if constexpr (kOdd == 1 && !(kReduceMany && kR * kT >= 4)) {
          if (last) {
            VF both[kAcc];
            HWY_UNROLL(4)
            for (size_t j = 0; j < kPairs; ++j) {
              both[2 * j] = hn::Load(df, stash + ((t * kR + i) * kPairs + j) * kN);
              both[2 * j + 1] = acc[i][t][j];
            }
            store(i, t, ReduceEvenOdd(both));
          }
        }
      }
    }
    if constexpr (kOdd == 1 && kReduceMany && kR * kT >= 4) {
      if (last) {  // several products' trees at once
        VF even[kR * kT], odd[kR * kT];
        HWY_UNROLL(8)
        for (size_t i = 0; i < kR; ++i) {
          HWY_UNROLL(8)
          for (size_t t = 0; t < kT; ++t) {
            even[i * kT + t] = hn::Load(df, stash + (t * kR + i) * kN);
            odd[i * kT + t] = acc[i][t][0];
          }
        }
        StoreDots<kR, kT>(even, odd, store);
      }
    }
  };
  pass.template operator()<0>();
  pass.template operator()<1>();
}

// Whether the two-pass tiles pay on this target: on AVX-512, where 32 registers hold 4 rows × 6
// vectors of single accumulators (docs/PERFORMANCE.md "Batched kernels in two passes" has the
// measurements). The BF16 and int8 kernels take them from kHalvesMinVectors vectors (below that
// decoding each weight chunk twice costs more than the larger tile saves); MXFP4's fp32-decoded
// weights stay one-pass (3 × 4): the bench preset's 256- and 512-column experts measured slower
// in two passes.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kHalvesTiles = true;
#else
constexpr bool kHalvesTiles = false;
#endif
constexpr int64_t kHalvesMinVectors = 16;

// A batch tile (kT > 1) in two passes (kHalves) or in one.
template <size_t kR, size_t kT, bool kHalves, class Decoder, class Store>
HWY_INLINE void TileKernelFor(const Decoder* dec, int64_t b0, int64_t b1, bool tail,
                              const float* xd, int64_t xstride, float* carry, bool first, bool last,
                              const Store& store) {
  if constexpr (kHalves && kT > 1) {
    TileKernelHalves<kR, kT>(dec, b0, b1, tail, xd, xstride, carry, first, last, store);
  } else {
    TileKernel<kR, kT>(dec, b0, b1, tail, xd, xstride, carry, first, last, store);
  }
}

// TileKernel for a run-time width 1 <= width <= kMaxT (the last, narrower vector tile).
template <size_t kR, size_t kMaxT, bool kHalves, class Decoder, class Store>
HWY_INLINE void TileKernelWidth(size_t width, const Decoder* dec, int64_t b0, int64_t b1, bool tail,
                                const float* xd, int64_t xstride, float* carry, bool first,
                                bool last, const Store& store) {
  if (width == kMaxT) {
    TileKernelFor<kR, kMaxT, kHalves>(dec, b0, b1, tail, xd, xstride, carry, first, last, store);
  } else if constexpr (kMaxT > 1) {
    TileKernelWidth<kR, kMaxT - 1, kHalves>(width, dec, b0, b1, tail, xd, xstride, carry, first,
                                            last, store);
  }
}

// Weights already decoded to fp32 in the even/odd layout (TiledRows' per-row-tile buffer whose
// first block is column block b0; a row's padded last block follows its full blocks).
struct F32PairDecoder {
  const float* base = nullptr;
  int64_t b0 = 0;
  template <bool kTail>
  HWY_INLINE void Pair(int64_t b, size_t j, VF& even, VF& odd) const {
    const DF df;
    const float* p = base + (b - b0) * kBlock + static_cast<int64_t>(j) * kChunk;
    even = hn::Load(df, p);
    odd = hn::Load(df, p + kN);
  }
  template <bool kTail, int kOdd>
  HWY_INLINE void Half(int64_t b, size_t j, VF& w) const {
    w = hn::Load(DF(), base + (b - b0) * kBlock + static_cast<int64_t>(j) * kChunk + kOdd * kN);
  }
};

// Tile shapes: accumulators (kR·kT·kAcc) + weights (2·kR) + one activation pair must fit the
// register file (32 zmm on AVX-512, 16 ymm on AVX2, 32 q on NEON). A single vector uses more rows
// (more weight streams in flight, each activation load shared by all of them).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr size_t kTileRows = 3, kTileVecs = 4, kTileRowsSingle = 8;
// Two-pass tiles (TileKernelHalves): 24 accumulators + 4 weights + one activation.
constexpr size_t kHalvesRows = 4, kHalvesVecs = 6;
#elif HWY_TARGET == HWY_AVX2
constexpr size_t kTileRows = 1, kTileVecs = 2, kTileRowsSingle = 2;
constexpr size_t kHalvesRows = kTileRows, kHalvesVecs = kTileVecs;
#else
constexpr size_t kTileRows = 1, kTileVecs = 3, kTileRowsSingle = 2;
constexpr size_t kHalvesRows = kTileRows, kHalvesVecs = kTileVecs;
#endif

// Per-thread scratch (kWhich: 0 de-interleaved activations, 1 carried partials): grows to the
// largest size the thread has needed (the warm-up calls), then is reused, so steady-state calls
// never allocate.
template <int kWhich>
HWY_INLINE float* ScratchFloats(int64_t count) {
  thread_local AlignedBuffer<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < count) buffer.Resize(static_cast<size_t>(count));
  return buffer.data();
}

// Activations are de-interleaved in blocks of vectors of at most this many bytes (kept in the
// core's L2 cache): the weights are streamed once per block, so the larger the block, the fewer
// bytes of weights per multiply-add.
constexpr int64_t kXBlockBytes = 512 * 1024;
// Columns per column block: a row tile's weights over this many columns stay in L1 while every
// vector tile of the block uses them (their partials carried between column blocks).
constexpr int64_t kColBlockBlocks = 1024 / kBlock;

// Rows [r0, r1) of Y = X·Wᵀ for n vectors: y[v·rows + r] = dot(row r, x_v), times row_scales[r]
// when row_scales is not null (row-int8), each dot in the order of kernels/matvec.h, so any row
// partition and any n give the same bits. Tiles of kR rows × kT vectors (a single vector: kR1 rows
// × 1); leftover rows go one at a time, leftover vectors in one narrower tile. make(dec, r) binds a
// decoder to row r.
//
// Columns past `cols` up to the next multiple of 32 are +0 in both the decoders' padded last
// block and x: their products +0·+0 leave every partial unchanged (a partial is never -0: it
// starts at +0, and a sum that cancels exactly rounds to +0), so the padding is exact.
template <size_t kR, size_t kT, size_t kR1, bool kHalves, class Decoder, class MakeDecoder>
HWY_INLINE void TiledRows(const MakeDecoder& make, int64_t rows, int64_t cols, const float* x,
                          int64_t n, int64_t r0, int64_t r1, float* y, const float* row_scales) {
  const int64_t padded = PaddedCols(cols);
  const int64_t full_blocks = cols / kBlock;
  const bool tail = full_blocks * kBlock < cols;
  const int64_t blocks = padded / kBlock;
  int64_t per_block = kXBlockBytes / (padded * static_cast<int64_t>(sizeof(float)));
  per_block = per_block < static_cast<int64_t>(kT)
                  ? static_cast<int64_t>(kT)
                  : per_block / static_cast<int64_t>(kT) * static_cast<int64_t>(kT);
  if (per_block > n) per_block = n;
  float* xd = ScratchFloats<0>(per_block * padded);
  // Carried partials of one row tile and every vector of the block (only with column blocks).
  float* carry =
      blocks > kColBlockBlocks
          ? ScratchFloats<1>(per_block * static_cast<int64_t>(kR > kR1 ? kR : kR1) * kBlock)
          : nullptr;
  // A row tile's weights of one column block, decoded to fp32.
  float* wbuf =
      ScratchFloats<2>(static_cast<int64_t>(kR > kR1 ? kR : kR1) * kColBlockBlocks * kBlock);
  for (int64_t v0 = 0; v0 < n; v0 += per_block) {
    const int64_t count = n - v0 < per_block ? n - v0 : per_block;
    for (int64_t v = 0; v < count; ++v) {
      DeinterleaveChunks(x + (v0 + v) * cols, cols, xd + v * padded);
    }
    float* yv = y + v0 * rows;
    // One row tile of kRows rows: every column block, and in it every vector of the block, kVecs
    // at a time.
    const auto rows_tile = [&]<size_t kRows, size_t kVecs>(int64_t r) HWY_ATTR {
      Decoder dec[kRows];
      for (size_t i = 0; i < kRows; ++i) make(dec[i], r + static_cast<int64_t>(i));
      for (int64_t cb = 0; cb < blocks; cb += kColBlockBlocks) {
        const int64_t cb_end = blocks - cb < kColBlockBlocks ? blocks : cb + kColBlockBlocks;
        const bool first = cb == 0, last = cb_end == blocks;
        const int64_t b1 = cb_end < full_blocks ? cb_end : full_blocks;
        const bool with_tail = last && tail;
        // One store whose t0 the vector tiles advance: a TileStore built per tile call measured
        // 3-5 points of the peak slower at 6 vectors (bench MXFP4 rows).
        TileStore store{yv, rows, r, 0, row_scales};
        int64_t& t0 = store.t0;
        const auto carry_at = [&](int64_t t) {
          return carry == nullptr ? nullptr : carry + t * static_cast<int64_t>(kRows) * kBlock;
        };
        const auto vector_tiles = [&](const auto* tile_dec) HWY_ATTR {
          for (t0 = 0; t0 + static_cast<int64_t>(kVecs) <= count; t0 += kVecs) {
            TileKernelFor<kRows, kVecs, kHalves>(tile_dec, cb, b1, with_tail, xd + t0 * padded,
                                                 padded, carry_at(t0), first, last, store);
          }
          if (t0 < count) {
            TileKernelWidth<kRows, kVecs, kHalves>(static_cast<size_t>(count - t0), tile_dec, cb,
                                                   b1, with_tail, xd + t0 * padded, padded,
                                                   carry_at(t0), first, last, store);
          }
        };
        if (!Decoder::kPredecode || count <= static_cast<int64_t>(kVecs)) {
          vector_tiles(dec);  // decode on the fly, once per vector tile
          continue;
        }
        // Several vector tiles of a costly format: decode the row tile's weights of this column
        // block to fp32 once (wbuf, L1-resident), in the even/odd layout the tiles read.
        const DF df;
        F32PairDecoder fdec[kRows];
        for (size_t i = 0; i < kRows; ++i) {
          float* base = wbuf + static_cast<int64_t>(i) * kColBlockBlocks * kBlock;
          fdec[i] = {base, cb};
          for (int64_t b = cb; b < b1 + (with_tail ? 1 : 0); ++b) {
            PrefetchAheadIfAny(dec[i], b);
            HWY_UNROLL(4)
            for (size_t j = 0; j < kPairs; ++j) {
              VF e, o;
              if (b < b1) {
                dec[i].template Pair<false>(b, j, e, o);
              } else {
                dec[i].template Pair<true>(b, j, e, o);
              }
              float* p = base + (b - cb) * kBlock + static_cast<int64_t>(j) * kChunk;
              hn::Store(e, df, p);
              hn::Store(o, df, p + kN);
            }
          }
        }
        vector_tiles(fdec);
      }
    };
    int64_t r = r0;
    if (count == 1) {
      for (; r + static_cast<int64_t>(kR1) <= r1; r += kR1) {
        rows_tile.template operator()<kR1, 1>(r);
      }
    } else {
      for (; r + static_cast<int64_t>(kR) <= r1; r += kR) {
        rows_tile.template operator()<kR, kT>(r);
      }
    }
    for (; r < r1; ++r) rows_tile.template operator()<1, kT>(r);
  }
}

// BF16 pair decoder: 2kN weights as kN 32-bit lanes; the even column is the low half (shifted
// up), the odd column the high half (masked): BF16 -> fp32 exactly, no shuffle.
struct Bf16PairDecoder {
  static constexpr bool kPredecode = false;  // a shift and a mask: cheaper than a store and load
  const uint16_t* row = nullptr;
  alignas(64) uint16_t pad[kBlock] = {};  // the last, partial block, zero-padded

  // The two-pass tiles (TileKernelHalves) ask for the weights one column block ahead of block b
  // (the same columns of the next block TiledRows gives them) while they compute on this one:
  // measured on K3's 7168-wide rows, prefetching half a column block or two ahead was 5-6 points
  // of the peak slower, as was none. (In the one-pass tiles, whose registers are all taken, it
  // cost int8 at 8 vectors a third of its speed.)
  HWY_INLINE void PrefetchAhead(int64_t b) const {
    hwy::Prefetch(row + (b + kColBlockBlocks) * kBlock);
  }
  HWY_INLINE void Bind(const uint16_t* w, int64_t cols, int64_t r) {
    row = w + r * cols;
    const int64_t full = cols / kBlock * kBlock;
    for (int64_t c = full; c < cols; ++c) pad[c - full] = row[c];
  }
  template <bool kTail>
  HWY_INLINE void Pair(int64_t b, size_t j, VF& even, VF& odd) const {
    const DF df;
    const hn::RebindToUnsigned<DF> du;
    const hn::Repartition<uint16_t, DF> d16;
    const uint16_t* p = (kTail ? pad : row + b * kBlock) + static_cast<int64_t>(j) * kChunk;
    const auto v = hn::BitCast(du, hn::LoadU(d16, p));
    even = hn::BitCast(df, hn::ShiftLeft<16>(v));
    odd = hn::BitCast(df, hn::And(v, hn::Set(du, 0xFFFF0000u)));
  }
  template <bool kTail, int kOdd>
  HWY_INLINE void Half(int64_t b, size_t j, VF& w) const {
    const DF df;
    const hn::RebindToUnsigned<DF> du;
    const hn::Repartition<uint16_t, DF> d16;
    const uint16_t* p = (kTail ? pad : row + b * kBlock) + static_cast<int64_t>(j) * kChunk;
    const auto v = hn::BitCast(du, hn::LoadU(d16, p));
    w = hn::BitCast(df, kOdd ? hn::And(v, hn::Set(du, 0xFFFF0000u)) : hn::ShiftLeft<16>(v));
  }
};

// Row-int8 pair decoder: 2kN int8 weights sign-extended to 16-bit lanes, viewed as kN 32-bit
// lanes; the even column is the low half (shifted up and arithmetic-shifted back), the odd column
// the high half (arithmetic shift), converted to fp32 exactly.
struct I8PairDecoder {
  static constexpr bool kPredecode = false;  // measured: decoding on the fly is as fast
  const int8_t* row = nullptr;
  alignas(64) int8_t pad[kBlock] = {};

  HWY_INLINE void PrefetchAhead(int64_t b) const {  // as Bf16PairDecoder's
    hwy::Prefetch(row + (b + kColBlockBlocks) * kBlock);
  }
  HWY_INLINE void Bind(const int8_t* q, int64_t cols, int64_t r) {
    row = q + r * cols;
    const int64_t full = cols / kBlock * kBlock;
    for (int64_t c = full; c < cols; ++c) pad[c - full] = row[c];
  }
  template <bool kTail>
  HWY_INLINE void Pair(int64_t b, size_t j, VF& even, VF& odd) const {
    const DF df;
    const hn::RebindToSigned<DF> di;
    const hn::Repartition<int16_t, DF> d16;
    const hn::Rebind<int8_t, decltype(d16)> d8;
    const int8_t* p = (kTail ? pad : row + b * kBlock) + static_cast<int64_t>(j) * kChunk;
    const auto v = hn::BitCast(di, hn::PromoteTo(d16, hn::LoadU(d8, p)));
    even = hn::ConvertTo(df, hn::ShiftRight<16>(hn::ShiftLeft<16>(v)));
    odd = hn::ConvertTo(df, hn::ShiftRight<16>(v));
  }
  template <bool kTail, int kOdd>
  HWY_INLINE void Half(int64_t b, size_t j, VF& w) const {
    VF even, odd;
    Pair<kTail>(b, j, even, odd);  // the unused half's shifts and convert are dead code
    w = kOdd ? odd : even;
  }
};

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// MXFP4 pair decoder (AVX-512: one chunk = one 32-column group). Byte j of a group holds columns
// 2j (low nibble) and 2j+1 (high nibble); the 16 bytes widened to 16 dword lanes index the E2M1
// table pre-multiplied by the group's power-of-two scale (exact), and vpermps reads only the low
// 4 bits of each index, so the low nibble needs no mask and the high nibble one shift.
struct Mxfp4PairDecoder {
  static constexpr bool kPredecode = true;  // a scale, a widening and two permutes per 32 weights
  const uint8_t* prow = nullptr;
  const uint8_t* srow = nullptr;

  HWY_INLINE void Bind(const uint8_t* packed, const uint8_t* scales, int64_t cols, int64_t r) {
    prow = packed + r * (cols / 2);
    srow = scales + r * (cols / kBlock);
  }
  // The predecode (TiledRows) asks for the bytes kPrefetchBytes past group b's, one cache line of
  // packed codes per 4 groups and of scales per 64: the hardware prefetcher alone left the decode
  // waiting on memory at every row tile of a cold expert (a matrix is read once per call).
  static constexpr int64_t kPrefetchBytes = 4096;
  HWY_INLINE void PrefetchAhead(int64_t b) const {
    if ((b & 3) != 0) return;
    hwy::Prefetch(prow + b * 16 + kPrefetchBytes);
    if ((b & 63) == 0) hwy::Prefetch(srow + b + kPrefetchBytes / 16);
  }
  template <bool kTail>
  HWY_INLINE void Pair(int64_t b, size_t, VF& even, VF& odd) const {
    alignas(64) static constexpr float kTable[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                                     4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                                     -2.0f, -3.0f, -4.0f, -6.0f};
    const __m512 scaled =
        _mm512_mul_ps(_mm512_load_ps(kTable), _mm512_set1_ps(kE8m0AsF32[srow[b]]));
    const __m512i codes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(prow + b * 16)));
    even.raw = _mm512_permutexvar_ps(codes, scaled);
    odd.raw = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), scaled);
  }
};
#endif

// ---- decoders ----

struct F32Decoder {
  const float* a;
  HWY_INLINE void Block(int64_t c, VF* w) const {
    const DF df;
    HWY_UNROLL(8)
    for (size_t k = 0; k < kAcc; ++k) w[k] = hn::LoadU(df, a + c + k * kN);
  }
  HWY_INLINE void Tail(int64_t c, int64_t count, float* out) const {
    for (int64_t i = 0; i < count; ++i) out[i] = a[c + i];
  }
};

// Row-int8: q -> fp32 exactly; the row scale is applied after the sum (Finish).
struct I8Decoder {
  const int8_t* q0;
  int64_t cols;
  const int8_t* row = nullptr;
  HWY_INLINE void SetRow(int64_t r) { row = q0 + r * cols; }
  HWY_INLINE void Block(int64_t c, VF* w) const {
    const DF df;
    const hn::RebindToSigned<DF> di;
    const hn::Rebind<int8_t, decltype(di)> d8;
    HWY_UNROLL(8)
    for (size_t k = 0; k < kAcc; ++k) {
      w[k] = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, row + c + k * kN)));
    }
  }
  HWY_INLINE void Tail(int64_t c, int64_t count, float* out) const {
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(row[c + i]);
  }
};

// MXFP4, fused: one group (16 packed bytes, one scale) per 32-column block. N bytes at a time are
// widened to 32-bit lanes in a byte order chosen so that interleaving the low-nibble and
// high-nibble lanes (InterleaveLower/Upper work per 128-bit block) yields elements in column
// order. Codes become fp32 by a byte shuffle of 2·E2M1 (small integers, ggml's kvalues),
// converted and multiplied by scale/2, so weight = E2M1·2^(s-127) exactly, as in the reference.
// NEON's path; on x86 only rows wider than the de-interleaved tiles of matvec_mxfp4.cc take it.
struct Mxfp4Decoder {
  using DI = hn::RebindToSigned<DF>;
  using D8 = hn::Rebind<uint8_t, DI>;  // kN bytes
  const uint8_t* packed0;
  const uint8_t* scales0;
  int64_t cols;
  const uint8_t* prow = nullptr;
  const uint8_t* srow = nullptr;
  hn::Vec<D8> perm;
  hn::Vec<DI> table;  // 2·E2M1 as int8, in every 128-bit block

  Mxfp4Decoder(const uint8_t* packed, const uint8_t* scales, int64_t n_cols)
      : packed0(packed), scales0(scales), cols(n_cols) {
    // Lane i = 4b + j of block b takes byte 2b + j (j < 2) or 2B + 2b + j - 2 (j >= 2).
    alignas(16) uint8_t idx[16] = {};
    constexpr size_t kBlocks = kN / 4;
    for (size_t i = 0; i < kN; ++i) {
      const size_t b = i / 4, j = i % 4;
      idx[i] = static_cast<uint8_t>(j < 2 ? 2 * b + j : 2 * kBlocks + 2 * b + j - 2);
    }
    perm = hn::LoadU(D8(), idx);
    alignas(16) static constexpr int8_t kDoubled[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                        0, -1, -2, -3, -4, -6, -8, -12};
    const hn::Repartition<int8_t, DI> d8s;
    table = hn::BitCast(DI(), hn::LoadDup128(d8s, kDoubled));
  }
  HWY_INLINE void SetRow(int64_t r) {
    prow = packed0 + r * (cols / 2);
    srow = scales0 + r * (cols / kBlock);
  }
  HWY_INLINE VF Lookup(hn::Vec<DI> code) const {
    const DF df;
    // Index bytes are (code, 0, 0, 0) per lane and table byte 0 is 0: the lane gets the
    // table byte zero-extended; shifts sign-extend it.
    const auto v = hn::TableLookupBytes(table, code);
    return hn::ConvertTo(df, hn::ShiftRight<24>(hn::ShiftLeft<24>(v)));
  }
  HWY_INLINE void Block(int64_t c, VF* w) const {
    const DF df;
    const DI di;
    const D8 d8;
    const int64_t g = c / kBlock;
    const uint8_t* bytes = prow + g * (kBlock / 2);
    const VF half_scale = hn::Set(df, kE8m0AsF32[srow[g]] * 0.5f);  // exact
    HWY_UNROLL(4)
    for (size_t it = 0; it < kAcc / 2; ++it) {
      auto b = hn::LoadU(d8, bytes + it * kN);
      if constexpr (kN > 4) b = hn::TableLookupBytes(b, perm);
      const auto v = hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DI>(), b));
      const VF lo = Lookup(hn::And(v, hn::Set(di, 15)));
      const VF hi = Lookup(hn::ShiftRight<4>(v));
      w[2 * it] = hn::Mul(hn::InterleaveLower(df, lo, hi), half_scale);
      w[2 * it + 1] = hn::Mul(hn::InterleaveUpper(df, lo, hi), half_scale);
    }
  }
  HWY_INLINE void Tail(int64_t, int64_t, float*) const {}  // cols is a multiple of 32
};

#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#endif  // include guard
