// End-to-end: `run --trace` writes one router-trace line per fed position with k experts for every
// MoE layer, and `trace-stats` reads it back (text report and --json), through the real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace deltafin {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::RunCli;

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("deltafin_trace_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TraceTest, RunTraceThenTraceStats) {
  const std::string model = (dir_ / "model").string();
  auto made = RunCli("make-model --preset tiny --seed 7 --no-sync --out " + model);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  std::ifstream config_in(model + "/config.json");
  const json config = json::parse(config_in, nullptr, false);
  ASSERT_FALSE(config.is_discarded());
  const json& tc = config.contains("text_config") ? config["text_config"] : config;
  const int64_t num_layers = tc.at("num_hidden_layers").get<int64_t>();
  const int64_t first_moe = tc.value("first_k_dense_replace", int64_t{0});
  const int64_t k = tc.at("num_experts_per_token").get<int64_t>();
  const int64_t num_experts = tc.at("num_experts").get<int64_t>();
  ASSERT_LT(first_moe, num_layers);

  // 5 prompt positions, prefilled in chunks of 2 (positions complete out of layer order), then
  // 6 generated tokens of which the first 5 are fed back: 10 positions.
  const std::string trace = (dir_ / "router_trace.jsonl").string();
  const std::string flags = " --prompt-ids 72,101,108,108,111 --prefill-chunk 2 --max-new 6";
  const std::string ids = (dir_ / "ids.json").string();
  auto run = RunCli("run --model " + model + flags + " --ignore-eos --trace " + trace +
                    " --ids-out " + ids);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream ids_in(ids);
  const json generated = json::parse(ids_in, nullptr, false);
  ASSERT_TRUE(generated.is_array() && generated.size() == 6) << run.output;
  std::vector<int64_t> fed = {72, 101, 108, 108, 111};
  for (size_t i = 0; i + 1 < generated.size(); ++i) fed.push_back(generated[i].get<int64_t>());

  std::ifstream in(trace);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "line " << n + 1 << ": " << line;
    ASSERT_LT(n, fed.size()) << "too many lines";
    EXPECT_EQ(j.at("position").get<int64_t>(), static_cast<int64_t>(n));
    EXPECT_EQ(j.at("token").get<int64_t>(), fed[n]);
    const json& layers = j.at("layers");
    ASSERT_EQ(static_cast<int64_t>(layers.size()), num_layers - first_moe) << line;
    for (size_t l = 0; l < layers.size(); ++l) {
      EXPECT_EQ(layers[l].at("layer").get<int64_t>(), first_moe + static_cast<int64_t>(l));
      const json& experts = layers[l].at("experts");
      const json& weights = layers[l].at("weights");
      ASSERT_EQ(static_cast<int64_t>(experts.size()), k) << line;
      ASSERT_EQ(static_cast<int64_t>(weights.size()), k) << line;
      std::set<int64_t> distinct;
      for (const json& e : experts) {
        const int64_t id = e.get<int64_t>();
        EXPECT_GE(id, 0);
        EXPECT_LT(id, num_experts);
        distinct.insert(id);
      }
      EXPECT_EQ(static_cast<int64_t>(distinct.size()), k) << line;
      for (const json& w : weights) EXPECT_TRUE(w.is_number()) << line;
    }
    ++n;
  }
  EXPECT_EQ(n, fed.size());

  const std::string stats_json = (dir_ / "stats.json").string();
  const std::string stats_svg = (dir_ / "stats.svg").string();
  auto stats = RunCli("trace-stats " + trace + " --json " + stats_json + " --svg " + stats_svg);
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  EXPECT_NE(stats.output.find("tokens 10, MoE layers " + std::to_string(num_layers - first_moe)),
            std::string::npos)
      << stats.output;
  EXPECT_NE(stats.output.find("hit rate"), std::string::npos) << stats.output;
  std::ifstream sj(stats_json);
  const json s = json::parse(sj, nullptr, false);
  ASSERT_FALSE(s.is_discarded());
  EXPECT_EQ(s.at("tokens").get<int64_t>(), 10);
  EXPECT_EQ(s.at("accesses").get<int64_t>(), 10 * (num_layers - first_moe) * k);
  const int64_t keys = s.at("keys_seen").get<int64_t>();
  EXPECT_EQ(s.at("lru").at("max_cache").get<int64_t>(), keys);
  ASSERT_EQ(static_cast<int64_t>(s.at("lru").at("hit_rate").size()), keys);
  // The largest cache only misses the first use of each key.
  EXPECT_EQ(s.at("lru").at("hits").back().get<int64_t>(), s.at("accesses").get<int64_t>() - keys);
  // --svg: one heatmap cell per (layer, expert) key the trace used, and the other two charts.
  std::ifstream svg_in(stats_svg);
  const std::string svg((std::istreambuf_iterator<char>(svg_in)), std::istreambuf_iterator<char>());
  int64_t cells = 0;
  for (size_t at = svg.find("class=\"cell\""); at != std::string::npos;
       at = svg.find("class=\"cell\"", at + 1)) {
    ++cells;
  }
  EXPECT_EQ(cells, keys);
  for (const char* id : {"id=\"usage-heatmap\"", "id=\"overlap\"", "id=\"lru\""}) {
    EXPECT_NE(svg.find(id), std::string::npos) << id;
  }

  // Errors: one line, exit 1.
  auto missing = RunCli("trace-stats " + (dir_ / "nope.jsonl").string());
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("cannot open"), std::string::npos) << missing.output;
  {
    std::ofstream bad(dir_ / "bad.jsonl");
    std::ifstream good(trace);
    std::getline(good, line);
    bad << line << "\n{not json\n";
  }
  auto bad = RunCli("trace-stats " + (dir_ / "bad.jsonl").string());
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("bad.jsonl:2: malformed JSON"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace deltafin
