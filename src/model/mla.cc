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

namespace {
// The most positions a slot attends together, and the most floats its scores may take
// (MlaBlockPositions): 8 positions already read a run of latents from cache 8 times for one read
// from memory; the score budget (8 MiB a slot) keeps long contexts within the plan.
constexpr int64_t kMlaMaxBlockPositions = 8;
constexpr int64_t kMlaBlockScoreFloats = int64_t{2} << 20;
// One position's transposed queries and scores have their heads padded to a multiple of the widest
// vector (16 floats), so the narrow products never take the scalar column tail.
constexpr int64_t kHeadLanes = 16;
// Waves shorter than this attend one position at a time: transposing the whole cache costs
// (start + n)·(kv_lora + rope) copies against n·heads times as many multiply-adds, too much for a
// verify pass of a few positions on a long context.
constexpr int64_t kMinPositionsForTransposedKeys = 16;
// Cached latents weighted per call while a block of several positions is attended: a run that
// stays in the core's cache while every position of the block uses it.
constexpr int64_t kMlaSumRunBytes = 64 * 1024;
// Positions per part when one position's scores split over the pool.
constexpr int64_t kScoreGrain = 256;

int64_t PaddedHeads(const ModelConfig& c) {
  return (c.mla_heads + kHeadLanes - 1) / kHeadLanes * kHeadLanes;
}
}  // namespace

int64_t MlaBlockPositions(const ModelConfig& c, int64_t capacity) {
  const int64_t per_position = c.mla_heads * std::max<int64_t>(capacity, 1);
  return std::clamp<int64_t>(kMlaBlockScoreFloats / per_position, 1, kMlaMaxBlockPositions);
}

void MlaScratch::Reserve(const ModelConfig& c, int64_t max_positions, int64_t capacity_positions,
                         int64_t worker_slots) {
  const int64_t n = max_positions, heads = c.mla_heads;
  const int64_t key = c.kv_lora_rank + c.qk_rope_head_dim, lanes = PaddedHeads(c);
  slots = worker_slots < 1 ? 1 : worker_slots;
  capacity = capacity_positions;
  block = MlaBlockPositions(c, capacity);
  const int64_t queries = slots * block * heads;  // query vectors of every slot's block
  const auto sz = [](int64_t v) { return static_cast<size_t>(v); };
  q_low.Resize(sz(n * c.q_lora_rank));
  q.Resize(sz(n * heads * c.mla_q_head_dim()));
  kv.Resize(sz(n * key));
  gate.Resize(sz(n * heads * c.v_head_dim));
  out.Resize(sz(n * heads * c.v_head_dim));
  q_cat.Resize(sz(queries * key));
  scores.Resize(sz(queries * capacity));
  ctx.Resize(sz(queries * c.kv_lora_rank));
  keys_t.Resize(sz(key * capacity));
  q_t.Resize(sz(key * lanes));
  std::fill(q_t.data(), q_t.data() + q_t.size(), 0.0f);  // the padding lanes stay +0
  scores_t.Resize(sz(capacity * lanes));
}

int64_t MlaScratchFixedFloats(const ModelConfig& c, int64_t capacity, int64_t slots) {
  const int64_t key = c.kv_lora_rank + c.qk_rope_head_dim;
  return slots * MlaBlockPositions(c, capacity) * c.mla_heads * (key + capacity + c.kv_lora_rank) +
         key * capacity + (key + capacity) * PaddedHeads(c);
}

namespace {

// How a block's scores are formed: against keys_t, transposed for the wave (kWave), or one
// position's against the cache rows with its queries transposed (kOnePosition).
enum class ScoreForm { kWave, kOnePosition };

// The attention of wave positions [t0, t0 + count) (cache positions start + t0 ...) for every
// head, on worker slot `slot`: absorbed queries; scores; softmax; the weighted latent sums; each
// head's value expansion and output gate. Position t sees cache positions [0, start + t] only: its
// scores past that are computed and never used, and its weighted sum stops there.
//
// A score is one chain of fused multiply-adds from +0 over the latent then the rope dimensions,
// s = Σ_c k[c]·q[c] in increasing c, then scaled. kWave forms it with the positions in the vector
// lanes (keys_t's rows are dimensions), all count·heads queries of the block in one product, so
// each run of keys is read once per block and no score needs a horizontal sum; kOnePosition forms
// the same chain with the heads in the lanes (q_t), the cache read as it is stored. Each weighted
// sum runs in increasing position from +0 (MatTMulF32Part's runs continue it exactly). So every
// form, slot, block, wave size and thread count gives the same bits: waves and decoding agree.
void AttendBlock(const ModelConfig& c, const MlaWeights& w, const MlaCache& cache, MlaScratch* s,
                 ScoreForm form, int64_t slot, int64_t start, int64_t t0, int64_t count) {
  const int64_t heads = c.mla_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim,
                vdim = c.v_head_dim, lora = c.kv_lora_rank, qdim = c.mla_q_head_dim();
  const int64_t key = lora + rope;
  const float scale = 1.0f / std::sqrt(static_cast<float>(qdim));
  const int64_t row_stride = nope + vdim;  // kv_b_proj rows per head
  const int64_t queries = count * heads;
  const int64_t stride = start + t0 + count;  // a query's score row: the block's last position's
  const auto visible = [&](int64_t v) { return start + t0 + v / heads + 1; };  // query v's
  const int64_t slot_queries = s->block * heads;
  float* q_cat = s->q_cat.data() + slot * slot_queries * key;            // [queries, key]
  float* scores = s->scores.data() + slot * slot_queries * s->capacity;  // [queries, stride]
  float* ctx = s->ctx.data() + slot * slot_queries * lora;               // [queries, lora]
  // kv_b_proj is read in absorbed form (per-head sub-blocks, one of them transposed), so it stays
  // BF16 even with the row-int8 spine: a departure from docs/MODEL.md §3.6 that can only make int8
  // mode more accurate (docs/INT8.md).
  for (int64_t v = 0; v < queries; ++v) {
    const int64_t h = v % heads;
    const float* qh = s->q.data() + (t0 + v / heads) * heads * qdim + h * qdim;
    const uint16_t* w_uk = w.kv_b_proj.data + (h * row_stride) * lora;  // [nope, lora]
    kernels::MatTVecBf16(w_uk, nope, lora, qh, q_cat + v * key);
    std::memcpy(q_cat + v * key + lora, qh + nope, static_cast<size_t>(rope) * sizeof(float));
  }
  if (form == ScoreForm::kWave) {
    kernels::MatTMulF32Part({s->keys_t.data(), s->capacity}, key, stride, q_cat, key, queries, true,
                            {scores, stride});
    for (int64_t v = 0; v < queries; ++v) {
      float* sv = scores + v * stride;
      for (int64_t p = 0; p < visible(v); ++p) sv[p] *= scale;
    }
  } else {  // one position: scores_t[p, h] = Σ_c q_t[c, h]·key_p[c], the cache's rows as x
    const int64_t lanes = PaddedHeads(c);
    float* q_t = s->q_t.data();
    float* scores_t = s->scores_t.data();
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < key; ++d) q_t[d * lanes + h] = q_cat[h * key + d];
    }
    DefaultPool().ParallelRanges(stride, kScoreGrain, [&](int64_t p0, int64_t p1) {
      float* part = scores_t + p0 * lanes;
      kernels::MatTMulF32Part({q_t, lanes}, lora, lanes, cache.latent.data() + p0 * lora, lora,
                              p1 - p0, true, {part, lanes});
      kernels::MatTMulF32Part({q_t + lora * lanes, lanes}, rope, lanes,
                              cache.rope.data() + p0 * rope, rope, p1 - p0, false, {part, lanes});
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t h = 0; h < heads; ++h)
          scores[h * stride + p] = scores_t[p * lanes + h] * scale;
      }
    });
  }
  for (int64_t v = 0; v < queries; ++v) kernels::SoftmaxInPlace(scores + v * stride, visible(v));
  if (count == 1) {
    // One position: one product (its columns split over the pool when not inside a worker).
    kernels::MatTMulF32Part({cache.latent.data(), lora}, stride, lora, scores, stride, heads, true,
                            {ctx, lora});
  } else {
    const int64_t run = std::max<int64_t>(kMlaSumRunBytes / (lora * 4), 1);
    for (int64_t r0 = 0; r0 < stride; r0 += run) {
      for (int64_t t = 0; t < count; ++t) {
        const int64_t rows = std::min(run, visible(t * heads) - r0);
        if (rows <= 0) continue;
        kernels::MatTMulF32Part({cache.latent.data() + r0 * lora, lora}, rows, lora,
                                scores + t * heads * stride + r0, stride, heads, r0 == 0,
                                {ctx + t * heads * lora, lora});
      }
    }
  }
  for (int64_t v = 0; v < queries; ++v) {
    const int64_t h = v % heads, t = t0 + v / heads;
    const uint16_t* w_uv = w.kv_b_proj.data + (h * row_stride + nope) * lora;  // [v, lora]
    float* oh = s->out.data() + t * heads * vdim + h * vdim;
    kernels::MatVecBf16(w_uv, vdim, lora, ctx + v * lora, oh);
    const float* gate = s->gate.data() + t * heads * vdim + h * vdim;  // σ(g_proj·x) already
    for (int64_t d = 0; d < vdim; ++d) oh[d] *= gate[d];
  }
}

// keys_t[d, p] = the cached key of position p (latent | rope), dimension d, for p in [0, length).
// Sixteen positions at a time, so each row of keys_t is written a full vector's floats at once.
void TransposeKeys(const ModelConfig& c, const MlaCache& cache, int64_t length, MlaScratch* s) {
  const int64_t lora = c.kv_lora_rank, rope = c.qk_rope_head_dim, cap = s->capacity;
  float* keys_t = s->keys_t.data();
  constexpr int64_t kGroup = 16;
  const int64_t groups = (length + kGroup - 1) / kGroup;
  DefaultPool().ParallelRanges(groups, 64, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t p0 = g * kGroup, p1 = std::min(length, p0 + kGroup);
      for (int64_t d = 0; d < lora; ++d) {
        for (int64_t p = p0; p < p1; ++p)
          keys_t[d * cap + p] = cache.latent[static_cast<size_t>(p * lora + d)];
      }
      for (int64_t d = 0; d < rope; ++d) {
        for (int64_t p = p0; p < p1; ++p) {
          keys_t[(lora + d) * cap + p] = cache.rope[static_cast<size_t>(p * rope + d)];
        }
      }
    }
  });
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
  const int64_t threads = std::min<int64_t>(pool.num_threads(), s->slots);
  if (n < kMinPositionsForTransposedKeys || n < 2 * threads) {
    // Decoding, verify passes, short waves: one position at a time, each product split over the
    // pool.
    for (int64_t t = 0; t < n; ++t) {
      AttendBlock(c, w, *cache, s, ScoreForm::kOnePosition, 0, start, t, 1);
    }
  } else {
    // A wave: the keys transposed once; blocks of up to s->block positions side by side,
    // interleaved (block b on worker b % workers) so that the causal work, which grows with t, is
    // shared evenly; each worker's kernel calls run on its thread.
    TransposeKeys(c, *cache, start + n, s);
    const int64_t block = std::clamp<int64_t>(n / threads, 1, s->block);
    const int64_t blocks = (n + block - 1) / block;
    struct Ctx {
      const ModelConfig* c;
      const MlaWeights* w;
      const MlaCache* cache;
      MlaScratch* s;
      int64_t start, n, block, blocks, workers;
    } ctx{&c, &w, cache, s, start, n, block, blocks, std::min(threads, blocks)};
    pool.Run(
        [](void* p, int index, int) {
          const Ctx& a = *static_cast<const Ctx*>(p);
          if (index >= a.workers) return;
          for (int64_t b = index; b < a.blocks; b += a.workers) {
            AttendBlock(*a.c, *a.w, *a.cache, a.s, ScoreForm::kWave, index, a.start, b * a.block,
                        std::min(a.block, a.n - b * a.block));
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
