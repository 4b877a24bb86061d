// SiTU, the gated activation of every K3 FFN (dense layer 0, shared experts, routed experts;
// docs/MODEL.md §4.6), over whole rows of gate and up values. A prefill wave applies it to
// positions × intermediate width values per FFN, so it is a kernel like the products: vectorised,
// split over the pool, and exact.
//
//   SiTU(g, u) = ((tanh(g/β)·β)·σ(g)) · (tanh(u/β_lin)·β_lin),   σ(g) = 1 / (1 + exp(−g))
//
// in fp32, in exactly this operation order. tanh and exp are not the C library's (whose results
// differ between libm versions and cannot be vectorised bit for bit) but this module's own,
// defined by the scalar references in ref/activation_ref.h as fixed sequences of IEEE operations
// (fused multiply-adds where written, correctly rounded division), which every Highway target
// repeats lane by lane: results are bit-identical on every CPU and for every thread count.
// Over all finite fp32 inputs both are within 1 ulp of the correctly rounded value (glibc's
// tanhf is within 2; kernels_test sweeps them).
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// gate[i] = SiTU(gate[i], up[i]) for i in [0, n); a NaN in either input gives NaN. Large n splits
// over the default pool (elementwise, so any split gives the same bits).
void SituInPlace(float* gate, const float* up, int64_t n, float beta, float linear_beta);

}  // namespace deltafin::kernels
