// The row-int8 spine end to end (docs/INT8.md): `convert-spine-int8` on a make-model tiny
// checkpoint (every target converted, resumable, --verify names a corrupted file and the rerun
// repairs it, a truncated file is re-converted), the attached int8 matrices against a scalar
// dequantized reference, and `logits` / `run --spine int8` through the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "deltafin/engine.h"
#include "format/checkpoint.h"
#include "model/linear.h"
#include "quant/bf16.h"
#include "quant/row_int8.h"
#include "unit/test_files.h"
#include "weights/config.h"
#include "weights/expert_streamer.h"
#include "weights/spine_int8.h"
#include "weights/weights.h"

namespace deltafin::testing {
namespace {

namespace fs = std::filesystem;

class SpineInt8E2e : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.Join("tiny");
    auto made = RunCli("make-model --preset tiny --seed 11 --no-sync --out " + ShellQuote(model_));
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  std::string Convert(const std::string& extra, int want_exit) {
    auto run = RunCli("convert-spine-int8 --model " + ShellQuote(model_) + extra);
    EXPECT_EQ(run.exit_code, want_exit) << run.output;
    return run.output;
  }
  std::string Out(const std::string& name) const { return model_ + "/spine-int8/" + name; }
  // Spec §3.6 targets, written out independently of weights/spine_int8.cc.
  std::set<std::string> ExpectedTargets() const {
    auto ckpt = Checkpoint::Open(model_);
    EXPECT_TRUE(ckpt.ok());
    std::set<std::string> out;
    for (const auto& name : ckpt->Names()) {
      const TensorRecord* rec = ckpt->Find(name);
      if (rec->entry.dtype != DType::kBF16 || rec->entry.shape.size() != 2) continue;
      bool skip = name == "language_model.model.embed_tokens.weight";
      for (const char* s : {"conv1d", "norm", "A_log", "dt_bias", "res_proj",
                            "e_score_correction_bias", ".experts.", "vision", "mm_projector"}) {
        skip = skip || name.find(s) != std::string::npos;
      }
      if (!skip) out.insert(name);
    }
    return out;
  }
  ScopedTempDir dir_;
  std::string model_;
};

TEST_F(SpineInt8E2e, ConvertsEveryTargetResumesVerifiesAndRepairs) {
  const std::string first = Convert("", 0);
  EXPECT_HAS_SUBSTR(first, "converted ");
  ASSERT_TRUE(fs::exists(Out("manifest.json"))) << first;
  const auto manifest = nlohmann::json::parse(ReadTextFile(Out("manifest.json")));
  EXPECT_EQ(manifest["format_version"], 1);
  const auto targets = ExpectedTargets();
  // 9 layers of the tiny preset: lm_head plus every per-layer linear.
  EXPECT_GT(targets.size(), 100u);
  std::set<std::string> listed;
  auto ckpt = Checkpoint::Open(model_);
  ASSERT_TRUE(ckpt.ok());
  for (const auto& t : manifest["tensors"]) {
    const std::string name = t["name"];
    listed.insert(name);
    const auto& shape = ckpt->Find(name)->entry.shape;
    EXPECT_EQ(t["rows"], shape[0]) << name;
    EXPECT_EQ(t["cols"], shape[1]) << name;
    EXPECT_EQ(fs::file_size(Out(name + ".i8")), static_cast<uint64_t>(shape[0] * shape[1]));
    EXPECT_EQ(fs::file_size(Out(name + ".sc")), static_cast<uint64_t>(shape[0] * 2));
  }
  EXPECT_EQ(listed, targets);
  EXPECT_EQ(listed.count("language_model.lm_head.weight"), 1u);
  EXPECT_EQ(listed.count("language_model.model.embed_tokens.weight"), 0u);
  for (const auto& f : fs::directory_iterator(model_ + "/spine-int8")) {
    EXPECT_NE(f.path().extension(), ".tmp") << f.path();
    EXPECT_EQ(f.path().string().find(".partial"), std::string::npos) << f.path();
  }

  // A rerun converts nothing and says so.
  const std::string again = Convert("", 0);
  EXPECT_HAS_SUBSTR(again, "nothing to convert");
  EXPECT_EQ(again.find("[1/"), std::string::npos) << again;

  // One flipped byte: --verify names the file, re-converts it and exits 1; the next --verify
  // passes.
  const std::string victim = "language_model.model.layers.1.self_attn.q_proj.weight";
  auto bytes = ReadBinaryFile(Out(victim + ".i8"));
  const auto original = bytes;
  bytes[bytes.size() / 2] ^= 0x5a;
  WriteBinaryFile(Out(victim + ".i8"), bytes);
  EXPECT_HAS_SUBSTR(Convert("", 0), "nothing to convert");  // same size: only --verify sees it
  const std::string verify = Convert(" --verify", 1);
  EXPECT_HAS_SUBSTR(verify, "mismatch: " + victim + ": ");
  EXPECT_HAS_SUBSTR(verify, victim + ".i8 sha256");
  EXPECT_HAS_SUBSTR(Convert(" --verify", 0), "every file matches the manifest");
  EXPECT_EQ(ReadBinaryFile(Out(victim + ".i8")), original);

  // A truncated scale file: a plain rerun re-converts exactly that tensor.
  const std::string cut = "language_model.lm_head.weight";
  fs::resize_file(Out(cut + ".sc"), 10);
  const std::string repaired = Convert("", 0);
  EXPECT_HAS_SUBSTR(repaired, "mismatch: " + cut);
  EXPECT_HAS_SUBSTR(repaired, "[1/1] " + cut);
  EXPECT_HAS_SUBSTR(repaired, "converted 1 tensors");

  // An interrupted run: files of one tensor gone, manifest gone, a torn progress line.
  const std::string lost = "language_model.model.layers.2.mlp_res_proj.weight";  // not a target
  EXPECT_EQ(targets.count(lost), 0u);
  const std::string gone = "language_model.model.layers.3.block_sparse_moe.gate.weight";
  fs::remove(Out(gone + ".i8"));
  fs::remove(Out(gone + ".sc"));
  fs::remove(Out("manifest.json"));
  WriteTextFile(Out("progress.jsonl"), ReadTextFile(Out("progress.jsonl")) + "{\"name\": \"lan");
  const std::string resumed = Convert("", 0);
  EXPECT_HAS_SUBSTR(resumed, "[1/1] " + gone);
  EXPECT_TRUE(fs::exists(Out("manifest.json")));
  EXPECT_HAS_SUBSTR(Convert(" --verify", 0), "every file matches the manifest");
}

TEST_F(SpineInt8E2e, AttachedMatricesMatchTheDequantizedReference) {
  Convert("", 0);
  auto w = ModelWeights::Load(model_, BindOptions{});
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_TRUE(AttachSpineInt8(model_, w->get()).ok());
  ModelWeights& mw = **w;
  int mla_layers = 0;
  for (const auto& lw : mw.layers) {
    if (lw.kind == AttentionKind::kMla) {
      ++mla_layers;
      EXPECT_EQ(lw.mla.kv_b_proj.q, nullptr);  // read in absorbed form: stays BF16
      EXPECT_NE(lw.mla.q_b_proj.q, nullptr);
    } else {
      EXPECT_NE(lw.kda.o_proj.q, nullptr);
    }
    if (lw.is_moe) {
      EXPECT_NE(lw.moe.router.q, nullptr);
    }
  }
  EXPECT_GT(mla_layers, 0);
  // lm_head: every weight within half a step of its BF16 value, and Linear equals the scalar
  // product of the dequantized weights.
  const SpineMatrix& m = mw.lm_head;
  ASSERT_NE(m.q, nullptr);
  std::vector<float> x(static_cast<size_t>(m.cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<float> y(static_cast<size_t>(m.rows));
  Linear(m, x.data(), 1, y.data());
  for (int64_t r = 0; r < m.rows; ++r) {
    float mx = 0.0f;
    for (int64_t c = 0; c < m.cols; ++c)
      mx = std::max(mx, std::fabs(Bf16ToF32(m.data[r * m.cols + c])));
    const float s32 = mx == 0.0f ? 1.0f : mx / 127.0f;
    ASSERT_EQ(m.q_scales[r], F16ToF32(F32ToF16(s32))) << r;
    double ref = 0;
    for (int64_t c = 0; c < m.cols; ++c) {
      const int8_t q = m.q[r * m.cols + c];
      ASSERT_LE(std::fabs(Bf16ToF32(m.data[r * m.cols + c]) - s32 * q), s32 * 0.5001f);
      ref += static_cast<double>(q) * x[static_cast<size_t>(c)];
    }
    ref *= m.q_scales[r];
    ASSERT_NEAR(y[static_cast<size_t>(r)], ref, 1e-4 * (1 + std::fabs(ref))) << r;
  }
}

std::vector<float> ReadFloats(const std::string& path) {
  const auto bytes = ReadBinaryFile(path);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST_F(SpineInt8E2e, LogitsAndRunUseTheInt8Spine) {
  // Without a conversion: a clear error naming the command.
  std::string ids;
  for (int i = 0; i < 32; ++i) ids += (i ? "," : "") + std::to_string((i * 37 + 5) % 1000);
  auto refused = RunCli("logits --model " + ShellQuote(model_) + " --tokens " + ids + " --out " +
                        ShellQuote(dir_.Join("x.f32")) + " --spine int8");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_HAS_SUBSTR(refused.output, "manifest.json not found");
  EXPECT_HAS_SUBSTR(refused.output, "deltafin convert-spine-int8 --model " + model_);

  Convert("", 0);
  const std::string bf16 = dir_.Join("bf16.f32"), int8 = dir_.Join("int8.f32");
  const std::string common = "logits --model " + ShellQuote(model_) + " --tokens " + ids;
  auto a = RunCli(common + " --out " + ShellQuote(bf16) + " --dump " + ShellQuote(dir_.Join("da")));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = RunCli(common + " --out " + ShellQuote(int8) + " --spine int8 --dump " +
                  ShellQuote(dir_.Join("db")));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto la = ReadFloats(bf16), lb = ReadFloats(int8);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_NE(ReadBinaryFile(bf16), ReadBinaryFile(int8)) << "int8 logits identical to BF16";
  // Layer 0 (no routing yet): int8 changes the attention output by about 1%.
  const auto da = ReadFloats(dir_.Join("da/L00.attn_out.f32"));
  const auto db = ReadFloats(dir_.Join("db/L00.attn_out.f32"));
  double num = 0, den = 0;
  for (size_t i = 0; i < da.size(); ++i) {
    num += (da[i] - db[i]) * (da[i] - db[i]);
    den += da[i] * da[i];
  }
  const double rel = std::sqrt(num / den);
  EXPECT_GT(rel, 1e-4);
  EXPECT_LT(rel, 0.03);
  // Top-1 agreement over the 32 positions. The tiny model has random weights: from layer 1 on,
  // quantized routers pick other experts and the differences grow layer by layer, so agreement is
  // far from perfect (measured 16/32 at commit time; docs/INT8.md has the bench-model numbers).
  // The bound only says int8 still tracks the model: chance is 1/1024.
  const size_t vocab = la.size() / 32;
  int agree = 0;
  for (size_t t = 0; t < 32; ++t) {
    const auto ra = la.begin() + static_cast<std::ptrdiff_t>(t * vocab);
    const auto rb = lb.begin() + static_cast<std::ptrdiff_t>(t * vocab);
    agree += std::max_element(ra, ra + static_cast<std::ptrdiff_t>(vocab)) - ra ==
             std::max_element(rb, rb + static_cast<std::ptrdiff_t>(vocab)) - rb;
  }
  EXPECT_GE(agree, 10) << "top-1 agreement " << agree << "/32";

  // `run` says at load that the spine is not weight-exact; the BF16 default does not.
  const std::string run = "run --model " + ShellQuote(model_) + " --prompt-ids 5,6,7 --max-new 2";
  auto r8 = RunCli(run + " --spine int8");
  ASSERT_EQ(r8.exit_code, 0) << r8.output;
  EXPECT_HAS_SUBSTR(r8.output, "spine: row-int8 (not weight-exact: logits differ from the BF16");
  auto r16 = RunCli(run);
  ASSERT_EQ(r16.exit_code, 0) << r16.output;
  EXPECT_EQ(r16.output.find("row-int8"), std::string::npos) << r16.output;
}

// The int8 spine streamed through the ring (direct reads of the .i8 files, some groups pinned)
// computes the same logits as the int8 spine mapped, bit for bit, at ring depths 1 and 2.
TEST_F(SpineInt8E2e, StreamedInt8SpineMatchesTheMappedInt8Spine) {
  Convert("", 0);
  EngineOptions options;
  options.model_dir = model_;
  options.spine_int8 = true;
  options.io_threads = 2;
  auto mapped = Engine::Load(options);
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  auto config = LoadModelConfig(model_);
  ASSERT_TRUE(config.ok());
  options.experts = EngineOptions::Experts::kStreamed;
  options.prefill_chunk = 32;  // fixed: the session's bytes below are what the budget must hold
  auto full = Engine::Plan(options);
  ASSERT_TRUE(full.ok()) << full.status().message();
  options.mem_limit = full->session_bytes +
                      ExpertStreamer::MinCacheBytes(*config, options.io_threads) +
                      full->spine_bytes - 4096;
  const std::vector<int32_t> prompt = {5, 17, 99, 3};
  const auto vocab = static_cast<size_t>((*mapped)->info().vocab_size);
  std::vector<float> want(prompt.size() * vocab), got(prompt.size() * vocab);
  auto reference = (*mapped)->NewSession();
  ASSERT_TRUE(reference->Prefill(prompt, want).ok());
  for (int readahead : {0, 1}) {
    SCOPED_TRACE("readahead " + std::to_string(readahead));
    options.spine_readahead = readahead;
    auto streamed = Engine::Load(options);
    ASSERT_TRUE(streamed.ok()) << streamed.status().message();
    ASSERT_FALSE((*streamed)->info().spine_resident) << (*streamed)->info().memory_plan;
    EXPECT_GT((*streamed)->info().spine_streamed_bytes, 0u);
    auto session = (*streamed)->NewSession();
    ASSERT_TRUE(session->Prefill(prompt, got).ok());
    EXPECT_EQ(got, want);
    EXPECT_GT(session->stats().spine_bytes_read, 0u);
  }
}

}  // namespace
}  // namespace deltafin::testing
