#include "quant/row_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/bf16.h"

namespace deltafin {

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf or NaN
    if (a == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN, payload kept
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: rounds past 65504 to inf
  if (a < 0x38800000u) {                        // below 2^-14: f16 subnormal or zero
    if (a <= 0x33000000u) return sign;          // <= 2^-25: rounds to 0 (2^-25 is a tie, 0 is even)
    // Value = m·2^(e-150); in units of 2^-24 that is m·2^(e-126), i.e. m >> (126 - e).
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t r = a - 0x38000000u;  // rebias the exponent 127 -> 15
  uint32_t q = r >> 13;
  const uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | q);
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal, exact
    return sign ? -v : v;
  }
  if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool QuantizeRowInt8(const uint16_t* bf16, int64_t cols, int8_t* q, uint16_t* scale_f16) {
  float m = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    const float v = Bf16ToF32(bf16[c]);
    if (!std::isfinite(v)) return false;
    m = std::max(m, std::fabs(v));
  }
  const float scale = m == 0.0f ? 1.0f : m / 127.0f;
  const uint16_t s16 = F32ToF16(scale);
  if ((s16 & 0x7c00u) == 0x7c00u) return false;
  for (int64_t c = 0; c < cols; ++c) {
    // nearbyint rounds half to even in the default rounding mode.
    float r = std::nearbyint(Bf16ToF32(bf16[c]) / scale);
    r = std::min(127.0f, std::max(-127.0f, r));
    q[c] = static_cast<int8_t>(r);
  }
  *scale_f16 = s16;
  return true;
}

}  // namespace deltafin
