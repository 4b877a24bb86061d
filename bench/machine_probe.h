// Quick compute-side measurements for `deltafin plan` (docs/PLAN.md): memory read bandwidth, the
// BF16 / row-int8 / MXFP4 matrix-vector rates with weights cold in cache, the fixed cost of one
// small kernel call on the thread pool, and the fp32 multiply-add peak. The same kernels and
// thread pool as the engine and `bench kernels`, at sizes that take seconds rather than minutes.
#pragma once

#include <atomic>
#include <functional>

namespace deltafin::bench {

struct ComputeProbe {
  double memory_bps = 0;    // plain read stream, all threads
  double bf16_bps = 0;      // weight bytes/s, cold, all threads
  double int8_bps = 0;      // int8 + fp32 row-scale bytes/s
  double mxfp4_bps = 0;     // packed + scale bytes/s
  double bf16_call_s = 0;   // one small BF16 product (64 x 1024), weights hot: the call's cost
  double mxfp4_call_s = 0;  // one small MXFP4 product (64 x 512), weights hot
  double fma_per_s = 0;     // fp32 multiply-adds/s
  // FLOP/s (2 per multiply-add) of a batched MXFP4 product of 64 rows at a K3 expert's shape,
  // weights hot: what a prefill wave's routed experts and spine products run at.
  double mxfp4_batched_flops = 0;
  int threads = 1;
};

// The fp32 multiply-add peak alone (multiply-adds/s, every compute thread), as MeasureCompute
// measures it: `bench prefill`'s compute floor.
double MeasureFmaPeak(bool quick);

// `quick`: smaller buffers and shorter timings (tests); the numbers are rougher.
ComputeProbe MeasureCompute(bool quick);

// How much slower the cold BF16 product (2048 x 7168, the spine's kind of work) runs while
// `load` runs on another thread than with nothing else running: the ratio of the medians of
// interleaved segments, alone and under the load (>= 1 but for noise). `load` runs until `stop`
// is set and must return soon after. `plan` runs the engine's expert reads as the load: on a
// machine with few cores the readers' system time, interrupts and memory traffic come out of the
// compute threads' time.
double Bf16SlowdownUnder(const std::function<void(const std::atomic<bool>& stop)>& load,
                         bool quick);

}  // namespace deltafin::bench
