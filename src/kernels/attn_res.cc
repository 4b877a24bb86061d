// kernels/attn_res.h, compiled once per Highway target (simd_targets.h), with its entry points.
// Each lane does the reference's operations on the same elements (ref/attn_res_ref.cc): partial
// d % 32 lives in lane d % kN of accumulator (d % 32) / kN, as in the matrix kernels. HWY_SCALAR
// calls the reference.
#include "kernels/attn_res.h"

#include "kernels/simd_targets.h"
// Highway's per-target recompilation of this file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attn_res.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/ref/attn_res_ref.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float AttnResScoreImpl(const float* v, float inv_rms, const float* q, int64_t width) {
#if HWY_TARGET == HWY_SCALAR
  return ref::AttnResScore(v, inv_rms, q, width);
#else
  using D = hn::ScalableTag<float>;
  const D d;
  constexpr size_t kN = hn::MaxLanes(D());
  constexpr size_t kAcc = 32 / kN;
  static_assert(kAcc * kN == 32, "vector width must divide 32 lanes");
  hn::Vec<D> acc[kAcc];
  for (size_t k = 0; k < kAcc; ++k) acc[k] = hn::Zero(d);
  const auto inv = hn::Set(d, inv_rms);
  const int64_t full = width / 32 * 32;
  for (int64_t c = 0; c < full; c += 32) {
    HWY_UNROLL(8)
    for (size_t k = 0; k < kAcc; ++k) {
      const auto at = c + static_cast<int64_t>(k * kN);
      acc[k] = hn::Add(acc[k], hn::Mul(hn::Mul(hn::LoadU(d, v + at), inv), hn::LoadU(d, q + at)));
    }
  }
  alignas(64) float p[32];
  for (size_t k = 0; k < kAcc; ++k) hn::Store(acc[k], d, p + k * kN);
  for (int64_t c = full; c < width; ++c) p[c - full] += (v[c] * inv_rms) * q[c];
  for (int w = 16; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) p[i] += p[i + w];
  }
  return p[0];
#endif
}

#if HWY_TARGET != HWY_SCALAR
using D = hn::ScalableTag<float>;

// step(i) for every whole vector of elements [i, i + lanes) within [0, width); returns the first
// element after them (the caller finishes the tail with the reference).
template <class Step>
HWY_INLINE int64_t ForEachWholeVector(int64_t width, const Step& step) {
  const auto lanes = static_cast<int64_t>(hn::Lanes(D()));
  int64_t i = 0;
  for (; i + lanes <= width; i += lanes) step(i);
  return i;
}
#endif

void AddScaledImpl(float* out, float a, const float* v, int64_t width) {
  int64_t done = 0;
#if HWY_TARGET != HWY_SCALAR
  const D d;
  const auto va = hn::Set(d, a);
  done = ForEachWholeVector(width, [&](int64_t i) HWY_ATTR {
    hn::StoreU(hn::Add(hn::LoadU(d, out + i), hn::Mul(va, hn::LoadU(d, v + i))), d, out + i);
  });
#endif
  ref::AddScaled(out + done, a, v + done, width - done);
}

void RmsScaleImpl(const float* x, float inv, const float* w, int64_t width, float* out) {
  int64_t done = 0;
#if HWY_TARGET != HWY_SCALAR
  const D d;
  const auto vinv = hn::Set(d, inv);
  done = w != nullptr ? ForEachWholeVector(width,
                                           [&](int64_t i) HWY_ATTR {
                                             hn::StoreU(hn::Mul(hn::LoadU(d, w + i),
                                                                hn::Mul(hn::LoadU(d, x + i), vinv)),
                                                        d, out + i);
                                           })
                      : ForEachWholeVector(width, [&](int64_t i) HWY_ATTR {
                          hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vinv), d, out + i);
                        });
#endif
  ref::RmsScale(x + done, inv, w != nullptr ? w + done : nullptr, width - done, out + done);
}

void AddThenScaleImpl(float* x, const float* b, float a, int64_t width) {
  int64_t done = 0;
#if HWY_TARGET != HWY_SCALAR
  const D d;
  const auto va = hn::Set(d, a);
  done = ForEachWholeVector(width, [&](int64_t i) HWY_ATTR {
    hn::StoreU(hn::Mul(va, hn::Add(hn::LoadU(d, x + i), hn::LoadU(d, b + i))), d, x + i);
  });
#endif
  ref::AddThenScale(x + done, b + done, a, width - done);
}

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::kernels {
HWY_EXPORT(AttnResScoreImpl);
HWY_EXPORT(AddScaledImpl);
HWY_EXPORT(RmsScaleImpl);
HWY_EXPORT(AddThenScaleImpl);

float AttnResScore(const float* v, float inv_rms, const float* q, int64_t width) {
  return HWY_DYNAMIC_DISPATCH(AttnResScoreImpl)(v, inv_rms, q, width);
}

void AddScaled(float* out, float a, const float* v, int64_t width) {
  HWY_DYNAMIC_DISPATCH(AddScaledImpl)(out, a, v, width);
}

void RmsScale(const float* x, float inv, const float* w, int64_t width, float* out) {
  HWY_DYNAMIC_DISPATCH(RmsScaleImpl)(x, inv, w, width, out);
}

void AddThenScale(float* x, const float* b, float a, int64_t width) {
  HWY_DYNAMIC_DISPATCH(AddThenScaleImpl)(x, b, a, width);
}
}  // namespace deltafin::kernels
#endif  // HWY_ONCE
