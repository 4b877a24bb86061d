// Fused multiply-add rate probe (fma_probe.h), compiled once per Highway target.
#include "kernels/simd_targets.h"
// Highway's per-target recompilation of this file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fma_probe.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/fma_probe.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Enough independent chains to cover the FMA latency on every core we target (4 cycles × 2 pipes
// needs 8; 12 leaves slack) while staying in 16 registers.
constexpr int kChains = 12;

int64_t FmaLanesPerIterationImpl() {
  return kChains * static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
}

float RunFmaChainsImpl(int64_t iterations) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  // a ← a·m + b converges to b / (1 - m): no overflow, no subnormals, for any iteration count.
  const V m = hn::Set(df, 0.999f), b = hn::Set(df, 1e-3f);
  V a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = hn::Set(df, static_cast<float>(i));
  for (int64_t it = 0; it < iterations; ++it) {
    HWY_UNROLL(kChains)
    for (int i = 0; i < kChains; ++i) a[i] = hn::MulAdd(a[i], m, b);
  }
  V sum = a[0];
  for (int i = 1; i < kChains; ++i) sum = hn::Add(sum, a[i]);
  return hn::GetLane(hn::SumOfLanes(df, sum));
}

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::kernels {
HWY_EXPORT(FmaLanesPerIterationImpl);
HWY_EXPORT(RunFmaChainsImpl);
int64_t FmaLanesPerIteration() { return HWY_DYNAMIC_DISPATCH(FmaLanesPerIterationImpl)(); }
float RunFmaChains(int64_t iterations) {
  return HWY_DYNAMIC_DISPATCH(RunFmaChainsImpl)(iterations);
}
}  // namespace deltafin::kernels
#endif  // HWY_ONCE
