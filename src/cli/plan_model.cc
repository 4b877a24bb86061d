#include "cli/plan_model.h"

#include <algorithm>
#include <cmath>

namespace deltafin::cli {

namespace {

double D(uint64_t v) { return static_cast<double>(v); }
double D(int64_t v) { return static_cast<double>(v); }

double Div(double a, double b) { return b > 0 ? a / b : 0.0; }

// Spine kernels of one step: weight bytes at the kernel's rate plus a fixed cost per call.
double SpineComputeSeconds(const MachineProfile& m, const ModelWorkload& w, bool int8) {
  return Div(D(w.spine_bytes_per_token), int8 ? m.int8_bps : m.bf16_bps) +
         D(w.spine_products) * m.bf16_call_s;
}

// Routed experts of one step: k experts per MoE layer, three MXFP4 products each.
double ExpertComputeSeconds(const MachineProfile& m, const ModelWorkload& w) {
  const double experts = D(w.experts_per_token * w.num_moe_layers);
  return Div(experts * D(w.expert_bytes), m.mxfp4_bps) + experts * 3 * m.mxfp4_call_s;
}

double HitRate(const ModelWorkload& w, uint64_t cache_bytes) {
  const double total = D(w.num_experts * w.num_moe_layers);
  if (w.expert_bytes == 0 || total <= 0) return 0;
  return std::min(1.0, std::floor(D(cache_bytes) / D(w.expert_bytes)) / total);
}

}  // namespace

std::vector<std::string> K3ConfigOverrides() {
  return {"vocab_size=163840",
          "hidden_size=7168",
          "intermediate_size=33792",
          "num_attention_heads=96",
          "q_lora_rank=1536",
          "kv_lora_rank=512",
          "qk_nope_head_dim=128",
          "qk_rope_head_dim=64",
          "v_head_dim=128",
          "linear_attn_config.num_heads=96",
          "moe_intermediate_size=3072",
          "routed_expert_hidden_size=3584"};
}

double ResidentComputeSeconds(const MachineProfile& m, const ModelWorkload& w, bool int8) {
  // The KDA state is read and written once per step at memory speed.
  return SpineComputeSeconds(m, w, int8) + ExpertComputeSeconds(m, w) +
         Div(2 * D(w.recurrent_state_bytes), m.memory_bps);
}

Prediction PredictScenario(const MachineProfile& m, const ModelWorkload& w, const ScenarioPlan& p,
                           const StreamingAssumptions& a) {
  Prediction r;
  r.name = p.name;
  r.spine = p.spine;
  r.note = p.note;
  if (!p.fits) {
    r.feasible = false;
    return r;
  }
  const bool int8 = p.spine == "int8";
  const double resident = ResidentComputeSeconds(m, w, int8);
  double compute = resident;
  if (!p.experts_streamed) {
    r.compute_s = r.s_per_token = compute;
    r.bound = "compute";
    r.expert_hit_rate = 1;
    return r;
  }
  // Flat routing (K3's balanced router; the bench model's random one): an LRU cache of c experts
  // out of T hits about c / T of the k needed per layer.
  r.expert_hit_rate = HitRate(w, p.expert_cache_bytes);
  const double needed =
      D(w.experts_per_token * w.num_moe_layers) * D(w.expert_bytes) * (1 - r.expert_hit_rate);
  const double read = needed * (1 + a.lookahead_waste);
  r.expert_bytes_needed = static_cast<uint64_t>(needed);
  r.expert_disk_s = Div(read, m.expert_read_bps);
  // Streaming adds the lookahead's router product per MoE layer and the readers' CPU time, which
  // the compute threads share the cores with.
  compute += D(w.num_moe_layers) *
             (Div(D(w.router_bytes), int8 ? m.int8_bps : m.bf16_bps) + m.bf16_call_s);
  if (m.compute_slowdown_reading > 0) {
    // Measured: compute runs slower by this factor while the readers are busy, which they are for
    // the part of the step their reads take (all of it when the step is disk-bound).
    const double busy = std::min(1.0, Div(r.expert_disk_s, compute));
    compute *= 1 + (std::max(1.0, m.compute_slowdown_reading) - 1) * busy;
  } else {
    compute += read * m.io_cpu_s_per_byte / std::max(1, m.threads);
  }
  r.compute_s = compute;
  double spine_read = 0;
  if (!p.spine_resident) {
    // The streamed groups are read once a token, directly, ahead of the layers that use them.
    spine_read = D(p.spine_streamed_bytes);
    r.spine_disk_s = Div(spine_read, m.expert_read_bps);
  }
  // Overlap, layer by layer: the layer-output lookahead issues layer L+1's guessed reads when
  // layer L ends, so they run behind L+1's attention, router, shared experts and latent
  // down-projection (the window), not behind L's routed experts and latent up-projection or
  // lm_head; the reads the lookahead missed start when L+1 routes and are only partly hidden
  // (by the shared experts and the experts already read).
  const double after_experts = ExpertComputeSeconds(m, w) +
                               Div(D(w.unoverlapped_spine_bytes), int8 ? m.int8_bps : m.bf16_bps);
  const double window = compute * std::clamp(Div(resident - after_experts, resident), 0.0, 1.0);
  const double guessed = a.lookahead_recall * r.expert_disk_s;
  r.exposed_io_s = std::max(0.0, guessed - window) +
                   (1 - a.lookahead_recall) * a.demand_exposed * r.expert_disk_s;
  r.s_per_token = compute + r.exposed_io_s;
  if (!p.spine_resident) {
    // Spine and expert reads share the disk and run behind compute (the ring reads ahead, the
    // lookahead guesses): the step takes the longer of the two.
    r.s_per_token = std::max(r.s_per_token, r.spine_disk_s + r.expert_disk_s);
  }
  r.bytes_read = static_cast<uint64_t>(read + spine_read);
  r.bound = r.spine_disk_s + r.expert_disk_s > compute ? "disk" : "compute";
  return r;
}

PrefillPrediction PredictPrefill(const MachineProfile& m, const ModelWorkload& w,
                                 const ScenarioPlan& p, int64_t prompt_tokens, double flops,
                                 double sampled_compute_s) {
  PrefillPrediction r;
  const int64_t wave = std::max<int64_t>(p.prefill_wave, 1);
  r.waves = (prompt_tokens + wave - 1) / wave;
  double bytes = 0;
  const double e = D(w.num_experts), k = D(w.experts_per_token);
  for (int64_t begin = 0; begin < prompt_tokens; begin += wave) {
    const double t = D(std::min(wave, prompt_tokens - begin));
    if (p.experts_streamed && e > 0) {
      const double distinct = e * (1 - std::pow(1 - k / e, t));
      bytes += distinct * D(w.num_moe_layers) * D(w.expert_bytes);
    }
    if (!p.spine_resident) bytes += D(p.spine_streamed_bytes);
  }
  r.bytes_read = static_cast<uint64_t>(bytes);
  r.read_s = Div(bytes, m.expert_read_bps);
  const double rate =
      m.batched_flops > 0 ? m.batched_flops : 2 * m.fma_per_s * kPrefillFmaEfficiency;
  // Plus the fixed cost of each kernel call: a wave makes one call per spine product and three
  // per expert it runs (decode's call costs, docs/PLAN.md).
  double calls_s = 0;
  for (int64_t begin = 0; begin < prompt_tokens; begin += wave) {
    const double t = D(std::min(wave, prompt_tokens - begin));
    const double distinct = e > 0 ? e * (1 - std::pow(1 - k / e, t)) : 0;
    calls_s +=
        D(w.spine_products) * m.bf16_call_s + distinct * D(w.num_moe_layers) * 3 * m.mxfp4_call_s;
  }
  r.compute_s = sampled_compute_s > 0 ? sampled_compute_s : Div(flops, rate) + calls_s;
  // The readers take cores and memory bandwidth from the products, as in a decode step: measured,
  // compute runs slower by compute_slowdown_reading for the part of the prompt the reads take;
  // otherwise their CPU time (system time per byte) is added.
  if (m.compute_slowdown_reading > 0) {
    const double busy = std::min(1.0, Div(r.read_s, r.compute_s));
    r.compute_s *= 1 + (std::max(1.0, m.compute_slowdown_reading) - 1) * busy;
  } else {
    r.compute_s += bytes * m.io_cpu_s_per_byte / std::max(1, m.threads);
  }
  r.seconds = std::max(r.read_s, r.compute_s);
  r.bound = r.read_s > r.compute_s ? "read" : "compute";
  return r;
}

Prediction PredictSpeculative(const MachineProfile& m, const ModelWorkload& w,
                              const Prediction& base, const SpeculationAssumptions& s) {
  Prediction r = base;
  r.name = base.name + "+speculation";
  if (!base.feasible) return r;
  const bool int8 = base.spine == "int8";
  const int n = std::max(1, s.draft_tokens + 1);
  const double spine_c = SpineComputeSeconds(m, w, int8);
  const double expert_c = ExpertComputeSeconds(m, w);
  // What the rows share: the spine's weight bytes (read from RAM or disk once per pass) and the
  // rest of the step's fixed work. What each row adds: one multiply-add per spine weight (int8:
  // one byte a weight, BF16: two) and its own routed experts.
  const double other_c = std::max(0.0, base.compute_s - spine_c - expert_c);
  const double spine_weights = D(w.spine_bytes_per_token) / (int8 ? 1.0 : 2.0);
  const double row_fma = Div(spine_weights, m.fma_per_s);
  double union_disk = 0;
  if (base.expert_disk_s > 0) {
    // Distinct experts n rows need per layer with flat routing: N (1 - (1 - k/N)^n).
    const double nk = D(w.num_experts), k = D(w.experts_per_token);
    const double distinct = nk * (1 - std::pow(1 - k / nk, n));
    union_disk = base.expert_disk_s * distinct / k;
  }
  const double verify = base.spine_disk_s + spine_c + other_c + n * row_fma +
                        std::max(n * expert_c, union_disk) + base.exposed_io_s;
  const double a = std::clamp(s.acceptance, 0.0, 0.999999);
  const double tokens = (1 - std::pow(a, n)) / (1 - a);
  r.s_per_token = verify / tokens;
  // Bytes per token: the spine re-read once per pass, the experts' union per pass.
  const double expert_read = base.expert_disk_s > 0 ? union_disk * m.expert_read_bps : 0;
  const double spine_read = base.spine_disk_s * m.expert_read_bps;
  r.bytes_read = static_cast<uint64_t>((expert_read + spine_read) / tokens);
  r.compute_s = (spine_c + other_c + n * row_fma + n * expert_c) / tokens;
  r.expert_disk_s = union_disk / tokens;
  r.spine_disk_s = base.spine_disk_s / tokens;
  r.bound = base.spine_disk_s + union_disk > spine_c + other_c + n * (row_fma + expert_c)
                ? "disk"
                : "compute";
  r.note = "a model at a stated acceptance (the engine's own: bench decode --speculate replay)";
  return r;
}

}  // namespace deltafin::cli
