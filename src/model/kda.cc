#include "model/kda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/attn_res.h"
#include "kernels/kda_state.h"
#include "kernels/matvec.h"
#include "kernels/short_conv.h"
#include "model/linear.h"
#include "model/ops.h"

namespace deltafin {

namespace {

// Positions from which a pass spreads its heads over the threads.
constexpr int64_t kHeadsSideBySideMinPositions = 8;
// Channels per part when a wave's convolutions split over the threads, and the positions from
// which they do: a short pass (a verify pass, a small chunk) is not worth a pool hand-off per
// layer for a few hundred multiply-adds per channel.
constexpr int64_t kConvChannelGrain = 64;
constexpr int64_t kConvSideBySideMinPositions = 64;
// Positions per part of a wave's element-wise gate work.
constexpr int64_t kGatePositionGrain = 64;

// fla's in-kernel l2norm: u / sqrt(Σu² + 1e-6) (docs/MODEL.md §4.4).
constexpr float kL2NormEps = 1e-6f;

void L2Normalize(float* u, int64_t n, float scale) {
  const float sum_sq = kernels::DotF32(u, u, n);
  const float inv = scale / std::sqrt(sum_sq + kL2NormEps);
  kernels::RmsScale(u, inv, nullptr, n, u);  // u[i]·inv
}

void Copy(const AlignedBuffer<float>& from, AlignedBuffer<float>* to) {
  std::memcpy(to->data(), from.data(), from.size() * sizeof(float));
}

}  // namespace

void KdaRollback::Reserve(const ModelConfig& c, KdaRollbackMode m, int64_t max_rows) {
  mode = m;
  rows = 0;
  const auto p = static_cast<size_t>(c.kda_width());
  const auto hist = static_cast<size_t>(c.conv_kernel_size - 1) * p;
  const auto state = static_cast<size_t>(c.kda_heads * c.kda_head_dim * c.kda_head_dim);
  const auto r = static_cast<size_t>(max_rows);
  conv_q.Resize(hist);
  conv_k.Resize(hist);
  conv_v.Resize(hist);
  raw.Resize(r * 3 * p);
  if (mode == KdaRollbackMode::kReplay) {
    base.Resize(state);
    inputs.Resize(r * (3 * p + static_cast<size_t>(c.kda_heads)));
    delta.Resize(static_cast<size_t>(c.kda_head_dim));
  } else {
    snapshots.Resize((r > 1 ? r - 1 : 0) * state);
  }
}

uint64_t KdaRollback::Bytes() const {
  return BufferBytes(conv_q, conv_k, conv_v, raw, base, inputs, delta, snapshots);
}

uint64_t KdaRollback::BytesPerRow(const ModelConfig& c, KdaRollbackMode mode) {
  const auto p = static_cast<uint64_t>(c.kda_width());
  const auto state = static_cast<uint64_t>(c.kda_heads * c.kda_head_dim * c.kda_head_dim);
  const uint64_t floats =
      3 * p +
      (mode == KdaRollbackMode::kReplay ? 3 * p + static_cast<uint64_t>(c.kda_heads) : state);
  return floats * sizeof(float);
}

void KdaRollbackTo(const ModelConfig& c, int64_t accepted, KdaRollback* rb, KdaState* state) {
  const int64_t p = c.kda_width(), heads = c.kda_heads, dim = c.kda_head_dim,
                kernel = c.conv_kernel_size, rows = rb->rows;
  rb->rows = 0;
  if (accepted + 1 >= rows) return;  // every row kept: the live state is already right
  // Conv history after row `accepted`: the last K-1 raw rows of [history before, raw 0..accepted].
  const int64_t fed = accepted + 1;
  AlignedBuffer<float>* hist[3] = {&state->conv_q, &state->conv_k, &state->conv_v};
  const AlignedBuffer<float>* before[3] = {&rb->conv_q, &rb->conv_k, &rb->conv_v};
  for (int64_t which = 0; which < 3; ++which) {
    for (int64_t j = 0; j < kernel - 1; ++j) {
      const int64_t src = j + fed;  // index in the concatenation (K-1 old rows, then fed rows)
      const float* from = src < kernel - 1
                              ? before[which]->data() + src * p
                              : rb->raw.data() + ((src - (kernel - 1)) * 3 + which) * p;
      std::memcpy(hist[which]->data() + j * p, from, static_cast<size_t>(p) * sizeof(float));
    }
  }
  const size_t state_floats = static_cast<size_t>(heads * dim * dim);
  if (rb->mode == KdaRollbackMode::kSnapshot) {
    std::memcpy(state->recurrent.data(), rb->snapshots.data() + accepted * state_floats,
                state_floats * sizeof(float));
    return;
  }
  Copy(rb->base, &state->recurrent);
  const int64_t stride = 3 * p + heads;
  for (int64_t t = 0; t <= accepted; ++t) {
    const float* in = rb->inputs.data() + t * stride;
    for (int64_t h = 0; h < heads; ++h) {
      float* S = state->recurrent.data() + h * dim * dim;
      kernels::KdaUpdate(S, in + 2 * p + h * dim, in + h * dim, in + p + h * dim, in[3 * p + h],
                         dim, rb->delta.data());
    }
  }
}

void KdaState::Init(const ModelConfig& c) {
  const auto hist = static_cast<size_t>((c.conv_kernel_size - 1) * c.kda_width());
  conv_q.Resize(hist);
  conv_k.Resize(hist);
  conv_v.Resize(hist);
  recurrent.Resize(static_cast<size_t>(c.kda_heads * c.kda_head_dim * c.kda_head_dim));
}

uint64_t KdaState::Bytes() const { return BufferBytes(conv_q, conv_k, conv_v, recurrent); }

void KdaState::Clear() {
  conv_q.Zero();
  conv_k.Zero();
  conv_v.Zero();
  recurrent.Zero();
}

void KdaScratch::Reserve(const ModelConfig& c, int64_t max_positions) {
  const auto np = static_cast<size_t>(max_positions * c.kda_width());
  for (AlignedBuffer<float>* b : {&q, &k, &v, &gate, &decay, &out}) b->Resize(np);
  f_low.Resize(static_cast<size_t>(max_positions * c.kda_head_dim));
  beta.Resize(static_cast<size_t>(max_positions * c.kda_heads));
  window.Resize(static_cast<size_t>(std::max<int64_t>(c.conv_kernel_size - 1, 1) * c.kda_width()));
}

uint64_t KdaScratch::Bytes() const {
  return BufferBytes(q, k, v, gate, decay, out, f_low, beta, window);
}

void KdaForward(const ModelConfig& c, const KdaWeights& w, const float* x, int64_t n,
                KdaState* state, KdaScratch* s, float* out, OpTimer* timer, KdaRollback* rollback) {
  const int64_t p = c.kda_width(), heads = c.kda_heads, dim = c.kda_head_dim,
                kernel = c.conv_kernel_size;
  if (rollback != nullptr) {
    rollback->rows = n;
    Copy(state->conv_q, &rollback->conv_q);
    Copy(state->conv_k, &rollback->conv_k);
    Copy(state->conv_v, &rollback->conv_v);
    if (rollback->mode == KdaRollbackMode::kReplay) Copy(state->recurrent, &rollback->base);
  }
  // Projections of all n positions at once (they only depend on x).
  Linear(w.q_proj, x, n, s->q.data());
  Linear(w.k_proj, x, n, s->k.data());
  Linear(w.v_proj, x, n, s->v.data());
  Linear(w.f_a_proj, x, n, s->f_low.data());
  Linear(w.f_b_proj, s->f_low.data(), n, s->decay.data());
  Linear(w.b_proj, x, n, s->beta.data());
  Linear(w.g_proj, x, n, s->gate.data());
  Charge(timer, OpFamily::kKdaProjections);

  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const bool replaying = rollback != nullptr && rollback->mode == KdaRollbackMode::kReplay;
  const bool snapshots = rollback != nullptr && rollback->mode == KdaRollbackMode::kSnapshot;
  // 1. The causal convolutions of every position first: they depend on the projections and the
  // conv history only, not on the recurrence. A wave splits the channels over the threads (each
  // channel's arithmetic unchanged).
  if (rollback != nullptr) {
    for (int64_t t = 0; t < n; ++t) {
      float* raw = rollback->raw.data() + t * 3 * p;
      std::memcpy(raw, s->q.data() + t * p, static_cast<size_t>(p) * sizeof(float));
      std::memcpy(raw + p, s->k.data() + t * p, static_cast<size_t>(p) * sizeof(float));
      std::memcpy(raw + 2 * p, s->v.data() + t * p, static_cast<size_t>(p) * sizeof(float));
    }
  }
  const auto conv_channels = [&](int64_t c0, int64_t c1) {
    kernels::ShortConvInPlace(w.q_conv, kernel, state->conv_q.data(), s->q.data(), n, p, c0, c1,
                              s->window.data());
    kernels::ShortConvInPlace(w.k_conv, kernel, state->conv_k.data(), s->k.data(), n, p, c0, c1,
                              s->window.data());
    kernels::ShortConvInPlace(w.v_conv, kernel, state->conv_v.data(), s->v.data(), n, p, c0, c1,
                              s->window.data());
  };
  if (n >= kConvSideBySideMinPositions) {
    DefaultPool().ParallelRanges(p, kConvChannelGrain, conv_channels);
  } else {
    conv_channels(0, p);
  }
  // The SiLU, element-wise over the wave (the history keeps the raw projections).
  for (AlignedBuffer<float>* conv : {&s->q, &s->k, &s->v})
    kernels::SiluInPlace(conv->data(), n * p);
  Charge(timer, OpFamily::kKdaConv);

  // 2. The gates of every position, element-wise (vector kernels over the whole wave): the
  // log-decay g = lower_bound·σ(exp(A_log[h])·(f + dt_bias)), one A per head (docs/MODEL.md §4.4),
  // turned into the decay factor exp(g); and the output gate σ(g_proj·x).
  DefaultPool().ParallelRanges(n, kGatePositionGrain, [&](int64_t t0, int64_t t1) {
    float* g = s->decay.data() + t0 * p;
    const int64_t count = (t1 - t0) * p;
    for (int64_t t = 0; t < t1 - t0; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        kernels::AddThenScale(g + t * p + h * dim, w.dt_bias + h * dim,
                              w.a_exp[static_cast<size_t>(h)], dim);
      }
    }
    // This part only (from inside a pool task the kernels stay on this thread).
    kernels::SigmoidInPlace(g, count);
    kernels::RmsScale(g, c.gate_lower_bound, nullptr, count, g);  // g·lower_bound
    kernels::ExpInPlace(g, count);
  });
  kernels::SigmoidInPlace(s->gate.data(), n * p);
  Charge(timer, OpFamily::kKdaRecurrence);

  // 3. The recurrence. Heads never mix, so each head steps through the n positions on its own:
  // a wave's heads are spread over the threads (one hand-off per layer, not per position), each
  // head's arithmetic unchanged, so the state and outputs are the same bit for bit. A decode step
  // or a short verify pass stays on the calling thread.
  const auto step_heads = [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      float* S = state->recurrent.data() + h * dim * dim;  // S[k][v]
      for (int64_t t = 0; t < n; ++t) {
        float* qh = s->q.data() + t * p + h * dim;
        float* kh = s->k.data() + t * p + h * dim;
        const float* vh = s->v.data() + t * p + h * dim;
        const float* gh = s->decay.data() + t * p + h * dim;  // exp(g), step 2
        float* oh = s->out.data() + t * p + h * dim;
        L2Normalize(qh, dim, q_scale);
        L2Normalize(kh, dim, 1.0f);
        const float beta = kernels::Sigmoid(s->beta[static_cast<size_t>(t * heads + h)]);
        if (replaying) {
          float* replay = rollback->inputs.data() + t * (3 * p + heads);
          std::memcpy(replay + h * dim, kh, static_cast<size_t>(dim) * sizeof(float));
          std::memcpy(replay + p + h * dim, vh, static_cast<size_t>(dim) * sizeof(float));
          std::memcpy(replay + 2 * p + h * dim, gh, static_cast<size_t>(dim) * sizeof(float));
          replay[3 * p + h] = beta;
        }
        // δ goes to this head's part of the conv window (free once the convolutions are done).
        kernels::KdaUpdateRead(S, gh, kh, vh, beta, qh, dim, s->window.data() + h * dim, oh);
        // Per-head RMSNorm (shared weight) before the sigmoid output gate.
        RmsNorm(oh, w.o_norm, dim, c.rms_norm_eps, oh);
        const float* gate = s->gate.data() + t * p + h * dim;  // σ already (step 2)
        for (int64_t d = 0; d < dim; ++d) oh[d] *= gate[d];
        // Snapshot rollback: the state after each row but the last (this head's part of it).
        if (snapshots && t + 1 < n) {
          const size_t floats = state->recurrent.size();
          std::memcpy(rollback->snapshots.data() + static_cast<size_t>(t) * floats +
                          static_cast<size_t>(h * dim * dim),
                      S, static_cast<size_t>(dim * dim) * sizeof(float));
        }
      }
    }
  };
  if (n >= kHeadsSideBySideMinPositions) {
    DefaultPool().ParallelRanges(heads, 1, step_heads);
  } else {
    step_heads(0, heads);
  }
  Charge(timer, OpFamily::kKdaRecurrence);
  Linear(w.o_proj, s->out.data(), n, out);
  Charge(timer, OpFamily::kKdaProjections);
}

}  // namespace deltafin
