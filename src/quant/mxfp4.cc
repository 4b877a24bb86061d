#include "quant/mxfp4.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace deltafin {

const float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void DequantizeMxfp4Row(const uint8_t* packed, const uint8_t* scales, size_t cols, float* out) {
  for (size_t i = 0; i < cols; i += 2) {
    const float scale = E8m0ToF32(scales[i / kMxfp4GroupSize]);
    const uint8_t byte = packed[i / 2];
    out[i] = kE2m1Values[byte & 0x0f] * scale;
    out[i + 1] = kE2m1Values[byte >> 4] * scale;
  }
}

namespace {

// Nearest E2M1 code for |v| <= 6 after scaling; ties go to the even code (mantissa bit 0).
uint8_t NearestE2m1Code(float v) {
  const float mag = std::fabs(v);
  uint8_t best = 0;
  float best_err = std::numeric_limits<float>::infinity();
  for (uint8_t c = 0; c < 8; ++c) {
    float err = std::fabs(kE2m1Values[c] - mag);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | ((v < 0 && best != 0) ? 8 : 0));
}

}  // namespace

void QuantizeMxfp4Row(const float* in, size_t cols, uint8_t* packed, uint8_t* scales) {
  for (size_t g = 0; g < cols / kMxfp4GroupSize; ++g) {
    const float* x = in + g * kMxfp4GroupSize;
    float amax = 0.0f;
    for (int t = 0; t < kMxfp4GroupSize; ++t) amax = std::fmax(amax, std::fabs(x[t]));
    int exponent = amax > 0.0f ? static_cast<int>(std::ceil(std::log2(amax / 6.0f))) : -125;
    if (exponent < kMinMxfp4Scale - 127) exponent = kMinMxfp4Scale - 127;
    if (exponent > kMaxMxfp4Scale - 127) exponent = kMaxMxfp4Scale - 127;
    const uint8_t s = static_cast<uint8_t>(exponent + 127);
    scales[g] = s;
    const float inv = 1.0f / E8m0ToF32(s);
    for (int t = 0; t < kMxfp4GroupSize; t += 2) {
      uint8_t lo = NearestE2m1Code(x[t] * inv);
      uint8_t hi = NearestE2m1Code(x[t + 1] * inv);
      packed[(g * kMxfp4GroupSize + t) / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace deltafin
