// Tests of the number formats (src/quant: E2M1/E8M0 MXFP4, BF16) and the matrix kernels
// (src/kernels/matvec.h). Format tests check exact values from docs/MODEL.md §3; kernel tests
// compare with a double-precision naive product on random data with awkward sizes, and require the
// batched forms to equal the matrix-vector form bit for bit (prefill and decode must agree
// exactly).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/matvec.h"
#include "quant/bf16.h"
#include "quant/mxfp4.h"

namespace deltafin {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// ---------------------------------------------------------------------------------------------
// E2M1 and E8M0 (docs/MODEL.md §3.1, §3.3)

TEST(Mxfp4Test, E2m1Table) {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int code = 0; code < 16; ++code) {
    SCOPED_TRACE(code);
    EXPECT_EQ(Bits(kE2m1Values[code]), Bits(want[code]));  // also tells -0 from +0
    // Definition: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0.
    const int e = (code >> 1) & 3, m = code & 1;
    const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + m / 2.0, e - 1);
    EXPECT_EQ(std::fabs(kE2m1Values[code]), mag);
    EXPECT_EQ(std::signbit(kE2m1Values[code]), (code & 8) != 0);
  }
}

TEST(Mxfp4Test, E8m0Values) {
  EXPECT_EQ(E8m0ToF32(127), 1.0f);
  EXPECT_EQ(E8m0ToF32(128), 2.0f);
  EXPECT_EQ(E8m0ToF32(126), 0.5f);
  EXPECT_EQ(E8m0ToF32(124), 0.125f);
  EXPECT_EQ(E8m0ToF32(0), std::ldexp(1.0f, -127));  // subnormal, not zero
  EXPECT_GT(E8m0ToF32(0), 0.0f);
  EXPECT_EQ(E8m0ToF32(1), std::ldexp(1.0f, -126));
  EXPECT_EQ(E8m0ToF32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(E8m0ToF32(255)));
  for (int s = 0; s < 255; ++s) {
    EXPECT_EQ(E8m0ToF32(static_cast<uint8_t>(s)), std::ldexp(1.0f, s - 127)) << s;
  }
}

TEST(Mxfp4Test, SpecWorkedExample) {
  // docs/MODEL.md §3.4: packed byte 0x3A at byte position 5 of a group, scale byte 124 (2^-3):
  // element 10 = code 0xA = -1.0 -> -0.125; element 11 = code 0x3 = 1.5 -> 0.1875.
  uint8_t packed[16] = {};
  packed[5] = 0x3A;
  const uint8_t scale = 124;
  float out[32];
  DequantizeMxfp4Row(packed, &scale, 32, out);
  EXPECT_EQ(out[10], -0.125f);
  EXPECT_EQ(out[11], 0.1875f);
  for (int i = 0; i < 32; ++i) {
    if (i != 10 && i != 11) {
      EXPECT_EQ(out[i], 0.0f) << i;
    }
  }
}

TEST(Mxfp4Test, DequantizeUsesLowNibbleForEvenElementAndOneScalePerGroup) {
  // Two groups: scale 2^0 and 2^3; byte j = (hi << 4) | lo with lo = j % 16, hi = 15 - j % 16.
  uint8_t packed[32];
  for (int j = 0; j < 32; ++j) packed[j] = static_cast<uint8_t>(((15 - j % 16) << 4) | (j % 16));
  const uint8_t scales[2] = {127, 130};
  float out[64];
  DequantizeMxfp4Row(packed, scales, 64, out);
  for (int i = 0; i < 64; ++i) {
    const int j = i / 2;
    const int code = i % 2 == 0 ? j % 16 : 15 - j % 16;
    const float scale = i < 32 ? 1.0f : 8.0f;
    EXPECT_EQ(out[i], kE2m1Values[code] * scale) << i;
  }
}

// Random MXFP4 data: codes and scale bytes in [lo_scale, hi_scale].
struct Mxfp4Matrix {
  int64_t rows, cols;
  std::vector<uint8_t> packed, scales;
};

Mxfp4Matrix RandomMxfp4(int64_t rows, int64_t cols, int lo_scale, int hi_scale, std::mt19937& rng) {
  Mxfp4Matrix m{rows, cols, std::vector<uint8_t>(static_cast<size_t>(rows * cols / 2)),
                std::vector<uint8_t>(static_cast<size_t>(rows * cols / 32))};
  std::uniform_int_distribution<int> byte(0, 255), scale(lo_scale, hi_scale);
  for (auto& b : m.packed) b = static_cast<uint8_t>(byte(rng));
  for (auto& s : m.scales) s = static_cast<uint8_t>(scale(rng));
  return m;
}

TEST(Mxfp4Test, QuantizeDequantizeIsExactOnTheGrid) {
  std::mt19937 rng(7);
  // Rows of random grid values: each group holds one element of magnitude 6 (so the quantiser
  // picks the original scale) and otherwise random codes except -0 (which reads back as +0).
  const size_t cols = 256;
  std::uniform_int_distribution<int> code_dist(0, 14), scale_dist(100, 150), pos(0, 31);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint8_t> codes(cols), scales(cols / 32);
    for (auto& c : codes) {
      c = static_cast<uint8_t>(code_dist(rng));
      if (c >= 8) ++c;  // skip code 8 (-0)
    }
    for (size_t g = 0; g < scales.size(); ++g) {
      scales[g] = static_cast<uint8_t>(scale_dist(rng));
      codes[g * 32 + static_cast<size_t>(pos(rng))] = trial % 2 ? 7 : 15;  // +6 or -6
    }
    std::vector<float> values(cols);
    for (size_t i = 0; i < cols; ++i) values[i] = kE2m1Values[codes[i]] * E8m0ToF32(scales[i / 32]);

    std::vector<uint8_t> packed(cols / 2), got_scales(cols / 32);
    QuantizeMxfp4Row(values.data(), cols, packed.data(), got_scales.data());
    EXPECT_EQ(got_scales, scales);
    for (size_t j = 0; j < cols / 2; ++j) {
      ASSERT_EQ(packed[j], codes[2 * j] | (codes[2 * j + 1] << 4)) << "byte " << j;
    }
    std::vector<float> back(cols);
    DequantizeMxfp4Row(packed.data(), got_scales.data(), cols, back.data());
    for (size_t i = 0; i < cols; ++i) ASSERT_EQ(back[i], values[i]) << i;
  }
}

TEST(Mxfp4Test, QuantizeValuesOnACoarserGridAreStillExact) {
  // Group amax 3: the quantiser picks scale 2^-1 and the values come back unchanged.
  std::vector<float> values(32);
  const float grid[] = {0, 0.5f, 1, 1.5f, 2, 3, -0.5f, -1, -1.5f, -2, -3};
  for (size_t i = 0; i < 32; ++i) values[i] = grid[i % 11];
  uint8_t packed[16], scale;
  QuantizeMxfp4Row(values.data(), 32, packed, &scale);
  EXPECT_EQ(scale, 126);
  float back[32];
  DequantizeMxfp4Row(packed, &scale, 32, back);
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(back[i], values[i]) << i;
}

TEST(Mxfp4Test, QuantizeRoundsToNearestEvenCode) {
  // Scale fixed at 2^0 by a 6 in the group; midpoints between grid values go to the even code
  // (mantissa bit 0): 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
  const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -2.5f, -5.0f, 0.3f, 5.1f};
  const float want[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, -2.0f, -4.0f, 0.5f, 6.0f};
  std::vector<float> values(32, 0.0f);
  values[31] = 6.0f;
  for (size_t i = 0; i < std::size(in); ++i) values[i] = in[i];
  uint8_t packed[16], scale;
  QuantizeMxfp4Row(values.data(), 32, packed, &scale);
  ASSERT_EQ(scale, 127);
  float back[32];
  DequantizeMxfp4Row(packed, &scale, 32, back);
  for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(back[i], want[i]) << in[i];
  EXPECT_EQ(back[31], 6.0f);
}

TEST(Mxfp4Test, QuantizeKeepsScalesInTheExactRange) {
  // All-zero and huge groups still produce scale bytes the engine accepts ([2, 252]).
  std::vector<float> values(64, 0.0f);
  for (size_t i = 32; i < 64; ++i) values[i] = 3e38f;
  uint8_t packed[32], scales[2];
  QuantizeMxfp4Row(values.data(), 64, packed, scales);
  EXPECT_GE(scales[0], kMinMxfp4Scale);
  EXPECT_LE(scales[0], kMaxMxfp4Scale);
  EXPECT_GE(scales[1], kMinMxfp4Scale);
  EXPECT_LE(scales[1], kMaxMxfp4Scale);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(packed[j] & 0x77, 0) << j;  // zeros stay zero
}

// ---------------------------------------------------------------------------------------------
// BF16

TEST(Bf16Test, WideningIsExact) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = Bf16ToF32(static_cast<uint16_t>(b));
    ASSERT_EQ(Bits(f), b << 16) << b;
  }
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xc000), -2.0f);
  EXPECT_EQ(Bf16ToF32(0x7f80), std::numeric_limits<float>::infinity());
}

TEST(Bf16Test, NarrowingRoundsToNearestEven) {
  // Exactly representable values survive.
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = FromBits(b << 16);
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBf16(f), b) << b;
  }
  // 1 + 2^-8 is halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): ties to even -> 0x3f80.
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808000)), 0x3f80);
  // Halfway between 0x3f81 (odd) and 0x3f82: ties to even -> 0x3f82.
  EXPECT_EQ(F32ToBf16(FromBits(0x3f818000)), 0x3f82);
  // Just above / below the midpoint round to nearest.
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(F32ToBf16(FromBits(0x3f807fff)), 0x3f80);
  // Negative ties behave the same on the magnitude.
  EXPECT_EQ(F32ToBf16(FromBits(0xbf808000)), 0xbf80);
  EXPECT_EQ(F32ToBf16(FromBits(0xbf818000)), 0xbf82);
  // Rounding carries into the exponent.
  EXPECT_EQ(F32ToBf16(FromBits(0x3fffc000)), 0x4000);
  // Subnormals round like everything else.
  EXPECT_EQ(F32ToBf16(FromBits(0x00018000)), 0x0002);
  EXPECT_EQ(F32ToBf16(FromBits(0x00008000)), 0x0000);
}

TEST(Bf16Test, NarrowingInfinityAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(F32ToBf16(inf), 0x7f80);
  EXPECT_EQ(F32ToBf16(-inf), 0xff80);
  // FLT_MAX rounds up to infinity under round-to-nearest-even; the largest bf16 stays finite.
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(F32ToBf16(FromBits(0x7f7f0000)), 0x7f7f);
  EXPECT_EQ(F32ToBf16(FromBits(0x7f7f7fff)), 0x7f7f);
  // NaNs stay NaN, including payloads that live only in the low 16 bits (naive rounding or
  // truncation would turn 0x7f800001 into infinity) and ones that would carry into the sign.
  for (uint32_t nan_bits :
       {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xff800001u, 0xffffffffu, 0x7f80ffffu}) {
    SCOPED_TRACE(nan_bits);
    const uint16_t b = F32ToBf16(FromBits(nan_bits));
    EXPECT_TRUE(std::isnan(Bf16ToF32(b))) << std::hex << b;
    EXPECT_EQ(b & 0x8000, (nan_bits >> 16) & 0x8000) << "sign changed";
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels against a double-precision naive product

std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937& rng) {
  std::vector<uint16_t> v(n);
  const std::vector<float> src = RandomFloats(n, rng, -2.0f, 2.0f);
  for (size_t i = 0; i < n; ++i) v[i] = F32ToBf16(src[i]);
  return v;
}

// Expects |got - want| <= 1e-5 * sum|terms| for every element.
void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::vector<double>& abs_sum, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), 1e-5 * abs_sum[i])
        << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

void ExpectBitEqual(const std::vector<float>& a, const std::vector<float>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(Bits(a[i]), Bits(b[i])) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

struct Size {
  int64_t rows, cols;
};

TEST(KernelTest, DotF32MatchesDoubleReference) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 2, 31, 32, 33, 63, 64, 65, 1001, 4097}) {
    SCOPED_TRACE(n);
    const auto a = RandomFloats(static_cast<size_t>(n), rng);
    const auto b = RandomFloats(static_cast<size_t>(n), rng);
    double want = 0, abs_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      want += static_cast<double>(a[i]) * b[i];
      abs_sum += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    ExpectClose({kernels::DotF32(a.data(), b.data(), n)}, {want}, {abs_sum}, "dot");
  }
  // Exact on integers (the sum is representable), and a zero-length dot is 0.
  std::vector<float> ones(77, 1.0f), ramp(77);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i);
  EXPECT_EQ(kernels::DotF32(ones.data(), ramp.data(), 77), 76.0f * 77.0f / 2.0f);
  EXPECT_EQ(kernels::DotF32(ones.data(), ramp.data(), 0), 0.0f);
}

TEST(KernelTest, MatVecBf16MatchesDoubleReference) {
  std::mt19937 rng(2);
  // cols deliberately not multiples of 32 (tail handling), rows odd.
  for (Size s : {Size{1, 1}, Size{3, 31}, Size{7, 33}, Size{17, 100}, Size{33, 160}, Size{65, 257},
                 Size{5, 1031}}) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    const auto w = RandomBf16(static_cast<size_t>(s.rows * s.cols), rng);
    const auto x = RandomFloats(static_cast<size_t>(s.cols), rng);
    std::vector<double> want(static_cast<size_t>(s.rows)), abs_sum(want.size());
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) {
        const double p =
            static_cast<double>(Bf16ToF32(w[static_cast<size_t>(r * s.cols + c)])) * x[c];
        want[r] += p;
        abs_sum[r] += std::fabs(p);
      }
    }
    std::vector<float> y(want.size(), std::nanf(""));
    kernels::MatVecBf16(w.data(), s.rows, s.cols, x.data(), y.data());
    ExpectClose(y, want, abs_sum, "MatVecBf16");
  }
}

TEST(KernelTest, MatTVecBf16MatchesDoubleReference) {
  std::mt19937 rng(3);
  for (Size s : {Size{1, 1}, Size{3, 31}, Size{33, 7}, Size{64, 17}, Size{129, 45}}) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    const auto w = RandomBf16(static_cast<size_t>(s.rows * s.cols), rng);
    const auto x = RandomFloats(static_cast<size_t>(s.rows), rng);
    std::vector<double> want(static_cast<size_t>(s.cols)), abs_sum(want.size());
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) {
        const double p =
            static_cast<double>(Bf16ToF32(w[static_cast<size_t>(r * s.cols + c)])) * x[r];
        want[c] += p;
        abs_sum[c] += std::fabs(p);
      }
    }
    std::vector<float> y(want.size(), std::nanf(""));
    kernels::MatTVecBf16(w.data(), s.rows, s.cols, x.data(), y.data());
    ExpectClose(y, want, abs_sum, "MatTVecBf16");
  }
}

TEST(KernelTest, MatVecMxfp4MatchesDoubleReference) {
  std::mt19937 rng(4);
  for (Size s :
       {Size{1, 32}, Size{3, 64}, Size{17, 96}, Size{33, 128}, Size{5, 160}, Size{9, 3584}}) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    const Mxfp4Matrix m = RandomMxfp4(s.rows, s.cols, 118, 134, rng);
    const auto x = RandomFloats(static_cast<size_t>(s.cols), rng);
    std::vector<double> want(static_cast<size_t>(s.rows)), abs_sum(want.size());
    for (int64_t r = 0; r < s.rows; ++r) {
      // Independent decode of the row (docs/MODEL.md §3.2-3.4), not DequantizeMxfp4Row.
      for (int64_t c = 0; c < s.cols; ++c) {
        const uint8_t byte = m.packed[static_cast<size_t>(r * s.cols / 2 + c / 2)];
        const int code = c % 2 == 0 ? byte & 0x0f : byte >> 4;
        const int sbyte = m.scales[static_cast<size_t>(r * s.cols / 32 + c / 32)];
        const double v =
            (code & 8 ? -1.0 : 1.0) *
            ((code & 6) == 0 ? 0.5 * (code & 1)
                             : std::ldexp(1.0 + (code & 1) / 2.0, ((code >> 1) & 3) - 1)) *
            std::ldexp(1.0, sbyte - 127);
        want[r] += v * x[c];
        abs_sum[r] += std::fabs(v * x[c]);
      }
    }
    std::vector<float> y(want.size(), std::nanf(""));
    kernels::MatVecMxfp4(m.packed.data(), m.scales.data(), s.rows, s.cols, x.data(), y.data());
    ExpectClose(y, want, abs_sum, "MatVecMxfp4");
  }
}

TEST(KernelTest, MatVecMxfp4AtTheEdgesOfTheScaleRange) {
  // Scale bytes 2 and 252 with x pre-scaled by 2^(127 - s) so products stay O(1).
  std::mt19937 rng(5);
  const int64_t rows = 3, cols = 64;
  Mxfp4Matrix m = RandomMxfp4(rows, cols, 127, 127, rng);
  for (int64_t r = 0; r < rows; ++r) {
    m.scales[static_cast<size_t>(r * 2)] = 2;
    m.scales[static_cast<size_t>(r * 2 + 1)] = 252;
  }
  std::vector<float> x = RandomFloats(static_cast<size_t>(cols), rng);
  for (int64_t c = 0; c < cols; ++c) x[c] = std::ldexp(x[c], c < 32 ? 125 : -125);
  std::vector<double> want(rows), abs_sum(rows);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeMxfp4Row(m.packed.data() + r * cols / 2, m.scales.data() + r * 2, cols, row.data());
    for (int64_t c = 0; c < cols; ++c) {
      want[r] += static_cast<double>(row[c]) * x[c];
      abs_sum[r] += std::fabs(static_cast<double>(row[c]) * x[c]);
    }
  }
  std::vector<float> y(rows);
  kernels::MatVecMxfp4(m.packed.data(), m.scales.data(), rows, cols, x.data(), y.data());
  ExpectClose(y, want, abs_sum, "MatVecMxfp4 extremes");
}

TEST(KernelTest, BatchedFormsEqualMatrixVectorFormBitForBit) {
  std::mt19937 rng(6);
  for (int64_t n : {1, 2, 5, 8}) {
    SCOPED_TRACE(n);
    {
      const int64_t rows = 37, cols = 203;
      const auto w = RandomBf16(static_cast<size_t>(rows * cols), rng);
      const auto x = RandomFloats(static_cast<size_t>(n * cols), rng);
      std::vector<float> batched(static_cast<size_t>(n * rows), std::nanf(""));
      kernels::MatMulBf16(w.data(), rows, cols, x.data(), n, batched.data());
      for (int64_t i = 0; i < n; ++i) {
        std::vector<float> single(static_cast<size_t>(rows));
        kernels::MatVecBf16(w.data(), rows, cols, x.data() + i * cols, single.data());
        ExpectBitEqual(
            std::vector<float>(batched.begin() + i * rows, batched.begin() + (i + 1) * rows),
            single, "MatMulBf16 vector " + std::to_string(i));
      }
    }
    {
      const int64_t rows = 41, cols = 160;
      const Mxfp4Matrix m = RandomMxfp4(rows, cols, 120, 134, rng);
      const auto x = RandomFloats(static_cast<size_t>(n * cols), rng);
      std::vector<float> batched(static_cast<size_t>(n * rows), std::nanf(""));
      kernels::MatMulMxfp4(m.packed.data(), m.scales.data(), rows, cols, x.data(), n,
                           batched.data());
      for (int64_t i = 0; i < n; ++i) {
        std::vector<float> single(static_cast<size_t>(rows));
        kernels::MatVecMxfp4(m.packed.data(), m.scales.data(), rows, cols, x.data() + i * cols,
                             single.data());
        ExpectBitEqual(
            std::vector<float>(batched.begin() + i * rows, batched.begin() + (i + 1) * rows),
            single, "MatMulMxfp4 vector " + std::to_string(i));
      }
    }
  }
}

TEST(KernelTest, MatVecIsDeterministicAndIndependentOfOtherRows) {
  // Row r of a product depends only on row r: a one-row call gives the same bits.
  std::mt19937 rng(8);
  const int64_t rows = 9, cols = 99;
  const auto w = RandomBf16(static_cast<size_t>(rows * cols), rng);
  const auto x = RandomFloats(static_cast<size_t>(cols), rng);
  std::vector<float> all(rows), again(rows);
  kernels::MatVecBf16(w.data(), rows, cols, x.data(), all.data());
  kernels::MatVecBf16(w.data(), rows, cols, x.data(), again.data());
  ExpectBitEqual(all, again, "repeat");
  for (int64_t r = 0; r < rows; ++r) {
    float one = 0;
    kernels::MatVecBf16(w.data() + r * cols, 1, cols, x.data(), &one);
    EXPECT_EQ(Bits(one), Bits(all[r])) << r;
  }
  // The documented order is DotF32's: a BF16 row widened to fp32 gives the same bits.
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> wide(cols);
    for (int64_t c = 0; c < cols; ++c) wide[c] = Bf16ToF32(w[static_cast<size_t>(r * cols + c)]);
    EXPECT_EQ(Bits(kernels::DotF32(wide.data(), x.data(), cols)), Bits(all[r])) << r;
  }
}

}  // namespace
}  // namespace deltafin
