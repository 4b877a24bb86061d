// The short causal convolution (kernels/short_conv.h), compiled once per Highway target
// (simd_targets.h). Lanes run across channels; each position's sum takes the taps in increasing
// order from +0, a multiply then an add per tap, exactly as the reference does for each channel.
// Channels past the last whole vector, taps beyond kMaxVectorTaps and HWY_SCALAR take the same
// steps one channel at a time.
#include "kernels/short_conv.h"

#include <cstring>

#include "kernels/simd_targets.h"
// Highway's per-target recompilation of this file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/short_conv.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace deltafin::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Input row i of the sequence [history (taps − 1 rows); x] for channel block at `ch`.
HWY_INLINE const float* InputRow(const float* history, const float* x, int64_t taps, int64_t width,
                                 int64_t i) {
  return i < 0 ? history + (taps - 1 + i) * width : x + i * width;
}

// Channels [c0, c1) one at a time, last position first.
void ConvChannels(const float* weight, int64_t taps, const float* history, float* x, int64_t n,
                  int64_t width, int64_t c0, int64_t c1) {
  for (int64_t ch = c0; ch < c1; ++ch) {
    const float* w = weight + ch * taps;
    for (int64_t t = n - 1; t >= 0; --t) {
      float acc = 0.0f;
      for (int64_t j = 0; j < taps; ++j) {
        acc += w[j] * InputRow(history, x, taps, width, t - taps + 1 + j)[ch];
      }
      x[t * width + ch] = acc;
    }
  }
}

#if HWY_TARGET != HWY_SCALAR
// Taps held in registers by the vector path (K3 has 4).
constexpr int64_t kMaxVectorTaps = 8;

// Whole vectors of channels from c0; returns the first channel not done.
int64_t ConvVectors(const float* weight, int64_t taps, const float* history, float* x, int64_t n,
                    int64_t width, int64_t c0, int64_t c1) {
  using D = hn::ScalableTag<float>;
  const D d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  if (taps > kMaxVectorTaps) return c0;
  const hn::RebindToSigned<D> di;
  const auto index = hn::Mul(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(taps)));
  int64_t ch = c0;
  for (; ch + lanes <= c1; ch += lanes) {
    hn::Vec<D> w[kMaxVectorTaps];
    for (int64_t j = 0; j < taps; ++j) w[j] = hn::GatherIndex(d, weight + ch * taps + j, index);
    for (int64_t t = n - 1; t >= 0; --t) {
      auto acc = hn::Zero(d);
      for (int64_t j = 0; j < taps; ++j) {
        const float* in = InputRow(history, x, taps, width, t - taps + 1 + j) + ch;
        acc = hn::Add(acc, hn::Mul(w[j], hn::LoadU(d, in)));
      }
      hn::StoreU(acc, d, x + t * width + ch);
    }
  }
  return ch;
}
#endif

void ShortConvImpl(const float* weight, int64_t taps, float* history, float* x, int64_t n,
                   int64_t width, int64_t c0, int64_t c1, float* carry) {
  const auto bytes = static_cast<size_t>(c1 - c0) * sizeof(float);
  // The next history (the sequence's last taps − 1 raw rows), before x is overwritten.
  for (int64_t r = 0; r + 1 < taps; ++r) {
    const float* src = InputRow(history, x, taps, width, n + r - (taps - 1));
    std::memcpy(carry + r * width + c0, src + c0, bytes);
  }
  int64_t done = c0;
#if HWY_TARGET != HWY_SCALAR
  done = ConvVectors(weight, taps, history, x, n, width, c0, c1);
#endif
  ConvChannels(weight, taps, history, x, n, width, done, c1);
  for (int64_t r = 0; r + 1 < taps; ++r) {
    std::memcpy(history + r * width + c0, carry + r * width + c0, bytes);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace deltafin::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace deltafin::kernels {
HWY_EXPORT(ShortConvImpl);

void ShortConvInPlace(const float* weight, int64_t taps, float* history, float* x, int64_t n,
                      int64_t width, int64_t c0, int64_t c1, float* carry) {
  HWY_DYNAMIC_DISPATCH(ShortConvImpl)(weight, taps, history, x, n, width, c0, c1, carry);
}

}  // namespace deltafin::kernels
#endif  // HWY_ONCE
