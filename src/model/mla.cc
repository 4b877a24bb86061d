#include "model/mla.h"

#include <cmath>
#include <cstring>

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

void MlaScratch::Reserve(const ModelConfig& c, int64_t max_positions, int64_t capacity) {
  const int64_t n = max_positions;
  q_low.Resize(static_cast<size_t>(n * c.q_lora_rank));
  q.Resize(static_cast<size_t>(n * c.mla_heads * c.mla_q_head_dim()));
  kv.Resize(static_cast<size_t>(n * (c.kv_lora_rank + c.qk_rope_head_dim)));
  gate.Resize(static_cast<size_t>(n * c.mla_heads * c.v_head_dim));
  out.Resize(static_cast<size_t>(n * c.mla_heads * c.v_head_dim));
  q_lat.Resize(static_cast<size_t>(c.kv_lora_rank));
  ctx.Resize(static_cast<size_t>(c.kv_lora_rank));
  scores.Resize(static_cast<size_t>(capacity));
}

Status MlaForward(const ModelConfig& c, const MlaWeights& w, const float* x, int64_t n,
                  MlaCache* cache, MlaScratch* s, float* out, OpTimer* timer) {
  if (cache->length + n > cache->capacity) {
    return Status::Error("context full: " + std::to_string(cache->length + n) +
                         " positions exceed the session capacity of " +
                         std::to_string(cache->capacity) + " (raise --ctx)");
  }
  const int64_t heads = c.mla_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim,
                vdim = c.v_head_dim, lora = c.kv_lora_rank, qdim = c.mla_q_head_dim(),
                kv_width = lora + rope;
  Linear(w.q_a_proj, x, n, s->q_low.data());
  for (int64_t t = 0; t < n; ++t) {
    float* ql = s->q_low.data() + t * c.q_lora_rank;
    RmsNorm(ql, w.q_a_norm.data(), c.q_lora_rank, kLoraNormEps, ql);
  }
  Linear(w.q_b_proj, s->q_low.data(), n, s->q.data());
  Linear(w.kv_a_proj, x, n, s->kv.data());
  Linear(w.g_proj, x, n, s->gate.data());

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

  const float scale = 1.0f / std::sqrt(static_cast<float>(qdim));
  const int64_t row_stride = nope + vdim;  // kv_b_proj rows per head
  // kv_b_proj is read in absorbed form (per-head sub-blocks, one of them transposed), so it stays
  // BF16 even with the row-int8 spine: a departure from docs/MODEL.md §3.6 that can only make int8
  // mode more accurate (docs/INT8.md).
  for (int64_t t = 0; t < n; ++t) {
    const int64_t visible = start + t + 1;
    float* o = s->out.data() + t * heads * vdim;
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = s->q.data() + t * heads * qdim + h * qdim;
      const uint16_t* w_uk = w.kv_b_proj.data + (h * row_stride) * lora;         // [nope, lora]
      const uint16_t* w_uv = w.kv_b_proj.data + (h * row_stride + nope) * lora;  // [v, lora]
      kernels::MatTVecBf16(w_uk, nope, lora, qh, s->q_lat.data());
      float* scores = s->scores.data();
      for (int64_t p = 0; p < visible; ++p) {
        const float content =
            kernels::DotF32(s->q_lat.data(), cache->latent.data() + p * lora, lora);
        const float positional = kernels::DotF32(qh + nope, cache->rope.data() + p * rope, rope);
        scores[p] = (content + positional) * scale;
      }
      SoftmaxInPlace(scores, visible);
      float* ctx = s->ctx.data();
      for (int64_t l = 0; l < lora; ++l) ctx[l] = 0.0f;
      for (int64_t p = 0; p < visible; ++p) {
        const float* lat = cache->latent.data() + p * lora;
        const float a = scores[p];
        for (int64_t l = 0; l < lora; ++l) ctx[l] += a * lat[l];
      }
      float* oh = o + h * vdim;
      kernels::MatVecBf16(w_uv, vdim, lora, ctx, oh);
      const float* gate = s->gate.data() + t * heads * vdim + h * vdim;
      for (int64_t d = 0; d < vdim; ++d) oh[d] *= Sigmoid(gate[d]);
    }
  }
  Charge(timer, OpFamily::kMlaAttention);
  Linear(w.o_proj, s->out.data(), n, out);
  Charge(timer, OpFamily::kMlaProjections);
  return Status::Ok();
}

}  // namespace deltafin
