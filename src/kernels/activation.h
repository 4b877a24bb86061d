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

// Gates and softmax: the router's sigmoid scores, the KDA convolutions' SiLU and decay, the MLA and
// KDA output gates, attention softmax. A 2,048-position wave evaluates about a billion of these, so
// they are kernels with the engine's own exp too (the C library's cost about 5 % of a wave as
// scalar calls), with the same guarantee: bit-identical on every target and thread count.
//   Exp(x)     = the engine's exp on [−87, 87]; +0 below, +inf above, NaN for NaN
//   Sigmoid(x) = 1 / (1 + Exp(−x))
//   Silu(x)    = x · Sigmoid(x)
// In place over x[0, n); large n splits over the default pool (element-wise: same bits).
void ExpInPlace(float* x, int64_t n);
void SigmoidInPlace(float* x, int64_t n);
void SiluInPlace(float* x, int64_t n);
// One value (scalar callers: a head's beta), the same bits as SigmoidInPlace.
float Sigmoid(float x);

// x[i] = Exp(x[i] − m) / s: m the largest non-NaN element, s the sum of the Exp values in the
// summation order of kernels/matvec.h (element i into partial i % 32, then the balanced tree), each
// element then multiplied by 1/s. One row on the calling thread (callers run rows side by side).
void SoftmaxInPlace(float* x, int64_t n);

}  // namespace deltafin::kernels
