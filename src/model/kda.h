// Kimi Delta Attention (spec §4.4): the recurrent attention of 69 of K3's 93 layers.
//
// Per position and head: q, k, v projections go through a causal depthwise conv (width K, tap K-1
// = current position) and SiLU; q and k are l2-normalised (q also scaled by 1/sqrt(head_dim)); the
// state S[k][v] (fp32, per head) decays row-wise by exp(g), takes a delta-rule write
// S += β·k̂·(v − k̂ᵀS)ᵀ, and is read with the updated state: o = q̂ᵀS. The output is RMS-normalised
// per head (one shared weight), gated by σ(g_proj·x), and projected back to H.
#pragma once

#include <cstdint>

#include "base/aligned_buffer.h"
#include "model/config.h"
#include "model/op_timer.h"
#include "model/weights.h"

namespace deltafin {

// Per-sequence state of one KDA layer; constant size whatever the sequence length.
struct KdaState {
  AlignedBuffer<float> conv_q, conv_k, conv_v;  // [K-1, P] last raw projections, oldest first
  AlignedBuffer<float> recurrent;               // [heads, head_dim(k), head_dim(v)]  S[h][k][v]
  void Init(const ModelConfig& c);
  void Clear();
};

// Working memory for up to `max_positions` positions, reserved once per session.
struct KdaScratch {
  AlignedBuffer<float> q, k, v, gate, decay, out;  // [n, P]
  AlignedBuffer<float> f_low;                      // [n, head_dim]
  AlignedBuffer<float> beta;                       // [n, heads]
  AlignedBuffer<float> window;                     // [P] conv accumulation
  void Reserve(const ModelConfig& c, int64_t max_positions);
};

// x: [n, H] normalised attention inputs of consecutive positions; out: [n, H]. `timer` (optional)
// is charged the projections, convolutions and recurrence separately.
void KdaForward(const ModelConfig& c, const KdaWeights& w, const float* x, int64_t n,
                KdaState* state, KdaScratch* scratch, float* out, OpTimer* timer = nullptr);

}  // namespace deltafin
