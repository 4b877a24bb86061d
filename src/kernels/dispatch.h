// Internal, SIMD-free interface between kernels/matvec.cc and kernels/activation.cc (threading,
// entry points) and the per-target kernel TUs (matvec_*.cc, activation_situ.cc). Each Choose* runs
// Highway's dynamic dispatch once and returns the function for the best target the CPU supports (or
// the one a test selected).
//
// A *Rows function computes rows [r0, r1) of Y = X·Wᵀ for n vectors: y[v*rows + r] for every v,
// each in the summation order of kernels/matvec.h, so any row partition gives the same bits.
#pragma once

#include <cstdint>

namespace deltafin::kernels::internal {

using Bf16RowsFn = void (*)(const uint16_t* w, int64_t rows, int64_t cols, const float* x,
                            int64_t n, int64_t r0, int64_t r1, float* y);
using Mxfp4RowsFn = void (*)(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                             int64_t cols, const float* x, int64_t n, int64_t r0, int64_t r1,
                             float* y);
using I8RowsFn = void (*)(const int8_t* q, const float* scales, int64_t rows, int64_t cols,
                          const float* x, int64_t n, int64_t r0, int64_t r1, float* y);
using DotF32Fn = float (*)(const float* a, const float* b, int64_t n);
// Columns [c0, c1) of the transposed fp32 product (kernels/matvec.h MatTMulF32).
using MatTMulF32ColsFn = void (*)(const float* w, int64_t w_stride, int64_t rows, const float* x,
                                  int64_t x_stride, int64_t n, bool first, int64_t c0, int64_t c1,
                                  float* y, int64_t y_stride);
using MatTVecBf16Fn = void (*)(const uint16_t* w, int64_t rows, int64_t cols, const float* x,
                               float* y);
// gate[i] = SiTU(gate[i], up[i]) for i in [0, n) (kernels/activation.h).
using SituFn = void (*)(float* gate, const float* up, int64_t n, float beta, float linear_beta);

Bf16RowsFn ChooseBf16Rows();
DotF32Fn ChooseDotF32();
MatTMulF32ColsFn ChooseMatTMulF32Cols();
MatTVecBf16Fn ChooseMatTVecBf16();
Mxfp4RowsFn ChooseMxfp4Rows();
I8RowsFn ChooseI8Rows();
SituFn ChooseSitu();
// x[i] = f(x[i]) in place, or the softmax of x[0, n) (kernels/activation.h).
using GateFn = void (*)(float* x, int64_t n);
GateFn ChooseExp();
GateFn ChooseSigmoid();
GateFn ChooseSilu();
GateFn ChooseSoftmax();
// The KDA state step (kernels/kda_state.h); out == nullptr: update only.
using KdaStepFn = void (*)(float* S, const float* g, const float* k, const float* v, float beta,
                           const float* q, int64_t dim, float* delta, float* out);
KdaStepFn ChooseKdaStep();

}  // namespace deltafin::kernels::internal
