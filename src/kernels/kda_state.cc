// The KDA state step (kernels/kda_state.h), compiled once per Highway target (simd_targets.h).
// Lanes run across the columns v of S: a block of up to kBlockVecs vectors of columns is decayed
// and read for δ over every row, then updated and read for the output over every row, with δ and
// the output held in registers; each lane repeats the reference's operations for its column.
// Columns past the last whole vector, and HWY_SCALAR, take the same steps one column at a time.
#include "kernels/simd_targets.h"
// Highway's per-target recompilation of this file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kda_state.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Columns [v0, v0 + count) one at a time, in the reference's order (out == nullptr: no read).
void KdaColumns(float* S, const float* g, const float* k, const float* v, float beta,
                const float* q, int64_t dim, int64_t v0, int64_t count, float* delta, float* out) {
  for (int64_t vv = v0; vv < v0 + count; ++vv) {
    float d = v[vv];
    for (int64_t kk = 0; kk < dim; ++kk) {
      S[kk * dim + vv] *= g[kk];
      d -= k[kk] * S[kk * dim + vv];
    }
    delta[vv] = d;
    float o = 0.0f;
    for (int64_t kk = 0; kk < dim; ++kk) {
      S[kk * dim + vv] += (beta * k[kk]) * d;
      if (out != nullptr) o += q[kk] * S[kk * dim + vv];
    }
    if (out != nullptr) out[vv] = o;
  }
}

#if HWY_TARGET != HWY_SCALAR
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Vectors of columns per block: δ and the output of the block stay in registers (2·kBlockVecs of
// them; AVX2 has 16).
#if HWY_TARGET == HWY_AVX2
constexpr size_t kBlockVecs = 4;
#else
constexpr size_t kBlockVecs = 8;
#endif

// One block of kVecs vectors of columns starting at column v0.
template <size_t kVecs, bool kRead>
HWY_INLINE void KdaBlock(float* S, const float* g, const float* k, const float* v, float beta,
                         const float* q, int64_t dim, int64_t v0, float* delta, float* out) {
  const D d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  V dv[kVecs];
  HWY_UNROLL(8)
  for (size_t j = 0; j < kVecs; ++j) dv[j] = hn::LoadU(d, v + v0 + static_cast<int64_t>(j) * lanes);
  for (int64_t kk = 0; kk < dim; ++kk) {
    float* row = S + kk * dim + v0;
    const V gk = hn::Set(d, g[kk]), kv = hn::Set(d, k[kk]);
    HWY_UNROLL(8)
    for (size_t j = 0; j < kVecs; ++j) {
      float* p = row + static_cast<int64_t>(j) * lanes;
      const V s = hn::Mul(hn::LoadU(d, p), gk);
      hn::StoreU(s, d, p);
      dv[j] = hn::Sub(dv[j], hn::Mul(kv, s));
    }
  }
  V ov[kVecs];
  HWY_UNROLL(8)
  for (size_t j = 0; j < kVecs; ++j) {
    hn::StoreU(dv[j], d, delta + v0 + static_cast<int64_t>(j) * lanes);
    ov[j] = hn::Zero(d);
  }
  for (int64_t kk = 0; kk < dim; ++kk) {
    float* row = S + kk * dim + v0;
    const V bk = hn::Set(d, beta * k[kk]);
    const V qk = hn::Set(d, kRead ? q[kk] : 0.0f);
    HWY_UNROLL(8)
    for (size_t j = 0; j < kVecs; ++j) {
      float* p = row + static_cast<int64_t>(j) * lanes;
      const V s = hn::Add(hn::LoadU(d, p), hn::Mul(bk, dv[j]));
      hn::StoreU(s, d, p);
      if constexpr (kRead) ov[j] = hn::Add(ov[j], hn::Mul(qk, s));
    }
  }
  if constexpr (kRead) {
    HWY_UNROLL(8)
    for (size_t j = 0; j < kVecs; ++j) {
      hn::StoreU(ov[j], d, out + v0 + static_cast<int64_t>(j) * lanes);
    }
  }
}

template <bool kRead>
HWY_INLINE int64_t KdaVectorColumns(float* S, const float* g, const float* k, const float* v,
                                    float beta, const float* q, int64_t dim, float* delta,
                                    float* out) {
  const auto lanes = static_cast<int64_t>(hn::Lanes(D()));
  const int64_t block = static_cast<int64_t>(kBlockVecs) * lanes;
  int64_t v0 = 0;
  for (; v0 + block <= dim; v0 += block) {
    KdaBlock<kBlockVecs, kRead>(S, g, k, v, beta, q, dim, v0, delta, out);
  }
  for (; v0 + lanes <= dim; v0 += lanes)
    KdaBlock<1, kRead>(S, g, k, v, beta, q, dim, v0, delta, out);
  return v0;
}
#endif

void KdaStepImpl(float* S, const float* g, const float* k, const float* v, float beta,
                 const float* q, int64_t dim, float* delta, float* out) {
  int64_t done = 0;
#if HWY_TARGET != HWY_SCALAR
  done = out != nullptr ? KdaVectorColumns<true>(S, g, k, v, beta, q, dim, delta, out)
                        : KdaVectorColumns<false>(S, g, k, v, beta, q, dim, delta, out);
#endif
  KdaColumns(S, g, k, v, beta, q, dim, done, dim - done, delta, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::kernels {
HWY_EXPORT(KdaStepImpl);

namespace internal {
KdaStepFn ChooseKdaStep() { return &HWY_DYNAMIC_DISPATCH(KdaStepImpl); }
}  // namespace internal

void KdaUpdate(float* S, const float* g, const float* k, const float* v, float beta, int64_t dim,
               float* delta) {
  internal::ChooseKdaStep()(S, g, k, v, beta, nullptr, dim, delta, nullptr);
}

void KdaUpdateRead(float* S, const float* g, const float* k, const float* v, float beta,
                   const float* q, int64_t dim, float* delta, float* out) {
  internal::ChooseKdaStep()(S, g, k, v, beta, q, dim, delta, out);
}
}  // namespace deltafin::kernels
#endif  // HWY_ONCE
