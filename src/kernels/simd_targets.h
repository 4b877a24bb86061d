// The one place that decides which Highway targets the kernels are compiled for. Every kernel TU
// includes this before any hwy/ header.
//
// x86: AVX3 (AVX-512 F/BW/DQ/VL), AVX2 (Haswell+) and the SCALAR fallback, in which every kernel
// calls its scalar reference (GCC 12.2 marks EMU128 broken; style-study §3.4). SSSE3/SSE4 are
// pruned for compile time (2-core CI); AVX3_DL is not built (nothing here uses VNNI/VBMI, and
// Highway 1.0.3 only builds it with HWY_WANT_AVX3_DL). ARM64: NEON only (SVE later).
#pragma once

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif
