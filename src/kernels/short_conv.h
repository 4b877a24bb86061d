// KDA's short causal convolution (docs/MODEL.md §4.4) over a whole wave, as a kernel: each of the
// q, k and v projections of every KDA layer goes through it before its SiLU. Position by position
// it cost more than its few multiply-adds (a per-position history shift, scalar code); here every
// position of the wave is convolved in place, last position first (so each one still reads the raw
// inputs before it), with the channels in the vector lanes.
//
// Every output is the reference's sum (ref/kda_ref.h): from +0, its taps in increasing order, each
// a multiply and then an add (no fused multiply-add). Channels never mix, so every Highway target
// and every split of the channels gives the same bits, for a wave and for one position at a time.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// Channels [c0, c1) of x [n, width], in place: the raw projections in, the convolved values out,
//   out[t][ch] = Σ_{j<taps} weight[ch·taps + j] · in(t − taps + 1 + j)[ch],
// where in(i) is raw row i of x for i >= 0 and row taps − 1 + i of `history` [taps − 1, width]
// (oldest first) for i < 0. Afterwards those channels of `history` hold the last taps − 1 raw
// inputs of the sequence (history rows, then x rows). `carry` is scratch of [taps − 1, width]
// floats (only channels [c0, c1) are used, so threads on disjoint channels may share it).
void ShortConvInPlace(const float* weight, int64_t taps, float* history, float* x, int64_t n,
                      int64_t width, int64_t c0, int64_t c1, float* carry);

}  // namespace deltafin::kernels
