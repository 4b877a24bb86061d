// The planner's arithmetic (src/cli/plan_model.h): for a stated profile and workload every
// prediction is the formula of docs/PLAN.md, worked out here by hand; and the real K3's decode
// workload, computed by Engine::Shape from the config `plan --k3` makes (in memory), equals the
// spec's byte accounting. Deterministic: nothing is timed, read from disk or written.
#include "cli/plan_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "deltafin/engine.h"
#include "modelgen/make_model.h"

namespace deltafin::cli {
namespace {

// Round numbers, so the expected values below can be checked on paper.
MachineProfile Profile() {
  MachineProfile m;
  m.name = "test";
  m.expert_read_bps = 2e9;
  m.memory_bps = 20e9;
  m.bf16_bps = 10e9;
  m.int8_bps = 8e9;
  m.mxfp4_bps = 5e9;
  m.bf16_call_s = 10e-6;
  m.mxfp4_call_s = 20e-6;
  m.fma_per_s = 100e9;
  m.io_cpu_s_per_byte = 0;
  m.threads = 2;
  return m;
}

ModelWorkload Workload() {
  ModelWorkload w;
  w.spine_bytes = 2'000'000'000;
  w.spine_bytes_per_token = 1'000'000'000;
  w.spine_products = 1000;
  w.router_bytes = 1'000'000;
  w.recurrent_state_bytes = 100'000'000;
  w.expert_bytes = 1'000'000;
  w.experts_per_token = 10;
  w.num_experts = 100;
  w.num_moe_layers = 10;
  return w;
}

TEST(PlanModelTest, ResidentComputeIsBytesOverRatePlusCalls) {
  const MachineProfile m = Profile();
  const ModelWorkload w = Workload();
  // spine 1e9 / 10e9 = 0.1 s + 1000 calls x 10 us = 0.01; experts 100 x 1e6 / 5e9 = 0.02 +
  // 300 calls x 20 us = 0.006; state 2 x 1e8 / 2e10 = 0.01.
  EXPECT_NEAR(ResidentComputeSeconds(m, w, false), 0.1 + 0.01 + 0.02 + 0.006 + 0.01, 1e-12);
  // int8: spine at 8 GB/s = 0.125.
  EXPECT_NEAR(ResidentComputeSeconds(m, w, true), 0.125 + 0.01 + 0.02 + 0.006 + 0.01, 1e-12);
  ScenarioPlan p;
  p.name = "resident";
  p.spine = "bf16";
  const Prediction r = PredictScenario(m, w, p);
  EXPECT_NEAR(r.s_per_token, 0.146, 1e-12);
  EXPECT_EQ(r.bytes_read, 0u);
  EXPECT_EQ(r.bound, "compute");
}

TEST(PlanModelTest, StreamedExpertsWithResidentSpine) {
  MachineProfile m = Profile();
  ModelWorkload w = Workload();
  w.unoverlapped_spine_bytes = 100'000'000;  // 0.01 s of the spine's 0.1 s runs after experts
  ScenarioPlan p;
  p.name = "stream-spine-resident";
  p.spine = "bf16";
  p.experts_streamed = true;
  p.expert_cache_bytes = 100'500'000;  // 100 whole experts of 1000: 10% hits
  StreamingAssumptions a;
  a.lookahead_recall = 0.8;
  a.lookahead_waste = 0.1;
  a.demand_exposed = 0.5;
  const Prediction r = PredictScenario(m, w, p, a);
  EXPECT_NEAR(r.expert_hit_rate, 0.1, 1e-12);
  // needed 100 x 1e6 x 0.9 = 9e7 B; read 9.9e7 B; disk 9.9e7 / 2e9 = 0.0495 s.
  EXPECT_EQ(r.expert_bytes_needed, 90'000'000u);
  EXPECT_EQ(r.bytes_read, 99'000'000u);
  EXPECT_NEAR(r.expert_disk_s, 0.0495, 1e-12);
  // compute 0.146 + 10 lookahead routers x (1e6 / 1e10 + 10 us) = 0.146 + 0.0011.
  EXPECT_NEAR(r.compute_s, 0.1471, 1e-12);
  // The window the guessed reads hide behind: compute less the routed experts (0.026 s) and the
  // unoverlapped spine (0.01 s), as a share of the resident 0.146 s.
  const double window = 0.1471 * (0.146 - 0.036) / 0.146;
  // Guessed 0.8 x 0.0495 = 0.0396 s fits in the window; the missed reads, (1 - 0.8) x 0.5 of
  // their 0.0495 s, are exposed; total compute + exposed.
  EXPECT_NEAR(r.exposed_io_s, 0.1 * 0.0495, 1e-12);
  EXPECT_NEAR(r.s_per_token, 0.1471 + 0.00495, 1e-12);
  EXPECT_EQ(r.bound, "compute");

  // A disk 10x slower makes it disk-bound: 0.495 s of reads, of which the guessed 0.396 s
  // overrun the window and the missed 0.099 s are half exposed.
  m.expert_read_bps = 2e8;
  const Prediction slow = PredictScenario(m, w, p, a);
  EXPECT_EQ(slow.bound, "disk");
  EXPECT_NEAR(slow.exposed_io_s, 0.396 - window + 0.0495, 1e-12);
  EXPECT_NEAR(slow.s_per_token, 0.1471 + 0.396 - window + 0.0495, 1e-12);

  // Reader CPU time is shared by the compute threads: 1 ns a byte x 9.9e7 B / 2 threads.
  m = Profile();
  m.io_cpu_s_per_byte = 1e-9;
  EXPECT_NEAR(PredictScenario(m, w, p, a).compute_s, 0.1471 + 0.0495, 1e-12);

  // A measured slowdown under reads replaces the reader-CPU term: the readers are busy for
  // 0.0495 of the 0.1471 s of compute, so compute grows by (1.6 - 1) x 0.0495 / 0.1471.
  m.compute_slowdown_reading = 1.6;
  EXPECT_NEAR(PredictScenario(m, w, p, a).compute_s, 0.1471 * (1 + 0.6 * 0.0495 / 0.1471), 1e-12);
  // Disk-bound (readers always busy): the whole factor.
  m.expert_read_bps = 2e8;
  EXPECT_NEAR(PredictScenario(m, w, p, a).compute_s, 0.1471 * 1.6, 1e-12);
  // Resident experts: no readers, no slowdown.
  p.experts_streamed = false;
  EXPECT_NEAR(PredictScenario(m, w, p, a).compute_s, 0.146, 1e-12);
}

TEST(PlanModelTest, StreamedSpineReadsItsUnpinnedBytesEveryToken) {
  const MachineProfile m = Profile();
  const ModelWorkload w = Workload();
  ScenarioPlan p;
  p.name = "stream-spine-streamed";
  p.spine = "bf16";
  p.experts_streamed = true;
  p.spine_resident = false;
  p.spine_streamed_bytes = 1'000'000'000;  // what the plan did not pin
  p.expert_cache_bytes = 0;
  StreamingAssumptions a;
  a.lookahead_recall = 1;
  a.lookahead_waste = 0;
  const Prediction r = PredictScenario(m, w, p, a);
  // Spine 1e9 B and experts 1e8 B share the disk at 2 GB/s: 0.55 s, longer than the 0.1471 s of
  // compute the reads run behind.
  EXPECT_NEAR(r.spine_disk_s, 0.5, 1e-12);
  EXPECT_EQ(r.bytes_read, 1'100'000'000u);
  EXPECT_NEAR(r.s_per_token, 0.55, 1e-12);
  EXPECT_EQ(r.bound, "disk");
  // A machine whose disk outruns compute: compute decides.
  MachineProfile fast = m;
  fast.expert_read_bps = 100e9;
  const Prediction f = PredictScenario(fast, w, p, a);
  EXPECT_NEAR(f.s_per_token, f.compute_s + f.exposed_io_s, 1e-12);
  EXPECT_EQ(f.bound, "compute");
}

TEST(PlanModelTest, RefusedPlanIsNotPredicted) {
  ScenarioPlan p;
  p.name = "stream-spine-streamed";
  p.fits = false;
  p.note = "memory budget too small";
  const Prediction r = PredictScenario(Profile(), Workload(), p);
  EXPECT_FALSE(r.feasible);
  EXPECT_EQ(r.note, "memory budget too small");
}

TEST(PlanModelTest, SpeculationAmortisesTheSpineNotTheExperts) {
  const MachineProfile m = Profile();
  const ModelWorkload w = Workload();
  ScenarioPlan p;
  p.name = "auto";
  p.spine = "bf16";
  const Prediction base = PredictScenario(m, w, p);
  SpeculationAssumptions s;
  s.acceptance = 0.5;
  s.draft_tokens = 1;  // 2 rows a pass, 1 + 0.5 = 1.5 tokens a pass
  const Prediction r = PredictSpeculative(m, w, base, s);
  // fixed: spine 0.11 + other 0.01 (state); per row: 5e8 weights / 1e11 = 0.005 and experts 0.026.
  const double verify = 0.11 + 0.01 + 2 * 0.005 + 2 * 0.026;
  EXPECT_NEAR(r.s_per_token, verify / 1.5, 1e-12);
  EXPECT_LT(r.s_per_token, base.s_per_token);
  EXPECT_EQ(r.name, "auto+speculation");
  EXPECT_NE(r.note.find("bench decode --speculate replay"), std::string::npos);
  // Acceptance 0: every pass yields one token and costs more than a plain step.
  s.acceptance = 0;
  EXPECT_GT(PredictSpeculative(m, w, base, s).s_per_token, base.s_per_token);
}

// Prefill: per wave the distinct experts its positions chose (flat routing) are read once, a
// streamed spine's streamed bytes once; compute is FLOPs at the batched rate plus the calls.
TEST(PlanModelTest, PrefillReadsEachWavesDistinctExpertsOnce) {
  MachineProfile m = Profile();
  m.batched_flops = 50e9;
  const ModelWorkload w = Workload();  // 100 experts, top-10, 10 MoE layers, 1 MB each
  ScenarioPlan p;
  p.experts_streamed = true;
  p.spine_resident = false;
  p.spine_streamed_bytes = 500'000'000;
  p.prefill_wave = 1000;
  // 2,500 tokens: waves of 1000, 1000, 500. 1000 positions choose all 100 experts (to 1e-45);
  // so do 500: each wave reads 10 layers x 100 experts x 1 MB = 1 GB, plus 0.5 GB of spine.
  const PrefillPrediction r = PredictPrefill(m, w, p, 2500, 100e9);
  EXPECT_EQ(r.waves, 3);
  EXPECT_NEAR(static_cast<double>(r.bytes_read), 3 * 1.5e9, 1e3);
  EXPECT_NEAR(r.read_s, 4.5e9 / 2e9, 1e-6);
  // 100 GFLOP at 50 GFLOP/s = 2 s; calls: 3 waves x (1000 spine x 10 us + 100 x 10 x 3 x 20 us).
  EXPECT_NEAR(r.compute_s, 2 + 3 * (0.01 + 0.06), 1e-9);
  EXPECT_NEAR(r.seconds, r.read_s, 1e-12);
  EXPECT_EQ(r.bound, "read");
  // One position chooses k = 10 experts; mapped experts and a resident spine read nothing; no
  // stated batched rate: 45 % of 2 x the FMA peak (90 GFLOP/s here).
  m.batched_flops = 0;
  p.experts_streamed = false;
  p.spine_resident = true;
  const PrefillPrediction one = PredictPrefill(m, w, p, 1, 9e9);
  EXPECT_EQ(one.waves, 1);
  EXPECT_EQ(one.bytes_read, 0u);
  EXPECT_NEAR(one.compute_s, 0.1 + 0.01 + 10 * 10 * 3 * 20e-6, 1e-9);
  EXPECT_EQ(one.bound, "compute");
}

// A measured slowdown while the readers run stretches the part of the compute the reads take
// (as in a decode step), in place of the readers' CPU time per byte.
TEST(PlanModelTest, PrefillComputeSlowsWhileTheReadersRun) {
  MachineProfile m = Profile();
  m.io_cpu_s_per_byte = 1e-9;
  const ModelWorkload w = Workload();  // 100 experts, top-10, 10 MoE layers, 1 MB each
  ScenarioPlan p;
  p.experts_streamed = true;
  p.spine_resident = true;
  p.prefill_wave = 1000;
  // One wave reads 1 GB: 0.5 s at 2 GB/s; the sampled compute is 2 s.
  const PrefillPrediction cpu = PredictPrefill(m, w, p, 1000, 0, 2.0);
  EXPECT_NEAR(cpu.read_s, 0.5, 1e-9);
  EXPECT_NEAR(cpu.compute_s, 2.0 + 1e9 * 1e-9 / m.threads, 1e-9);
  // Readers busy a quarter of the compute, kernels 1.4x slower meanwhile: 2 x (1 + 0.4 x 0.25).
  m.compute_slowdown_reading = 1.4;
  const PrefillPrediction slowed = PredictPrefill(m, w, p, 1000, 0, 2.0);
  EXPECT_NEAR(slowed.compute_s, 2.2, 1e-9);
  EXPECT_EQ(slowed.bound, "compute");
  // Reads longer than the compute: slowed all the way.
  m.expert_read_bps = 0.25e9;
  EXPECT_NEAR(PredictPrefill(m, w, p, 1000, 0, 2.0).compute_s, 2.8, 1e-9);
}

// `plan --k3`'s config through the engine's own planner gives the spec's byte accounting
// (docs/MODEL.md §2.11), so the K3 numbers are computed from the config rather than typed in.
TEST(PlanModelTest, K3WorkloadFromConfigMatchesSpec) {
  auto text = PresetConfigJson("bench", K3ConfigOverrides());
  ASSERT_TRUE(text.ok()) << text.status().message();
  // The shape needs no folder and no memory budget.
  EngineOptions o;
  auto bf16 = Engine::Shape(o, *text);
  o.spine_int8 = true;
  auto int8 = Engine::Shape(o, *text);
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  ASSERT_TRUE(int8.ok()) << int8.status().message();
  EXPECT_EQ(bf16->hidden_size, 7168);
  EXPECT_EQ(bf16->num_moe_layers, 92);
  EXPECT_EQ(bf16->experts_per_token, 16);
  EXPECT_EQ(bf16->expert_bytes, 17'547'264u);
  EXPECT_EQ(bf16->spine_bytes, 113'509'540'864u);
  EXPECT_EQ(bf16->spine_bytes_per_token, 111'160'744'960u);
  // The resident int8 spine is the spec's on-disk accounting (57,974,619,328 B) plus two
  // documented departures: MLA's kv_b_proj stays BF16 (24 layers x 24576 x 512 weights: one
  // byte more a weight, no f16 row scales) and row scales are widened to fp32 in RAM (2 bytes a
  // row more, under 10 M rows).
  const uint64_t kv_b_bf16 = 24ull * (24576 * 512 - 24576 * 2);
  const uint64_t int8_spec = 57'974'619'328u + kv_b_bf16;
  EXPECT_GE(int8->spine_bytes, int8_spec);
  EXPECT_LT(int8->spine_bytes, int8_spec + 20'000'000u);
  // Both formats read all but the embedding table (BF16 in both), whose one row is read.
  EXPECT_EQ(bf16->spine_bytes - bf16->spine_bytes_per_token,
            int8->spine_bytes - int8->spine_bytes_per_token);
  // 69 KDA layers x 96 heads x 128 x 128 fp32.
  EXPECT_EQ(bf16->recurrent_state_bytes, 434'110'464u);
  // After the routed experts: lm_head 163840 x 7168 and 92 latent up-projections 7168 x 3584,
  // BF16; the int8 copy is one byte a weight plus a scale per row.
  EXPECT_EQ(bf16->unoverlapped_spine_bytes_per_token,
            2ull * (163840ull * 7168 + 92ull * 7168 * 3584));
  EXPECT_GT(int8->unoverlapped_spine_bytes_per_token, 163840ull * 7168 + 92ull * 7168 * 3584);
  EXPECT_LT(int8->unoverlapped_spine_bytes_per_token,
            bf16->unoverlapped_spine_bytes_per_token * 6 / 10);
}

}  // namespace
}  // namespace deltafin::cli
