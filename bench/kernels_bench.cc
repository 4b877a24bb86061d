#include "bench/kernels_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "kernels/fma_probe.h"
#include "kernels/matvec.h"

namespace deltafin::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Weight sets rotate over at least this many bytes, far above any last-level cache we target
// (32 MiB on the reference machine), so every call reads its weights from DRAM.
constexpr size_t kColdBytes = size_t{512} << 20;
// The bandwidth probe's buffer.
constexpr size_t kProbeBytes = size_t{1} << 30;

void FillBytes(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(p + i, &s, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(i);
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Sum of 64-bit words over [b, e), 4 independent chains: a plain read stream.
uint64_t ReadWords(const uint64_t* p, int64_t b, int64_t e) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = b;
  for (; i + 4 <= e; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  for (; i < e; ++i) a0 += p[i];
  return a0 + a1 + a2 + a3;
}

struct Record {
  std::string kernel, shape;
  int64_t positions = 1;
  int threads = 1;
  double bytes = 0, seconds = 0, weights = 0, gbps = 0, probe_gbps = 0, ratio = 0;
};

class Bench {
 public:
  explicit Bench(const KernelsBenchOptions& o) : o_(o) {}

  // One timed segment of a kernel and the bandwidth probe pass run just before it.
  struct Sample {
    double seconds_per_call, probe_gbps;
  };

  // kSegments rounds of [one pass of the bandwidth probe, then call(i) (i = which weight copy) for
  // min_seconds / kSegments]. Pairing each segment with the probe right before it means a
  // neighbour's load on a shared machine weighs on both sides of a ratio alike.
  // Without `with_probe` (the batched table, which divides by the multiply-add peak instead) the
  // probe passes are skipped and probe_gbps is 0.
  std::vector<Sample> Time(int copies, const std::function<void(int)>& call,
                           bool with_probe = true) {
    constexpr int kSegments = 5;
    call(0);  // warm up code paths, page in outputs
    int copy = 1 % copies;
    std::vector<Sample> samples;
    for (int segment = 0; segment < kSegments; ++segment) {
      const double probe = with_probe ? ProbePass() : 0.0;
      int64_t calls = 0;
      const auto t0 = Clock::now();
      double elapsed = 0;
      do {
        call(copy);
        copy = (copy + 1) % copies;
        ++calls;
        elapsed = Seconds(t0, Clock::now());
      } while (elapsed < o_.min_seconds / kSegments || calls < 2);
      samples.push_back({elapsed / static_cast<double>(calls), probe});
    }
    return samples;
  }

  // One pass of a plain read stream over a buffer far above the last-level cache, on the default
  // pool's threads: GB/s.
  double ProbePass() {
    if (probe_.size() == 0) {
      probe_.Resize(kProbeBytes / 8);
      FillBytes(reinterpret_cast<uint8_t*>(probe_.data()), kProbeBytes, 99);
    }
    const auto n = static_cast<int64_t>(probe_.size());
    const auto t0 = Clock::now();
    DefaultPool().ParallelRanges(n, 1 << 16, [&](int64_t b, int64_t e) {
      sink_.fetch_add(ReadWords(probe_.data(), b, e), std::memory_order_relaxed);
    });
    return static_cast<double>(kProbeBytes) / Seconds(t0, Clock::now()) / 1e9;
  }

  // Median of 5 probe passes on `threads` threads (the header's figure).
  double ProbeBandwidth(int threads) {
    SetDefaultThreadCount(threads);
    ProbePass();  // page in
    std::vector<double> passes;
    for (int i = 0; i < 5; ++i) passes.push_back(ProbePass());
    return Median(passes);
  }

  static double Median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  }

  // Records the median time per call and the median of the per-segment ratios (kernel GB/s over
  // the GB/s of the probe pass just before that segment).
  void Add(const std::string& kernel, int64_t rows, int64_t cols, int64_t positions, int threads,
           double bytes, const std::vector<Sample>& samples) {
    Record r;
    r.kernel = kernel;
    r.shape = std::to_string(rows) + "x" + std::to_string(cols);
    r.positions = positions;
    r.threads = threads;
    r.bytes = bytes;
    std::vector<double> seconds, ratios, probes;
    for (const Sample& sample : samples) {
      seconds.push_back(sample.seconds_per_call);
      ratios.push_back(bytes / sample.seconds_per_call / 1e9 / sample.probe_gbps);
      probes.push_back(sample.probe_gbps);
    }
    r.seconds = Median(seconds);
    r.ratio = Median(ratios);
    r.probe_gbps = Median(probes);
    r.weights = static_cast<double>(rows) * static_cast<double>(cols);
    r.gbps = bytes / r.seconds / 1e9;
    records_.push_back(r);
    std::printf("%-14s %-13s %4lld %4d %10.1f %10.3f %8.2f %8.2f %6.2f %12.0f\n", r.kernel.c_str(),
                r.shape.c_str(), static_cast<long long>(positions), threads, bytes / 1e6,
                r.seconds * 1e3, r.gbps, r.probe_gbps, r.ratio,
                static_cast<double>(positions) / r.seconds);
    std::fflush(stdout);
  }

  // Multiply-add lanes per second on `threads` threads (fma_probe.h), best of 3.
  double ProbeFma(int threads) {
    SetDefaultThreadCount(threads);
    const int64_t iterations = o_.quick ? 2'000'000 : 50'000'000;
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
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
      for (float f : ctx.sink) sink_.fetch_add(static_cast<uint64_t>(f), std::memory_order_relaxed);
      const double lanes = static_cast<double>(kernels::FmaLanesPerIteration()) *
                           static_cast<double>(iterations) * threads;
      if (lanes / s > best) best = lanes / s;
    }
    return best;
  }

  void Mxfp4(const char* name, int64_t rows, int64_t cols, int64_t positions,
             const std::vector<int>& thread_counts) {
    const size_t packed = static_cast<size_t>(rows * cols / 2);
    const size_t bytes = packed + static_cast<size_t>(rows * cols / 32);
    const int copies = Copies(bytes);
    std::vector<AlignedBuffer<uint8_t>> w(static_cast<size_t>(copies));
    for (int i = 0; i < copies; ++i) {
      w[static_cast<size_t>(i)].Resize(bytes);
      FillBytes(w[static_cast<size_t>(i)].data(), packed, static_cast<uint64_t>(i));
      std::memset(w[static_cast<size_t>(i)].data() + packed, 124, bytes - packed);
    }
    AlignedBuffer<float> x(static_cast<size_t>(positions * cols)),
        y(static_cast<size_t>(positions * rows));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 97);
    for (int t : thread_counts) {
      SetDefaultThreadCount(t);
      const auto s = Time(copies, [&](int c) {
        const uint8_t* base = w[static_cast<size_t>(c)].data();
        kernels::MatMulMxfp4(base, base + packed, rows, cols, x.data(), positions, y.data());
      });
      Add(name, rows, cols, positions, t, static_cast<double>(bytes), s);
    }
  }

  void Bf16(const char* name, int64_t rows, int64_t cols, const std::vector<int>& thread_counts) {
    const size_t bytes = static_cast<size_t>(rows * cols) * 2;
    const int copies = Copies(bytes);
    std::vector<AlignedBuffer<uint16_t>> w(static_cast<size_t>(copies));
    for (int i = 0; i < copies; ++i) {
      w[static_cast<size_t>(i)].Resize(bytes / 2);
      auto* p = w[static_cast<size_t>(i)].data();
      FillBytes(reinterpret_cast<uint8_t*>(p), bytes, static_cast<uint64_t>(i));
      for (size_t j = 0; j < bytes / 2; ++j) p[j] &= 0xbfff;  // finite values
    }
    AlignedBuffer<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 97);
    for (int t : thread_counts) {
      SetDefaultThreadCount(t);
      const auto s = Time(copies, [&](int c) {
        kernels::MatVecBf16(w[static_cast<size_t>(c)].data(), rows, cols, x.data(), y.data());
      });
      Add(name, rows, cols, 1, t, static_cast<double>(bytes), s);
    }
  }

  void I8(const char* name, int64_t rows, int64_t cols, const std::vector<int>& thread_counts) {
    const size_t qbytes = static_cast<size_t>(rows * cols);
    const size_t bytes = qbytes + static_cast<size_t>(rows) * 4;
    const int copies = Copies(bytes);
    std::vector<AlignedBuffer<int8_t>> w(static_cast<size_t>(copies));
    for (int i = 0; i < copies; ++i) {
      w[static_cast<size_t>(i)].Resize(qbytes);
      FillBytes(reinterpret_cast<uint8_t*>(w[static_cast<size_t>(i)].data()), qbytes,
                static_cast<uint64_t>(i));
    }
    AlignedBuffer<float> scales(static_cast<size_t>(rows));
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.01f;
    AlignedBuffer<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 97);
    for (int t : thread_counts) {
      SetDefaultThreadCount(t);
      const auto s = Time(copies, [&](int c) {
        kernels::MatVecI8(w[static_cast<size_t>(c)].data(), scales.data(), rows, cols, x.data(),
                          y.data());
      });
      Add(name, rows, cols, 1, t, static_cast<double>(bytes), s);
    }
  }

  // ---- batched products: n activation rows × one weight matrix ----

  struct BatchRecord {
    std::string kernel, shape;
    int64_t n = 1;
    int threads = 1;
    double bytes = 0, seconds = 0, gflops = 0, fraction = 0, gbps = 0;
  };

  // Times call(copy) per n and thread count, weights rotating over cold copies as above. FLOPs
  // count 2 per multiply-add (rows·cols·n multiply-adds); "of peak" divides the multiply-adds per
  // second by the fp32 multiply-add peak measured at the same thread count.
  void AddBatched(const std::string& kernel, int64_t rows, int64_t cols, double bytes, int copies,
                  const std::vector<int>& thread_counts,
                  const std::function<void(int, int64_t)>& call) {
    for (int t : thread_counts) {
      SetDefaultThreadCount(t);
      for (int64_t n : BatchSizes()) {
        const auto samples = Time(
            copies, [&](int c) { call(c, n); }, /*with_probe=*/false);
        std::vector<double> seconds;
        for (const Sample& sample : samples) seconds.push_back(sample.seconds_per_call);
        BatchRecord r;
        r.kernel = kernel;
        r.shape = std::to_string(rows) + "x" + std::to_string(cols);
        r.n = n;
        r.threads = t;
        r.bytes = bytes;
        r.seconds = Median(seconds);
        const double fmas =
            static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(n);
        r.gflops = 2 * fmas / r.seconds / 1e9;
        r.fraction = fmas / r.seconds / (t == 1 ? fma1_ : fma_all_);
        r.gbps = bytes / r.seconds / 1e9;
        batch_records_.push_back(r);
        std::printf("%-14s %-11s %4lld %4d %10.4f %9.1f %7.0f%% %8.2f\n", r.kernel.c_str(),
                    r.shape.c_str(), static_cast<long long>(n), t, r.seconds * 1e3, r.gflops,
                    100 * r.fraction, r.gbps);
        std::fflush(stdout);
      }
    }
  }

  std::vector<int64_t> BatchSizes() const {
    if (o_.quick) return {1, 2, 8, 32, 33};
    return {1, 2, 4, 8, 16, 32, 64, 128, 512};
  }

  // Activations for up to the largest batch: small values of both signs.
  static AlignedBuffer<float> Activations(int64_t n, int64_t cols) {
    AlignedBuffer<float> x(static_cast<size_t>(n * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 97) - 0.04f;
    return x;
  }

  void BatchedMxfp4(const char* name, int64_t rows, int64_t cols,
                    const std::vector<int>& thread_counts) {
    const size_t packed = static_cast<size_t>(rows * cols / 2);
    const size_t bytes = packed + static_cast<size_t>(rows * cols / 32);
    const int copies = Copies(bytes);
    std::vector<AlignedBuffer<uint8_t>> w(static_cast<size_t>(copies));
    for (int i = 0; i < copies; ++i) {
      w[static_cast<size_t>(i)].Resize(bytes);
      FillBytes(w[static_cast<size_t>(i)].data(), packed, static_cast<uint64_t>(i));
      std::memset(w[static_cast<size_t>(i)].data() + packed, 124, bytes - packed);
    }
    const int64_t max_n = BatchSizes().back();
    const auto x = Activations(max_n, cols);
    AlignedBuffer<float> y(static_cast<size_t>(max_n * rows));
    AddBatched(name, rows, cols, static_cast<double>(bytes), copies, thread_counts,
               [&](int c, int64_t n) {
                 const uint8_t* base = w[static_cast<size_t>(c)].data();
                 kernels::MatMulMxfp4(base, base + packed, rows, cols, x.data(), n, y.data());
               });
  }

  void BatchedBf16(const char* name, int64_t rows, int64_t cols,
                   const std::vector<int>& thread_counts) {
    const size_t bytes = static_cast<size_t>(rows * cols) * 2;
    const int copies = Copies(bytes);
    std::vector<AlignedBuffer<uint16_t>> w(static_cast<size_t>(copies));
    for (int i = 0; i < copies; ++i) {
      w[static_cast<size_t>(i)].Resize(bytes / 2);
      auto* p = w[static_cast<size_t>(i)].data();
      FillBytes(reinterpret_cast<uint8_t*>(p), bytes, static_cast<uint64_t>(i));
      for (size_t j = 0; j < bytes / 2; ++j) p[j] &= 0xbfff;  // finite values
    }
    const int64_t max_n = BatchSizes().back();
    const auto x = Activations(max_n, cols);
    AlignedBuffer<float> y(static_cast<size_t>(max_n * rows));
    AddBatched(
        name, rows, cols, static_cast<double>(bytes), copies, thread_counts, [&](int c, int64_t n) {
          kernels::MatMulBf16(w[static_cast<size_t>(c)].data(), rows, cols, x.data(), n, y.data());
        });
  }

  void BatchedI8(const char* name, int64_t rows, int64_t cols,
                 const std::vector<int>& thread_counts) {
    const size_t qbytes = static_cast<size_t>(rows * cols);
    const size_t bytes = qbytes + static_cast<size_t>(rows) * 4;
    const int copies = Copies(bytes);
    std::vector<AlignedBuffer<int8_t>> w(static_cast<size_t>(copies));
    for (int i = 0; i < copies; ++i) {
      w[static_cast<size_t>(i)].Resize(qbytes);
      FillBytes(reinterpret_cast<uint8_t*>(w[static_cast<size_t>(i)].data()), qbytes,
                static_cast<uint64_t>(i));
    }
    AlignedBuffer<float> scales(static_cast<size_t>(rows));
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.01f;
    const int64_t max_n = BatchSizes().back();
    const auto x = Activations(max_n, cols);
    AlignedBuffer<float> y(static_cast<size_t>(max_n * rows));
    AddBatched(name, rows, cols, static_cast<double>(bytes), copies, thread_counts,
               [&](int c, int64_t n) {
                 kernels::MatMulI8(w[static_cast<size_t>(c)].data(), scales.data(), rows, cols,
                                   x.data(), n, y.data());
               });
  }

  // The batched table: the bench preset's shapes (MXFP4 experts 256×512 and 512×256, 1024-wide
  // BF16 / int8 spine linears) and K3's (experts 3072×3584 and 3584×3072, hidden 7168).
  void RunBatched(const std::vector<int>& counts) {
    std::printf(
        "\nbatched products, n activation rows: GFLOP/s = 2·rows·cols·n / s; \"of peak\" = "
        "multiply-adds/s / the multiply-add peak at that thread count; GB/s = weight bytes / s\n");
    std::printf("%-14s %-11s %4s %4s %10s %9s %8s %8s\n", "kernel", "shape", "n", "thr", "ms/call",
                "GFLOP/s", "of peak", "GB/s");
    const int64_t s = o_.quick ? 8 : 1;
    BatchedMxfp4("mxfp4 bench w13", 256 / s, 512 / s, counts);
    BatchedMxfp4("mxfp4 bench w2", 512 / s, 256 / s, counts);
    BatchedMxfp4("mxfp4 k3 w13", 3072 / s, 3584 / s, counts);
    BatchedMxfp4("mxfp4 k3 w2", 3584 / s, 3072 / s, counts);
    BatchedBf16("bf16 bench", 1024 / s, 1024 / s, counts);
    BatchedBf16("bf16 k3", 2048 / s, 7168 / s, counts);
    BatchedI8("int8 bench", 1024 / s, 1024 / s, counts);
    BatchedI8("int8 k3", 2048 / s, 7168 / s, counts);
    // Summary: the lowest and highest fraction of the peak at the row counts prefill uses.
    for (int t : counts) {
      double lo = 1e9, hi = 0;
      for (const BatchRecord& r : batch_records_) {
        if (r.threads != t || r.n < 32) continue;
        lo = std::min(lo, r.fraction);
        hi = std::max(hi, r.fraction);
      }
      if (hi > 0) {
        std::printf(
            "batched kernels at n >= 32, %d thread(s): %.0f%%-%.0f%% of the multiply-add peak\n", t,
            100 * lo, 100 * hi);
      }
    }
  }

  int Run() {
    const int all = o_.threads > 0 ? o_.threads : AvailableCpus();
    std::vector<int> counts = {1};
    if (all > 1) counts.push_back(all);
    char when[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
    std::printf("deltafin bench kernels  %s  threads: 1 and %d\n", when, all);
    bw1_ = ProbeBandwidth(1);
    bw_all_ = all > 1 ? ProbeBandwidth(all) : bw1_;
    fma1_ = ProbeFma(1);
    fma_all_ = all > 1 ? ProbeFma(all) : fma1_;
    std::printf(
        "memory read bandwidth (%zu MiB probe, median of 5): 1 thread %.2f GB/s, %d threads "
        "%.2f GB/s\n",
        kProbeBytes >> 20, bw1_, all, bw_all_);
    std::printf("fp32 multiply-add peak: 1 thread %.1f G/s, %d threads %.1f G/s\n", fma1_ / 1e9,
                all, fma_all_ / 1e9);
    std::printf(
        "each row: 5 segments, each after one probe pass (\"mem GB/s\": their median); ratio = "
        "median over segments of kernel GB/s / that segment's probe GB/s\n\n");
    std::printf("%-14s %-13s %4s %4s %10s %10s %8s %8s %6s %12s\n", "kernel", "shape", "pos", "thr",
                "MB", "ms/call", "GB/s", "mem GB/s", "ratio", "positions/s");
    const int64_t s = o_.quick ? 8 : 1;
    Mxfp4("mxfp4 w1/w3", 3072 / s, 3584 / s, 1, counts);
    Mxfp4("mxfp4 w2", 3584 / s, 3072 / s, 1, counts);
    Bf16("bf16 shared", 6144 / s, 7168 / s, counts);
    Bf16("bf16 kda", 12288 / s, 7168 / s, counts);
    Bf16("bf16 lm_head", o_.lm_head_rows / s, 7168 / s, counts);
    I8("int8 shared", 6144 / s, 7168 / s, counts);
    I8("int8 kda", 12288 / s, 7168 / s, counts);
    I8("int8 lm_head", o_.lm_head_rows / s, 7168 / s, counts);
    probe_ = AlignedBuffer<uint64_t>();
    RunBatched(counts);
    SetDefaultThreadCount(0);
    if (!o_.json_path.empty()) return WriteJson();
    return 0;
  }

 private:
  static int Copies(size_t bytes) {
    const size_t c = (kColdBytes + bytes - 1) / bytes;
    return static_cast<int>(c < 2 ? 2 : c);
  }

  int WriteJson() const {
    std::FILE* f = std::fopen(o_.json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "error: %s: cannot open for writing\n", o_.json_path.c_str());
      return 1;
    }
    std::fprintf(f, "[\n");
    std::fprintf(f,
                 "  {\"kernel\": \"memory_read\", \"threads\": 1, \"gbps\": %.4f},\n"
                 "  {\"kernel\": \"memory_read\", \"threads\": %d, \"gbps\": %.4f}",
                 bw1_, records_.empty() ? 1 : records_.back().threads, bw_all_);
    std::fprintf(f,
                 ",\n  {\"kernel\": \"fma_peak\", \"threads\": 1, \"lanes_per_second\": %.6g},\n"
                 "  {\"kernel\": \"fma_peak\", \"threads\": %d, \"lanes_per_second\": %.6g}",
                 fma1_, records_.empty() ? 1 : records_.back().threads, fma_all_);
    for (const Record& r : records_) {
      std::fprintf(f,
                   ",\n  {\"kernel\": \"%s\", \"shape\": \"%s\", \"positions\": %lld, "
                   "\"threads\": %d, \"bytes\": %.0f, \"seconds\": %.9f, \"gbps\": %.4f, "
                   "\"memory_gbps\": %.4f, \"ratio\": %.4f}",
                   r.kernel.c_str(), r.shape.c_str(), static_cast<long long>(r.positions),
                   r.threads, r.bytes, r.seconds, r.gbps, r.probe_gbps, r.ratio);
    }
    for (const BatchRecord& r : batch_records_) {
      std::fprintf(f,
                   ",\n  {\"kernel\": \"%s\", \"shape\": \"%s\", \"positions\": %lld, "
                   "\"threads\": %d, \"bytes\": %.0f, \"seconds\": %.9f, \"gflops\": %.4f, "
                   "\"fma_fraction\": %.4f, \"gbps\": %.4f}",
                   r.kernel.c_str(), r.shape.c_str(), static_cast<long long>(r.n), r.threads,
                   r.bytes, r.seconds, r.gflops, r.fraction, r.gbps);
    }
    std::fprintf(f, "\n]\n");
    const bool ok = std::fclose(f) == 0;
    if (!ok) std::fprintf(stderr, "error: %s: write failed\n", o_.json_path.c_str());
    return ok ? 0 : 1;
  }

  KernelsBenchOptions o_;
  AlignedBuffer<uint64_t> probe_;
  std::atomic<uint64_t> sink_{0};  // keeps the probes' reads alive; parts add from every thread
  double bw1_ = 0, bw_all_ = 0, fma1_ = 0, fma_all_ = 0;
  std::vector<Record> records_;
  std::vector<BatchRecord> batch_records_;
};

}  // namespace

int RunKernelsBench(const KernelsBenchOptions& options) {
  Bench bench(options);
  return bench.Run();
}

}  // namespace deltafin::bench
