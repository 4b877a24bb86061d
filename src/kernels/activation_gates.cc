// Gates and softmax (kernels/activation.h), compiled once per Highway target (simd_targets.h):
// each lane repeats the scalar reference's operations (ref/activation_ref.cc) in the same order,
// and the softmax's sum takes the summation order of kernels/matvec.h (DotRowTile with a weight
// row of ones: fma(1, e, p) rounds exactly as p + e). HWY_SCALAR and the tails call the reference.
#include <cmath>
#include <limits>

#include "kernels/simd_targets.h"
// Highway's per-target recompilation of this file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/activation_gates.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/activation-inl.h"
#include "kernels/dispatch.h"
#include "kernels/matvec-inl.h"
#include "kernels/ref/activation_ref.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {

#if HWY_TARGET != HWY_SCALAR
// ref::Exp lane by lane: ExpF32 inside [−87, 87], +0 below, +inf above, NaN kept.
HWY_INLINE V ExpGateVec(D d, V x) {
  using namespace activation;  // NOLINT(google-build-using-namespace)
  V y = ExpVec(d, x);
  y = hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, kExpMin)), y);
  y = hn::IfThenElse(hn::Gt(x, hn::Set(d, kExpMax)), hn::Inf(d), y);
  return hn::IfThenElse(hn::IsNaN(x), x, y);
}

HWY_INLINE V SigmoidVec(D d, V x) {
  const V one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, ExpGateVec(d, hn::Neg(x))));
}

// Every element through op(d, v) (a vector form of scalar(x)); the tail through scalar.
template <class VecOp, class ScalarOp>
HWY_INLINE void Elementwise(float* x, int64_t n, const VecOp& op, const ScalarOp& scalar) {
  const D d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(op(d, hn::LoadU(d, x + i)), d, x + i);
  for (; i < n; ++i) x[i] = scalar(x[i]);
}

// A weight row of ones for DotRowTile: the dot product with x is Σ x in the documented order.
struct OnesDecoder {
  HWY_INLINE void Block(int64_t, VF* w) const {
    HWY_UNROLL(8)
    for (size_t k = 0; k < kAcc; ++k) w[k] = hn::Set(DF(), 1.0f);
  }
  HWY_INLINE void Tail(int64_t, int64_t count, float* out) const {
    for (int64_t i = 0; i < count; ++i) out[i] = 1.0f;
  }
};
#endif

void ExpImpl(float* x, int64_t n) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t i = 0; i < n; ++i) x[i] = ref::Exp(x[i]);
#else
  Elementwise(
      x, n, [](D d, V v) HWY_ATTR { return ExpGateVec(d, v); },
      [](float v) { return ref::Exp(v); });
#endif
}

void SigmoidImpl(float* x, int64_t n) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t i = 0; i < n; ++i) x[i] = ref::Sigmoid(x[i]);
#else
  Elementwise(
      x, n, [](D d, V v) HWY_ATTR { return SigmoidVec(d, v); },
      [](float v) { return ref::Sigmoid(v); });
#endif
}

void SiluImpl(float* x, int64_t n) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t i = 0; i < n; ++i) x[i] = ref::Silu(x[i]);
#else
  Elementwise(
      x, n, [](D d, V v) HWY_ATTR { return hn::Mul(v, SigmoidVec(d, v)); },
      [](float v) { return ref::Silu(v); });
#endif
}

void SoftmaxImpl(float* x, int64_t n) {
#if HWY_TARGET == HWY_SCALAR
  ref::Softmax(x, n);
#else
  const D d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  // The largest non-NaN element: max is exact, so lanes in any order give the reference's value
  // (up to the sign of a zero maximum, which changes no x − m).
  V vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const V v = hn::LoadU(d, x + i);
    vmax = hn::IfThenElse(hn::Gt(v, vmax), v, vmax);
  }
  float m = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (; i < n; ++i) {
    if (x[i] > m) m = x[i];
  }
  const V vm = hn::Set(d, m);
  Elementwise(
      x, n, [vm](D dd, V v) HWY_ATTR { return ExpGateVec(dd, hn::Sub(v, vm)); },
      [m](float v) { return ref::Exp(v - m); });
  const OnesDecoder ones;
  const float* xs[1] = {x};
  float sum[1];
  DotRowTile<1>(ones, n, xs, sum);
  const float inv = 1.0f / sum[0];
  const V vinv = hn::Set(d, inv);
  Elementwise(
      x, n, [vinv](D, V v) HWY_ATTR { return hn::Mul(v, vinv); },
      [inv](float v) { return v * inv; });
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::kernels {
HWY_EXPORT(ExpImpl);
HWY_EXPORT(SigmoidImpl);
HWY_EXPORT(SiluImpl);
HWY_EXPORT(SoftmaxImpl);

namespace internal {
GateFn ChooseExp() { return &HWY_DYNAMIC_DISPATCH(ExpImpl); }
GateFn ChooseSigmoid() { return &HWY_DYNAMIC_DISPATCH(SigmoidImpl); }
GateFn ChooseSilu() { return &HWY_DYNAMIC_DISPATCH(SiluImpl); }
GateFn ChooseSoftmax() { return &HWY_DYNAMIC_DISPATCH(SoftmaxImpl); }
}  // namespace internal
}  // namespace deltafin::kernels
#endif  // HWY_ONCE
