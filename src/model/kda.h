// Kimi Delta Attention (docs/MODEL.md §4.4): the recurrent attention of 69 of K3's 93 layers.
//
// Per position and head: q, k, v projections go through a causal depthwise conv (width K, tap K-1
// = current position) and SiLU; q and k are l2-normalised (q also scaled by 1/sqrt(head_dim)); the
// state S[k][v] (fp32, per head) decays row-wise by exp(g), takes a delta-rule write
// S += β·k̂·(v − k̂ᵀS)ᵀ, and is read with the updated state: o = q̂ᵀS. The output is RMS-normalised
// per head (one shared weight), gated by σ(g_proj·x), and projected back to H.
#pragma once

#include <cstdint>

#include "base/aligned_buffer.h"
#include "model/op_timer.h"
#include "model/reserved_bytes.h"
#include "weights/config.h"
#include "weights/weights.h"

namespace deltafin {

// Per-sequence state of one KDA layer; constant size whatever the sequence length.
struct KdaState {
  AlignedBuffer<float> conv_q, conv_k, conv_v;  // [K-1, P] last raw projections, oldest first
  AlignedBuffer<float> recurrent;               // [heads, head_dim(k), head_dim(v)]  S[h][k][v]
  void Init(const ModelConfig& c);
  void Clear();
  uint64_t Bytes() const;  // reserved, for Session::ReservedBytes
};

// Working memory for up to `max_positions` positions, reserved once per session.
struct KdaScratch {
  AlignedBuffer<float> q, k, v, gate, decay, out;  // [n, P]
  AlignedBuffer<float> f_low;                      // [n, head_dim]
  AlignedBuffer<float> beta;                       // [n, heads]
  AlignedBuffer<float> window;  // [max(K-1, 1), P] the convolutions' next history, then δ [P]
  void Reserve(const ModelConfig& c, int64_t max_positions);
  uint64_t Bytes() const;
};

// How a speculative verify pass (model/forward.h) keeps what it needs to roll a KDA layer back to
// any of its rows. Both are bit-exact; docs/SPECULATION.md has the measured trade-off.
//  kSnapshot: after every row but the last, the recurrent state is copied ([rows-1] states).
//  kReplay:   the state before the pass is copied once; every row's recurrence inputs (k̂, v,
//             decay, β) are stored, and Commit replays the accepted rows from the copy with the
//             same update routine the forward pass uses.
// Either way the raw q/k/v projections of every row and the conv history before the pass are
// kept, and the conv history is rebuilt from them.
enum class KdaRollbackMode : uint8_t { kSnapshot, kReplay };

struct KdaRollback {
  KdaRollbackMode mode = KdaRollbackMode::kReplay;
  int64_t rows = 0;                             // rows of the pending verify pass (0: none)
  AlignedBuffer<float> conv_q, conv_k, conv_v;  // [K-1, P] conv history before the pass
  AlignedBuffer<float> raw;                     // [max_rows, 3, P] raw q, k, v projections
  AlignedBuffer<float> base;                    // kReplay: [heads, dk, dv] state before the pass
  AlignedBuffer<float> inputs;                  // kReplay: [max_rows, 3P + heads] k̂ v g β
  AlignedBuffer<float> delta;                   // kReplay: [dv] δ of the replayed update
  AlignedBuffer<float> snapshots;               // kSnapshot: [max_rows - 1, heads, dk, dv]
  void Reserve(const ModelConfig& c, KdaRollbackMode mode, int64_t max_rows);
  uint64_t Bytes() const;
  // Bytes reserved per verify row (for the memory report).
  static uint64_t BytesPerRow(const ModelConfig& c, KdaRollbackMode mode);
};

// Puts `state` where it was after row `accepted` (0-based) of the pending verify pass.
void KdaRollbackTo(const ModelConfig& c, int64_t accepted, KdaRollback* rb, KdaState* state);

// x: [n, H] normalised attention inputs of consecutive positions; out: [n, H]. `timer` (optional)
// is charged the projections, convolutions and recurrence separately. `rollback`, when set, records
// what KdaRollbackTo needs (a verify pass: n <= its reserved rows).
void KdaForward(const ModelConfig& c, const KdaWeights& w, const float* x, int64_t n,
                KdaState* state, KdaScratch* scratch, float* out, OpTimer* timer = nullptr,
                KdaRollback* rollback = nullptr);

}  // namespace deltafin
