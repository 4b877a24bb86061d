// Scalar references of kernels/activation.h: the definition of the engine's exp, tanh and SiTU.
// Every SIMD target computes the same operations in the same order, so these are the oracle the
// per-target tests compare against bit for bit.
#pragma once

#include <cstdint>

namespace deltafin::kernels::ref {

// e^x for x clamped to [−87, 87] (2^n stays a normal float): n = round(x·log₂e) by the 1.5·2²³
// trick, r = x − n·ln2 in two fused steps (Cody–Waite: ln2 = 0.693359375 − 2.12194440e-4), the
// Taylor polynomial of degree 7 in r (|r| ≤ 0.347, truncation < 6e-9 relative) by Horner's rule
// in fused multiply-adds, times 2^n built from its exponent bits.
float ExpF32(float x);
// tanh(x): for |x| < 0.625 the odd polynomial x + x·s·q(s), s = x², q of degree 5 (fitted
// minimax coefficients, fused Horner steps); else ±(1 − 2/(e^{2·min(|x|, 10)} + 1)), which is
// exactly ±1 from |x| ≈ 9.01 on.
float TanhF32(float x);
// One SiTU value in the documented order (kernels/activation.h).
float Situ(float gate, float up, float beta, float linear_beta);

// The element-wise functions of kernels/activation.h ("Gates and softmax"):
// Exp(x) = ExpF32(x) on [−87, 87], +0 below, +inf above, NaN for NaN;
// Sigmoid(x) = 1 / (1 + Exp(−x)); Silu(x) = x · Sigmoid(x).
float Exp(float x);
float Sigmoid(float x);
float Silu(float x);
// x[i] = Exp(x[i] − m) / s in place: m the largest non-NaN element (−inf if none), s the sum of
// the Exp values in the order of kernels/matvec.h (element i into partial i % 32, then the
// balanced tree), and each element times 1/s.
void Softmax(float* x, int64_t n);

}  // namespace deltafin::kernels::ref
