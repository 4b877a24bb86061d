// Tests of the f16 conversions and the row-int8 quantizer (src/quant/row_int8.h, docs/MODEL.md
// §3.6) on hand-computed values: rounding ties, overflow, subnormals, an all-zero row, negative
// values and a scale that f16 rounds (quantization uses the fp32 scale, dequantization the f16
// one).
#include "quant/row_int8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "quant/bf16.h"

namespace deltafin {
namespace {

TEST(F16Test, ExactValuesAndRoundingTies) {
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(0.1f), 0x2e66);
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties to the even mantissa (0).
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3·2^-11 lies halfway between mantissas 1 and 2: ties to 2.
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Just above a tie rounds up.
  EXPECT_EQ(F32ToF16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
}

TEST(F16Test, OverflowGoesToInfinity) {
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);  // the largest f16
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // the midpoint ties to even: infinity
  EXPECT_EQ(F32ToF16(-1e6f), 0xfc00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7c00);
  const uint16_t nan = F32ToF16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(F16ToF32(nan)));
}

TEST(F16Test, Subnormals) {
  const float unit = std::ldexp(1.0f, -24);  // the smallest f16 subnormal
  EXPECT_EQ(F32ToF16(unit), 0x0001);
  EXPECT_EQ(F32ToF16(unit / 2), 0x0000);  // 2^-25: tie between 0 and 1 unit, to even 0
  EXPECT_EQ(F32ToF16(-unit / 2), 0x8000);
  EXPECT_EQ(F32ToF16(std::nextafter(unit / 2, 1.0f)), 0x0001);
  EXPECT_EQ(F32ToF16(1.5f * unit), 0x0002);            // tie between 1 and 2 units: 2
  EXPECT_EQ(F32ToF16(2.5f * unit), 0x0002);            // tie between 2 and 3 units: 2
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);  // the smallest normal
  // 1023.5 units: tie between the largest subnormal and the smallest normal, to even (normal).
  EXPECT_EQ(F32ToF16(1023.5f * unit), 0x0400);
  EXPECT_EQ(F32ToF16(1023.25f * unit), 0x03ff);
  EXPECT_EQ(F32ToF16(1e-30f), 0x0000);
  EXPECT_EQ(F16ToF32(0x0001), unit);
  EXPECT_EQ(F16ToF32(0x83ff), -1023 * unit);
}

TEST(F16Test, EveryF16RoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = F16ToF32(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), bits) << std::hex << h;
  }
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0xfc00), -std::numeric_limits<float>::infinity());
}

std::vector<uint16_t> Row(std::initializer_list<float> values) {
  std::vector<uint16_t> out;
  for (float v : values) out.push_back(F32ToBf16(v));
  return out;
}

TEST(RowInt8Test, ZeroRowHasScaleOne) {
  const auto row = Row({0.0f, -0.0f, 0.0f});
  std::vector<int8_t> q(row.size(), 99);
  uint16_t scale = 0;
  ASSERT_TRUE(QuantizeRowInt8(row.data(), 3, q.data(), &scale));
  EXPECT_EQ(scale, 0x3c00);  // 1.0
  EXPECT_EQ(q, (std::vector<int8_t>{0, 0, 0}));
}

TEST(RowInt8Test, ScaleOneTiesToEvenAndNegatives) {
  // m = 127, scale = 1: w / scale = w exactly.
  const auto row = Row({127.0f, -63.5f, 0.5f, 1.5f, -2.5f, -127.0f, 3.25f});
  std::vector<int8_t> q(row.size());
  uint16_t scale = 0;
  ASSERT_TRUE(QuantizeRowInt8(row.data(), static_cast<int64_t>(row.size()), q.data(), &scale));
  EXPECT_EQ(scale, 0x3c00);
  EXPECT_EQ(q, (std::vector<int8_t>{127, -64, 0, 2, -2, -127, 3}));
}

TEST(RowInt8Test, ScaleTwo) {
  // m = 254, scale = 2: 5/2 = 2.5 -> 2, -3/2 = -1.5 -> -2, 7/2 = 3.5 -> 4, -254/2 = -127.
  const auto row = Row({5.0f, -3.0f, 7.0f, -254.0f});
  std::vector<int8_t> q(row.size());
  uint16_t scale = 0;
  ASSERT_TRUE(QuantizeRowInt8(row.data(), 4, q.data(), &scale));
  EXPECT_EQ(scale, 0x4000);  // 2.0
  EXPECT_EQ(q, (std::vector<int8_t>{2, -2, 4, -127}));
}

TEST(RowInt8Test, ScaleThatRoundsInF16) {
  // m = 1: fp32 scale = 1/127 = 0.0078740157...; f16 rounds it to 2^-7·(1 + 8/1024) =
  // 0.00787353515625 (bits 0x2008). Quantization divides by the fp32 scale:
  // 1 -> 127, 0.5 -> 63.5 (a tie in fp32) -> 64, -0.25 -> -31.75 -> -32, 2^-8 -> 0.496 -> 0,
  // -0.75 -> -95.25 -> -95.
  const auto row = Row({1.0f, 0.5f, -0.25f, std::ldexp(1.0f, -8), -0.75f});
  std::vector<int8_t> q(row.size());
  uint16_t scale = 0;
  ASSERT_TRUE(QuantizeRowInt8(row.data(), 5, q.data(), &scale));
  EXPECT_EQ(scale, 0x2008);
  EXPECT_EQ(F16ToF32(scale), 0.00787353515625f);
  EXPECT_NE(F16ToF32(scale), 1.0f / 127.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{127, 64, -32, 0, -95}));
}

TEST(RowInt8Test, RejectsNonFiniteRows) {
  const auto row = Row({1.0f, std::numeric_limits<float>::infinity()});
  std::vector<int8_t> q(row.size());
  uint16_t scale = 0;
  EXPECT_FALSE(QuantizeRowInt8(row.data(), 2, q.data(), &scale));
  const auto big = Row({1e10f});  // scale 7.9e7 overflows f16
  EXPECT_FALSE(QuantizeRowInt8(big.data(), 1, q.data(), &scale));
}

}  // namespace
}  // namespace deltafin
