// The constants of the engine's exp and tanh (kernels/ref/activation_ref.h), shared by the scalar
// references and the per-target kernels so both compute with the same bits.
#pragma once

namespace deltafin::kernels::activation {

inline constexpr float kExpMin = -87.0f, kExpMax = 87.0f;
inline constexpr float kLog2E = 1.44269504f;
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5·2²³: adding it rounds to an integer
inline constexpr float kMinusLn2Hi = -0.693359375f, kMinusLn2Lo = 2.12194440e-4f;
// Taylor coefficients 1/k! of e^r for k = 2..7 (k = 0, 1 are 1).
inline constexpr float kExpC2 = 1.0f / 2, kExpC3 = 1.0f / 6, kExpC4 = 1.0f / 24,
                       kExpC5 = 1.0f / 120, kExpC6 = 1.0f / 720, kExpC7 = 1.0f / 5040;
inline constexpr float kTanhSmall = 0.625f, kTanhSaturate = 10.0f;
// tanh(x) ≈ x + x·s·q(s), s = x², on |x| < 0.625 (relative error 2e-9 before rounding).
inline constexpr float kTanhQ0 = -3.333333433e-01f, kTanhQ1 = 1.333331019e-01f,
                       kTanhQ2 = -5.396093428e-02f, kTanhQ3 = 2.178215422e-02f,
                       kTanhQ4 = -8.386106230e-03f, kTanhQ5 = 2.339316532e-03f;

}  // namespace deltafin::kernels::activation
