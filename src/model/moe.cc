#include "model/moe.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <numeric>

#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/attn_res.h"
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
  router_scratch.Resize(sz(std::max(1, DefaultThreadCount()) * RouterScratchFloats(c)));
  ids.Resize(sz(n * k));
  weights.Resize(sz(n * k));
  z.Resize(sz(n * latent));
  z_gathered.Resize(sz(n * latent));
  work.Resize(sz(n * k));
  work_row.Resize(sz(n * k));
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
  y_work.Resize(sz(n * k * latent));
  r.Resize(sz(n * latent));
  routed.Resize(sz(n * c.hidden_size));
}

uint64_t FfnScratch::Bytes() const {
  return BufferBytes(gate, up, router_logits, router_scratch, ids, weights, z, z_gathered, work,
                     work_row, work_begin, work_cursor, needed, mark, guess_ids, guess_weights,
                     guess_union, u1, u3, y_work, r, routed);
}

void GatedFfnForward(const ModelConfig& c, const GatedFfnWeights& w, const float* x, int64_t n,
                     FfnScratch* s, float* out) {
  const int64_t width = w.gate_proj.rows;
  Linear(w.gate_proj, x, n, s->gate.data());
  Linear(w.up_proj, x, n, s->up.data());
  kernels::SituInPlace(s->gate.data(), s->up.data(), n * width, c.situ_beta, c.situ_linear_beta);
  Linear(w.down_proj, s->gate.data(), n, out);
}

namespace {

// Positions from which a wave's routing splits over the pool (each part with its own scratch).
constexpr int64_t kRouteSideBySideMinPositions = 64;

// Route of positions [0, n): ids and weights [n, top_k] from logits [n, experts]. A wave's
// positions split over at most as many threads as the scratch has slices (reserved for the
// session's thread count), as MLA's worker slots do.
void RouteAll(const ModelConfig& c, const RouterConfig& rc, const float* logits,
              const float* correction_bias, int64_t n, FfnScratch* s, int32_t* ids,
              float* weights) {
  const int64_t k = c.num_experts_per_token, per = RouterScratchFloats(c);
  const int64_t slots = static_cast<int64_t>(s->router_scratch.size()) / per;
  const int64_t parts =
      n < kRouteSideBySideMinPositions ? 1 : std::min<int64_t>(DefaultPool().num_threads(), slots);
  const auto route_part = [&](int64_t part) {
    float* scratch = s->router_scratch.data() + part * per;
    for (int64_t t = n * part / parts; t < n * (part + 1) / parts; ++t) {
      Route(rc, logits + t * c.num_experts, correction_bias, scratch, ids + t * k, weights + t * k);
    }
  };
  if (parts == 1) {
    route_part(0);
    return;
  }
  struct Ctx {
    const decltype(route_part)* f;
    int64_t parts;
  } ctx{&route_part, parts};
  DefaultPool().Run(
      [](void* p, int index, int) {
        const Ctx& x = *static_cast<const Ctx*>(p);
        if (index < x.parts) (*x.f)(index);
      },
      &ctx);
}

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
  int32_t* work_row = s->work_row.data();
  for (int64_t i = 0; i < count; ++i) {
    const int32_t row = cursor[mark[ids[i]]]++;
    s->work[static_cast<size_t>(row)] = static_cast<int32_t>(i);
    work_row[i] = row;
  }
  for (int64_t j = 0; j < m; ++j) mark[needed[j]] = -1;
}

// Rows of the j-th expert's work list (the positions that chose it).
int64_t Members(const FfnScratch& s, int64_t j) {
  return s.work_begin[static_cast<size_t>(j + 1)] - s.work_begin[static_cast<size_t>(j)];
}

// One routed expert of a layer over the positions that chose it, using scratch rows
// [row0, row0 + members) of z_gathered, u1 and u3 (so experts with disjoint rows can run at
// once): gathers the positions' latent inputs, w1 and w3, SiTU, and w2 straight into the
// expert's rows of y_work (its work list's rows, which no other expert writes).
struct ExpertJob {
  int64_t j;            // index into the layer's needed experts and work lists
  const uint8_t* span;  // the expert's bytes (ExpertLayout), valid until the source's End
  int64_t row0;         // first scratch row
};

void RunExpert(const ModelConfig& c, const ExpertLayout& layout, FfnScratch* s,
               const ExpertJob& job) {
  const int64_t latent = c.routed_expert_hidden_size, inter = c.moe_intermediate_size,
                k = c.num_experts_per_token;
  const auto latent_bytes = static_cast<size_t>(latent) * sizeof(float);
  const int32_t* list = s->work.data() + s->work_begin[static_cast<size_t>(job.j)];
  const int64_t members = Members(*s, job.j);
  float* z = s->z_gathered.data() + job.row0 * latent;
  float* u1 = s->u1.data() + job.row0 * inter;
  float* u3 = s->u3.data() + job.row0 * inter;
  float* y =
      s->y_work.data() + static_cast<int64_t>(s->work_begin[static_cast<size_t>(job.j)]) * latent;
  for (int64_t q = 0; q < members; ++q) {
    std::memcpy(z + q * latent, s->z.data() + (list[q] / k) * latent, latent_bytes);
  }
  const uint8_t* span = job.span;
  kernels::MatMulMxfp4(span + layout.w1_packed, span + layout.w1_scale, inter, latent, z, members,
                       u1);
  kernels::MatMulMxfp4(span + layout.w3_packed, span + layout.w3_scale, inter, latent, z, members,
                       u3);
  kernels::SituInPlace(u1, u3, members * inter, c.situ_beta, c.situ_linear_beta);
  kernels::MatMulMxfp4(span + layout.w2_packed, span + layout.w2_scale, latent, inter, u1, members,
                       y);
}

// Selections per expert (positions × top-k ÷ experts) from which the lookahead guesses a whole
// layer instead of routing the wave again.
constexpr int64_t kGuessEveryExpertFactor = 8;

// Experts that run side by side: at most kMaxExpertGroup, their rows together at most the wave's
// positions (the scratch holds that many rows; every position chooses an expert at most once).
constexpr int64_t kMaxExpertGroup = 64;
// Fewer positions than this (decode steps, verify passes): one expert at a time.
constexpr int64_t kExpertsSideBySideMinPositions = 16;
// Positions per part when the combine splits over the pool (a decode step or a verify pass stays
// on one thread).
constexpr int64_t kCombineGrain = 32;

struct ExpertGroup {
  const ModelConfig* c;
  const ExpertLayout* layout;
  FfnScratch* s;
  std::array<ExpertJob, kMaxExpertGroup> jobs{};
  int64_t count = 0;
  int64_t rows = 0;
  std::atomic<int64_t> next{0};
};

// Runs the group's experts and empties it. One expert: its products split their rows over the
// pool. Several: each thread takes the next unclaimed expert until none is left (the kernels
// called from inside a pool task run on that thread alone).
void RunGroup(ExpertGroup* g) {
  if (g->count == 1) {
    RunExpert(*g->c, *g->layout, g->s, g->jobs[0]);
  } else if (g->count > 1) {
    // Largest first (each expert's work grows with its rows): the threads take the small ones
    // last and finish close together. Order does not matter to the results (disjoint rows).
    std::sort(g->jobs.begin(), g->jobs.begin() + g->count,
              [s = g->s](const ExpertJob& a, const ExpertJob& b) {
                return Members(*s, a.j) > Members(*s, b.j);
              });
    g->next.store(0, std::memory_order_relaxed);
    DefaultPool().Run(
        [](void* ctx, int, int) {
          auto* group = static_cast<ExpertGroup*>(ctx);
          for (;;) {
            const int64_t i = group->next.fetch_add(1, std::memory_order_relaxed);
            if (i >= group->count) return;
            RunExpert(*group->c, *group->layout, group->s, group->jobs[static_cast<size_t>(i)]);
          }
        },
        g);
  }
  g->count = 0;
  g->rows = 0;
}

}  // namespace

void PrefetchGuess(const ModelConfig& c, const MoeWeights& next, int64_t next_layer,
                   const ExpertAccess& access, const float* x, int64_t n, FfnScratch* s) {
  const int64_t k = c.num_experts_per_token;
  const RouterConfig rc{c.num_experts,      k,
                        c.num_expert_group, c.topk_group,
                        c.moe_renormalize,  c.routed_scaling_factor};
  int64_t m = 0;
  if (n * k >= kGuessEveryExpertFactor * c.num_experts) {
    // A wave this long chooses every expert of the layer but for a chance of about
    // exp(-kGuessEveryExpertFactor) each, so the guess is the whole layer, without a second
    // router pass over the wave.
    m = c.num_experts;
    std::iota(s->guess_union.data(), s->guess_union.data() + m, 0);
  } else {
    Linear(next.router, x, n, s->router_logits.data());
    RouteAll(c, rc, s->router_logits.data(), next.correction_bias, n, s, s->guess_ids.data(),
             s->guess_weights.data());
    m = ExpertUnion(s->guess_ids.data(), n * k, s->mark.data(), s->guess_union.data());
  }
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
                k = c.num_experts_per_token, n_experts = c.num_experts;
  const RouterConfig rc{
      n_experts, k, c.num_expert_group, c.topk_group, c.moe_renormalize, c.routed_scaling_factor};
  Linear(w.router, x, n, s->router_logits.data());
  RouteAll(c, rc, s->router_logits.data(), w.correction_bias, n, s, s->ids.data(),
           s->weights.data());
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
  ExpertSource* source = access.source;
  const int64_t batch = source->max_batch();
  // Time spent in the source is I/O wait unless its experts are all in RAM already.
  const OpFamily wait = source->always_ready() ? OpFamily::kRoutedExperts : OpFamily::kExpertIoWait;
  // A wave's experts run side by side, one per thread (each expert's products then use one
  // thread: no hand-off per small call); a decode step or a verify pass (few positions, experts of
  // one or two rows each) runs one expert at a time with its rows split over the threads, as soon
  // as its bytes are in. Either way each output gets the same fused multiply-adds in the same
  // order (kernels/matvec.h), so the result is the same bit for bit.
  ExpertGroup group{&c, &layout, s};
  const int threads = DefaultPool().num_threads();
  // Experts all in RAM run in groups as large as the scratch allows (one pool hand-off per group);
  // streamed ones up to 16 per thread, so the first to arrive compute while the rest load. (At 4
  // a thread, a 2,048-position wave's threads waited 8 % of the group time at the group ends;
  // at 16, largest first, 1 %.)
  const int64_t group_limit =
      (threads > 1 && n >= kExpertsSideBySideMinPositions)
          ? (source->always_ready() ? kMaxExpertGroup
                                    : std::min<int64_t>(kMaxExpertGroup, int64_t{16} * threads))
          : 1;
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
      if (access.interrupt != nullptr && access.interrupt->load(std::memory_order_relaxed)) {
        source->End();
        return Status::Error(kInterrupted);
      }
      const int64_t j = b0 + ready->index;
      const int64_t members = Members(*s, j);
      if (group.rows + members > n) RunGroup(&group);
      group.jobs[static_cast<size_t>(group.count++)] = {j, ready->data, group.rows};
      group.rows += members;
      if (group.count == group_limit) RunGroup(&group);
    }
    RunGroup(&group);
    Charge(timer, OpFamily::kRoutedExperts);
    source->End();
    Charge(timer, wait);
  }

  // Combine in selection order: acc += w_e·y_e (docs/MODEL.md §6.1: a multiply, then an add,
  // from +0), then the latent norm; each position on its own, so the positions split over the
  // pool (the norm is charged with them).
  DefaultPool().ParallelRanges(n, kCombineGrain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* r = s->r.data() + t * latent;
      std::fill(r, r + latent, 0.0f);
      for (int64_t slot = 0; slot < k; ++slot) {
        const auto i = static_cast<size_t>(t * k + slot);
        kernels::AddScaled(r, s->weights[i],
                           s->y_work.data() + static_cast<int64_t>(s->work_row[i]) * latent,
                           latent);
      }
      if (c.latent_moe_use_norm) RmsNorm(r, w.latent_norm.data(), latent, c.rms_norm_eps, r);
    }
  });
  Charge(timer, OpFamily::kRoutedExperts);
  Linear(w.latent_up, s->r.data(), n, s->routed.data());
  Charge(timer, OpFamily::kLatentProjections);
  if (m == 0) {  // no expert ran (only when n is 0): the shared experts still give `out`
    GatedFfnForward(c, w.shared, x, n, s, out);
    Charge(timer, OpFamily::kSharedExperts);
  }
  AddRows(s->routed.data(), n * hidden, out);
  Charge(timer, OpFamily::kRoutedExperts);
  return Status::Ok();
}

}  // namespace deltafin
