// Multi-head Latent Attention with NoPE and an output gate (docs/MODEL.md §4.5), absorbed form.
//
// The cache keeps, per position, only the normalised KV latent c_kv [kv_lora] and the shared,
// unrotated rope-part key r [rope] (55 KB/token for K3 instead of 2.8 MB expanded). Scores use
// q_lat_h = W_UK_hᵀ·q_nope_h against c_kv, plus q_rope_h·r; values are formed in latent space and
// expanded once per head with W_UV_h. Algebraically identical to the expanded form; rounding
// differs at ~1e-8 (accepted by docs/MODEL.md §6.3 #12).
#pragma once

#include <cstdint>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "model/op_timer.h"
#include "model/reserved_bytes.h"
#include "weights/config.h"
#include "weights/weights.h"

namespace deltafin {

struct MlaCache {
  AlignedBuffer<float> latent;  // [capacity, kv_lora] RMS-normalised c_kv
  AlignedBuffer<float> rope;    // [capacity, rope]    un-normalised, unrotated shared key part
  int64_t length = 0;
  int64_t capacity = 0;
  void Init(const ModelConfig& c, int64_t capacity_positions);
  uint64_t Bytes() const { return BufferBytes(latent, rope); }
};

// Working buffers. The attention of one position runs on one worker slot (a slot per compute
// thread, so a wave's positions are attended side by side); q_lat, q_rope, scores, rope_part and
// ctx hold `slots` slots each.
struct MlaScratch {
  AlignedBuffer<float> q_low;      // [n, q_lora]
  AlignedBuffer<float> q;          // [n, heads*(nope+rope)]
  AlignedBuffer<float> kv;         // [n, kv_lora+rope]
  AlignedBuffer<float> gate;       // [n, heads*v]
  AlignedBuffer<float> out;        // [n, heads*v]
  AlignedBuffer<float> q_lat;      // [slots, heads, kv_lora] absorbed queries
  AlignedBuffer<float> q_rope;     // [slots, heads, rope]    rope parts of the queries, packed
  AlignedBuffer<float> scores;     // [slots, heads, capacity] (a slot: [heads, visible] packed)
  AlignedBuffer<float> rope_part;  // [slots, heads, kMlaScoreBlock] rope-part scores of a block
  AlignedBuffer<float> ctx;        // [slots, heads, kv_lora] attention-weighted latents
  int64_t slots = 0;
  int64_t capacity = 0;
  // `slots`: compute threads that may attend positions at once (DefaultThreadCount()).
  void Reserve(const ModelConfig& c, int64_t max_positions, int64_t capacity, int64_t slots);
  uint64_t Bytes() const {
    return BufferBytes(q_low, q, kv, gate, out, q_lat, q_rope, scores, rope_part, ctx);
  }
};

// Cached positions whose scores are formed per kernel call (the rope part's buffer size).
inline constexpr int64_t kMlaScoreBlock = 256;

// Floats MlaScratch::Reserve holds beyond its per-position buffers (for the memory plan).
int64_t MlaScratchFixedFloats(const ModelConfig& c, int64_t capacity, int64_t slots);

// x: [n, H] normalised inputs of the next n positions; appends them to the cache (each position
// attends to the cached past and itself); out: [n, H]. Fails if the cache would overflow.
// `timer` (optional) is charged the projections and the attention separately.
Status MlaForward(const ModelConfig& c, const MlaWeights& w, const float* x, int64_t n,
                  MlaCache* cache, MlaScratch* scratch, float* out, OpTimer* timer = nullptr);

}  // namespace deltafin
