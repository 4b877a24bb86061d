// The planner's model of a decode token (docs/PLAN.md): pure arithmetic from a machine profile
// (bandwidths, kernel rates, per-call costs) and a model's decode workload (bytes and kernel calls
// per token, the memory plan's split) to predicted seconds per token for each way to run it.
//
// No I/O and no timing here, so the numbers follow from the inputs alone and a unit test can check
// them (tests/unit/plan_model_test.cc). `deltafin plan` (cmd_plan.cc) measures the profile, asks
// Engine::Plan for each scenario's memory plan, and prints what this computes. It models what the
// engine does today: a spine that does not fit pins what the memory plan allows and streams the
// rest every token with direct reads that run ahead of the layers, sharing the disk with the
// expert reads (weights/spine_ring.h); experts stream through an
// LRU cache that flat routing hits about as often as its share of all experts, and the router
// lookahead hides most of the expert reads behind compute.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin::cli {

// What the machine does, measured by `plan` or stated by a profile file. Rates in bytes/s.
struct MachineProfile {
  std::string name;  // "measured", "m1-max", or the profile file
  // Direct reads of expert-size spans at the engine's queue depth: the routed experts' rate, and
  // a streamed spine's (weights/spine_ring.h reads it the same way, in 1 MiB chunks).
  double expert_read_bps = 0;
  double memory_bps = 0;    // plain read stream, all threads
  double bf16_bps = 0;      // BF16 matrix-vector weight bytes/s, weights cold, all threads
  double int8_bps = 0;      // row-int8 matrix-vector
  double mxfp4_bps = 0;     // MXFP4 matrix-vector
  double bf16_call_s = 0;   // fixed cost of one small BF16/int8 kernel call (thread pool)
  double mxfp4_call_s = 0;  // fixed cost of one small MXFP4 kernel call
  double fma_per_s = 0;     // fp32 multiply-adds/s, all threads (rows of a batched verify)
  // FLOP/s of a batched MXFP4 product (64 rows, a K3 expert's shape): a prefill wave's rate.
  // 0 (a profile that does not state it): fma_per_s * 2 * kPrefillFmaEfficiency.
  double batched_flops = 0;
  double io_cpu_s_per_byte = 0;  // CPU seconds the readers spend per byte read (system time)
  // Compute time while the expert readers run at full depth over compute time alone (measured by
  // `plan`; 0 = not known, then io_cpu_s_per_byte stands in for the readers' cost).
  double compute_slowdown_reading = 0;
  // Further drives holding a copy of every expert (`deltafin spread`), by their expert read rate
  // (bytes/s): stated with --drive-gbps or a profile's "drive_gbps"; expert_read_bps is the sum
  // of the first drive's rate and these once AddDrives ran.
  std::vector<double> more_drive_bps;
  // " + N more drives (...)" for the table's heading, kept apart from `name` so a profile written
  // and read back does not carry it twice.
  std::string drives_note;
  int threads = 1;          // compute threads
  uint64_t ram_budget = 0;  // the engine's budget (cgroup-aware, minus headroom)
  uint64_t free_disk = 0;   // free bytes where the model lives (0: unknown)
};

// The decode workload of one model at one spine format (ModelInfo's workload fields).
struct ModelWorkload {
  uint64_t spine_bytes = 0;            // all non-expert tensors (what must be resident)
  uint64_t spine_bytes_per_token = 0;  // what one decode step reads of them
  int64_t spine_products = 0;          // spine kernel calls per step
  uint64_t router_bytes = 0;           // one router (the lookahead's extra product per layer)
  uint64_t recurrent_state_bytes = 0;  // read and written every step
  // Spine bytes per step after each layer's routed experts (latent up-projections, lm_head):
  // compute the next layer's lookahead reads cannot overlap (ModelInfo's field of that name).
  uint64_t unoverlapped_spine_bytes = 0;
  uint64_t expert_bytes = 0;      // one routed expert
  int64_t experts_per_token = 0;  // top-k
  int64_t num_experts = 0;        // per MoE layer
  int64_t num_moe_layers = 0;
  uint64_t all_expert_bytes() const {
    return expert_bytes * static_cast<uint64_t>(num_experts * num_moe_layers);
  }
};

// How a scenario runs: the memory plan Engine::Plan chose for its budget.
struct ScenarioPlan {
  std::string name;   // as `bench decode --scenario` (or a planner-only variant)
  std::string spine;  // "bf16" or "int8"
  bool fits = true;   // false: the plan refuses this budget (see note)
  bool experts_streamed = false;
  bool spine_resident = true;
  uint64_t spine_streamed_bytes = 0;  // a streamed spine: read per token (the rest is pinned)
  int64_t prefill_wave = 0;           // positions one prefill pass processes (the plan's wave)
  uint64_t expert_cache_bytes = 0;
  uint64_t budget = 0;  // the engine's memory budget for this scenario
  std::string note;     // why it does not fit, or what the scenario is
};

// Behaviour constants of the engine, measured on the bench model (docs/STREAMING.md) and stated
// rather than measured each run.
struct StreamingAssumptions {
  double lookahead_recall = 0.78;  // experts the layer-output lookahead guesses in time
  double lookahead_waste = 0.05;   // extra bytes read for wrong guesses, over needed
  double demand_exposed = 0.5;     // share of an unguessed read's time not hidden by the layer
};

// Speculative decoding, modelled: a verify pass's fixed and per-row cost at a stated acceptance.
struct SpeculationAssumptions {
  double acceptance = 0.7;  // probability each drafted token is accepted
  int draft_tokens = 3;     // drafted tokens per verify pass (the pass has draft_tokens + 1 rows)
};

struct Prediction {
  std::string name;
  std::string spine;
  bool feasible = true;
  std::string note;
  double s_per_token = 0;
  double compute_s = 0;      // kernel time incl. streaming overheads
  double expert_disk_s = 0;  // expert bytes needed / expert read bandwidth
  double spine_disk_s = 0;   // streamed spine bytes / direct read bandwidth
  double exposed_io_s = 0;   // expert I/O the lookahead does not hide
  uint64_t bytes_read = 0;   // per token from disk (experts incl. wasted guesses + spine)
  uint64_t expert_bytes_needed = 0;
  double expert_hit_rate = 0;  // of the LRU cache, flat routing
  std::string bound;           // "disk" or "compute"
};

// Time to first token: prefilling a prompt in the plan's waves (docs/PLAN.md "Prefill"). Each
// wave reads, per MoE layer, the distinct experts its positions chose (flat routing: of E experts
// with top-k, T positions choose E·(1 − (1 − k/E)^T) on average) once, and a streamed spine's
// streamed layers once; it computes the prompt's FLOPs (PrefillFlops) at the batched kernels'
// measured rate, plus the fixed cost of its kernel calls (one per spine product, three per
// expert run), or the compute measured on a sample of the model; plus the readers' CPU time
// (bytes read × io_cpu_s_per_byte ÷ threads). Reads run behind compute (the next expert's read
// overlaps the current one's products), so a wave takes the longer of the two.
struct PrefillPrediction {
  double seconds = 0;
  double read_s = 0;     // bytes that must be read / expert read bandwidth
  double compute_s = 0;  // FLOPs / batched kernel rate
  uint64_t bytes_read = 0;
  int64_t waves = 0;
  std::string bound;  // "read" or "compute"
};

// Where a profile states no batched rate: batched MXFP4 reached 45-50 % of the fp32 multiply-add
// peak at 16 rows on the 2-vCPU machine of docs/PERFORMANCE.md (issue 32's measurement).
inline constexpr double kPrefillFmaEfficiency = 0.45;

// `sampled_compute_s` > 0: the compute measured on a sample of the model
// (cli/plan_prefill_sample.h) replaces the FLOP model's.
PrefillPrediction PredictPrefill(const MachineProfile& m, const ModelWorkload& w,
                                 const ScenarioPlan& p, int64_t prompt_tokens, double flops,
                                 double sampled_compute_s = 0);

// Seconds of kernel work one decode step does with everything in RAM.
double ResidentComputeSeconds(const MachineProfile& m, const ModelWorkload& w, bool int8);

// The `make-model` overrides that turn the bench preset (K3's layer count, experts, top-k and
// routing groups at smaller widths) into the real K3's config. ParseModelConfig checks every K3
// number (a config with hidden_size 7168 must be K3 in all of them), so a wrong entry fails rather
// than planning a different model.
std::vector<std::string> K3ConfigOverrides();

// One scenario's prediction.
Prediction PredictScenario(const MachineProfile& m, const ModelWorkload& w, const ScenarioPlan& p,
                           const StreamingAssumptions& a = {});

// s/token with speculative decoding on top of `base` (its scenario's split): a verify pass of
// n = draft_tokens + 1 rows costs fixed + n * per_row, where fixed is what the rows share (the
// spine's reads or kernel bytes) and per_row what each row adds (its routed experts, read or
// computed, and its multiply-adds over the spine); a pass yields (1 - a^n) / (1 - a) tokens.
Prediction PredictSpeculative(const MachineProfile& m, const ModelWorkload& w,
                              const Prediction& base, const SpeculationAssumptions& s);

}  // namespace deltafin::cli
