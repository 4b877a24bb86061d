// Multi-head Latent Attention with NoPE and an output gate (docs/MODEL.md §4.5), absorbed form.
//
// The cache keeps, per position, only the normalised KV latent c_kv [kv_lora] and the shared,
// unrotated rope-part key r [rope] (55 KB/token for K3 instead of 2.8 MB expanded). A score is
// [q_lat_h | q_rope_h]·[c_kv | r] with q_lat_h = W_UK_hᵀ·q_nope_h, one fused multiply-add chain
// over the kv_lora + rope dimensions; values are formed in latent space and expanded once per head
// with W_UV_h. Algebraically identical to the expanded form; rounding
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

// Working buffers. A wave's positions are attended side by side in blocks of up to `block`
// consecutive positions, a block on one worker slot (a slot per compute thread), against the
// cached keys transposed once for the whole wave (keys_t); decoding and short waves attend one
// position at a time on slot 0 with each product split over the threads (q_t, scores_t). Both
// give each score the same chain of fused multiply-adds (MlaForward).
struct MlaScratch {
  AlignedBuffer<float> q_low;   // [n, q_lora]
  AlignedBuffer<float> q;       // [n, heads*(nope+rope)]
  AlignedBuffer<float> kv;      // [n, kv_lora+rope]
  AlignedBuffer<float> gate;    // [n, heads*v]
  AlignedBuffer<float> out;     // [n, heads*v]
  AlignedBuffer<float> q_cat;   // [slots, block·heads, kv_lora+rope] absorbed query | rope query
  AlignedBuffer<float> scores;  // [slots, block·heads, capacity] (a slot: [block·heads, stride])
  AlignedBuffer<float> ctx;     // [slots, block·heads, kv_lora] attention-weighted latents
  AlignedBuffer<float> keys_t;  // [kv_lora+rope, capacity] cached latent | rope keys, transposed
  AlignedBuffer<float> q_t;     // [kv_lora+rope, padded heads] one position's q_cat, transposed
  AlignedBuffer<float> scores_t;  // [capacity, padded heads] one position's scores, position-major
  int64_t slots = 0;
  int64_t block = 1;  // positions attended together on a slot (MlaBlockPositions)
  int64_t capacity = 0;
  // `slots`: compute threads that may attend positions at once (DefaultThreadCount()).
  void Reserve(const ModelConfig& c, int64_t max_positions, int64_t capacity, int64_t slots);
  uint64_t Bytes() const {
    return BufferBytes(q_low, q, kv, gate, out, q_cat, scores, ctx, keys_t, q_t, scores_t);
  }
};

// Positions of a wave attended together on one slot: each run of cached keys and latents is then
// read once for all of them while it is in cache (at long waves the latent cache, 4 MB a layer for
// the bench preset at 8k positions, no longer fits the core's cache, and one position at a time
// read it twice per position). Bounded by the slot's scores, block·heads·capacity floats, so long
// contexts attend fewer positions together.
int64_t MlaBlockPositions(const ModelConfig& c, int64_t capacity);

// Floats MlaScratch::Reserve holds beyond its per-position buffers (for the memory plan).
int64_t MlaScratchFixedFloats(const ModelConfig& c, int64_t capacity, int64_t slots);

// x: [n, H] normalised inputs of the next n positions; appends them to the cache (each position
// attends to the cached past and itself); out: [n, H]. Fails if the cache would overflow.
// `timer` (optional) is charged the projections and the attention separately.
Status MlaForward(const ModelConfig& c, const MlaWeights& w, const float* x, int64_t n,
                  MlaCache* cache, MlaScratch* scratch, float* out, OpTimer* timer = nullptr);

}  // namespace deltafin
