#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/matvec.h"
#include "model/linear.h"
#include "model/ops.h"

namespace deltafin {

namespace {
// The HF reference builds the two LoRA norms without an eps argument: class default 1e-6
// (docs/MODEL.md §4.2, §6.3 #2). Every other norm uses rms_norm_eps.
constexpr float kLoraNormEps = 1e-6f;
}  // namespace

void MlaCache::Init(const ModelConfig& c, int64_t capacity_positions) {
  capacity = capacity_positions;
  length = 0;
  latent.Resize(static_cast<size_t>(capacity * c.kv_lora_rank));
  rope.Resize(static_cast<size_t>(capacity * c.qk_rope_head_dim));
}

void MlaScratch::Reserve(const ModelConfig& c, int64_t max_positions, int64_t capacity_positions,
                         int64_t worker_slots) {
  const int64_t n = max_positions, heads = c.mla_heads;
  slots = worker_slots < 1 ? 1 : worker_slots;
  capacity = capacity_positions;
  q_low.Resize(static_cast<size_t>(n * c.q_lora_rank));
  q.Resize(static_cast<size_t>(n * heads * c.mla_q_head_dim()));
  kv.Resize(static_cast<size_t>(n * (c.kv_lora_rank + c.qk_rope_head_dim)));
  gate.Resize(static_cast<size_t>(n * heads * c.v_head_dim));
  out.Resize(static_cast<size_t>(n * heads * c.v_head_dim));
  q_lat.Resize(static_cast<size_t>(slots * heads * c.kv_lora_rank));
  q_rope.Resize(static_cast<size_t>(slots * heads * c.qk_rope_head_dim));
  scores.Resize(static_cast<size_t>(slots * heads * capacity));
  rope_part.Resize(static_cast<size_t>(slots * heads * kMlaScoreBlock));
  ctx.Resize(static_cast<size_t>(slots * heads * c.kv_lora_rank));
}

int64_t MlaScratchFixedFloats(const ModelConfig& c, int64_t capacity, int64_t slots) {
  return slots * c.mla_heads *
         (2 * c.kv_lora_rank + c.qk_rope_head_dim + capacity + kMlaScoreBlock);
}

namespace {

// The attention of wave position t (cache position start + t) for every head, on worker slot
// `slot`: absorbed queries, scores against every visible cached latent and rope key (all heads
// in one product per block of positions), softmax, the weighted latent sum (one transposed
// product for all heads), each head's value expansion and output gate. Each score is exactly
// DotF32(q_lat, latent) + DotF32(q_rope, rope) scaled, and each weighted sum runs in increasing
// position, whichever slot, wave size or thread count: waves and decoding agree bit for bit.
void AttendPosition(const ModelConfig& c, const MlaWeights& w, const MlaCache& cache, MlaScratch* s,
                    int64_t slot, int64_t start, int64_t t) {
  const int64_t heads = c.mla_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim,
                vdim = c.v_head_dim, lora = c.kv_lora_rank, qdim = c.mla_q_head_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(qdim));
  const int64_t row_stride = nope + vdim;  // kv_b_proj rows per head
  const int64_t visible = start + t + 1;
  float* q_lat = s->q_lat.data() + slot * heads * lora;
  float* q_rope = s->q_rope.data() + slot * heads * rope;
  float* scores = s->scores.data() + slot * heads * s->capacity;  // [heads, visible]
  float* part = s->rope_part.data() + slot * heads * kMlaScoreBlock;
  float* ctx = s->ctx.data() + slot * heads * lora;
  // kv_b_proj is read in absorbed form (per-head sub-blocks, one of them transposed), so it stays
  // BF16 even with the row-int8 spine: a departure from docs/MODEL.md §3.6 that can only make int8
  // mode more accurate (docs/INT8.md).
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = s->q.data() + t * heads * qdim + h * qdim;
    const uint16_t* w_uk = w.kv_b_proj.data + (h * row_stride) * lora;  // [nope, lora]
    kernels::MatTVecBf16(w_uk, nope, lora, qh, q_lat + h * lora);
    std::memcpy(q_rope + h * rope, qh + nope, static_cast<size_t>(rope) * sizeof(float));
  }
  for (int64_t p0 = 0; p0 < visible; p0 += kMlaScoreBlock) {
    const int64_t m = visible - p0 < kMlaScoreBlock ? visible - p0 : kMlaScoreBlock;
    kernels::MatMulF32(cache.latent.data() + p0 * lora, m, lora, q_lat, heads, scores + p0,
                       visible);
    kernels::MatMulF32(cache.rope.data() + p0 * rope, m, rope, q_rope, heads, part, m);
    for (int64_t h = 0; h < heads; ++h) {
      float* sh = scores + h * visible + p0;
      const float* ph = part + h * m;
      for (int64_t i = 0; i < m; ++i) sh[i] = (sh[i] + ph[i]) * scale;
    }
  }
  for (int64_t h = 0; h < heads; ++h) kernels::SoftmaxInPlace(scores + h * visible, visible);
  kernels::MatTMulF32(cache.latent.data(), visible, lora, scores, heads, ctx);
  float* o = s->out.data() + t * heads * vdim;
  for (int64_t h = 0; h < heads; ++h) {
    const uint16_t* w_uv = w.kv_b_proj.data + (h * row_stride + nope) * lora;  // [v, lora]
    float* oh = o + h * vdim;
    kernels::MatVecBf16(w_uv, vdim, lora, ctx + h * lora, oh);
    const float* gate = s->gate.data() + t * heads * vdim + h * vdim;  // σ(g_proj·x) already
    for (int64_t d = 0; d < vdim; ++d) oh[d] *= gate[d];
  }
}

}  // namespace

Status MlaForward(const ModelConfig& c, const MlaWeights& w, const float* x, int64_t n,
                  MlaCache* cache, MlaScratch* s, float* out, OpTimer* timer) {
  if (cache->length + n > cache->capacity) {
    return Status::Error("context full: " + std::to_string(cache->length + n) +
                         " positions exceed the session capacity of " +
                         std::to_string(cache->capacity) + " (raise --ctx)");
  }
  const int64_t rope = c.qk_rope_head_dim, lora = c.kv_lora_rank, kv_width = lora + rope;
  Linear(w.q_a_proj, x, n, s->q_low.data());
  for (int64_t t = 0; t < n; ++t) {
    float* ql = s->q_low.data() + t * c.q_lora_rank;
    RmsNorm(ql, w.q_a_norm.data(), c.q_lora_rank, kLoraNormEps, ql);
  }
  Linear(w.q_b_proj, s->q_low.data(), n, s->q.data());
  Linear(w.kv_a_proj, x, n, s->kv.data());
  Linear(w.g_proj, x, n, s->gate.data());
  kernels::SigmoidInPlace(s->gate.data(), n * c.mla_heads * c.v_head_dim);  // the output gate

  // Append all n positions first: position t attends to cache[0 .. start+t] (causal).
  const int64_t start = cache->length;
  for (int64_t t = 0; t < n; ++t) {
    const float* kv = s->kv.data() + t * kv_width;
    float* lat = cache->latent.data() + (start + t) * lora;
    RmsNorm(kv, w.kv_a_norm.data(), lora, kLoraNormEps, lat);
    std::memcpy(cache->rope.data() + (start + t) * rope, kv + lora,
                static_cast<size_t>(rope) * sizeof(float));
  }
  cache->length = start + n;
  Charge(timer, OpFamily::kMlaProjections);

  ThreadPool& pool = DefaultPool();
  const int64_t workers = std::min<int64_t>({pool.num_threads(), s->slots, n});
  if (workers <= 1) {
    // One position (decode), or one thread: the kernels split each product over the pool.
    for (int64_t t = 0; t < n; ++t) AttendPosition(c, w, *cache, s, 0, start, t);
  } else {
    // Positions side by side, interleaved (position t on worker t % workers) so that the causal
    // work, which grows with t, is shared evenly; each worker's kernel calls run on its thread.
    struct Ctx {
      const ModelConfig* c;
      const MlaWeights* w;
      const MlaCache* cache;
      MlaScratch* s;
      int64_t start, n, workers;
    } ctx{&c, &w, cache, s, start, n, workers};
    pool.Run(
        [](void* p, int index, int) {
          const Ctx& a = *static_cast<const Ctx*>(p);
          if (index >= a.workers) return;
          for (int64_t t = index; t < a.n; t += a.workers) {
            AttendPosition(*a.c, *a.w, *a.cache, a.s, index, a.start, t);
          }
        },
        &ctx);
  }
  Charge(timer, OpFamily::kMlaAttention);
  Linear(w.o_proj, s->out.data(), n, out);
  Charge(timer, OpFamily::kMlaProjections);
  return Status::Ok();
}

}  // namespace deltafin
