#include "bench/machine_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "kernels/fma_probe.h"
#include "kernels/matvec.h"

namespace deltafin::bench {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<uint64_t> g_sink{0};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Fill(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(p + i, &s, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(i);
}

// Seconds per call of call(copy), rotating over `copies` weight copies so that each call reads
// its weights from DRAM (copies * bytes is far above the last-level cache), for about `seconds`.
// The fastest of 5 segments: on a shared machine a segment in which another process took a core
// measures that process, not the kernel (the planner's inputs are the machine's capability).
double TimePerCall(int copies, double seconds, const std::function<void(int)>& call) {
  for (int c = 0; c < copies; ++c) call(c);  // page in, warm up
  std::vector<double> segs;
  int copy = 0;
  for (int seg = 0; seg < 5; ++seg) {
    int64_t calls = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    do {
      call(copy);
      copy = (copy + 1) % copies;
      ++calls;
      elapsed = Seconds(t0, Clock::now());
    } while (elapsed < seconds / 5 || calls < 3);
    segs.push_back(elapsed / static_cast<double>(calls));
  }
  return *std::min_element(segs.begin(), segs.end());
}

// A kernel's cost as bytes / rate + per-call cost: the call cost is the time of a tiny product
// with its weights hot in cache (the thread-pool hand-off), the rate what a large cold product
// streams once that cost is taken off. (A straight line through a small and a large cold size
// was tried first: on a loaded 2-core VM one preempted small segment made the intercept 4 ms.)
struct Line {
  double bps = 0, call_s = 0;
};

Line Fit(double t_tiny, double b_large, double t_large) {
  Line l;
  l.call_s = std::min(t_tiny, 0.5 * t_large);
  l.bps = b_large / (t_large - l.call_s);
  return l;
}

int CopiesFor(size_t bytes, size_t cold) {
  return static_cast<int>(std::max<size_t>(2, (cold + bytes - 1) / bytes));
}

struct Sizes {
  size_t cold;
  double seconds;
};

double TimeBf16(int64_t rows, int64_t cols, const Sizes& z) {
  const size_t bytes = static_cast<size_t>(rows * cols) * 2;
  const int copies = CopiesFor(bytes, z.cold);
  AlignedBuffer<uint16_t> w(static_cast<size_t>(copies) * bytes / 2);
  Fill(reinterpret_cast<uint8_t*>(w.data()), w.size() * 2, 1);
  for (size_t j = 0; j < w.size(); ++j) w[j] &= 0xbfff;  // finite values
  AlignedBuffer<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 97);
  return TimePerCall(copies, z.seconds, [&](int c) {
    kernels::MatVecBf16(w.data() + static_cast<size_t>(c) * bytes / 2, rows, cols, x.data(),
                        y.data());
  });
}

double TimeI8(int64_t rows, int64_t cols, const Sizes& z) {
  const size_t qbytes = static_cast<size_t>(rows * cols);
  const int copies = CopiesFor(qbytes, z.cold);
  AlignedBuffer<int8_t> q(static_cast<size_t>(copies) * qbytes);
  Fill(reinterpret_cast<uint8_t*>(q.data()), q.size(), 2);
  AlignedBuffer<float> scales(static_cast<size_t>(rows * copies));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.01f;
  AlignedBuffer<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 97);
  return TimePerCall(copies, z.seconds, [&](int c) {
    kernels::MatVecI8(q.data() + static_cast<size_t>(c) * qbytes,
                      scales.data() + static_cast<size_t>(c * rows), rows, cols, x.data(),
                      y.data());
  });
}

double TimeMxfp4(int64_t rows, int64_t cols, const Sizes& z) {
  const size_t packed = static_cast<size_t>(rows * cols / 2);
  const size_t bytes = packed + static_cast<size_t>(rows * cols / 32);
  const int copies = CopiesFor(bytes, z.cold);
  AlignedBuffer<uint8_t> w(static_cast<size_t>(copies) * bytes);
  for (int c = 0; c < copies; ++c) {
    uint8_t* base = w.data() + static_cast<size_t>(c) * bytes;
    Fill(base, packed, static_cast<uint64_t>(c));
    std::memset(base + packed, 124, bytes - packed);  // scales 2^-3
  }
  AlignedBuffer<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 97);
  return TimePerCall(copies, z.seconds, [&](int c) {
    const uint8_t* base = w.data() + static_cast<size_t>(c) * bytes;
    kernels::MatVecMxfp4(base, base + packed, rows, cols, x.data(), y.data());
  });
}

double MemoryBandwidth(size_t bytes) {
  AlignedBuffer<uint64_t> buf(bytes / 8);
  Fill(reinterpret_cast<uint8_t*>(buf.data()), bytes, 9);
  const auto n = static_cast<int64_t>(buf.size());
  std::vector<double> passes;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = Clock::now();
    DefaultPool().ParallelRanges(n, 1 << 16, [&](int64_t b, int64_t e) {
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      int64_t j = b;
      for (; j + 4 <= e; j += 4) {
        a0 += buf[static_cast<size_t>(j)];
        a1 += buf[static_cast<size_t>(j + 1)];
        a2 += buf[static_cast<size_t>(j + 2)];
        a3 += buf[static_cast<size_t>(j + 3)];
      }
      for (; j < e; ++j) a0 += buf[static_cast<size_t>(j)];
      g_sink.fetch_add(a0 + a1 + a2 + a3, std::memory_order_relaxed);
    });
    if (i > 0) passes.push_back(static_cast<double>(bytes) / Seconds(t0, Clock::now()));
  }
  std::sort(passes.begin(), passes.end());
  return passes[passes.size() / 2];
}

double FmaPeak(int threads, bool quick) {
  const int64_t iterations = quick ? 1'000'000 : 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 2; ++rep) {
    struct Ctx {
      int64_t iterations;
      float sink[64];
    } ctx{iterations, {}};
    const auto t0 = Clock::now();
    DefaultPool().Run(
        [](void* c, int index, int) {
          auto& x = *static_cast<Ctx*>(c);
          if (index < 64) x.sink[index] = kernels::RunFmaChains(x.iterations);
        },
        &ctx);
    const double s = Seconds(t0, Clock::now());
    for (float f : ctx.sink) g_sink.fetch_add(static_cast<uint64_t>(f), std::memory_order_relaxed);
    const double lanes = static_cast<double>(kernels::FmaLanesPerIteration()) *
                         static_cast<double>(iterations) * threads;
    best = std::max(best, lanes / s);
  }
  return best;
}

}  // namespace

ComputeProbe MeasureCompute(bool quick) {
  ComputeProbe p;
  p.threads = DefaultThreadCount();
  const Sizes z{quick ? size_t{48} << 20 : size_t{384} << 20, quick ? 0.03 : 0.3};
  p.memory_bps = MemoryBandwidth(quick ? size_t{64} << 20 : size_t{512} << 20);
  // Tiny products stay in cache (two copies); large ones are K3-sized and cold.
  const Sizes hot{0, z.seconds};
  const Line bf16 = Fit(TimeBf16(64, 1024, hot), 2048.0 * 7168 * 2, TimeBf16(2048, 7168, z));
  p.bf16_bps = bf16.bps;
  p.bf16_call_s = bf16.call_s;
  const Line i8 = Fit(TimeI8(64, 1024, hot), 4096.0 * 7168, TimeI8(4096, 7168, z));
  p.int8_bps = i8.bps;
  const double mx_large = 3072.0 * 3584 * 17 / 32;
  const Line mx = Fit(TimeMxfp4(64, 512, hot), mx_large, TimeMxfp4(3072, 3584, z));
  p.mxfp4_bps = mx.bps;
  p.mxfp4_call_s = mx.call_s;
  p.fma_per_s = FmaPeak(p.threads, quick);
  return p;
}

}  // namespace deltafin::bench
