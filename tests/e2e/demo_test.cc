// End-to-end: the README's main job through the real CLI binary. tools/demo.sh's command on the
// bundled trained model (models/k3-kjv-demo) must continue a prompt in English; make-model writes
// a tiny K3-shaped checkpoint; run generates from it; logits writes every position. Also checks
// that make-model's initialisation keeps activations well-scaled through a K3-deep (93-layer)
// stack: logits neither constant nor exploding.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "cli_runner.h"
#include "deltafin/engine.h"
#include "nlohmann/json.hpp"

namespace deltafin {
namespace {

namespace fs = std::filesystem;

using testing::RunCli;

class DemoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("deltafin_e2e_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Statistics of a run's logits and per-layer outputs, gathered through the engine API.
class ScaleObserver : public ForwardObserver {
 public:
  void OnActivation(int64_t, int64_t layer, const char* name,
                    std::span<const float> values) override {
    if (std::string(name) != "layer_out" || layer < 0) return;
    double sum_sq = 0;
    for (float v : values) sum_sq += double{v} * v;
    const double rms = std::sqrt(sum_sq / static_cast<double>(values.size()));
    min_rms = std::min(min_rms, rms);
    max_rms = std::max(max_rms, rms);
  }
  double min_rms = 1e300, max_rms = 0;
};

// tools/demo.sh's default run: the continuation must be English, not token salad. The words of
// the King James text itself are 97% in wamerican's list (training/README.md).
TEST_F(DemoTest, TrainedDemoModelContinuesInEnglish) {
  std::ifstream dict("/usr/share/dict/words");
  if (!dict) GTEST_SKIP() << "no /usr/share/dict/words (apt-get install wamerican)";
  std::unordered_set<std::string> words;
  auto lower = [](std::string w) {
    for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return w;
  };
  for (std::string w; std::getline(dict, w);) words.insert(lower(w));
  // stdout is the continuation's text alone (log lines go to stderr).
  auto run = testing::RunCliStreams("run --model " DF_DEMO_MODEL_DIR
                                    " --prompt 'And God said unto Moses,' --max-new 48"
                                    " --repeat-penalty 1.3");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string text = run.out;
  const std::regex word(R"([A-Za-z]+)");
  size_t total = 0, known = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), word); it != std::sregex_iterator();
       ++it) {
    ++total;
    known += words.count(lower(it->str()));
  }
  std::printf("continuation: %s\n%zu of %zu words in the dictionary\n", text.c_str(), known, total);
  ASSERT_GE(total, 20u) << text;
  EXPECT_GE(static_cast<double>(known), 0.8 * static_cast<double>(total)) << text;
}

// The most times any run of 5 words occurs in `text`.
size_t MostRepeatedFiveWords(const std::string& text) {
  std::vector<std::string> w;
  const std::regex word(R"([A-Za-z]+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), word); it != std::sregex_iterator();
       ++it) {
    w.push_back(it->str());
  }
  std::map<std::string, size_t> counts;
  size_t most = 0;
  for (size_t i = 0; i + 5 <= w.size(); ++i) {
    std::string key;
    for (size_t j = i; j < i + 5; ++j) key += w[j] + " ";
    most = std::max(most, ++counts[key]);
  }
  return most;
}

// Greedy text of this small model loops ("nor to the house of Israel" five times); demo.sh's
// --repeat-penalty 1.3 (docs/SERVER.md "Penalties") breaks the loop, and stays lossless under
// speculation: the same ids with --speculate ngram and off.
TEST_F(DemoTest, RepeatPenaltyBreaksTheDemoLoopAndSpeculationKeepsIt) {
  const std::string base =
      "run --model " DF_DEMO_MODEL_DIR " --prompt 'And God said unto Moses,' --max-new 48";
  auto plain = testing::RunCliStreams(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_GE(MostRepeatedFiveWords(plain.out), 3u) << plain.out;
  std::string ids[2];
  const char* modes[2] = {"ngram", "off"};
  for (int i = 0; i < 2; ++i) {
    const std::string path = (dir_ / (std::string("ids_") + modes[i] + ".json")).string();
    auto run = testing::RunCliStreams(base + " --repeat-penalty 1.3 --frequency-penalty 0.1" +
                                      " --speculate " + modes[i] + " --ids-out " + path);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_LT(MostRepeatedFiveWords(run.out), 3u) << run.out;
    std::ifstream in(path);
    std::getline(in, ids[i]);
  }
  EXPECT_FALSE(ids[0].empty());
  EXPECT_EQ(ids[0], ids[1]);
  auto bad = testing::RunCliStreams(base + " --presence-penalty 3");
  EXPECT_NE(bad.exit_code, 0);
}

TEST_F(DemoTest, MakeModelThenRunGeneratesTokens) {
  const std::string model = (dir_ / "model").string();
  auto made = RunCli("make-model --preset tiny --seed 7 --out " + model);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string ids_path = (dir_ / "ids.json").string();
  auto run =
      RunCli("run --model " + model + " --prompt-ids 72,101,108 --max-new 5 --ids-out " + ids_path);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // --ids-out holds a JSON array of the 5 generated ids (stdout has their text).
  const auto ids = nlohmann::json::parse(std::ifstream(ids_path), nullptr, false);
  ASSERT_TRUE(ids.is_array()) << run.output;
  EXPECT_EQ(ids.size(), 5u) << run.output;

  // logits: the file holds [3, vocab] floats and matches a second, identical run.
  const std::string out = (dir_ / "logits.f32").string();
  auto logits = RunCli("logits --model " + model + " --tokens 72,101,108 --out " + out);
  ASSERT_EQ(logits.exit_code, 0) << logits.output;
  EXPECT_EQ(fs::file_size(out), 3u * 1024u * sizeof(float));

  // --dump: per-layer activations [positions, hidden] and one route line per position and MoE
  // layer, next to logits identical to the run without it.
  const std::string dump = (dir_ / "dump").string();
  const std::string out2 = (dir_ / "logits2.f32").string();
  auto dumped =
      RunCli("logits --model " + model + " --tokens 72,101,108 --out " + out2 + " --dump " + dump);
  ASSERT_EQ(dumped.exit_code, 0) << dumped.output;
  const size_t hidden = 256, layers = 9, positions = 3;
  for (const char* name : {"attn_in", "attn_out", "ffn_in", "ffn_out", "layer_out"}) {
    for (size_t layer = 0; layer < layers; ++layer) {
      char file[64];
      std::snprintf(file, sizeof(file), "L%02zu.%s.f32", layer, name);
      ASSERT_TRUE(fs::exists(fs::path(dump) / file)) << file;
      EXPECT_EQ(fs::file_size(fs::path(dump) / file), positions * hidden * sizeof(float)) << file;
    }
  }
  EXPECT_EQ(fs::file_size(fs::path(dump) / "final_hidden.f32"), positions * hidden * sizeof(float));
  std::ifstream routes(fs::path(dump) / "routes.jsonl");
  size_t lines = 0;
  for (std::string line; std::getline(routes, line);) ++lines;
  EXPECT_EQ(lines, positions * (layers - 1));
  std::ifstream a(out, std::ios::binary), b(out2, std::ios::binary);
  const std::string bytes_a((std::istreambuf_iterator<char>(a)), {});
  const std::string bytes_b((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(bytes_a, bytes_b) << "--dump changed the logits";
}

TEST_F(DemoTest, ActivationsStayWellScaledThroughK3Depth) {
  const std::string model = (dir_ / "deep").string();
  // K3's depth and layer schedule at tiny width; fewer experts keep the file small.
  auto made = RunCli("make-model --preset tiny --seed 3 --no-sync --out " + model +
                     " --set num_hidden_layers=93 --set num_experts=16"
                     " --set num_expert_group=1 --set topk_group=1");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EngineOptions options;
  options.model_dir = model;
  auto engine = Engine::Load(options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  auto session = (*engine)->NewSession();
  ScaleObserver scale;
  session->SetObserver(&scale);
  const std::vector<int32_t> prompt = {72, 101, 108, 108, 111, 32, 119, 111};
  const auto vocab = static_cast<size_t>((*engine)->info().vocab_size);
  std::vector<float> logits(prompt.size() * vocab);
  ASSERT_TRUE(session->Prefill(prompt, logits).ok());

  std::set<int32_t> argmaxes;
  for (size_t t = 0; t < prompt.size(); ++t) {
    std::span<const float> row(logits.data() + t * vocab, vocab);
    double mean = 0, sq = 0;
    for (float v : row) {
      ASSERT_TRUE(std::isfinite(v));
      mean += v;
    }
    mean /= static_cast<double>(vocab);
    for (float v : row) sq += (v - mean) * (v - mean);
    const double stddev = std::sqrt(sq / static_cast<double>(vocab));
    EXPECT_GT(stddev, 0.05) << "position " << t << ": logits nearly constant";
    EXPECT_LT(stddev, 50.0) << "position " << t << ": logits exploding";
    argmaxes.insert(ArgmaxToken(row));
  }
  EXPECT_GE(argmaxes.size(), 2u) << "every position predicts the same token";
  EXPECT_GT(scale.min_rms, 1e-2);
  EXPECT_LT(scale.max_rms, 1e3);
  std::printf("93 layers: layer-output RMS in [%.3g, %.3g]\n", scale.min_rms, scale.max_rms);
}

TEST_F(DemoTest, HelpIsAvailableForEveryCommand) {
  for (const char* cmd : {"", " make-model", " run", " logits", " trace-stats"}) {
    auto r = RunCli(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << cmd << r.output;
  }
}

// `bench kernels --quick` (shapes 8x smaller) prints its table and writes one JSON record per
// kernel, shape and thread count, plus the bandwidth and multiply-add probes it divides by.
TEST_F(DemoTest, BenchKernelsWritesOneRecordPerKernelAndThreadCount) {
  const std::string json = (dir_ / "kernels.json").string();
  auto r = RunCli("bench kernels --quick --min-seconds 0.01 --threads 2 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("of the multiply-add peak"), std::string::npos) << r.output;
  const auto records = nlohmann::json::parse(std::ifstream(json));
  ASSERT_TRUE(records.is_array());
  std::set<std::string> probes;
  std::set<std::pair<std::string, int>> kernels, batched;
  for (const auto& rec : records) {
    const std::string kernel = rec.at("kernel");
    const int threads = rec.at("threads");
    if (kernel == "memory_read") {
      EXPECT_GT(rec.at("gbps").get<double>(), 0.1);
      probes.insert(kernel + std::to_string(threads));
    } else if (kernel == "fma_peak") {
      EXPECT_GT(rec.at("lanes_per_second").get<double>(), 1e8);
      probes.insert(kernel + std::to_string(threads));
    } else if (rec.contains("fma_fraction")) {
      // The batched table: one record per kernel, shape, row count and thread count.
      EXPECT_GT(rec.at("gflops").get<double>(), 0) << kernel;
      EXPECT_GT(rec.at("fma_fraction").get<double>(), 0) << kernel;
      EXPECT_TRUE(batched
                      .insert({kernel + " " + rec.at("shape").get<std::string>() + " " +
                                   std::to_string(rec.at("positions").get<int>()),
                               threads})
                      .second)
          << "duplicate record " << kernel;
    } else {
      EXPECT_GT(rec.at("bytes").get<double>(), 0) << kernel;
      EXPECT_GT(rec.at("gbps").get<double>(), 0) << kernel;
      EXPECT_GT(rec.at("ratio").get<double>(), 0) << kernel;
      EXPECT_TRUE(
          kernels.insert({kernel + " " + rec.at("shape").get<std::string>(), threads}).second)
          << "duplicate record " << kernel;
    }
  }
  EXPECT_EQ(probes.size(), 4u);    // memory_read and fma_peak, 1 and 2 threads
  EXPECT_EQ(kernels.size(), 16u);  // 8 kernel/shape rows × 2 thread counts
  EXPECT_EQ(batched.size(), 80u);  // 8 kernel/shape rows × 5 row counts (--quick) × 2 threads
}

TEST_F(DemoTest, UnknownCommandFails) {
  auto r = RunCli("frobnicate");
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace deltafin
