// Per-target vector forms of the engine's exp and tanh (kernels/ref/activation_ref.h defines
// them): each lane repeats the scalar reference's operations in the same order, so every target
// gives the reference's bits. Shared by the activation TUs (activation_situ.cc,
// activation_gates.cc).
//
// Included by those TUs after hwy/foreach_target.h, so it has Highway's per-target include guard
// instead of #pragma once. Not compiled for HWY_SCALAR: there the TUs call the references.
#if defined(DELTAFIN_KERNELS_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DELTAFIN_KERNELS_ACTIVATION_INL_H_
#undef DELTAFIN_KERNELS_ACTIVATION_INL_H_
#else
#define DELTAFIN_KERNELS_ACTIVATION_INL_H_
#endif

#include "hwy/highway.h"
#include "kernels/activation_constants.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

HWY_INLINE V ExpVec(D d, V x) {
  using namespace activation;  // NOLINT(google-build-using-namespace)
  x = hn::Min(hn::Max(x, hn::Set(d, kExpMin)), hn::Set(d, kExpMax));
  const V magic = hn::Set(d, kRoundMagic);
  const V n = hn::Sub(hn::Add(hn::Mul(x, hn::Set(d, kLog2E)), magic), magic);
  V r = hn::MulAdd(n, hn::Set(d, kMinusLn2Hi), x);
  r = hn::MulAdd(n, hn::Set(d, kMinusLn2Lo), r);
  V p = hn::Set(d, kExpC7);
  p = hn::MulAdd(p, r, hn::Set(d, kExpC6));
  p = hn::MulAdd(p, r, hn::Set(d, kExpC5));
  p = hn::MulAdd(p, r, hn::Set(d, kExpC4));
  p = hn::MulAdd(p, r, hn::Set(d, kExpC3));
  p = hn::MulAdd(p, r, hn::Set(d, kExpC2));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  const hn::RebindToSigned<D> di;
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::Mul(p, hn::BitCast(d, bits));
}

HWY_INLINE V TanhVec(D d, V x) {
  using namespace activation;  // NOLINT(google-build-using-namespace)
  const V a = hn::Abs(x);
  const V s = hn::Mul(x, x);
  V q = hn::Set(d, kTanhQ5);
  q = hn::MulAdd(q, s, hn::Set(d, kTanhQ4));
  q = hn::MulAdd(q, s, hn::Set(d, kTanhQ3));
  q = hn::MulAdd(q, s, hn::Set(d, kTanhQ2));
  q = hn::MulAdd(q, s, hn::Set(d, kTanhQ1));
  q = hn::MulAdd(q, s, hn::Set(d, kTanhQ0));
  const V small = hn::MulAdd(hn::Mul(x, s), q, x);
  const V one = hn::Set(d, 1.0f);
  const V e = ExpVec(d, hn::Mul(hn::Set(d, 2.0f), hn::Min(a, hn::Set(d, kTanhSaturate))));
  const V t = hn::Sub(one, hn::Div(hn::Set(d, 2.0f), hn::Add(e, one)));
  const V large = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Neg(t), t);
  return hn::IfThenElse(hn::Lt(a, hn::Set(d, kTanhSmall)), small, large);
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#endif  // include guard
