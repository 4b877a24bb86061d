// IEEE binary16 (f16) conversions and the row-int8 quantizer of the optional row-int8 spine
// (docs/MODEL.md §3.6, docs/INT8.md).
//
// Per row: widen BF16 -> fp32; m = max |w|; scale = m / 127 in fp32 (1 when m == 0);
// q = clamp(round_half_even(w / scale), -127, 127). The stored scale is f16(scale): quantization
// uses the fp32 scale, dequantization the f16-rounded one (y[r] = f32(scale16[r]) · Σ q[r,c]·x[c]).
#pragma once

#include <cstdint>

namespace deltafin {

// fp32 -> f16, round to nearest even. Overflow (|f| >= 65520) gives ±inf, values below half the
// smallest subnormal (2^-25, ties to even) give ±0, subnormal results are rounded correctly, and
// NaN stays a (quiet) NaN.
uint16_t F32ToF16(float f);
// f16 -> fp32, exact (every f16 value, subnormals and infinities included, is an fp32 value).
float F16ToF32(uint16_t h);

// Quantizes one BF16 row of `cols` values into q[cols] and writes the f16 bits of its scale.
// Returns false, writing nothing meaningful, when the row holds a non-finite value or its scale
// overflows f16 (|w| > 65504·127): the format cannot represent it.
bool QuantizeRowInt8(const uint16_t* bf16, int64_t cols, int8_t* q, uint16_t* scale_f16);

}  // namespace deltafin
