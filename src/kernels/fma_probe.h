// The core's fp32 fused multiply-add rate, measured: the ceiling of any fp32 kernel, which bounds
// what batching can gain once a product is compute-bound (`deltafin bench kernels` prints it).
//
// RunFmaChains runs `iterations` steps of independent multiply-add chains with the widest vectors
// of the best Highway target the CPU supports; FmaLanesPerIteration says how many fp32
// multiply-adds one step is. The returned value depends on every chain, so none is optimised away.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

int64_t FmaLanesPerIteration();
float RunFmaChains(int64_t iterations);

}  // namespace deltafin::kernels
