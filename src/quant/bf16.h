// BF16 <-> fp32. BF16 is the upper half of an fp32 bit pattern, so widening is exact (a 16-bit
// shift); narrowing rounds to nearest even, which is how checkpoints are written.
#pragma once

#include <cstdint>
#include <cstring>

namespace deltafin {

inline float Bf16ToF32(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep NaN a (quiet) NaN
  }
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace deltafin
