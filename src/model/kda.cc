#include "model/kda.h"

#include <cmath>
#include <cstring>

#include "model/linear.h"
#include "model/ops.h"

namespace deltafin {

namespace {

// fla's in-kernel l2norm: u / sqrt(Σu² + 1e-6) (spec §4.4).
constexpr float kL2NormEps = 1e-6f;

// Causal depthwise conv over [history (K-1 rows, oldest first), current] then SiLU, in place on
// `cur` [P]; then shifts `cur` (the raw projection) into the history.
void ConvStep(const float* weight, int64_t width, int64_t kernel, float* history, float* cur,
              float* scratch_raw) {
  std::memcpy(scratch_raw, cur, static_cast<size_t>(width) * sizeof(float));
  for (int64_t ch = 0; ch < width; ++ch) {
    const float* wc = weight + ch * kernel;
    float acc = 0.0f;
    for (int64_t j = 0; j < kernel - 1; ++j) acc += wc[j] * history[j * width + ch];
    acc += wc[kernel - 1] * scratch_raw[ch];
    cur[ch] = Silu(acc);
  }
  // Shift: drop the oldest row, append the raw current projection.
  if (kernel > 2) {
    std::memmove(history, history + width,
                 static_cast<size_t>((kernel - 2) * width) * sizeof(float));
  }
  std::memcpy(history + (kernel - 2) * width, scratch_raw,
              static_cast<size_t>(width) * sizeof(float));
}

void L2Normalize(float* u, int64_t n, float scale) {
  float sum_sq = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_sq += u[i] * u[i];
  const float inv = scale / std::sqrt(sum_sq + kL2NormEps);
  for (int64_t i = 0; i < n; ++i) u[i] *= inv;
}

}  // namespace

void KdaState::Init(const ModelConfig& c) {
  const auto hist = static_cast<size_t>((c.conv_kernel_size - 1) * c.kda_width());
  conv_q.Resize(hist);
  conv_k.Resize(hist);
  conv_v.Resize(hist);
  recurrent.Resize(static_cast<size_t>(c.kda_heads * c.kda_head_dim * c.kda_head_dim));
}

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
  window.Resize(static_cast<size_t>(c.kda_width()));
}

void KdaForward(const ModelConfig& c, const KdaWeights& w, const float* x, int64_t n,
                KdaState* state, KdaScratch* s, float* out, OpTimer* timer) {
  const int64_t p = c.kda_width(), heads = c.kda_heads, dim = c.kda_head_dim,
                kernel = c.conv_kernel_size;
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
  for (int64_t t = 0; t < n; ++t) {
    float* q = s->q.data() + t * p;
    float* k = s->k.data() + t * p;
    float* v = s->v.data() + t * p;
    float* g = s->decay.data() + t * p;
    float* o = s->out.data() + t * p;
    ConvStep(w.q_conv, p, kernel, state->conv_q.data(), q, s->window.data());
    ConvStep(w.k_conv, p, kernel, state->conv_k.data(), k, s->window.data());
    ConvStep(w.v_conv, p, kernel, state->conv_v.data(), v, s->window.data());
    Charge(timer, OpFamily::kKdaConv);
    for (int64_t h = 0; h < heads; ++h) {
      float* qh = q + h * dim;
      float* kh = k + h * dim;
      const float* vh = v + h * dim;
      float* gh = g + h * dim;
      float* oh = o + h * dim;
      L2Normalize(qh, dim, q_scale);
      L2Normalize(kh, dim, 1.0f);
      const float beta = Sigmoid(s->beta[static_cast<size_t>(t * heads + h)]);
      // Log-decay g = lower_bound·σ(exp(A_log[h])·(f + dt_bias)), one A per head (spec §4.4).
      const float a = w.a_exp[static_cast<size_t>(h)];
      for (int64_t d = 0; d < dim; ++d) {
        gh[d] = std::exp(c.gate_lower_bound * Sigmoid(a * (gh[d] + w.dt_bias[h * dim + d])));
      }
      float* S = state->recurrent.data() + h * dim * dim;  // S[k][v]
      // 1. decay rows; 2. δ = v − Σ_k k̂[k]·S[k][:]
      for (int64_t kk = 0; kk < dim; ++kk) {
        float* row = S + kk * dim;
        for (int64_t vv = 0; vv < dim; ++vv) row[vv] *= gh[kk];
      }
      for (int64_t vv = 0; vv < dim; ++vv) oh[vv] = vh[vv];  // oh holds δ for now
      for (int64_t kk = 0; kk < dim; ++kk) {
        const float* row = S + kk * dim;
        const float kv = kh[kk];
        for (int64_t vv = 0; vv < dim; ++vv) oh[vv] -= kv * row[vv];
      }
      // 3. write S += β·k̂·δᵀ; 4. read o = Σ_k q̂[k]·S[k][:] with the updated state.
      for (int64_t kk = 0; kk < dim; ++kk) {
        float* row = S + kk * dim;
        const float bk = beta * kh[kk];
        for (int64_t vv = 0; vv < dim; ++vv) row[vv] += bk * oh[vv];
      }
      for (int64_t vv = 0; vv < dim; ++vv) oh[vv] = 0.0f;
      for (int64_t kk = 0; kk < dim; ++kk) {
        const float* row = S + kk * dim;
        const float qk = qh[kk];
        for (int64_t vv = 0; vv < dim; ++vv) oh[vv] += qk * row[vv];
      }
      // Per-head RMSNorm (shared weight) before the sigmoid output gate.
      RmsNorm(oh, w.o_norm, dim, c.rms_norm_eps, oh);
      const float* gate = s->gate.data() + t * p + h * dim;
      for (int64_t d = 0; d < dim; ++d) oh[d] *= Sigmoid(gate[d]);
    }
    Charge(timer, OpFamily::kKdaRecurrence);
  }
  Linear(w.o_proj, s->out.data(), n, out);
  Charge(timer, OpFamily::kKdaProjections);
}

}  // namespace deltafin
