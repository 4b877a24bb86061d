#include "model/moe.h"

#include <algorithm>
#include <cstring>

#include "kernels/matvec.h"
#include "model/linear.h"
#include "model/ops.h"

namespace deltafin {

void FfnScratch::Reserve(const ModelConfig& c, int64_t max_positions) {
  const int64_t n = max_positions, latent = c.routed_expert_hidden_size,
                inter = c.moe_intermediate_size, k = c.num_experts_per_token;
  const int64_t width = std::max(c.intermediate_size, c.shared_width());
  auto sz = [](int64_t v) { return static_cast<size_t>(v); };
  gate.Resize(sz(n * width));
  up.Resize(sz(n * width));
  router_logits.Resize(sz(n * c.num_experts));
  router_scratch.Resize(sz(2 * c.num_experts + c.num_expert_group));
  ids.Resize(sz(n * k));
  weights.Resize(sz(n * k));
  z.Resize(sz(n * latent));
  z_gathered.Resize(sz(n * latent));
  work.Resize(sz(n * k));
  work_begin.Resize(sz(c.num_experts + 1));
  work_cursor.Resize(sz(c.num_experts));
  needed.Resize(sz(std::min(n * k, c.num_experts)));
  mark.Resize(sz(c.num_experts));
  std::fill(mark.data(), mark.data() + mark.size(), -1);
  guess_ids.Resize(sz(n * k));
  guess_weights.Resize(sz(n * k));
  guess_union.Resize(sz(std::min(n * k, c.num_experts)));
  u1.Resize(sz(n * inter));
  u3.Resize(sz(n * inter));
  y_expert.Resize(sz(n * latent));
  y_slots.Resize(sz(n * k * latent));
  r.Resize(sz(n * latent));
  routed.Resize(sz(n * c.hidden_size));
}

uint64_t FfnScratch::Bytes() const {
  return BufferBytes(gate, up, router_logits, router_scratch, ids, weights, z, z_gathered, work,
                     work_begin, work_cursor, needed, mark, guess_ids, guess_weights, guess_union,
                     u1, u3, y_expert, y_slots, r, routed);
}

void GatedFfnForward(const ModelConfig& c, const GatedFfnWeights& w, const float* x, int64_t n,
                     FfnScratch* s, float* out) {
  const int64_t width = w.gate_proj.rows;
  Linear(w.gate_proj, x, n, s->gate.data());
  Linear(w.up_proj, x, n, s->up.data());
  SituInPlace(s->gate.data(), s->up.data(), n * width, c.situ_beta, c.situ_linear_beta);
  Linear(w.down_proj, s->gate.data(), n, out);
}

namespace {

// The distinct experts of ids[0..count) in order of first appearance, into out; returns how many.
// `mark` is [experts] of -1 on entry and on return.
int64_t ExpertUnion(const int32_t* ids, int64_t count, int32_t* mark, int32_t* out) {
  int64_t m = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (mark[ids[i]] < 0) {
      mark[ids[i]] = static_cast<int32_t>(m);
      out[m++] = ids[i];
    }
  }
  for (int64_t j = 0; j < m; ++j) mark[out[j]] = -1;
  return m;
}

// Puts experts[0..m) in file order (their span offsets in the layer's shard; ties by id), so that
// the reads of a layer's union, in batches, go through the file front to back. std::sort does not
// allocate.
void SortByFileOffset(const MoeWeights& w, int32_t* experts, int64_t m) {
  const uint64_t* offsets = w.expert_offsets.data();
  std::sort(experts, experts + m, [offsets](int32_t a, int32_t b) {
    return offsets[a] != offsets[b] ? offsets[a] < offsets[b] : a < b;
  });
}

// The work lists of one MoE layer: for the j-th expert of needed[0..m), the selections
// (t * top_k + slot) that chose it, in increasing order, at work[work_begin[j] ..
// work_begin[j + 1]). One pass over the routes instead of one per expert, which at a wave of
// thousands of positions and hundreds of experts would rival the experts' own work. `mark` is
// [experts] of -1 on entry and on return.
void BuildWorkLists(const int32_t* ids, int64_t count, const int32_t* needed, int64_t m,
                    FfnScratch* s) {
  int32_t* mark = s->mark.data();
  int32_t* begin = s->work_begin.data();
  int32_t* cursor = s->work_cursor.data();
  for (int64_t j = 0; j < m; ++j) mark[needed[j]] = static_cast<int32_t>(j);
  std::fill(begin, begin + m + 1, 0);
  for (int64_t i = 0; i < count; ++i) begin[mark[ids[i]] + 1] += 1;
  for (int64_t j = 0; j < m; ++j) {
    begin[j + 1] += begin[j];
    cursor[j] = begin[j];
  }
  for (int64_t i = 0; i < count; ++i)
    s->work[static_cast<size_t>(cursor[mark[ids[i]]]++)] = static_cast<int32_t>(i);
  for (int64_t j = 0; j < m; ++j) mark[needed[j]] = -1;
}

}  // namespace

void PrefetchGuess(const ModelConfig& c, const MoeWeights& next, int64_t next_layer,
                   const ExpertAccess& access, const float* x, int64_t n, FfnScratch* s) {
  const int64_t k = c.num_experts_per_token;
  const RouterConfig rc{c.num_experts,      k,
                        c.num_expert_group, c.topk_group,
                        c.moe_renormalize,  c.routed_scaling_factor};
  Linear(next.router, x, n, s->router_logits.data());
  for (int64_t t = 0; t < n; ++t) {
    Route(rc, s->router_logits.data() + t * c.num_experts, next.correction_bias,
          s->router_scratch.data(), s->guess_ids.data() + t * k, s->guess_weights.data() + t * k);
  }
  const int64_t m = ExpertUnion(s->guess_ids.data(), n * k, s->mark.data(), s->guess_union.data());
  // In file order, like the layer's own batches: when the guesses are more than the streamer
  // queues, those it takes are the ones the layer's first batch will pin.
  SortByFileOffset(next, s->guess_union.data(), m);
  Charge(access.timer, OpFamily::kRouter);
  access.source->Prefetch(next_layer, {s->guess_union.data(), static_cast<size_t>(m)},
                          access.stats);
  Charge(access.timer, OpFamily::kExpertIoWait);
}

Status MoeForward(const ModelConfig& c, const MoeWeights& w, int64_t layer,
                  const ExpertAccess& access, const float* x, int64_t n, FfnScratch* s,
                  float* out) {
  const ExpertLayout& layout = *access.layout;
  const int64_t hidden = c.hidden_size, latent = c.routed_expert_hidden_size,
                inter = c.moe_intermediate_size, k = c.num_experts_per_token,
                n_experts = c.num_experts;
  const RouterConfig rc{
      n_experts, k, c.num_expert_group, c.topk_group, c.moe_renormalize, c.routed_scaling_factor};
  Linear(w.router, x, n, s->router_logits.data());
  for (int64_t t = 0; t < n; ++t) {
    Route(rc, s->router_logits.data() + t * n_experts, w.correction_bias, s->router_scratch.data(),
          s->ids.data() + t * k, s->weights.data() + t * k);
  }
  const int64_t m = ExpertUnion(s->ids.data(), n * k, s->mark.data(), s->needed.data());
  SortByFileOffset(w, s->needed.data(), m);
  BuildWorkLists(s->ids.data(), n * k, s->needed.data(), m, s);
  OpTimer* const timer = access.timer;
  Charge(timer, OpFamily::kRouter);

  // Run each expert once over every position that selected it (a prefill wave: each expert of
  // the layer is read once for the whole wave), in file order, in batches the source can hold
  // (the union never has to fit in RAM), each expert as soon as its bytes are in RAM (a streamed
  // source hands out cached experts while the misses load). While a batch computes, the next
  // batch's first experts are queued as guesses, so the disk does not idle at batch boundaries.
  // The per-slot outputs are combined in selection order below, so the order experts arrive in
  // does not matter.
  const auto latent_bytes = static_cast<size_t>(latent) * sizeof(float);
  ExpertSource* source = access.source;
  const int64_t batch = source->max_batch();
  // Time spent in the source is I/O wait unless its experts are all in RAM already.
  const OpFamily wait = source->always_ready() ? OpFamily::kRoutedExperts : OpFamily::kExpertIoWait;
  for (int64_t b0 = 0; b0 < m; b0 += batch) {
    const int64_t b1 = std::min(m, b0 + batch);
    DF_RETURN_IF_ERROR(
        source->Begin(layer, {s->needed.data() + b0, static_cast<size_t>(b1 - b0)}, access.stats));
    Charge(timer, wait);
    if (b1 < m && source->takes_guesses()) {
      source->Prefetch(layer,
                       {s->needed.data() + b1, static_cast<size_t>(std::min(m, b1 + batch) - b1)},
                       access.stats);
      Charge(timer, wait);
    }
    if (b0 == 0) {
      if (access.next != nullptr && source->takes_guesses()) {
        PrefetchGuess(c, *access.next, layer + 1, access, x, n, s);
      }
      // The shared experts and the latent projection need no routed expert: they run while the
      // first misses load.
      GatedFfnForward(c, w.shared, x, n, s, out);
      Charge(timer, OpFamily::kSharedExperts);
      Linear(w.latent_down, x, n, s->z.data());
      Charge(timer, OpFamily::kLatentProjections);
    }
    for (int64_t done = b0; done < b1; ++done) {
      Charge(timer, OpFamily::kRoutedExperts);
      auto ready = source->WaitAny(access.stats);
      Charge(timer, wait);
      if (!ready.ok()) {
        source->End();
        return ready.status();
      }
      const int64_t j = b0 + ready->index;
      const uint8_t* span = ready->data;
      const int32_t* list = s->work.data() + s->work_begin[static_cast<size_t>(j)];
      const int64_t members =
          s->work_begin[static_cast<size_t>(j + 1)] - s->work_begin[static_cast<size_t>(j)];
      for (int64_t q = 0; q < members; ++q) {
        std::memcpy(s->z_gathered.data() + q * latent, s->z.data() + (list[q] / k) * latent,
                    latent_bytes);
      }
      kernels::MatMulMxfp4(span + layout.w1_packed, span + layout.w1_scale, inter, latent,
                           s->z_gathered.data(), members, s->u1.data());
      kernels::MatMulMxfp4(span + layout.w3_packed, span + layout.w3_scale, inter, latent,
                           s->z_gathered.data(), members, s->u3.data());
      SituInPlace(s->u1.data(), s->u3.data(), members * inter, c.situ_beta, c.situ_linear_beta);
      kernels::MatMulMxfp4(span + layout.w2_packed, span + layout.w2_scale, latent, inter,
                           s->u1.data(), members, s->y_expert.data());
      for (int64_t q = 0; q < members; ++q) {
        std::memcpy(s->y_slots.data() + static_cast<int64_t>(list[q]) * latent,
                    s->y_expert.data() + q * latent, latent_bytes);
      }
    }
    Charge(timer, OpFamily::kRoutedExperts);
    source->End();
    Charge(timer, wait);
  }

  // Combine in selection order: acc += w_e·y_e (docs/MODEL.md §6.1), then the latent norm.
  for (int64_t t = 0; t < n; ++t) {
    float* r = s->r.data() + t * latent;
    std::fill(r, r + latent, 0.0f);
    for (int64_t slot = 0; slot < k; ++slot) {
      const float we = s->weights[static_cast<size_t>(t * k + slot)];
      const float* y = s->y_slots.data() + (t * k + slot) * latent;
      for (int64_t d = 0; d < latent; ++d) r[d] += y[d] * we;
    }
    Charge(timer, OpFamily::kRoutedExperts);
    if (c.latent_moe_use_norm) RmsNorm(r, w.latent_norm.data(), latent, c.rms_norm_eps, r);
    Charge(timer, OpFamily::kLatentProjections);
  }
  Linear(w.latent_up, s->r.data(), n, s->routed.data());
  Charge(timer, OpFamily::kLatentProjections);
  if (m == 0) {  // no expert ran (only when n is 0): the shared experts still give `out`
    GatedFfnForward(c, w.shared, x, n, s, out);
    Charge(timer, OpFamily::kSharedExperts);
  }
  for (int64_t i = 0; i < n * hidden; ++i) out[i] = s->routed[static_cast<size_t>(i)] + out[i];
  Charge(timer, OpFamily::kRoutedExperts);
  return Status::Ok();
}

}  // namespace deltafin
