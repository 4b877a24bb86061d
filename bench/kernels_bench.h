// `deltafin bench kernels`: memory read bandwidth and the matrix kernels on K3's shapes, weights
// cold in cache, 1 thread and all threads. Prints a table; optionally writes JSON records.
#pragma once

#include <string>

namespace deltafin::bench {

struct KernelsBenchOptions {
  int threads = 0;               // "all threads": 0 = the default pool size (AvailableCpus)
  std::string json_path;         // empty: no JSON
  double min_seconds = 0.4;      // per measurement
  int64_t lm_head_rows = 32768;  // of 163840 (BF16 lm_head is 2.35 GB; see docs/PERFORMANCE.md)
  bool quick = false;            // tiny shapes, for tests
};

// Returns a process exit code; prints errors as "error: ..." on stderr.
int RunKernelsBench(const KernelsBenchOptions& options);

}  // namespace deltafin::bench
