// BF16 and fp32 kernels, compiled once per Highway target (simd_targets.h): BF16 matrix × vectors,
// BF16 transposed matrix-vector, fp32 dot and the transposed fp32 product (MLA attention over the
// latent cache). HWY_SCALAR calls the scalar references.
#include <cmath>
#include <string>

#include "kernels/simd_targets.h"
// Highway's per-target recompilation of this file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/dispatch.h"
#include "kernels/matvec-inl.h"
#include "kernels/ref/matvec_ref.h"
#include "quant/bf16.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {

void Bf16RowsImpl(const uint16_t* w, int64_t rows, int64_t cols, const float* x, int64_t n,
                  int64_t r0, int64_t r1, float* y) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t v = 0; v < n; ++v) {
    ref::MatVecBf16(w + r0 * cols, r1 - r0, cols, x + v * cols, y + v * rows + r0);
  }
#else
  const auto bind = [&](Bf16PairDecoder& dec, int64_t r) { dec.Bind(w, cols, r); };
  if constexpr (kHalvesTiles) {
    if (n >= kHalvesMinVectors) {
      TiledRows<kHalvesRows, kHalvesVecs, kTileRowsSingle, true, Bf16PairDecoder>(
          bind, rows, cols, x, n, r0, r1, y, nullptr);
      return;
    }
  }
  TiledRows<kTileRows, kTileVecs, kTileRowsSingle, false, Bf16PairDecoder>(bind, rows, cols, x, n,
                                                                           r0, r1, y, nullptr);
#endif
}

float DotF32Impl(const float* a, const float* b, int64_t n) {
#if HWY_TARGET == HWY_SCALAR
  return ref::DotF32(a, b, n);
#else
  const F32Decoder dec{a};
  const float* xs[1] = {b};
  float out[1];
  DotRowTile<1>(dec, n, xs, out);
  return out[0];
#endif
}

#if HWY_TARGET != HWY_SCALAR
// kV vectors × kW weight vectors of columns [c, c + kW·kN): acc[j][k] = Σ_r fma(W[r, c + k·kN ..],
// x_j[r]) in increasing r, from +0 (`first`) or from the partial sums already in y. W's rows are
// w_stride apart, x_j is x + j·x_stride, y_j is y + j·y_stride. Each weight vector is loaded once
// for the kV vectors.
template <size_t kV, size_t kW>
HWY_INLINE void TransposedTile(const float* w, int64_t w_stride, int64_t rows, const float* x,
                               int64_t x_stride, bool first, int64_t c, float* y,
                               int64_t y_stride) {
  const DF df;
  VF acc[kV][kW];
  HWY_UNROLL(8)
  for (size_t j = 0; j < kV; ++j) {
    HWY_UNROLL(4)
    for (size_t k = 0; k < kW; ++k) {
      acc[j][k] =
          first ? hn::Zero(df) : hn::LoadU(df, y + static_cast<int64_t>(j) * y_stride + c + k * kN);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    VF wv[kW];
    HWY_UNROLL(4)
    for (size_t k = 0; k < kW; ++k) wv[k] = hn::LoadU(df, w + r * w_stride + c + k * kN);
    HWY_UNROLL(8)
    for (size_t j = 0; j < kV; ++j) {
      const VF xr = hn::Set(df, x[static_cast<int64_t>(j) * x_stride + r]);
      HWY_UNROLL(4)
      for (size_t k = 0; k < kW; ++k) acc[j][k] = hn::MulAdd(wv[k], xr, acc[j][k]);
    }
  }
  HWY_UNROLL(8)
  for (size_t j = 0; j < kV; ++j) {
    HWY_UNROLL(4)
    for (size_t k = 0; k < kW; ++k) {
      hn::StoreU(acc[j][k], df, y + static_cast<int64_t>(j) * y_stride + c + k * kN);
    }
  }
}

// Vectors per transposed tile: kV·kW accumulators + kW weights + a broadcast fit the registers
// (four weight vectors wide, or one: a narrow product such as MLA's scores against few heads).
#if HWY_TARGET == HWY_AVX2
constexpr size_t kTransposedVecs = 2, kTransposedVecsNarrow = 8;
#else
constexpr size_t kTransposedVecs = 4, kTransposedVecsNarrow = 8;
#endif
#endif

// Columns [c0, c1) of y_v[c] = Σ_r W[r,c]·x_v[r] (fp32 W rows w_stride apart, x_v at
// x + v·x_stride, y_v at y + v·y_stride), from +0 (`first`) or continuing the partial sums in y.
void MatTMulF32ColsImpl(const float* w, int64_t w_stride, int64_t rows, const float* x,
                        int64_t x_stride, int64_t n, bool first, int64_t c0, int64_t c1, float* y,
                        int64_t y_stride) {
  const auto scalar_column = [&](int64_t v, int64_t c) {
    float acc = first ? 0.0f : y[v * y_stride + c];
    for (int64_t r = 0; r < rows; ++r)
      acc = std::fma(w[r * w_stride + c], x[v * x_stride + r], acc);
    y[v * y_stride + c] = acc;
  };
#if HWY_TARGET == HWY_SCALAR
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t c = c0; c < c1; ++c) scalar_column(v, c);
  }
#else
  // kV vectors from v on, columns [c, c + kW·kN).
  const auto tile = [&]<size_t kV, size_t kW>(int64_t v, int64_t c) HWY_ATTR {
    TransposedTile<kV, kW>(w, w_stride, rows, x + v * x_stride, x_stride, first, c,
                           y + v * y_stride, y_stride);
  };
  constexpr int64_t kStep = 4 * static_cast<int64_t>(kN);
  int64_t c = c0;
  for (; c + kStep <= c1; c += kStep) {
    int64_t v = 0;
    for (; v + static_cast<int64_t>(kTransposedVecs) <= n; v += kTransposedVecs) {
      tile.template operator()<kTransposedVecs, 4>(v, c);
    }
    for (; v < n; ++v) tile.template operator()<1, 4>(v, c);
  }
  for (; c + static_cast<int64_t>(kN) <= c1; c += kN) {
    int64_t v = 0;
    for (; v + static_cast<int64_t>(kTransposedVecsNarrow) <= n; v += kTransposedVecsNarrow) {
      tile.template operator()<kTransposedVecsNarrow, 1>(v, c);
    }
    for (; v < n; ++v) tile.template operator()<1, 1>(v, c);
  }
  for (; c < c1; ++c) {
    for (int64_t v = 0; v < n; ++v) scalar_column(v, c);
  }
#endif
}

// y[c] = Σ_r W[r,c]·x[r], in increasing r, starting from +0 like the reference.
void MatTVecBf16Impl(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
#if HWY_TARGET == HWY_SCALAR
  ref::MatTVecBf16(w, rows, cols, x, y);
#else
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const auto load = [&](const uint16_t* p) {
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  };
  constexpr int64_t kStep = 4 * static_cast<int64_t>(kN);
  int64_t c = 0;
  for (; c + kStep <= cols; c += kStep) {
    VF a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = w + r * cols + c;
      const VF xr = hn::Set(df, x[r]);
      a0 = hn::MulAdd(load(row), xr, a0);
      a1 = hn::MulAdd(load(row + kN), xr, a1);
      a2 = hn::MulAdd(load(row + 2 * kN), xr, a2);
      a3 = hn::MulAdd(load(row + 3 * kN), xr, a3);
    }
    hn::StoreU(a0, df, y + c);
    hn::StoreU(a1, df, y + c + kN);
    hn::StoreU(a2, df, y + c + 2 * kN);
    hn::StoreU(a3, df, y + c + 3 * kN);
  }
  for (; c + static_cast<int64_t>(kN) <= cols; c += kN) {
    VF a0 = hn::Zero(df);
    for (int64_t r = 0; r < rows; ++r) {
      a0 = hn::MulAdd(load(w + r * cols + c), hn::Set(df, x[r]), a0);
    }
    hn::StoreU(a0, df, y + c);
  }
  for (; c < cols; ++c) {
    float acc = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      acc = std::fma(Bf16ToF32(w[r * cols + c]), x[r], acc);
    }
    y[c] = acc;
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::kernels {
HWY_EXPORT(Bf16RowsImpl);
HWY_EXPORT(DotF32Impl);
HWY_EXPORT(MatTVecBf16Impl);
HWY_EXPORT(MatTMulF32ColsImpl);

namespace internal {
Bf16RowsFn ChooseBf16Rows() { return &HWY_DYNAMIC_DISPATCH(Bf16RowsImpl); }
DotF32Fn ChooseDotF32() { return &HWY_DYNAMIC_DISPATCH(DotF32Impl); }
MatTVecBf16Fn ChooseMatTVecBf16() { return &HWY_DYNAMIC_DISPATCH(MatTVecBf16Impl); }
MatTMulF32ColsFn ChooseMatTMulF32Cols() { return &HWY_DYNAMIC_DISPATCH(MatTMulF32ColsImpl); }
}  // namespace internal

// Dynamic dispatch picks the best (lowest-bit) target that is both compiled in and supported.
const char* ActiveSimdTarget() {
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(usable & -usable);
}

std::string SimdTargetNames(bool only_supported) {
  std::string out;
  int64_t targets = HWY_TARGETS & (only_supported ? hwy::SupportedTargets() : ~int64_t{0});
  for (; targets != 0; targets &= targets - 1) {
    out += (out.empty() ? "" : " ") + std::string(hwy::TargetName(targets & -targets));
  }
  return out;
}

std::string HighwayVersion() {
  return std::to_string(HWY_MAJOR) + "." + std::to_string(HWY_MINOR) + "." +
         std::to_string(HWY_PATCH);
}
}  // namespace deltafin::kernels
#endif  // HWY_ONCE
