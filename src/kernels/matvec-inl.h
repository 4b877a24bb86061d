// Per-target building blocks of the matrix kernels (Highway): decoders that turn 32 consecutive
// weights of a row into fp32 vectors, and the row dot product in the order documented in
// kernels/matvec.h. 32 partial sums are kept as 32/N vectors of N lanes (2 on AVX3, 4 on AVX2,
// 8 on NEON), lane l of vector k holding partial k*N + l; each step is one fused multiply-add,
// exactly as the scalar reference (std::fma) rounds, so every target is bit-identical to it.
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

#include "hwy/highway.h"
#include "quant/bf16.h"
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

// Dot products of one weight row (behind `dec`) with kT activation vectors xs[t], columns
// [0, cols). Decoder: Block(c, w) fills kAcc vectors with the weights of columns [c, c+32);
// Tail(c, count, out) writes `count` < 32 weights from column c as scalars.
template <size_t kT, class Decoder>
HWY_INLINE void DotRowTile(const Decoder& dec, int64_t cols, const float* const* xs, float* out) {
  const DF df;
  VF acc[kT][kAcc];
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

// BF16 -> fp32 is exact: the 16 bits become the upper half of the fp32 pattern.
struct Bf16Decoder {
  const uint16_t* w0;
  int64_t cols;
  const uint16_t* row = nullptr;
  HWY_INLINE void SetRow(int64_t r) { row = w0 + r * cols; }
  HWY_INLINE void Block(int64_t c, VF* w) const {
    const DF df;
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<uint16_t, decltype(du)> d16;
    HWY_UNROLL(8)
    for (size_t k = 0; k < kAcc; ++k) {
      const auto wide = hn::PromoteTo(du, hn::LoadU(d16, row + c + k * kN));
      w[k] = hn::BitCast(df, hn::ShiftLeft<16>(wide));
    }
  }
  HWY_INLINE void Tail(int64_t c, int64_t count, float* out) const {
    for (int64_t i = 0; i < count; ++i) out[i] = Bf16ToF32(row[c + i]);
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
    const VF half_scale = hn::Set(df, E8m0ToF32(srow[g]) * 0.5f);  // exact
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
