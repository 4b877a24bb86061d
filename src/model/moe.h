// Feed-forward blocks: the gated SiTU MLP (dense layer 0 and the fused shared experts) and the
// LatentMoE block of layers ≥ first_k_dense_replace (docs/MODEL.md §4.6–§4.7).
//
// LatentMoE for one position: route on x; z = latent_down·x once; each selected expert runs
// y_e = W2·SiTU(W1·z, W3·z) in the latent space with MXFP4 weights; r = Σ w_e·y_e in selection
// order; RMSNorm(r); routed = latent_up·r; plus the shared experts on the full-width x.
// For n positions each expert in the union of their selections runs once over all positions that
// chose it (the batched products read the expert's bytes once); the per-position combine order is
// unchanged, so a prefill chunk and token-by-token decode give identical results.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "deltafin/engine.h"
#include "model/op_timer.h"
#include "model/reserved_bytes.h"
#include "weights/config.h"
#include "weights/expert_source.h"
#include "weights/weights.h"

namespace deltafin {

// Route's scratch for one position (model/ops.h): [2*experts + groups].
inline int64_t RouterScratchFloats(const ModelConfig& c) {
  return 2 * c.num_experts + c.num_expert_group;
}

struct FfnScratch {
  // Gated MLP
  AlignedBuffer<float> gate, up;  // [n, max(dense width, shared width)]
  // Router
  AlignedBuffer<float> router_logits;   // [n, experts]
  AlignedBuffer<float> router_scratch;  // [threads, RouterScratchFloats]: one slice per thread
  AlignedBuffer<int32_t> ids;           // [n, top_k] selection order
  AlignedBuffer<float> weights;         // [n, top_k]
  // Latent experts
  AlignedBuffer<float> z;           // [n, latent]
  AlignedBuffer<float> z_gathered;  // [n, latent] rows of the positions routed to one expert
  // Work lists: the selections (t*top_k + slot) of each expert of `needed`, grouped by expert.
  AlignedBuffer<int32_t> work;         // [n*top_k]
  AlignedBuffer<int32_t> work_row;     // [n*top_k] selection t*top_k + slot -> its index in work
  AlignedBuffer<int32_t> work_begin;   // [experts + 1] expert j's list starts at work_begin[j]
  AlignedBuffer<int32_t> work_cursor;  // [experts]
  AlignedBuffer<int32_t> needed;       // [min(n*top_k, experts)] the union, in file order
  AlignedBuffer<int32_t> mark;         // [experts] position in `needed`, -1 outside a call
  AlignedBuffer<int32_t> guess_ids;    // [n, top_k] the next layer's router on this input
  AlignedBuffer<float> guess_weights;  // [n, top_k]
  AlignedBuffer<int32_t> guess_union;  // [min(n*top_k, experts)]
  AlignedBuffer<float> u1, u3;         // [n, inter]
  // [n*top_k, latent]: expert outputs in work-list order (expert j's rows at work_begin[j]..),
  // written by the products directly; the combine finds selection i's row at work_row[i].
  AlignedBuffer<float> y_work;
  AlignedBuffer<float> r;       // [n, latent]
  AlignedBuffer<float> routed;  // [n, H]
  void Reserve(const ModelConfig& c, int64_t max_positions);
  uint64_t Bytes() const;  // reserved, for Session::ReservedBytes
};

// out[n, H] = down·SiTU(gate·x, up·x). Charges nothing: the caller knows its family.
void GatedFfnForward(const ModelConfig& c, const GatedFfnWeights& w, const float* x, int64_t n,
                     FfnScratch* s, float* out);

// Where a MoE layer's experts come from, for one forward pass.
struct ExpertAccess {
  const ExpertLayout* layout = nullptr;
  ExpertSource* source = nullptr;  // the experts' spans (weights/expert_source.h)
  // Router lookahead: the next MoE layer, whose router is applied to this layer's input to guess
  // (and prefetch) its experts while this layer computes. Null: no lookahead.
  const MoeWeights* next = nullptr;
  SessionStats* stats = nullptr;
  // Charged the router, latent projections, shared and routed experts and expert I/O separately
  // (optional). The caller charges its own work before the call.
  OpTimer* timer = nullptr;
  // Read between routed experts: when it holds true the layer stops and returns kInterrupted
  // (Session::SetInterrupt). Null: never.
  const std::atomic<bool>* interrupt = nullptr;
};

// The message of the Status a forward pass returns when its interrupt flag was raised.
inline constexpr const char* kInterrupted = "interrupted";

// Routes x [n, H] with MoE layer `next_layer`'s router and queues reads of the experts chosen
// (a guess: the real input of that layer is not known yet). Uses the router scratch of s.
void PrefetchGuess(const ModelConfig& c, const MoeWeights& next, int64_t next_layer,
                   const ExpertAccess& access, const float* x, int64_t n, FfnScratch* s);

// out[n, H] = LatentMoE(x) + shared(x) for MoE layer `layer`. Routes are left in s->ids /
// s->weights; expert loads are counted in access.stats. Fails when the source cannot deliver an
// expert (a failed read, or a stream install that cannot fetch it).
Status MoeForward(const ModelConfig& c, const MoeWeights& w, int64_t layer,
                  const ExpertAccess& access, const float* x, int64_t n, FfnScratch* s, float* out);

}  // namespace deltafin
