// BF16 and fp32 kernels, compiled once per Highway target (simd_targets.h): BF16 matrix × vectors,
// BF16 transposed matrix-vector, fp32 dot. HWY_SCALAR calls the scalar references.
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
  TiledRows<kTileRows, kTileVecs, kTileRowsSingle, Bf16PairDecoder>(
      [&](Bf16PairDecoder& dec, int64_t r) { dec.Bind(w, cols, r); }, rows, cols, x, n, r0, r1, y,
      [](int64_t, float s) { return s; });
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

namespace internal {
Bf16RowsFn ChooseBf16Rows() { return &HWY_DYNAMIC_DISPATCH(Bf16RowsImpl); }
DotF32Fn ChooseDotF32() { return &HWY_DYNAMIC_DISPATCH(DotF32Impl); }
MatTVecBf16Fn ChooseMatTVecBf16() { return &HWY_DYNAMIC_DISPATCH(MatTVecBf16Impl); }
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
