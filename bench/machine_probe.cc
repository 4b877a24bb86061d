#include "bench/machine_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
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

// One kernel at one size, rotating over `copies` weight copies so that each call reads its
// weights from DRAM (copies * bytes is far above the last-level cache), or over two copies that
// stay in cache for the hot call-cost products.
class TimedKernel {
 public:
  virtual ~TimedKernel() = default;
  virtual void Call(int copy) = 0;
  int copies = 2;
  int next = 0;
  std::vector<double> per_call;  // seconds per call, one entry per segment
};

// Times every kernel in `rounds` round-robin rounds of one `segment_s` segment each, and returns
// each kernel's median seconds per call. Interleaving puts every kernel's segments across the
// same few seconds, and the median is what a few seconds of decode on this machine, as it is now,
// see: on a shared VM the fastest segment is a moment when a neighbour left the core. (The first
// version took each kernel's fastest of 5 back-to-back segments. On a VM with 17 % steal time,
// that predicted 0.40 s/token for a decode that measured 0.67 s, with steps from 0.40 to 0.95 s.)
std::vector<double> MedianPerCall(const std::vector<TimedKernel*>& kernels, int rounds,
                                  double segment_s) {
  for (TimedKernel* k : kernels) {
    for (int c = 0; c < k->copies; ++c) k->Call(c);  // page in, warm up
  }
  for (int round = 0; round < rounds; ++round) {
    for (TimedKernel* k : kernels) {
      int64_t calls = 0;
      const auto t0 = Clock::now();
      double elapsed = 0;
      do {
        k->Call(k->next);
        k->next = (k->next + 1) % k->copies;
        ++calls;
        elapsed = Seconds(t0, Clock::now());
      } while (elapsed < segment_s || calls < 3);
      k->per_call.push_back(elapsed / static_cast<double>(calls));
    }
  }
  std::vector<double> out;
  for (TimedKernel* k : kernels) {
    std::vector<double> v = k->per_call;
    std::sort(v.begin(), v.end());
    out.push_back(v[v.size() / 2]);
  }
  return out;
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

void FillX(AlignedBuffer<float>& x) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 97);
}

class Bf16Kernel : public TimedKernel {
 public:
  Bf16Kernel(int64_t rows, int64_t cols, size_t cold)
      : rows_(rows), cols_(cols), elems_(static_cast<size_t>(rows * cols)) {
    copies = CopiesFor(elems_ * 2, cold);
    w_ = AlignedBuffer<uint16_t>(static_cast<size_t>(copies) * elems_);
    Fill(reinterpret_cast<uint8_t*>(w_.data()), w_.size() * 2, 1);
    for (size_t j = 0; j < w_.size(); ++j) w_[j] &= 0xbfff;  // finite values
    x_ = AlignedBuffer<float>(static_cast<size_t>(cols));
    y_ = AlignedBuffer<float>(static_cast<size_t>(rows));
    FillX(x_);
  }
  void Call(int c) override {
    kernels::MatVecBf16(w_.data() + static_cast<size_t>(c) * elems_, rows_, cols_, x_.data(),
                        y_.data());
  }

 private:
  int64_t rows_, cols_;
  size_t elems_;
  AlignedBuffer<uint16_t> w_;
  AlignedBuffer<float> x_, y_;
};

class I8Kernel : public TimedKernel {
 public:
  I8Kernel(int64_t rows, int64_t cols, size_t cold)
      : rows_(rows), cols_(cols), qbytes_(static_cast<size_t>(rows * cols)) {
    copies = CopiesFor(qbytes_, cold);
    q_ = AlignedBuffer<int8_t>(static_cast<size_t>(copies) * qbytes_);
    Fill(reinterpret_cast<uint8_t*>(q_.data()), q_.size(), 2);
    scales_ = AlignedBuffer<float>(static_cast<size_t>(rows * copies));
    for (size_t i = 0; i < scales_.size(); ++i) scales_[i] = 0.01f;
    x_ = AlignedBuffer<float>(static_cast<size_t>(cols));
    y_ = AlignedBuffer<float>(static_cast<size_t>(rows));
    FillX(x_);
  }
  void Call(int c) override {
    kernels::MatVecI8(q_.data() + static_cast<size_t>(c) * qbytes_,
                      scales_.data() + static_cast<size_t>(c * rows_), rows_, cols_, x_.data(),
                      y_.data());
  }

 private:
  int64_t rows_, cols_;
  size_t qbytes_;
  AlignedBuffer<int8_t> q_;
  AlignedBuffer<float> scales_, x_, y_;
};

class Mxfp4Kernel : public TimedKernel {
 public:
  // `batch` > 1: the batched product over that many rows of activations (a prefill wave's
  // expert work), timed for its multiply-add rate rather than its bytes.
  Mxfp4Kernel(int64_t rows, int64_t cols, size_t cold, int64_t batch = 1)
      : rows_(rows),
        cols_(cols),
        batch_(batch),
        packed_(static_cast<size_t>(rows * cols / 2)),
        bytes_(packed_ + static_cast<size_t>(rows * cols / 32)) {
    copies = CopiesFor(bytes_, cold);
    w_ = AlignedBuffer<uint8_t>(static_cast<size_t>(copies) * bytes_);
    for (int c = 0; c < copies; ++c) {
      uint8_t* base = w_.data() + static_cast<size_t>(c) * bytes_;
      Fill(base, packed_, static_cast<uint64_t>(c));
      std::memset(base + packed_, 124, bytes_ - packed_);  // scales 2^-3
    }
    x_ = AlignedBuffer<float>(static_cast<size_t>(cols * batch));
    y_ = AlignedBuffer<float>(static_cast<size_t>(rows * batch));
    FillX(x_);
  }
  void Call(int c) override {
    const uint8_t* base = w_.data() + static_cast<size_t>(c) * bytes_;
    if (batch_ > 1) {
      kernels::MatMulMxfp4(base, base + packed_, rows_, cols_, x_.data(), batch_, y_.data());
    } else {
      kernels::MatVecMxfp4(base, base + packed_, rows_, cols_, x_.data(), y_.data());
    }
  }

 private:
  int64_t rows_, cols_, batch_;
  size_t packed_, bytes_;
  AlignedBuffer<uint8_t> w_;
  AlignedBuffer<float> x_, y_;
};

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

double MeasureFmaPeak(bool quick) { return FmaPeak(DefaultThreadCount(), quick); }

ComputeProbe MeasureCompute(bool quick) {
  ComputeProbe p;
  p.threads = DefaultThreadCount();
  const size_t cold = quick ? size_t{48} << 20 : size_t{384} << 20;
  p.memory_bps = MemoryBandwidth(quick ? size_t{64} << 20 : size_t{512} << 20);
  // Tiny products stay in cache (two copies); large ones are K3-sized and cold.
  Bf16Kernel bf16_tiny(64, 1024, 0), bf16_large(2048, 7168, cold);
  I8Kernel i8_tiny(64, 1024, 0), i8_large(4096, 7168, cold);
  Mxfp4Kernel mx_tiny(64, 512, 0), mx_large(3072, 3584, cold);
  // A prefill wave's expert product: 64 rows through one K3-expert-sized matrix, weights hot.
  const int64_t batch_rows = 64, batch_m = quick ? 768 : 3072, batch_k = quick ? 896 : 3584;
  Mxfp4Kernel mx_batched(batch_m, batch_k, 0, batch_rows);
  // 9 rounds of 7 segments of 80 ms: about 5 s.
  const std::vector<double> t = MedianPerCall(
      {&bf16_tiny, &bf16_large, &i8_tiny, &i8_large, &mx_tiny, &mx_large, &mx_batched},
      quick ? 3 : 9, quick ? 0.005 : 0.08);
  p.mxfp4_batched_flops = 2.0 * static_cast<double>(batch_m * batch_k * batch_rows) / t[6];
  const Line bf16 = Fit(t[0], 2048.0 * 7168 * 2, t[1]);
  p.bf16_bps = bf16.bps;
  p.bf16_call_s = bf16.call_s;
  const Line i8 = Fit(t[2], 4096.0 * 7168, t[3]);
  p.int8_bps = i8.bps;
  const Line mx = Fit(t[4], 3072.0 * 3584 * 17 / 32, t[5]);
  p.mxfp4_bps = mx.bps;
  p.mxfp4_call_s = mx.call_s;
  p.fma_per_s = FmaPeak(p.threads, quick);
  return p;
}

double Bf16SlowdownUnder(const std::function<void(const std::atomic<bool>& stop)>& load,
                         bool quick) {
  Bf16Kernel alone(2048, 7168, quick ? size_t{48} << 20 : size_t{384} << 20);
  const int rounds = quick ? 3 : 9;
  const double segment_s = quick ? 0.005 : 0.08;
  const double t_alone = MedianPerCall({&alone}, rounds, segment_s)[0];
  std::atomic<bool> stop{false};
  std::thread loader([&] { load(stop); });
  std::this_thread::sleep_for(std::chrono::milliseconds(quick ? 20 : 200));  // reads under way
  alone.per_call.clear();
  const double t_loaded = MedianPerCall({&alone}, rounds, segment_s)[0];
  stop.store(true);
  loader.join();
  return t_loaded / t_alone;
}

}  // namespace deltafin::bench
