// MXFP4 as stored by compressed-tensors ("mxfp4-pack-quantized"), in plain scalar C++.
// These functions are the oracle that every SIMD kernel is tested against.
//
// Layout of one logical matrix W[R, C] (C = inputs, a multiple of 32):
//   weight_packed  U8 [R, C/2]   byte j of row r: low nibble = element 2j, high nibble = 2j+1
//   weight_scale   U8 [R, C/32]  byte g of row r scales elements 32g..32g+31 (packed bytes
//   16g..16g+15)
// Element nibble b3..b0: b3 sign, b2b1 exponent (bias 1), b0 mantissa -> E2M1 values
//   {0, .5, 1, 1.5, 2, 3, 4, 6} and their negatives. Scale byte s is E8M0: 2^(s-127).
// Dequantisation W = E2M1 * 2^(s-127) is exact in fp32.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace deltafin {

inline constexpr int kMxfp4GroupSize = 32;
// Scale bytes outside this range make the fast exponent-add kernels inexact; we refuse them
// (docs/MODEL.md §3.3) rather than carry a slow path nobody's checkpoint needs.
inline constexpr uint8_t kMinMxfp4Scale = 2;
inline constexpr uint8_t kMaxMxfp4Scale = 252;

extern const float kE2m1Values[16];

// 2^(s-127) as fp32, exact for every byte (s = 0 is the subnormal 2^-127; s = 255 is NaN per OCP).
// constexpr: kE8m0AsF32 below is built from it.
constexpr float E8m0ToF32(uint8_t s) {
  return std::bit_cast<float>(s == 0 ? 0x00400000u : s == 255 ? 0x7fc00000u : uint32_t{s} << 23);
}

// E8m0ToF32 of every byte, for kernels that convert one scale per 32-weight group: one load
// instead of two compares and a select on the decode path.
inline constexpr std::array<float, 256> kE8m0AsF32 = [] {
  std::array<float, 256> t{};
  for (unsigned s = 0; s < 256; ++s) t[s] = E8m0ToF32(static_cast<uint8_t>(s));
  return t;
}();

// Dequantises one row of `cols` elements into out[cols].
void DequantizeMxfp4Row(const uint8_t* packed, const uint8_t* scales, size_t cols, float* out);

// Quantises one row (cols a multiple of 32): per group scale 2^ceil(log2(amax/6)) and
// round-to-nearest-even onto the E2M1 grid. Used by make-model and tests.
void QuantizeMxfp4Row(const float* in, size_t cols, uint8_t* packed, uint8_t* scales);

}  // namespace deltafin
