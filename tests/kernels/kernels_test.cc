// Per-target kernel tests: every entry point of kernels/matvec.h on every Highway target this CPU
// supports (and this build compiled), against the scalar references in kernels/ref/. Every target
// keeps the documented summation order, so results must be bit-identical (EXPECT_EQ, not a
// tolerance). Covers odd sizes and tails, MXFP4 scale bytes 2..252, batched == per-vector, and
// independence from the thread count.
// First, so that SupportedAndGeneratedTargets() lists the targets the kernels were built for.
#include "kernels/simd_targets.h"
// (the rest)
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "hwy/targets.h"
#include "kernels/activation.h"
#include "kernels/attn_res.h"
#include "kernels/kda_state.h"
#include "kernels/matvec.h"
#include "kernels/ref/activation_ref.h"
#include "kernels/ref/attn_res_ref.h"
#include "kernels/ref/kda_ref.h"
#include "kernels/ref/matvec_ref.h"
#include "kernels/short_conv.h"

namespace deltafin::kernels {
namespace {

std::vector<float> RandomFloats(std::mt19937& rng, size_t n, float lo = -2.0f, float hi = 2.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& f : v) f = dist(rng);
  return v;
}

std::vector<uint16_t> RandomBf16(std::mt19937& rng, size_t n) {
  std::vector<uint16_t> v(n);
  // Random magnitudes over a wide exponent range, both signs, some exact zeros.
  std::uniform_int_distribution<int> exp(100, 140), mant(0, 127), sign(0, 1), zero(0, 31);
  for (auto& b : v) {
    b = zero(rng) == 0 ? 0 : static_cast<uint16_t>((sign(rng) << 15) | (exp(rng) << 7) | mant(rng));
  }
  return v;
}

std::vector<uint8_t> RandomBytes(std::mt19937& rng, size_t n, int lo = 0, int hi = 255) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(dist(rng));
  return v;
}

// Exact comparison that also reports the index.
void ExpectSame(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i], got[i]) << what << " differs at " << i;
  }
}

// DF_THREADS=1 (the qemu-aarch64 run, whose qemu-user hangs creating threads): no worker threads.
bool SingleThreadOnly() {
  const char* env = std::getenv("DF_THREADS");
  return env != nullptr && std::atoi(env) == 1;
}

class KernelsTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

const int64_t kRowsList[] = {1, 3, 17, 64};
const int64_t kColsList[] = {1, 5, 16, 31, 32, 33, 63, 100, 257, 1000};
// 3584/3072: K3 expert inputs; 16416: wider than the AVX-512 path de-interleaves on the stack.
const int64_t kMxfp4Cols[] = {32, 64, 96, 160, 1024, 3072, 3584, 16416};
const int64_t kBatches[] = {1, 2, 3, 4, 5, 7, 16, 17};

TEST_P(KernelsTest, DotF32) {
  std::mt19937 rng(1);
  for (int64_t n : {0, 1, 7, 31, 32, 33, 64, 65, 1000, 4099}) {
    const auto a = RandomFloats(rng, static_cast<size_t>(n));
    const auto b = RandomFloats(rng, static_cast<size_t>(n));
    EXPECT_EQ(ref::DotF32(a.data(), b.data(), n), DotF32(a.data(), b.data(), n)) << "n=" << n;
  }
}

TEST_P(KernelsTest, MatVecBf16) {
  std::mt19937 rng(2);
  for (int64_t rows : kRowsList) {
    for (int64_t cols : kColsList) {
      const auto w = RandomBf16(rng, static_cast<size_t>(rows * cols));
      const auto x = RandomFloats(rng, static_cast<size_t>(cols));
      std::vector<float> want(static_cast<size_t>(rows)), got(want.size());
      ref::MatVecBf16(w.data(), rows, cols, x.data(), want.data());
      MatVecBf16(w.data(), rows, cols, x.data(), got.data());
      SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols));
      ExpectSame(want, got, "MatVecBf16");
    }
  }
}

TEST_P(KernelsTest, MatTVecBf16) {
  std::mt19937 rng(3);
  for (int64_t rows : kRowsList) {
    for (int64_t cols : kColsList) {
      const auto w = RandomBf16(rng, static_cast<size_t>(rows * cols));
      const auto x = RandomFloats(rng, static_cast<size_t>(rows));
      std::vector<float> want(static_cast<size_t>(cols)), got(want.size());
      ref::MatTVecBf16(w.data(), rows, cols, x.data(), want.data());
      MatTVecBf16(w.data(), rows, cols, x.data(), got.data());
      SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols));
      ExpectSame(want, got, "MatTVecBf16");
    }
  }
}

// MLA attention's weighted latent sum (transposed), against the reference.
TEST_P(KernelsTest, MatTMulF32) {
  std::mt19937 rng(32);
  for (int64_t rows : {1, 3, 17, 64, 300}) {
    for (int64_t cols : kColsList) {
      for (int64_t n : {1, 2, 4, 5, 8, 9}) {
        const auto w = RandomFloats(rng, static_cast<size_t>(rows * cols));
        const auto x = RandomFloats(rng, static_cast<size_t>(n * rows));
        std::vector<float> want(static_cast<size_t>(n * cols)), got(want.size());
        ref::MatTMulF32(w.data(), rows, cols, x.data(), n, want.data());
        MatTMulF32(w.data(), rows, cols, x.data(), n, got.data());
        SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                     " n=" + std::to_string(n));
        ExpectSame(want, got, "MatTMulF32");
      }
    }
  }
}

// A transposed product split into runs of rows (MLA's causal runs, and a score's latent and rope
// parts): every split, with W, x and y inside wider buffers, has the bits of one call over all
// rows, and of the reference's runs.
TEST_P(KernelsTest, MatTMulF32PartsMatchOneCall) {
  std::mt19937 rng(33);
  for (int64_t rows : {1, 5, 64, 257}) {
    for (int64_t cols : {7, 16, 24, 128, 200, 512}) {
      for (int64_t n : {1, 3, 4, 8, 9, 17}) {
        const int64_t w_stride = cols + 5, x_stride = rows + 11, y_stride = cols + 3;
        const auto w = RandomFloats(rng, static_cast<size_t>(rows * w_stride));
        const auto x = RandomFloats(rng, static_cast<size_t>(n * x_stride));
        std::vector<float> packed_w(static_cast<size_t>(rows * cols));
        std::vector<float> packed_x(static_cast<size_t>(n * rows));
        for (int64_t r = 0; r < rows; ++r) {
          std::copy_n(w.begin() + r * w_stride, cols, packed_w.begin() + r * cols);
        }
        for (int64_t v = 0; v < n; ++v) {
          std::copy_n(x.begin() + v * x_stride, rows, packed_x.begin() + v * rows);
        }
        std::vector<float> one_call(static_cast<size_t>(n * cols));
        ref::MatTMulF32(packed_w.data(), rows, cols, packed_x.data(), n, one_call.data());
        std::vector<float> want(static_cast<size_t>(n * y_stride), -7.0f);  // gaps untouched
        for (int64_t v = 0; v < n; ++v) {
          std::copy_n(one_call.begin() + v * cols, cols, want.begin() + v * y_stride);
        }
        for (int64_t run : {int64_t{1}, int64_t{3}, int64_t{64}, rows}) {
          std::vector<float> got(want.size(), -7.0f), ref_parts(want.size(), -7.0f);
          for (int64_t r0 = 0; r0 < rows; r0 += run) {
            const int64_t len = std::min(run, rows - r0);
            MatTMulF32Part({w.data() + r0 * w_stride, w_stride}, len, cols, x.data() + r0, x_stride,
                           n, r0 == 0, {got.data(), y_stride});
            ref::MatTMulF32Part(w.data() + r0 * w_stride, w_stride, len, cols, x.data() + r0,
                                x_stride, n, r0 == 0, ref_parts.data(), y_stride);
          }
          SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                       " n=" + std::to_string(n) + " run=" + std::to_string(run));
          ExpectSame(want, got, "MatTMulF32Part");
          ExpectSame(want, ref_parts, "ref::MatTMulF32Part");
        }
      }
    }
  }
}

TEST_P(KernelsTest, MatVecMxfp4) {
  std::mt19937 rng(4);
  for (int64_t rows : kRowsList) {
    for (int64_t cols : kMxfp4Cols) {
      const auto packed = RandomBytes(rng, static_cast<size_t>(rows * cols / 2));
      const auto scales = RandomBytes(rng, static_cast<size_t>(rows * cols / 32), 2, 252);
      // Activations of wide range so that scale extremes stay finite: |w| <= 6·2^125.
      const auto x = RandomFloats(rng, static_cast<size_t>(cols), -1e-3f, 1e-3f);
      std::vector<float> want(static_cast<size_t>(rows)), got(want.size());
      ref::MatVecMxfp4(packed.data(), scales.data(), rows, cols, x.data(), want.data());
      MatVecMxfp4(packed.data(), scales.data(), rows, cols, x.data(), got.data());
      SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols));
      ExpectSame(want, got, "MatVecMxfp4");
    }
  }
}

// Every scale byte of the audited range 2..252, each paired with every E2M1 code.
TEST_P(KernelsTest, Mxfp4EveryScaleAndCode) {
  const int64_t cols = 32, rows = 251;
  std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2)), scales(rows);
  for (int64_t r = 0; r < rows; ++r) {
    scales[static_cast<size_t>(r)] = static_cast<uint8_t>(2 + r);
    for (int64_t j = 0; j < cols / 2; ++j) {
      packed[static_cast<size_t>(r * cols / 2 + j)] =
          static_cast<uint8_t>((j + r) % 16 | (15 - j) << 4);
    }
  }
  std::mt19937 rng(5);
  for (float range : {1e-30f, 1.0f, 1e-3f}) {
    const auto x = RandomFloats(rng, cols, -range, range);
    std::vector<float> want(rows), got(rows);
    ref::MatVecMxfp4(packed.data(), scales.data(), rows, cols, x.data(), want.data());
    MatVecMxfp4(packed.data(), scales.data(), rows, cols, x.data(), got.data());
    ExpectSame(want, got, "MatVecMxfp4 scales");
  }
}

TEST_P(KernelsTest, MatVecI8) {
  std::mt19937 rng(6);
  for (int64_t rows : kRowsList) {
    for (int64_t cols : kColsList) {
      const auto bytes = RandomBytes(rng, static_cast<size_t>(rows * cols), 0, 254);
      std::vector<int8_t> q(bytes.size());
      for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(bytes[i] - 127);
      const auto scales = RandomFloats(rng, static_cast<size_t>(rows), 1e-4f, 1e-1f);
      const auto x = RandomFloats(rng, static_cast<size_t>(cols));
      std::vector<float> want(static_cast<size_t>(rows)), got(want.size());
      ref::MatVecI8(q.data(), scales.data(), rows, cols, x.data(), want.data());
      MatVecI8(q.data(), scales.data(), rows, cols, x.data(), got.data());
      SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols));
      ExpectSame(want, got, "MatVecI8");
    }
  }
}

// Batched products equal the matrix-vector product of every vector, bit for bit.
TEST_P(KernelsTest, BatchedEqualsPerVector) {
  std::mt19937 rng(7);
  const int64_t rows = 37;
  for (int64_t cols : {32, 33, 96, 161}) {
    const auto wb = RandomBf16(rng, static_cast<size_t>(rows * cols));
    const auto bytes = RandomBytes(rng, static_cast<size_t>(rows * cols), 0, 254);
    std::vector<int8_t> q(bytes.size());
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(bytes[i] - 127);
    const auto qs = RandomFloats(rng, static_cast<size_t>(rows), 1e-3f, 1e-2f);
    const int64_t mcols = cols / 32 * 32;
    const auto packed = RandomBytes(rng, static_cast<size_t>(rows * mcols / 2));
    const auto scales = RandomBytes(rng, static_cast<size_t>(rows * mcols / 32), 110, 135);
    for (int64_t n : kBatches) {
      SCOPED_TRACE("cols=" + std::to_string(cols) + " n=" + std::to_string(n));
      const auto x = RandomFloats(rng, static_cast<size_t>(n * cols));
      const auto xm = RandomFloats(rng, static_cast<size_t>(n * mcols));
      std::vector<float> batched(static_cast<size_t>(n * rows)), single(batched.size());
      MatMulBf16(wb.data(), rows, cols, x.data(), n, batched.data());
      for (int64_t v = 0; v < n; ++v) {
        ref::MatVecBf16(wb.data(), rows, cols, x.data() + v * cols, single.data() + v * rows);
      }
      ExpectSame(single, batched, "MatMulBf16");
      MatMulI8(q.data(), qs.data(), rows, cols, x.data(), n, batched.data());
      for (int64_t v = 0; v < n; ++v) {
        ref::MatVecI8(q.data(), qs.data(), rows, cols, x.data() + v * cols,
                      single.data() + v * rows);
      }
      ExpectSame(single, batched, "MatMulI8");
      MatMulMxfp4(packed.data(), scales.data(), rows, mcols, xm.data(), n, batched.data());
      for (int64_t v = 0; v < n; ++v) {
        MatVecMxfp4(packed.data(), scales.data(), rows, mcols, xm.data() + v * mcols,
                    single.data() + v * rows);
      }
      ExpectSame(single, batched, "MatMulMxfp4 vs MatVecMxfp4");
      for (int64_t v = 0; v < n; ++v) {
        ref::MatVecMxfp4(packed.data(), scales.data(), rows, mcols, xm.data() + v * mcols,
                         single.data() + v * rows);
      }
      ExpectSame(single, batched, "MatMulMxfp4 vs reference");
    }
  }
}

// Wide MXFP4 rows: fewer vectors fit one de-interleaved tile on AVX-512 (3, 2, then 1 at 16384
// columns), and past 16384 columns the generic path takes over.
TEST_P(KernelsTest, BatchedMxfp4WideRows) {
  std::mt19937 rng(9);
  const int64_t rows = 9, n = 5;
  for (int64_t cols : {4128, 6144, 16384, 16416}) {
    SCOPED_TRACE("cols=" + std::to_string(cols));
    const auto packed = RandomBytes(rng, static_cast<size_t>(rows * cols / 2));
    const auto scales = RandomBytes(rng, static_cast<size_t>(rows * cols / 32), 110, 135);
    const auto x = RandomFloats(rng, static_cast<size_t>(n * cols));
    std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
    for (int64_t v = 0; v < n; ++v) {
      ref::MatVecMxfp4(packed.data(), scales.data(), rows, cols, x.data() + v * cols,
                       want.data() + v * rows);
    }
    MatMulMxfp4(packed.data(), scales.data(), rows, cols, x.data(), n, got.data());
    ExpectSame(want, got, "MatMulMxfp4");
  }
}

// Every batch size a prefill wave can hand the kernels (tile remainders of every width included),
// odd column counts for BF16 and int8 (the zero-padded last block), and 1, 2 and 3 threads (row
// parts that split tiles), rows narrower and wider than a column block: each batched product
// equals the per-vector reference bit for bit.
// 37 rows = 12 tiles of 3 + 1 and 4 single-vector tiles of 8 + 5.
TEST_P(KernelsTest, BatchedEverySizeAndThreadCount) {
  const int64_t batch_sizes[] = {1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 64, 100, 257};
  const int64_t max_n = 257, rows = 37;
  std::vector<int> thread_counts = {1, 2, 3};
  if (SingleThreadOnly()) thread_counts = {1};
  const int saved = DefaultThreadCount();
  std::mt19937 rng(10);
  // Checks fn(x, n, y) against want (max_n·rows, per-vector references) for every n and thread
  // count; vector v of a batch of n is the v-th vector of x, so want's prefix is the answer.
  const auto check = [&](const std::vector<float>& want, const char* what,
                         const std::function<void(int64_t, float*)>& fn) {
    for (int threads : thread_counts) {
      SetDefaultThreadCount(threads);
      for (int64_t n : batch_sizes) {
        SCOPED_TRACE(std::string(what) + " n=" + std::to_string(n) +
                     " threads=" + std::to_string(threads));
        std::vector<float> got(static_cast<size_t>(n * rows));
        fn(n, got.data());
        ExpectSame(std::vector<float>(want.begin(), want.begin() + n * rows), got, what);
      }
    }
  };
  // 2085 and 3584: rows wider than one column block (1024), so partials are carried across
  // blocks (and, for 2085, the padded last block comes after them).
  for (int64_t cols : {5, 33, 100, 257, 1000, 2085}) {
    SCOPED_TRACE("cols=" + std::to_string(cols));
    const auto x = RandomFloats(rng, static_cast<size_t>(max_n * cols));
    const auto wb = RandomBf16(rng, static_cast<size_t>(rows * cols));
    const auto bytes = RandomBytes(rng, static_cast<size_t>(rows * cols), 0, 255);
    std::vector<int8_t> q(bytes.size());
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(bytes[i] - 128);
    const auto qs = RandomFloats(rng, static_cast<size_t>(rows), 1e-3f, 1e-2f);
    std::vector<float> want_b(static_cast<size_t>(max_n * rows)), want_q(want_b.size());
    for (int64_t v = 0; v < max_n; ++v) {
      ref::MatVecBf16(wb.data(), rows, cols, x.data() + v * cols, want_b.data() + v * rows);
      ref::MatVecI8(q.data(), qs.data(), rows, cols, x.data() + v * cols, want_q.data() + v * rows);
    }
    check(want_b, "MatMulBf16",
          [&](int64_t n, float* y) { MatMulBf16(wb.data(), rows, cols, x.data(), n, y); });
    check(want_q, "MatMulI8",
          [&](int64_t n, float* y) { MatMulI8(q.data(), qs.data(), rows, cols, x.data(), n, y); });
  }
  for (int64_t cols : {32, 96, 512, 1024, 3584}) {
    SCOPED_TRACE("cols=" + std::to_string(cols));
    const auto x = RandomFloats(rng, static_cast<size_t>(max_n * cols));
    const auto packed = RandomBytes(rng, static_cast<size_t>(rows * cols / 2));
    const auto scales = RandomBytes(rng, static_cast<size_t>(rows * cols / 32), 110, 135);
    std::vector<float> want(static_cast<size_t>(max_n * rows));
    for (int64_t v = 0; v < max_n; ++v) {
      ref::MatVecMxfp4(packed.data(), scales.data(), rows, cols, x.data() + v * cols,
                       want.data() + v * rows);
    }
    check(want, "MatMulMxfp4", [&](int64_t n, float* y) {
      MatMulMxfp4(packed.data(), scales.data(), rows, cols, x.data(), n, y);
    });
  }
  SetDefaultThreadCount(saved);
}

// SiTU inputs at every scale the model produces and beyond: both tanh branches, the saturation
// of tanh and of exp's clamp, signed zeros, subnormals, infinities and NaN.
std::vector<float> SituInputs(std::mt19937& rng, size_t n) {
  std::vector<float> v = RandomFloats(rng, n, -3.0f, 3.0f);
  std::uniform_real_distribution<float> mag(-12.0f, 12.0f);
  std::uniform_int_distribution<int> pick(0, 5);
  for (auto& f : v) {
    if (pick(rng) == 0) f = std::ldexp(f, static_cast<int>(mag(rng)));  // 2^-12 .. 2^12 scales
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            0.625f,
                            -0.625f,
                            2.5f,
                            40.0f,
                            -87.5f,
                            90.0f,
                            250.0f,
                            -250.0f,
                            1e30f,
                            -1e30f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (size_t i = 0; i < std::size(specials) && i < n; ++i) v[i * 7 % n] = specials[i];
  return v;
}

TEST_P(KernelsTest, KdaStepMatchesReference) {
  std::mt19937 rng(33);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int64_t dim : {1, 3, 4, 7, 8, 15, 16, 17, 33, 64, 100, 128, 129, 200}) {
    for (int round = 0; round < 3; ++round) {
      const auto sz = static_cast<size_t>(dim);
      std::vector<float> S(sz * sz), g(sz), k(sz), v(sz), q(sz);
      for (auto& x : S) x = uni(rng) * (round == 2 ? 1e-20f : 1.0f);
      for (auto& x : g) x = 0.5f + 0.5f * std::abs(uni(rng));
      for (auto& x : k) x = uni(rng);
      for (auto& x : v) x = uni(rng);
      for (auto& x : q) x = uni(rng);
      if (round == 1) {  // exact cancellations and signed zeros
        for (size_t i = 0; i < sz; i += 3) k[i] = 0.0f;
        for (size_t i = 1; i < sz; i += 4) v[i] = -0.0f;
      }
      const float beta = 0.37f + 0.1f * static_cast<float>(round);
      std::vector<float> want_s = S, want_delta(sz), want_out(sz);
      ref::KdaUpdate(want_s.data(), g.data(), k.data(), v.data(), beta, dim, want_delta.data());
      ref::KdaRead(want_s.data(), q.data(), dim, want_out.data());
      std::vector<float> got_s = S, got_delta(sz), got_out(sz);
      KdaUpdateRead(got_s.data(), g.data(), k.data(), v.data(), beta, q.data(), dim,
                    got_delta.data(), got_out.data());
      SCOPED_TRACE("dim=" + std::to_string(dim) + " round=" + std::to_string(round));
      // Bit for bit, so -0 and +0 differ too.
      ASSERT_EQ(0, std::memcmp(want_out.data(), got_out.data(), sz * sizeof(float)));
      ASSERT_EQ(0, std::memcmp(want_s.data(), got_s.data(), sz * sz * sizeof(float)));
      ExpectSame(want_s, got_s, "KdaUpdateRead state");
      ExpectSame(want_delta, got_delta, "KdaUpdateRead delta");
      ExpectSame(want_out, got_out, "KdaUpdateRead out");
      std::vector<float> upd_s = S, upd_delta(sz);
      KdaUpdate(upd_s.data(), g.data(), k.data(), v.data(), beta, dim, upd_delta.data());
      ExpectSame(want_s, upd_s, "KdaUpdate state");
      ExpectSame(want_delta, upd_delta, "KdaUpdate delta");
    }
  }
}

TEST_P(KernelsTest, SituMatchesReference) {
  std::mt19937 rng(21);
  for (int64_t n : {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 1000, 4099}) {
    const auto gate = SituInputs(rng, static_cast<size_t>(n));
    const auto up = SituInputs(rng, static_cast<size_t>(n));
    std::vector<float> want(gate.size()), got = gate;
    for (size_t i = 0; i < gate.size(); ++i) want[i] = ref::Situ(gate[i], up[i], 4.0f, 25.0f);
    SituInPlace(got.data(), up.data(), n, 4.0f, 25.0f);
    for (size_t i = 0; i < want.size(); ++i) {
      // Bit for bit, so -0 and +0 differ too.
      ASSERT_EQ(std::signbit(want[i]), std::signbit(got[i])) << "n " << n << " element " << i;
      ASSERT_EQ(want[i], got[i]) << "n " << n << " element " << i << ": gate " << gate[i] << " up "
                                 << up[i];
    }
  }
  // NaN in either input gives NaN, in every lane position.
  for (int64_t at = 0; at < 19; ++at) {
    std::vector<float> gate(19, 0.5f), up(19, 0.25f);
    (at % 2 == 0 ? gate : up)[static_cast<size_t>(at)] = std::numeric_limits<float>::quiet_NaN();
    SituInPlace(gate.data(), up.data(), 19, 4.0f, 25.0f);
    for (int64_t i = 0; i < 19; ++i) {
      EXPECT_EQ(std::isnan(gate[static_cast<size_t>(i)]), i == at) << "NaN at " << at;
    }
  }
}

// Bit for bit, -0 against +0 and NaN against NaN included.
void ExpectSameBits(const std::vector<float>& want, const std::vector<float>& got,
                    const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &want[i], sizeof a);
    std::memcpy(&b, &got[i], sizeof b);
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;  // NaN payloads may differ
    ASSERT_EQ(a, b) << what << " element " << i << ": want " << want[i] << " got " << got[i];
  }
}

// The short convolution over a wave against the reference's position-by-position loop: widths
// with tails on every target, 1..9 taps (past the vector path's 8), waves shorter than the
// history, channel ranges that start and end inside a vector, and several calls in a row (the
// history carried between them); outputs and history bit for bit.
TEST_P(KernelsTest, ShortConvMatchesReference) {
  std::mt19937 rng(57);
  for (int64_t width : {1, 7, 16, 33, 100}) {
    for (int64_t taps : {1, 2, 4, 9}) {
      const auto past = static_cast<size_t>(taps - 1);
      const auto w = static_cast<size_t>(width);
      const std::vector<float> weight = RandomFloats(rng, w * static_cast<size_t>(taps));
      std::vector<float> want_hist = RandomFloats(rng, past * w);
      std::vector<float> got_hist = want_hist;
      std::vector<float> carry(std::max<size_t>(past, 1) * w);
      const int64_t c0 = width > 8 ? 3 : 0, c1 = width > 8 ? width - 2 : width;
      for (int64_t n : {1, 2, 3, 20, 1}) {
        const std::vector<float> x = RandomFloats(rng, static_cast<size_t>(n) * w);
        std::vector<float> want = x, got = x;
        ref::ShortConvInPlace(weight.data(), taps, want_hist.data(), want.data(), n, width, c0, c1);
        ShortConvInPlace(weight.data(), taps, got_hist.data(), got.data(), n, width, c0, c1,
                         carry.data());
        SCOPED_TRACE("width=" + std::to_string(width) + " taps=" + std::to_string(taps) +
                     " n=" + std::to_string(n));
        ExpectSameBits(want, got, "ShortConv outputs");
        ExpectSameBits(want_hist, got_hist, "ShortConv history");
      }
    }
  }
}

// Exp, Sigmoid and SiLU in place against their scalar references, over every lane position and
// tail (lengths 0..70), long rows split over the pool, and the special values (±0, ±inf, NaN,
// subnormals, both clamp edges and beyond).
TEST_P(KernelsTest, GatesMatchReference) {
  std::mt19937 rng(41);
  struct Gate {
    const char* name;
    void (*in_place)(float*, int64_t);
    float (*ref)(float);
  };
  const Gate gates[] = {{"Exp", ExpInPlace, ref::Exp},
                        {"Sigmoid", SigmoidInPlace, ref::Sigmoid},
                        {"Silu", SiluInPlace, ref::Silu}};
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 70; ++n) lengths.push_back(n);
  lengths.push_back(100003);  // several parts over the pool
  for (const Gate& gate : gates) {
    for (int64_t n : lengths) {
      auto x = SituInputs(rng, static_cast<size_t>(n));
      for (size_t i = 0; i < x.size(); i += 11) x[i] = std::numeric_limits<float>::quiet_NaN();
      for (size_t i = 3; i < x.size(); i += 13) x[i] = (i % 2 ? -87.0f : 87.0f) * (1 + 1e-7f);
      std::vector<float> want(x.size()), got = x;
      for (size_t i = 0; i < x.size(); ++i) want[i] = gate.ref(x[i]);
      gate.in_place(got.data(), n);
      ExpectSameBits(want, got, std::string(gate.name) + " n " + std::to_string(n));
    }
  }
  // What the references promise.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ref::Exp(-inf), 0.0f);
  EXPECT_EQ(ref::Exp(inf), inf);
  EXPECT_EQ(ref::Exp(0.0f), 1.0f);
  EXPECT_EQ(ref::Sigmoid(0.0f), 0.5f);
  EXPECT_EQ(ref::Sigmoid(inf), 1.0f);
  EXPECT_EQ(ref::Sigmoid(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(ref::Sigmoid(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(Sigmoid(0.75f), ref::Sigmoid(0.75f));
}

TEST_P(KernelsTest, SoftmaxMatchesReference) {
  std::mt19937 rng(42);
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 70; ++n) lengths.push_back(n);
  for (int64_t n : {127, 128, 129, 1000, 4099}) lengths.push_back(n);
  for (int64_t n : lengths) {
    for (int shape = 0; shape < 4; ++shape) {
      // Attention scores (a few tens wide), near-equal values, one dominant value, and rows with
      // elements far enough below the maximum that their Exp is +0.
      auto x = RandomFloats(rng, static_cast<size_t>(n), shape == 1 ? -1e-3f : -20.0f,
                            shape == 1 ? 1e-3f : 20.0f);
      if (shape == 2) x[static_cast<size_t>(n) / 2] = 60.0f;
      if (shape == 3) {
        for (size_t i = 0; i < x.size(); i += 3) x[i] = -200.0f;
      }
      std::vector<float> want = x, got = x;
      ref::Softmax(want.data(), n);
      SoftmaxInPlace(got.data(), n);
      ExpectSameBits(want, got,
                     "Softmax n " + std::to_string(n) + " shape " + std::to_string(shape));
      float sum = 0;
      for (float v : got) sum += v;
      EXPECT_NEAR(sum, 1.0f, 1e-5f) << n;
    }
  }
  // -inf gives +0; a NaN makes the sum, and so every element, NaN (as the C library's exp would).
  const float inf = std::numeric_limits<float>::infinity();
  for (bool with_nan : {false, true}) {
    std::vector<float> x = {1.0f, with_nan ? std::numeric_limits<float>::quiet_NaN() : 0.5f, 2.0f,
                            -inf};
    std::vector<float> want = x;
    ref::Softmax(want.data(), 4);
    SoftmaxInPlace(x.data(), 4);
    ExpectSameBits(want, x, "Softmax specials");
    EXPECT_EQ(std::isnan(x[0]), with_nan);
    if (!with_nan) {
      EXPECT_EQ(x[3], 0.0f);
    }
  }
}

// The AttnRes passes against their references: widths around every lane and partial boundary
// and the model widths (1024 bench, 7168 K3).
TEST_P(KernelsTest, AttnResMatchesReference) {
  std::mt19937 rng(43);
  std::vector<int64_t> widths;
  for (int64_t w = 0; w <= 70; ++w) widths.push_back(w);
  for (int64_t w : {1024, 1031, 7168}) widths.push_back(w);
  for (int64_t width : widths) {
    const auto v = RandomFloats(rng, static_cast<size_t>(width), -30.0f, 30.0f);
    const auto q = RandomFloats(rng, static_cast<size_t>(width));
    const float inv_rms = 0.0371f;
    const float want = ref::AttnResScore(v.data(), inv_rms, q.data(), width);
    const float got = AttnResScore(v.data(), inv_rms, q.data(), width);
    ASSERT_EQ(want, got) << "width " << width;
    auto out_want = RandomFloats(rng, static_cast<size_t>(width));
    auto out_got = out_want;
    ref::AddScaled(out_want.data(), 0.3f, v.data(), width);
    AddScaled(out_got.data(), 0.3f, v.data(), width);
    ExpectSameBits(out_want, out_got, "AddScaled width " + std::to_string(width));
    // RmsScale with and without a weight, into another buffer and in place.
    const auto w = RandomFloats(rng, static_cast<size_t>(width));
    for (const float* weight : {w.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> scaled_want(static_cast<size_t>(width)), scaled_got(scaled_want.size());
      ref::RmsScale(v.data(), inv_rms, weight, width, scaled_want.data());
      RmsScale(v.data(), inv_rms, weight, width, scaled_got.data());
      ExpectSameBits(scaled_want, scaled_got, "RmsScale width " + std::to_string(width));
      auto in_place = v;
      RmsScale(in_place.data(), inv_rms, weight, width, in_place.data());
      ExpectSameBits(scaled_want, in_place, "RmsScale in place width " + std::to_string(width));
    }
    auto shifted_want = v;
    auto shifted_got = v;
    ref::AddThenScale(shifted_want.data(), w.data(), -0.75f, width);
    AddThenScale(shifted_got.data(), w.data(), -0.75f, width);
    ExpectSameBits(shifted_want, shifted_got, "AddThenScale width " + std::to_string(width));
  }
}

// Large enough that the rows are split over the pool; results must not depend on thread count.
TEST_P(KernelsTest, ThreadCountDoesNotChangeResults) {
  if (SingleThreadOnly()) GTEST_SKIP() << "DF_THREADS=1";
  std::mt19937 rng(8);
  const int64_t rows = 1031, cols = 1024, n = 5;
  const auto packed = RandomBytes(rng, static_cast<size_t>(rows * cols / 2));
  const auto scales = RandomBytes(rng, static_cast<size_t>(rows * cols / 32), 110, 135);
  const auto wb = RandomBf16(rng, static_cast<size_t>(rows * cols));
  const auto x = RandomFloats(rng, static_cast<size_t>(n * cols));
  std::vector<float> want(static_cast<size_t>(n * rows)), wantb(want.size());
  // fp32: the weighted latent sum, columns split over the pool.
  const auto wf = RandomFloats(rng, static_cast<size_t>(rows * cols));
  const auto xt = RandomFloats(rng, static_cast<size_t>(n * rows));
  std::vector<float> wantt(static_cast<size_t>(n * cols));
  ref::MatTMulF32(wf.data(), rows, cols, xt.data(), n, wantt.data());
  std::vector<float> want_situ(x.size());
  for (size_t i = 0; i < x.size(); ++i) want_situ[i] = ref::Situ(wf[i], x[i], 4.0f, 25.0f);
  for (int64_t v = 0; v < n; ++v) {
    ref::MatVecMxfp4(packed.data(), scales.data(), rows, cols, x.data() + v * cols,
                     want.data() + v * rows);
    ref::MatVecBf16(wb.data(), rows, cols, x.data() + v * cols, wantb.data() + v * rows);
  }
  const int saved = DefaultThreadCount();
  for (int threads : {1, 2, 3, 8}) {
    SetDefaultThreadCount(threads);
    ASSERT_EQ(DefaultPool().num_threads(), threads);
    std::vector<float> got(want.size());
    MatMulMxfp4(packed.data(), scales.data(), rows, cols, x.data(), n, got.data());
    ExpectSame(want, got, "MatMulMxfp4");
    MatMulBf16(wb.data(), rows, cols, x.data(), n, got.data());
    ExpectSame(wantb, got, "MatMulBf16");
    std::vector<float> gott(wantt.size());
    MatTMulF32(wf.data(), rows, cols, xt.data(), n, gott.data());
    ExpectSame(wantt, gott, "MatTMulF32");
    // SiTU over rows × cols elements, split over the pool.
    std::vector<float> situ = wf;
    SituInPlace(situ.data(), x.data(), static_cast<int64_t>(x.size()), 4.0f, 25.0f);
    situ.resize(x.size());
    ExpectSame(want_situ, situ, "SituInPlace");
  }
  SetDefaultThreadCount(saved);
}

std::string TargetParamName(const ::testing::TestParamInfo<int64_t>& info) {
  return hwy::TargetName(info.param);
}

INSTANTIATE_TEST_SUITE_P(Simd, KernelsTest,
                         ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()), TargetParamName);

// Distance in units in the last place between two finite floats of the same sign (0 if equal).
int64_t Ulps(float a, float b) {
  if (a == b) return 0;
  if (std::signbit(a) != std::signbit(b)) return std::numeric_limits<int64_t>::max();
  int32_t ia = 0, ib = 0;
  std::memcpy(&ia, &a, sizeof a);
  std::memcpy(&ib, &b, sizeof b);
  return std::abs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

// The engine's exp and tanh (the references every target repeats) against double precision,
// rounded: every 509th fp32 bit pattern of both signs, within 1 ulp.
TEST(Activation, ExpAndTanhWithinOneUlp) {
  int64_t worst_exp = 0, worst_tanh = 0;
  for (uint32_t bits = 0; bits < 0x7f800000u; bits += 509) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      float x = 0;
      const uint32_t b = bits | sign;
      std::memcpy(&x, &b, sizeof x);
      const int64_t t =
          Ulps(ref::TanhF32(x), static_cast<float>(std::tanh(static_cast<double>(x))));
      worst_tanh = std::max(worst_tanh, t);
      ASSERT_LE(t, 1) << "tanh(" << x << ")";
      if (std::fabs(x) <= 87.0f) {
        const int64_t e =
            Ulps(ref::ExpF32(x), static_cast<float>(std::exp(static_cast<double>(x))));
        worst_exp = std::max(worst_exp, e);
        ASSERT_LE(e, 1) << "exp(" << x << ")";
      }
    }
  }
  EXPECT_EQ(ref::TanhF32(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(ref::TanhF32(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_EQ(ref::ExpF32(0.0f), 1.0f);
  RecordProperty("worst_exp_ulps", static_cast<int>(worst_exp));
  RecordProperty("worst_tanh_ulps", static_cast<int>(worst_tanh));
}

TEST(ThreadPool, RunsEveryIndexOnce) {
  if (SingleThreadOnly()) GTEST_SKIP() << "DF_THREADS=1";
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 100; ++round) {
      std::vector<int> hits(static_cast<size_t>(threads));
      pool.Run([](void* ctx, int index,
                  int) { ++(*static_cast<std::vector<int>*>(ctx))[static_cast<size_t>(index)]; },
               &hits);
      for (int h : hits) ASSERT_EQ(h, 1);
    }
  }
}

TEST(ThreadPool, ParallelRangesCoverExactly) {
  if (SingleThreadOnly()) GTEST_SKIP() << "DF_THREADS=1";
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 10, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.ParallelRanges(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, AvailableCpusIsPositive) { EXPECT_GE(AvailableCpus(), 1); }

}  // namespace
}  // namespace deltafin::kernels
