// SiTU (kernels/activation.h), compiled once per Highway target (simd_targets.h): each lane
// repeats the scalar reference's operations (ref/activation_ref.cc) in the same order, both
// branches of tanh computed and the reference's one selected. HWY_SCALAR and the tails call the
// reference itself.
#include <cmath>

#include "kernels/simd_targets.h"
// Highway's per-target recompilation of this file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/activation_situ.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/activation-inl.h"
#include "kernels/dispatch.h"
#include "kernels/ref/activation_ref.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SituImpl(float* gate, const float* up, int64_t n, float beta, float linear_beta) {
  int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const D d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  const V vbeta = hn::Set(d, beta), vlinear = hn::Set(d, linear_beta), one = hn::Set(d, 1.0f);
  for (; i + lanes <= n; i += lanes) {
    const V g = hn::LoadU(d, gate + i), u = hn::LoadU(d, up + i);
    const V bounded_gate = hn::Mul(TanhVec(d, hn::Div(g, vbeta)), vbeta);
    const V sigmoid = hn::Div(one, hn::Add(one, ExpVec(d, hn::Neg(g))));
    const V bounded_up = hn::Mul(TanhVec(d, hn::Div(u, vlinear)), vlinear);
    const V y = hn::Mul(hn::Mul(bounded_gate, sigmoid), bounded_up);
    const auto nan = hn::Or(hn::IsNaN(g), hn::IsNaN(u));
    hn::StoreU(hn::IfThenElse(nan, hn::Add(g, u), y), d, gate + i);
  }
#endif
  for (; i < n; ++i) gate[i] = ref::Situ(gate[i], up[i], beta, linear_beta);
}

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::kernels {
HWY_EXPORT(SituImpl);

namespace internal {
SituFn ChooseSitu() { return &HWY_DYNAMIC_DISPATCH(SituImpl); }
}  // namespace internal
}  // namespace deltafin::kernels
#endif  // HWY_ONCE
