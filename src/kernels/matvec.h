// Matrix-vector and small-batch matrix products over the weight formats of a K3 checkpoint.
//
// This header is SIMD-free: the model calls these entry points once per whole matrix; each call
// dispatches once (Highway, kernels/simd_targets.h) to the best target the CPU supports and splits
// the rows over the default thread pool (base/thread_pool.h). Every target keeps the summation
// order below, so results are bit-identical to the scalar references in ref/ on every CPU and
// for every thread count.
//
// Conventions: W is row-major [rows, cols] (PyTorch nn.Linear), y[r] = Σ_c W[r,c]·x[c] with fp32
// accumulation. Batched forms take X as [n, cols] and write Y as [n, rows], and produce for every
// vector exactly what the matrix-vector form produces: prefill and decode then agree bit for bit.
//
// Summation order (fixed, so results are deterministic): 32 partial sums, element c goes to
// partial c % 32 in increasing c as one fused multiply-add, p = fma(w, x, p) (one rounding per
// step; every SIMD target has FMA, and the references use std::fma); partials are then combined
// pairwise as a balanced tree
// (p[i] += p[i+16], then p[i] += p[i+8], ... , p[0] += p[1]). For MXFP4 the product of an E2M1
// value and its power-of-two scale is exact, so only this order decides the rounding.
#pragma once

#include <cstdint>
#include <string>

namespace deltafin::kernels {

// BF16 weights [rows, cols].
void MatVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y);
void MatMulBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y);

// Transposed product y[c] = Σ_r W[r,c]·x[r] for BF16 W [rows, cols] (MLA's absorbed key:
// q_lat = W_UKᵀ·q_nope). Accumulates in increasing r.
void MatTVecBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y);

// MXFP4 weights: packed [rows, cols/2], scales [rows, cols/32] (layout in quant/mxfp4.h).
void MatVecMxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* x, float* y);
void MatMulMxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* x, int64_t n, float* y);

// Row-int8 weights (docs/MODEL.md §3.6): q int8 [rows, cols] and one fp32 scale per row (the stored
// f16 scale, widened); y[r] = scales[r] · Σ_c q[r,c]·x[c], the sum in the order above.
void MatVecI8(const int8_t* q, const float* scales, int64_t rows, int64_t cols, const float* x,
              float* y);
void MatMulI8(const int8_t* q, const float* scales, int64_t rows, int64_t cols, const float* x,
              int64_t n, float* y);

// Dot product of two fp32 vectors in the same fixed order as the matrix kernels.
float DotF32(const float* a, const float* b, int64_t n);

// Transposed fp32 for n vectors X [n, rows] (MLA's attention-weighted latent sum):
// y[v*cols + c] = Σ_r W[r,c]·x_v[r], one fused multiply-add per r in increasing r starting from
// +0 (MatTVecBf16's order); weight rows are loaded once for a tile of vectors. Columns split over
// the pool.
void MatTMulF32(const float* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y);

// Rows of a matrix `stride` floats apart (a row-major block inside a wider buffer).
template <class T>
struct StridedRows {
  T* data;
  int64_t stride;
};

// The general form: W's rows w.stride apart, x_v at x + v·x_stride, y_v[c] at y.data +
// v·y.stride + c; with `first` y starts at +0, otherwise each y_v[c] holds the sum over earlier
// rows and this call's rows continue it with the same fused multiply-adds in increasing r. A stored
// fp32 partial reloads unchanged, so a product split into runs of rows has exactly one call's bits
// (MLA weights a run of cached latents for several positions while the run is in cache, and forms
// a score from its latent and rope parts in one chain).
void MatTMulF32Part(StridedRows<const float> w, int64_t rows, int64_t cols, const float* x,
                    int64_t x_stride, int64_t n, bool first, StridedRows<float> y);

// Highway's name of the target the kernels dispatch to on this CPU ("AVX3", "AVX2", "NEON",
// "SCALAR"); the compiled-in targets (all, or those this CPU supports), best first,
// space-separated; Highway's version. For `deltafin --version`.
const char* ActiveSimdTarget();
std::string SimdTargetNames(bool only_supported);
std::string HighwayVersion();

}  // namespace deltafin::kernels
