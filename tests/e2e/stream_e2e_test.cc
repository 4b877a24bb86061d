// End to end through the CLI: `run --experts streamed --stats-json` generates the same tokens as a
// mapped run and reports its bytes; `bench decode` runs under a real memory cgroup (root only)
// and reports the fields docs/PERFORMANCE.md relies on, staying within its limit. Both report the
// op-family breakdown (docs/BREAKDOWN.md) per step, and `bench decode --svg` draws it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "unit/test_files.h"

namespace deltafin::testing {
namespace {

class StreamE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.Join("tiny");
    auto made = RunCli("make-model --preset tiny --seed 11 --no-sync --out " + ShellQuote(model_));
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  // The --ids-out file of a run (the JSON array of generated ids).
  static std::string Ids(const std::string& path) { return ReadTextFile(path); }
  ScopedTempDir dir_;
  std::string model_;
};

TEST_F(StreamE2e, StreamedRunGeneratesTheSameTokensAndReportsItsBytes) {
  const std::string common =
      "run --model " + ShellQuote(model_) + " --prompt-ids 5,6,7,8,9 --max-new 8 --ignore-eos";
  const std::string mapped_ids = dir_.Join("mapped.json"),
                    streamed_ids = dir_.Join("streamed.json");
  auto mapped = RunCli(common + " --experts mapped --ids-out " + ShellQuote(mapped_ids));
  ASSERT_EQ(mapped.exit_code, 0) << mapped.output;
  const std::string stats_path = dir_.Join("stats.json");
  auto streamed = RunCli(common + " --experts streamed --expert-cache 1M --io-threads 2 --stats" +
                         // One decode step per token, as the step count below assumes.
                         " --speculate off" + " --stats-json " + ShellQuote(stats_path) +
                         " --ids-out " + ShellQuote(streamed_ids));
  ASSERT_EQ(streamed.exit_code, 0) << streamed.output;
  EXPECT_EQ(Ids(streamed_ids), Ids(mapped_ids)) << streamed.output;
  EXPECT_EQ(Ids(mapped_ids).front(), '[') << Ids(mapped_ids);
  EXPECT_NE(streamed.output.find("streamed through a RAM cache of 1.00 MiB"), std::string::npos)
      << streamed.output;
  EXPECT_NE(streamed.output.find("decode pos 5:"), std::string::npos) << streamed.output;
  std::ifstream in(stats_path);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["steps"].size(), 8u);  // prefill + 7 decode steps
  EXPECT_TRUE(j["experts_streamed"].get<bool>());
  uint64_t bytes = 0;
  for (const auto& s : j["steps"]) {
    bytes += s["expert_bytes_read"].get<uint64_t>();
    EXPECT_LE(s["expert_cache_hits"].get<uint64_t>(), s["expert_loads"].get<uint64_t>());
    EXPECT_GT(s["floor_s"].get<double>(), 0.0);
  }
  EXPECT_GT(bytes, 0u);
  // The breakdown: every family in every step; their sum is the forward pass, which the step's
  // wall time (measured by the CLI around the engine call) contains.
  double wall = 0, ops = 0;
  for (const auto& s : j["steps"]) {
    ASSERT_EQ(s["ops"].size(), 16u) << s.dump();
    double sum = 0;
    for (const auto& [family, seconds] : s["ops"].items()) sum += seconds.get<double>();
    EXPECT_NEAR(sum, s["ops_sum_s"].get<double>(), 1e-9);
    EXPECT_LE(sum, s["seconds"].get<double>() * 1.0001);
    EXPECT_GT(s["ops"]["expert_io_wait"].get<double>(), 0.0);
    wall += s["seconds"].get<double>();
    ops += sum;
  }
  EXPECT_NEAR(ops, wall, 0.05 * wall);
  EXPECT_NE(streamed.output.find("  ops ms: "), std::string::npos) << streamed.output;
  EXPECT_NE(streamed.output.find("where the time went (7 decode steps"), std::string::npos)
      << streamed.output;
  EXPECT_NE(streamed.output.find("  sum of families"), std::string::npos) << streamed.output;
}

// The resident scenario needs no cgroup: its JSON has the breakdown per token and per step, and
// --svg draws one bar per step (the warm-up step marked) with the floor.
TEST_F(StreamE2e, BenchDecodeResidentReportsTheBreakdownAndDrawsIt) {
  const std::string json = dir_.Join("bench.json"), svg = dir_.Join("bench.svg");
  auto run = RunCli("bench decode --model " + ShellQuote(model_) +
                    " --scenario resident --steps 3 --prompt-tokens 2 --json " + ShellQuote(json) +
                    " --svg " + ShellQuote(svg));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("| ops: routed_experts s/token |"), std::string::npos) << run.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["steps"].size(), 3u);
  EXPECT_FALSE(j["steps"][0]["counted"].get<bool>());
  ASSERT_EQ(j["ops_s_per_token"].size(), 16u);
  double sum = 0;
  for (const auto& [family, seconds] : j["ops_s_per_token"].items()) sum += seconds.get<double>();
  EXPECT_NEAR(sum, j["ops_sum_s_per_token"].get<double>(), 1e-9);
  EXPECT_GT(j["ops_s_per_token"]["kda_recurrence"].get<double>(), 0.0);
  std::ifstream svg_in(svg);
  const std::string text((std::istreambuf_iterator<char>(svg_in)),
                         std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<?xml", 0), 0u);
  EXPECT_NE(text.find("id=\"decode-steps\""), std::string::npos);
  EXPECT_NE(text.find(">routed_experts</text>"), std::string::npos);
  EXPECT_NE(text.find("floor = max(I/O, compute)"), std::string::npos);
  EXPECT_EQ(text.find("<script"), std::string::npos);
}

// `bench prefill` (docs/PERFORMANCE.md "Prefill waves"): the JSON names outside checks read, a
// 300-token prompt in one planned wave against `--prefill-chunk 32`'s ten, all in RAM.
TEST_F(StreamE2e, BenchPrefillResidentReportsTheFloorInWaves) {
  const std::string json = dir_.Join("prefill.json"), svg = dir_.Join("prefill.svg");
  auto run = RunCli("bench prefill --model " + ShellQuote(model_) +
                    " --scenario resident --prompt-tokens 300 --json " + ShellQuote(json) +
                    " --svg " + ShellQuote(svg));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  for (const char* key :
       {"prompt_tokens", "seconds", "tokens_per_s", "waves", "wave_tokens", "expert_bytes_read",
        "expert_bytes_floor", "spine_bytes_read", "disk_gbps", "fma_gflops", "read_floor_s",
        "compute_floor_s", "floor_ratio", "proc_read_bytes", "ops"}) {
    EXPECT_TRUE(j.contains(key)) << key << "\n" << j.dump(1);
  }
  EXPECT_EQ(j["prompt_tokens"], 300);
  EXPECT_EQ(j["waves"], 1);
  EXPECT_GE(j["wave_tokens"].get<int64_t>(), 300);
  EXPECT_GT(j["fma_gflops"].get<double>(), 0.0);
  EXPECT_GT(j["compute_floor_s"].get<double>(), 0.0);
  EXPECT_GT(j["floor_ratio"].get<double>(), 0.0);
  EXPECT_EQ(j["expert_bytes_read"], 0);  // mapped
  EXPECT_GT(j["expert_bytes_floor"].get<uint64_t>(), 0u);
  ASSERT_EQ(j["ops"].size(), 16u);
  EXPECT_GT(j["ops"]["routed_experts"].get<double>(), 0.0);
  std::ifstream svg_in(svg);
  const std::string text((std::istreambuf_iterator<char>(svg_in)),
                         std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<?xml", 0), 0u);
  EXPECT_NE(text.find(">routed_experts</text>"), std::string::npos);

  auto chunks = RunCli("bench prefill --model " + ShellQuote(model_) +
                       " --scenario resident --prompt-tokens 300 --prefill-chunk 32 --json " +
                       ShellQuote(json));
  ASSERT_EQ(chunks.exit_code, 0) << chunks.output;
  std::ifstream in2(json);
  const auto c = nlohmann::json::parse(in2);
  EXPECT_EQ(c["waves"], 10);
  EXPECT_EQ(c["wave_tokens"], 32);
  // Ten chunks need each expert once per chunk: more than one wave.
  EXPECT_GT(c["expert_bytes_floor"].get<uint64_t>(), j["expert_bytes_floor"].get<uint64_t>());
}

// Streamed experts in their cgroup: a wave reads each expert it needs once (within 5 % of what it
// needed: only wrong lookahead guesses add to it).
TEST_F(StreamE2e, BenchPrefillStreamedReadsEachExpertOncePerWave) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create a memory cgroup";
  const std::string json = dir_.Join("prefill.json");
  auto run = RunCli("bench prefill --model " + ShellQuote(model_) +
                    " --scenario stream-spine-resident --prompt-tokens 200 --probe-experts 64 "
                    "--expert-cache 2M --json " +
                    ShellQuote(json));
  if (run.output.find("cannot create a memory cgroup") != std::string::npos) {
    GTEST_SKIP() << "no writable memory cgroup here: " << run.output;
  }
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["waves"], 1);
  const double floor = j["expert_bytes_floor"].get<double>();
  EXPECT_GT(floor, 0.0);
  // Direct reads cover whole 4 KiB blocks: the needed bytes count them (the floor does not).
  EXPECT_GE(j["expert_bytes_needed"].get<double>(), floor);
  EXPECT_LE(j["expert_bytes_read"].get<double>(), 1.05 * j["expert_bytes_needed"].get<double>())
      << j.dump(1);
  EXPECT_GT(j["disk_gbps"].get<double>(), 0.0);
  EXPECT_GT(j["read_floor_s"].get<double>(), 0.0);
}

TEST_F(StreamE2e, TooSmallMemoryLimitFailsAtStartupWithTheNumbers) {
  auto run = RunCli("run --model " + ShellQuote(model_) + " --prompt-ids 1,2 --mem-limit 2M");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(run.output.rfind("error: memory budget 2.00 MiB (--mem-limit) is too small", 0), 0u)
      << run.output;
}

TEST_F(StreamE2e, BenchDecodeUnderARealMemoryCgroup) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create a memory cgroup";
  const std::string json = dir_.Join("bench.json");
  auto run = RunCli("bench decode --model " + ShellQuote(model_) +
                    " --scenario stream-spine-resident --steps 4 --probe-experts 64 --json " +
                    ShellQuote(json));
  if (run.output.find("cannot create a memory cgroup") != std::string::npos) {
    GTEST_SKIP() << "no writable memory cgroup here: " << run.output;
  }
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("running under a memory cgroup limit"), std::string::npos);
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  for (const char* key :
       {"scenario", "tokens", "s_per_token", "expert_bytes_per_token", "spine_bytes_per_token",
        "proc_read_bytes_per_token", "disk_gbps", "floor_s", "floor_ratio", "read_floor_s",
        "io_floor_ratio", "spine_streamed_bytes_per_token", "spine_resident_bytes",
        "major_faults_per_token"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  // One name per value: the duplicates are gone.
  for (const char* key : {"io_floor_s", "read_floor_ratio", "baseline_s_per_token"}) {
    EXPECT_FALSE(j.contains(key)) << key;
  }
  // The spine fits in this scenario's budget: all of it is resident.
  EXPECT_EQ(j["spine_resident_bytes"], j["spine_bytes"]);
  // The floor is the larger of its disk and compute terms.
  EXPECT_EQ(j["floor_s"].get<double>(),
            std::max(j["read_floor_s"].get<double>(), j["compute_s_per_token"].get<double>()));
  // Nothing streams of a resident spine: the engine read only experts, and the probe read them.
  EXPECT_EQ(j["spine_streamed_bytes_per_token"].get<double>(), 0.0);
  EXPECT_EQ(j["engine_read_bytes_per_token"], j["expert_bytes_per_token"]);
  EXPECT_EQ(j["disk_probe"], "64 random expert reads");
  EXPECT_GE(j["major_faults_per_token"].get<double>(), 0.0);
  EXPECT_EQ(j["scenario"], "stream-spine-resident");
  EXPECT_EQ(j["tokens"], 3);
  EXPECT_GT(j["expert_bytes_per_token"].get<double>(), 0.0);
  EXPECT_GT(j["disk_gbps"].get<double>(), 0.0);
  EXPECT_GT(j["floor_ratio"].get<double>(), 0.0);
  const uint64_t limit = j["memory_limit"], peak = j["peak_memory_bytes"];
  EXPECT_GT(limit, 0u);
  EXPECT_LE(peak, limit);
  // The disk's busy share is reported exactly when the kernel has a stat file for the block
  // device that holds the model, and is then a fraction.
  struct stat st {};
  ASSERT_EQ(::stat(model_.c_str(), &st), 0);
  const std::string device =
      std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  ASSERT_TRUE(j.contains("disk_busy_fraction"));
  if (std::filesystem::exists("/sys/dev/block/" + device + "/stat")) {
    ASSERT_TRUE(j["disk_busy_fraction"].is_number()) << j["disk_busy_fraction"];
    EXPECT_GE(j["disk_busy_fraction"].get<double>(), 0.0);
    EXPECT_LE(j["disk_busy_fraction"].get<double>(), 1.0);
    EXPECT_EQ(j["disk_device"], device);
  } else {
    EXPECT_TRUE(j["disk_busy_fraction"].is_null()) << j["disk_busy_fraction"];
  }
}

}  // namespace
}  // namespace deltafin::testing
