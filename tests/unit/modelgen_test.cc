// make-model tests: a generated checkpoint must load through the same code as a real K3 download
// (config parser, checkpoint directory, tensor roster) and reproduce K3's layout facts exactly —
// dtypes, shapes, shard naming, expert contiguity, tokenizer files — and generation must be
// deterministic. Everything runs on the tiny preset in a temporary directory (a few seconds).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "io/mapped_file.h"
#include "modelgen/bpe_vocab.h"
#include "modelgen/make_model.h"
#include "quant/bf16.h"
#include "quant/mxfp4.h"
#include "unit/test_files.h"
#include "weights/config.h"
#include "weights/tensor_roster.h"

namespace deltafin {
namespace {

namespace fs = std::filesystem;

using testing::ReadTextFile;
using testing::ScopedTempDir;
using testing::WriteTextFile;

MakeModelOptions TinyOptions(const std::string& dir, uint64_t seed) {
  MakeModelOptions o;
  o.preset = "tiny";
  o.out_dir = dir;
  o.seed = seed;
  o.fsync = false;  // tests do not need durability; keep them fast
  return o;
}

std::vector<std::string> FileNames(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Every roster tensor (globals, per-layer, experts) by name.
std::map<std::string, TensorSpec> RosterByName(const ModelConfig& c) {
  std::map<std::string, TensorSpec> out;
  for (auto& s : GlobalTensorSpecs(c)) out.emplace(s.name, s);
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (auto& s : LayerTensorSpecs(c, layer)) out.emplace(s.name, s);
    if (!c.IsMoeLayer(layer)) continue;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      for (auto& s : ExpertTensorSpecs(c, layer, e)) out.emplace(s.name, s);
    }
  }
  return out;
}

// The checkpoint holds exactly the roster's tensors with the roster's dtypes and shapes.
void ExpectMatchesRoster(const std::string& dir) {
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const auto roster = RosterByName(*config);
  EXPECT_EQ(ckpt->num_tensors(), roster.size());
  for (const auto& [name, spec] : roster) {
    const TensorRecord* r = ckpt->Find(name);
    ASSERT_NE(r, nullptr) << "missing " << name;
    EXPECT_EQ(r->entry.dtype, spec.dtype) << name;
    EXPECT_EQ(r->entry.shape, spec.shape) << name;
  }
  for (const auto& name : ckpt->Names()) EXPECT_TRUE(roster.count(name)) << "unexpected " << name;
}

// Strict standard base64 decoder (tiktoken files use '=' padding); false on any malformed input.
bool Base64Decode(const std::string& in, std::string* out) {
  auto value = [](char ch) -> int {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
  };
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char ch = in[i + k];
      if (ch == '=') {
        if (!last || k < 2) return false;
        v[k] = 0;
        ++pad;
      } else {
        if (pad > 0) return false;  // data after padding
        v[k] = value(ch);
        if (v[k] < 0) return false;
      }
    }
    const uint32_t bits = static_cast<uint32_t>(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
    out->push_back(static_cast<char>(bits >> 16));
    if (pad < 2) out->push_back(static_cast<char>(bits >> 8));
    if (pad < 1) out->push_back(static_cast<char>(bits));
  }
  return true;
}

std::vector<float> ReadFloats(const Checkpoint& ckpt, const std::string& name) {
  const TensorRecord* r = ckpt.Find(name);
  EXPECT_NE(r, nullptr) << name;
  if (r == nullptr) return {};
  const TensorView v = ckpt.View(*r);
  std::vector<float> out;
  if (r->entry.dtype == DType::kF32) {
    out.resize(v.bytes / 4);
    std::memcpy(out.data(), v.data, v.bytes);
  } else {
    for (size_t i = 0; i < v.bytes / 2; ++i) {
      uint16_t b;
      std::memcpy(&b, v.data + 2 * i, 2);
      out.push_back(Bf16ToF32(b));
    }
  }
  return out;
}

double Rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / double(v.size()));
}

// One tiny model shared by the read-only tests (generated once; ~0.2 s).
class TinyModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScopedTempDir();
    MakeModelOptions o = TinyOptions(dir_->Join("model"), 1);
    o.threads = 3;  // DeterministicAcrossRunsAndThreadCounts compares against 1 thread
    const Status s = MakeModel(o, &summary_);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string ModelDir() { return dir_->Join("model"); }

  static ScopedTempDir* dir_;
  static MakeModelSummary summary_;
};
ScopedTempDir* TinyModelTest::dir_ = nullptr;
MakeModelSummary TinyModelTest::summary_;

TEST_F(TinyModelTest, WritesTheFilesOfAK3Download) {
  std::vector<std::string> want = {"config.json", "generation_config.json",
                                   "model.safetensors.index.json", "tiktoken.model",
                                   "tokenizer_config.json"};
  // 1 non-expert shard + one shard per MoE layer (8), K3's 6-digit total.
  for (int i = 1; i <= 9; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-000009.safetensors", i);
    want.push_back(name);
  }
  std::sort(want.begin(), want.end());
  EXPECT_EQ(FileNames(ModelDir()), want);  // and no *.partial left behind
  EXPECT_EQ(summary_.files.size(), want.size());
  uint64_t total = 0;
  for (const auto& f : want) total += fs::file_size(fs::path(ModelDir()) / f);
  EXPECT_EQ(summary_.total_bytes, total);
}

TEST_F(TinyModelTest, ConfigParsesWithThePresetValues) {
  auto c = LoadModelConfig(ModelDir());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->vocab_size, 1024);
  EXPECT_EQ(c->bos_token_id, 768);
  EXPECT_EQ(c->eos_token_id, 770);
  EXPECT_EQ(c->pad_token_id, 1023);
  EXPECT_EQ(c->hidden_size, 256);
  EXPECT_EQ(c->intermediate_size, 640);
  EXPECT_EQ(c->num_hidden_layers, 9);
  EXPECT_EQ(c->max_position_embeddings, 8192);
  EXPECT_EQ(c->attn_res_block_size, 4);
  EXPECT_EQ(c->kda_heads, 4);
  EXPECT_EQ(c->kda_head_dim, 128);
  EXPECT_EQ(c->mla_heads, 4);
  EXPECT_EQ(c->q_lora_rank, 96);
  EXPECT_EQ(c->kv_lora_rank, 64);
  EXPECT_EQ(c->num_experts, 64);
  EXPECT_EQ(c->num_experts_per_token, 4);
  EXPECT_EQ(c->num_expert_group, 4);
  EXPECT_EQ(c->topk_group, 2);
  EXPECT_EQ(c->ExpertBytes(), 19584u);  // docs/MODEL.md §7
  const std::vector<AttentionKind> kinds = {
      AttentionKind::kKda, AttentionKind::kKda, AttentionKind::kKda,
      AttentionKind::kMla, AttentionKind::kKda, AttentionKind::kKda,
      AttentionKind::kKda, AttentionKind::kMla, AttentionKind::kMla};
  EXPECT_EQ(c->layer_kinds, kinds);

  // The full K3 field set and structure (the golden tiny-k3 config's fields).
  const auto root = nlohmann::json::parse(ReadTextFile(ModelDir() + "/config.json"));
  EXPECT_EQ(root["media_placeholder_token_id"], 789);
  EXPECT_TRUE(root["vision_config"].is_object());
  EXPECT_EQ(root["architectures"][0], "KimiK3ForConditionalGeneration");
  const auto& tc = root["text_config"];
  for (const char* key : {"model_type",
                          "dtype",
                          "tie_word_embeddings",
                          "use_cache",
                          "max_position_embeddings",
                          "rms_norm_eps",
                          "hidden_act",
                          "activation_situ_beta",
                          "activation_situ_linear_beta",
                          "num_nextn_predict_layers",
                          "mla_use_nope",
                          "mla_use_output_gate",
                          "first_k_dense_replace",
                          "moe_layer_freq",
                          "num_shared_experts",
                          "latent_moe_use_norm",
                          "moe_router_activation_func",
                          "topk_method",
                          "use_grouped_topk",
                          "moe_renormalize",
                          "routed_scaling_factor",
                          "architectures",
                          "bos_token_id",
                          "eos_token_id",
                          "pad_token_id",
                          "vocab_size",
                          "hidden_size",
                          "intermediate_size",
                          "num_hidden_layers",
                          "attn_res_block_size",
                          "num_attention_heads",
                          "num_key_value_heads",
                          "q_lora_rank",
                          "kv_lora_rank",
                          "qk_nope_head_dim",
                          "qk_rope_head_dim",
                          "v_head_dim",
                          "num_experts",
                          "num_experts_per_token",
                          "moe_intermediate_size",
                          "routed_expert_hidden_size",
                          "num_expert_group",
                          "topk_group",
                          "linear_attn_config",
                          "quantization_config"}) {
    EXPECT_TRUE(tc.contains(key)) << key;
  }
  EXPECT_EQ(tc["linear_attn_config"]["kda_layers"], nlohmann::json({1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(tc["linear_attn_config"]["full_attn_layers"], nlohmann::json({4, 8, 9}));
  EXPECT_EQ(tc["quantization_config"]["config_groups"]["group_0"]["targets"][0],
            R"(re:.*block_sparse_moe\.experts\.\d+\.w[123]$)");
}

TEST_F(TinyModelTest, ContainsExactlyTheRosterTensors) { ExpectMatchesRoster(ModelDir()); }

TEST_F(TinyModelTest, ExpertsAreContiguousAndEachLayerIsInOneShard) {
  auto c = LoadModelConfig(ModelDir());
  ASSERT_TRUE(c.ok());
  auto ckpt = Checkpoint::Open(ModelDir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const uint64_t expert_bytes = c->ExpertBytes();
  std::map<int, int> tensors_per_shard;
  for (const auto& name : ckpt->Names()) ++tensors_per_shard[ckpt->Find(name)->shard];
  for (int64_t layer = 1; layer < c->num_hidden_layers; ++layer) {
    std::vector<std::pair<uint64_t, std::string>> spans;  // (start offset, expert id as text)
    int shard = -1;
    for (int64_t e = 0; e < c->num_experts; ++e) {
      const auto specs = ExpertTensorSpecs(*c, layer, e);
      const TensorRecord* first = ckpt->Find(specs[0].name);
      ASSERT_NE(first, nullptr);
      if (shard < 0) shard = first->shard;
      uint64_t offset = first->file_offset;
      for (const auto& s : specs) {
        const TensorRecord* r = ckpt->Find(s.name);
        ASSERT_NE(r, nullptr);
        EXPECT_EQ(r->shard, shard) << s.name;
        EXPECT_EQ(r->file_offset, offset) << s.name << " does not follow the previous part";
        offset += r->entry.end - r->entry.begin;
      }
      EXPECT_EQ(offset - first->file_offset, expert_bytes);
      spans.emplace_back(first->file_offset, std::to_string(e));
    }
    // The layer's experts form one run, in lexicographic id order (0, 1, 10, 11, ..., 2, ...),
    // and the shard holds nothing else.
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      EXPECT_EQ(spans[i].first, spans[i - 1].first + expert_bytes);
      EXPECT_LT(spans[i - 1].second, spans[i].second);
    }
    EXPECT_EQ(tensors_per_shard[shard], c->num_experts * 6);
  }
}

TEST_F(TinyModelTest, ShardsAreOrderedLikeCommonWriters) {
  // Inside a shard: F32 first, then BF16, then U8; by name within a dtype.
  auto ckpt = Checkpoint::Open(ModelDir());
  ASSERT_TRUE(ckpt.ok());
  std::map<int, std::vector<const TensorRecord*>> by_shard;
  for (const auto& name : ckpt->Names()) {
    const TensorRecord* r = ckpt->Find(name);
    by_shard[r->shard].push_back(r);
  }
  for (auto& [shard, records] : by_shard) {
    std::sort(records.begin(), records.end(),
              [](auto* a, auto* b) { return a->file_offset < b->file_offset; });
    for (size_t i = 1; i < records.size(); ++i) {
      const auto& a = records[i - 1]->entry;
      const auto& b = records[i]->entry;
      const size_t wa = DTypeSize(a.dtype), wb = DTypeSize(b.dtype);
      EXPECT_TRUE(wa > wb || (wa == wb && a.name < b.name)) << a.name << " before " << b.name;
      EXPECT_EQ(records[i]->file_offset, records[i - 1]->file_offset + (a.end - a.begin));
    }
  }
}

TEST_F(TinyModelTest, ExpertScalesAreInRangeAndWeightsWellScaled) {
  auto c = LoadModelConfig(ModelDir());
  ASSERT_TRUE(c.ok());
  auto ckpt = Checkpoint::Open(ModelDir());
  ASSERT_TRUE(ckpt.ok());
  for (const auto& name : ckpt->Names()) {
    if (!name.ends_with("weight_scale")) continue;
    const TensorView v = ckpt->View(*ckpt->Find(name));
    for (size_t i = 0; i < v.bytes; ++i) {
      ASSERT_GE(v.data[i], kMinMxfp4Scale) << name;
      ASSERT_LE(v.data[i], kMaxMxfp4Scale) << name;
    }
  }
  // Dequantised RMS ≈ 1/sqrt(inputs) for w1 [96, 128] and w2 [128, 96] of a few experts.
  for (int64_t e : {0, 17, 63}) {
    const auto specs = ExpertTensorSpecs(*c, 3, e);
    for (size_t m = 0; m < 6; m += 2) {
      const TensorView packed = ckpt->View(*ckpt->Find(specs[m].name));
      const TensorView scales = ckpt->View(*ckpt->Find(specs[m + 1].name));
      const int64_t rows = specs[m].shape[0], cols = specs[m].shape[1] * 2;
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeMxfp4Row(packed.data + r * cols / 2, scales.data + r * cols / 32,
                           static_cast<size_t>(cols), w.data() + r * cols);
      }
      EXPECT_NEAR(Rms(w) * std::sqrt(double(cols)), 1.0, 0.08) << specs[m].name;
    }
  }
}

TEST_F(TinyModelTest, SpineWeightsHaveTheIntendedDistributions) {
  auto ckpt = Checkpoint::Open(ModelDir());
  ASSERT_TRUE(ckpt.ok());
  const std::string l1 = "language_model.model.layers.1.";
  EXPECT_NEAR(Rms(ReadFloats(*ckpt, "language_model.model.embed_tokens.weight")), 1.0, 0.03);
  EXPECT_NEAR(Rms(ReadFloats(*ckpt, l1 + "self_attn.q_proj.weight")) * 16.0, 1.0, 0.03);
  EXPECT_NEAR(Rms(ReadFloats(*ckpt, l1 + "self_attn.o_proj.weight")) * std::sqrt(512.0), 1.0, 0.03);
  EXPECT_NEAR(Rms(ReadFloats(*ckpt, "language_model.lm_head.weight")) * 16.0, 1.0, 0.03);
  EXPECT_NEAR(Rms(ReadFloats(*ckpt, l1 + "self_attn.q_conv1d.weight")), 0.5, 0.03);
  for (const char* norm : {"input_layernorm.weight", "self_attn.o_norm.weight",
                           "block_sparse_moe.routed_expert_norm.weight"}) {
    for (float x : ReadFloats(*ckpt, l1 + norm)) {
      EXPECT_GE(x, 0.89f) << norm;
      EXPECT_LE(x, 1.11f) << norm;
    }
  }
  for (float x : ReadFloats(*ckpt, l1 + "block_sparse_moe.gate.e_score_correction_bias")) {
    EXPECT_LE(std::fabs(x), 0.01f);
  }
  // A_log [128]: 4 real heads with exp(A_log) in [0.6, 2.7], then exact zero padding.
  const auto a_log = ReadFloats(*ckpt, l1 + "self_attn.A_log");
  ASSERT_EQ(a_log.size(), 128u);
  for (size_t i = 0; i < a_log.size(); ++i) {
    if (i < 4) {
      EXPECT_GE(std::exp(a_log[i]), 0.6f - 1e-5f);
      EXPECT_LE(std::exp(a_log[i]), 2.7f + 1e-5f);
    } else {
      EXPECT_EQ(a_log[i], 0.0f) << i;
    }
  }
}

TEST_F(TinyModelTest, TokenizerFilesParse) {
  std::istringstream lines(ReadTextFile(ModelDir() + "/tiktoken.model"));
  std::string line;
  std::set<std::string> seen;
  int64_t expected_rank = 0;
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    ASSERT_NE(space, std::string::npos) << line;
    std::string bytes;
    ASSERT_TRUE(Base64Decode(line.substr(0, space), &bytes)) << line;
    EXPECT_EQ(line.substr(space + 1), std::to_string(expected_rank)) << "ranks must be contiguous";
    if (expected_rank < 256) {
      EXPECT_EQ(bytes, std::string(1, static_cast<char>(expected_rank)));
    } else {
      EXPECT_GE(bytes.size(), 2u);
    }
    EXPECT_TRUE(seen.insert(bytes).second) << "duplicate token at rank " << expected_rank;
    ++expected_rank;
  }
  EXPECT_EQ(expected_rank, 768);

  const auto tc =
      nlohmann::json::parse(ReadTextFile(ModelDir() + "/tokenizer_config.json"), nullptr,
                            /*allow_exceptions=*/false);
  ASSERT_FALSE(tc.is_discarded());
  const auto& added = tc["added_tokens_decoder"];
  ASSERT_EQ(added.size(), 256u);
  const std::map<int, std::string> named = {{768, "[BOS]"},
                                            {769, "[EOS]"},
                                            {770, "<|end_of_msg|>"},
                                            {771, "<|open|>"},
                                            {772, "<|close|>"},
                                            {773, "<|sep|>"},
                                            {774, "[start_header_id]"},
                                            {775, "[end_header_id]"},
                                            {777, "[EOT]"},
                                            {786, "<|media_begin|>"},
                                            {787, "<|media_content|>"},
                                            {788, "<|media_end|>"},
                                            {789, "<|media_pad|>"},
                                            {833, "<osagent_mode>"},
                                            {1022, "[UNK]"},
                                            {1023, "[PAD]"}};
  for (int id = 768; id < 1024; ++id) {
    const std::string key = std::to_string(id);
    ASSERT_TRUE(added.contains(key)) << key;
    const auto& t = added[key];
    auto it = named.find(id);
    EXPECT_EQ(t["content"], it != named.end() ? it->second : "<|reserved_token_" + key + "|>");
    EXPECT_EQ(t["lstrip"], false);
    EXPECT_EQ(t["normalized"], false);
    EXPECT_EQ(t["rstrip"], false);
    EXPECT_EQ(t["single_word"], false);
    EXPECT_EQ(t["special"], true);
  }
  EXPECT_EQ(tc["bos_token"], "[BOS]");
  EXPECT_EQ(tc["tokenizer_class"], "TikTokenTokenizer");
}

TEST_F(TinyModelTest, DeterministicAcrossRunsAndThreadCounts) {
  ScopedTempDir other;
  MakeModelOptions same = TinyOptions(other.Join("same"), 1);
  same.threads = 1;
  ASSERT_TRUE(MakeModel(same).ok());
  MakeModelOptions seed2 = TinyOptions(other.Join("seed2"), 2);
  ASSERT_TRUE(MakeModel(seed2).ok());
  const auto names = FileNames(ModelDir());
  ASSERT_EQ(FileNames(same.out_dir), names);
  for (const auto& name : names) {
    const std::string a = ReadTextFile(ModelDir() + "/" + name);
    EXPECT_EQ(a, ReadTextFile(same.out_dir + "/" + name)) << name << " differs for the same seed";
    const std::string b = ReadTextFile(seed2.out_dir + "/" + name);
    if (name.ends_with(".safetensors")) {
      EXPECT_EQ(a.size(), b.size()) << name;
      EXPECT_NE(a, b) << name << " is the same for seeds 1 and 2";
    } else {
      EXPECT_EQ(a, b) << name << " should not depend on the seed";
    }
  }
}

TEST(MakeModel, OverridesReshapeTheModel) {
  ScopedTempDir dir;
  MakeModelOptions o = TinyOptions(dir.Join("m"), 5);
  o.overrides = {"hidden_size=128", "num_hidden_layers=6",
                 "vocab_size=640",  "linear_attn_config.num_heads=2",
                 "num_experts=16",  "rms_norm_eps=1e-6"};
  const Status s = MakeModel(o);
  ASSERT_TRUE(s.ok()) << s.message();
  auto c = LoadModelConfig(o.out_dir);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->hidden_size, 128);
  EXPECT_EQ(c->num_hidden_layers, 6);
  EXPECT_EQ(c->vocab_size, 640);
  EXPECT_EQ(c->bos_token_id, 384);
  EXPECT_EQ(c->eos_token_id, 386);
  EXPECT_EQ(c->pad_token_id, 639);
  EXPECT_EQ(c->kda_heads, 2);
  EXPECT_EQ(c->num_experts, 16);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
  // K3 rule on 6 layers: MLA at zero-based 3 and 5 (last).
  const std::vector<AttentionKind> kinds = {AttentionKind::kKda, AttentionKind::kKda,
                                            AttentionKind::kKda, AttentionKind::kMla,
                                            AttentionKind::kKda, AttentionKind::kMla};
  EXPECT_EQ(c->layer_kinds, kinds);
  ExpectMatchesRoster(o.out_dir);
  // The vocabulary follows vocab_size: 384 ranks.
  const std::string tiktoken = ReadTextFile(o.out_dir + "/tiktoken.model");
  EXPECT_EQ(std::count(tiktoken.begin(), tiktoken.end(), '\n'), 384);
}

TEST(MakeModel, PresetConfigOverrides) {
  auto parse = [](const std::vector<std::string>& overrides) {
    auto text = PresetConfigJson("tiny", overrides);
    EXPECT_TRUE(text.ok()) << text.status().message();
    return ParseModelConfig(text.ok() ? text.value() : "", "test");
  };
  auto c = parse({"num_hidden_layers=13"});
  ASSERT_TRUE(c.ok());
  for (int64_t i = 0; i < 13; ++i) {
    const bool mla = (i + 1) % 4 == 0 || i == 12;
    EXPECT_EQ(c->layer_kinds[static_cast<size_t>(i)] == AttentionKind::kMla, mla) << i;
  }
  c = parse({"num_attention_heads=2"});  // num_key_value_heads follows
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mla_heads, 2);
  c = parse({"use_grouped_topk=false"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->num_expert_group, 1);
  c = parse({"linear_attn_config.gate_lower_bound=-3"});
  ASSERT_TRUE(c.ok());
  EXPECT_FLOAT_EQ(c->gate_lower_bound, -3.0f);
}

TEST(MakeModel, BadOverridesGiveClearErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"no_such_field=1", "no field 'no_such_field'"},
      {"linear_attn_config.nope=1", "no field 'linear_attn_config.nope'"},
      {"hidden_size=abc", "hidden_size must be an integer"},
      {"hidden_size=1.5", "hidden_size must be an integer"},
      {"hidden_size=", "missing value"},
      {"hidden_size", "expected key=value"},
      {"rms_norm_eps=x", "rms_norm_eps must be a finite number"},
      {"mla_use_nope=1", "mla_use_nope must be true or false"},
      {"hidden_act=gelu", "cannot be overridden"},
      {"eos_token_id=5", "derived from vocab_size"},
      {"linear_attn_config.kda_layers=1", "derived from num_hidden_layers"},
      {"vocab_size=300", "vocab_size must be at least 512"},
      {"num_hidden_layers=0", "num_hidden_layers"},
      {"num_experts_per_token=100", "num_experts_per_token"},  // caught by ParseModelConfig
      {"moe_intermediate_size=100", "multiple of 32"},
  };
  for (const auto& [override_text, want] : cases) {
    auto r = PresetConfigJson("tiny", {override_text});
    ASSERT_FALSE(r.ok()) << override_text;
    EXPECT_HAS_SUBSTR(r.status().message(), want) << override_text;
  }
  auto unknown = PresetConfigJson("huge", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_HAS_SUBSTR(unknown.status().message(), "unknown preset 'huge'");
}

TEST(MakeModel, BenchPresetMatchesTheBenchmarkDefinition) {
  auto text = PresetConfigJson("bench", {});
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto c = ParseModelConfig(text.value(), "bench");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->num_hidden_layers, 93);
  EXPECT_EQ(std::count(c->layer_kinds.begin(), c->layer_kinds.end(), AttentionKind::kMla), 24);
  EXPECT_EQ(c->layer_kinds[91], AttentionKind::kMla);
  EXPECT_EQ(c->layer_kinds[92], AttentionKind::kMla);
  EXPECT_EQ(c->hidden_size, 1024);
  EXPECT_EQ(c->intermediate_size, 4864);
  EXPECT_EQ(c->kda_heads, 8);
  EXPECT_EQ(c->mla_heads, 8);
  EXPECT_EQ(c->q_lora_rank, 256);
  EXPECT_EQ(c->kv_lora_rank, 128);
  EXPECT_EQ(c->qk_nope_head_dim, 64);
  EXPECT_EQ(c->qk_rope_head_dim, 32);
  EXPECT_EQ(c->v_head_dim, 64);
  EXPECT_EQ(c->num_experts, 896);
  EXPECT_EQ(c->num_experts_per_token, 16);
  EXPECT_EQ(c->num_expert_group, 1);
  EXPECT_EQ(c->topk_group, 1);
  EXPECT_EQ(c->attn_res_block_size, 12);
  EXPECT_EQ(c->vocab_size, 32768);
  EXPECT_EQ(c->bos_token_id, 32512);
  EXPECT_EQ(c->ExpertBytes(), 208896u);  // bench README
}

TEST(MakeModel, RefusesANonEmptyDirectoryWithoutForce) {
  ScopedTempDir dir;
  WriteTextFile(dir.Join("notes.txt"), "keep me");
  WriteTextFile(dir.Join("model-00001-of-000042.safetensors"), "stale shard");
  MakeModelOptions o = TinyOptions(dir.path(), 1);
  Status s = MakeModel(o);
  ASSERT_FALSE(s.ok());
  EXPECT_HAS_SUBSTR(s.message(), "--force");
  EXPECT_FALSE(fs::exists(dir.Join("config.json")));

  o.force = true;
  s = MakeModel(o);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(fs::exists(dir.Join("notes.txt")));  // not a model file: left alone
  EXPECT_FALSE(fs::exists(dir.Join("model-00001-of-000042.safetensors")));
  ExpectMatchesRoster(dir.path());
}

TEST(MakeModel, SplitsTheSpineAcrossShardsBelowTheLimit) {
  ScopedTempDir dir;
  MakeModelOptions o = TinyOptions(dir.Join("m"), 3);
  o.max_spine_shard_bytes = 4'000'000;
  const Status s = MakeModel(o);
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectMatchesRoster(o.out_dir);
  auto ckpt = Checkpoint::Open(o.out_dir);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_GT(ckpt->shard_paths().size(), 9u);  // > 1 spine shard + 8 expert shards
  std::map<int, uint64_t> spine_bytes;
  for (const auto& name : ckpt->Names()) {
    if (name.find(".experts.") != std::string::npos) continue;
    const TensorRecord* r = ckpt->Find(name);
    spine_bytes[r->shard] += r->entry.end - r->entry.begin;
  }
  for (const auto& [shard, bytes] : spine_bytes) EXPECT_LE(bytes, o.max_spine_shard_bytes);
}

// The k3 preset is K3 itself (docs/MODEL.md §1.2) in K3's real file layout (§2.1, §2.11): 96
// shards, each MoE layer's 896 experts in one shard, the vision tensors in their own. Planned, not
// written.
TEST(MakeModel, K3PresetPlansTheReal96ShardLayout) {
  auto text = PresetConfigJson("k3", {});
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto config = ParseModelConfig(*text, "k3");
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->hidden_size, 7168);
  EXPECT_EQ(config->num_hidden_layers, 93);
  EXPECT_EQ(config->vocab_size, 163840);
  EXPECT_EQ(config->num_experts, 896);
  EXPECT_EQ(config->num_experts_per_token, 16);
  EXPECT_EQ(config->bos_token_id, 163584);
  EXPECT_EQ(config->eos_token_id, 163586);
  const auto root = nlohmann::json::parse(*text);
  ASSERT_TRUE(root.contains("vision_config"));
  EXPECT_EQ(root["vision_config"]["model_type"], "kimi_k3_vision");

  MakeModelOptions o;
  o.preset = "k3";
  auto shards = PlanModelShards(o);
  ASSERT_TRUE(shards.ok()) << shards.status().message();
  ASSERT_EQ(shards->size(), 96u);
  std::map<std::string, int> kinds;
  std::map<std::string, uint64_t> bytes;
  size_t vision_tensors = 0;
  for (size_t i = 0; i < shards->size(); ++i) {
    const ShardSummary& s = (*shards)[i];
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-000096.safetensors", i + 1);
    EXPECT_EQ(s.file_name, name);
    ++kinds[s.kind];
    bytes[s.kind] += s.data_bytes;
    if (s.kind == "experts") {
      EXPECT_EQ(s.data_bytes, 15'722'348'544u) << s.file_name;  // 896 x 17,547,264
      EXPECT_EQ(s.tensors, 896u * 6);
    }
    if (s.kind == "vision") vision_tensors += s.tensors;
  }
  EXPECT_EQ(kinds["spine"], 3);
  EXPECT_EQ(kinds["experts"], 92);
  EXPECT_EQ(kinds["vision"], 1);
  EXPECT_EQ(vision_tensors, 168u);  // 165 vision_tower.* + 3 mm_projector.*
  EXPECT_EQ(bytes["spine"], 113'509'540'864u);
  EXPECT_EQ(bytes["spine"] + bytes["experts"], 1'559'965'606'912u);
  EXPECT_GT(bytes["vision"], 700'000'000u);  // about 0.8 GB
  EXPECT_LT(bytes["vision"], 1'000'000'000u);
}

// Sparse mode writes every header and the index and leaves tensor data as holes: full-size files
// of zeros that load like any checkpoint. The k3 preset cut to two layers (and, as the config
// check requires of fewer than 93, a smaller hidden size) keeps its vision shard.
TEST(MakeModel, SparseWritesHolesThatLoadLikeAnyCheckpoint) {
  ScopedTempDir dir;
  MakeModelOptions o;
  o.preset = "k3";
  o.out_dir = dir.Join("m");
  o.overrides = {"num_hidden_layers=2", "hidden_size=1024"};
  o.sparse = true;
  o.fsync = false;
  MakeModelSummary summary;
  const Status s = MakeModel(o, &summary);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GT(summary.total_bytes, 17'000'000'000u);  // 15.7 GB of experts + spine + vision

  auto ckpt = Checkpoint::Open(o.out_dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_EQ(ckpt->shard_paths().size(), 5u);  // 3 spine + 1 expert + 1 vision
  EXPECT_TRUE(ckpt->shard_paths().back().ends_with("model-00005-of-000005.safetensors"));
  int vision = 0, projector = 0;
  for (const auto& name : ckpt->Names()) {
    vision += name.starts_with("vision_tower.");
    projector += name.starts_with("mm_projector.");
  }
  EXPECT_EQ(vision, 165);
  EXPECT_EQ(projector, 3);
  // Every roster tensor is present with its dtype and shape; the others are the vision ones.
  auto config = LoadModelConfig(o.out_dir);
  ASSERT_TRUE(config.ok()) << config.status().message();
  const auto roster = RosterByName(*config);
  EXPECT_EQ(ckpt->num_tensors(), roster.size() + 168);
  for (const auto& [name, spec] : roster) {
    const TensorRecord* r = ckpt->Find(name);
    ASSERT_NE(r, nullptr) << "missing " << name;
    EXPECT_EQ(r->entry.dtype, spec.dtype) << name;
    EXPECT_EQ(r->entry.shape, spec.shape) << name;
  }
  // Holes: the files have their full size but (almost) no blocks, and read as zeros.
  uint64_t apparent = 0, allocated = 0;
  for (const auto& path : ckpt->shard_paths()) {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    apparent += static_cast<uint64_t>(st.st_size);
    allocated += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  EXPECT_GT(apparent, 17'000'000'000u);
  EXPECT_LT(allocated, 64'000'000u);  // headers only
  const std::vector<float> a_log =
      ReadFloats(*ckpt, LayerTensorName(0, "self_attn.A_log"));  // padding must be 0: it is
  ASSERT_EQ(a_log.size(), 128u);
  for (float v : a_log) EXPECT_EQ(v, 0.0f);
}

TEST(MakeModel, RefusesAbsurdSizesBeforeWriting) {
  ScopedTempDir dir;
  MakeModelOptions o = TinyOptions(dir.Join("m"), 1);
  o.overrides = {"hidden_size=100000000"};
  const Status s = MakeModel(o);
  ASSERT_FALSE(s.ok());
  EXPECT_HAS_SUBSTR(s.message(), "hidden_size");
  EXPECT_FALSE(fs::exists(o.out_dir));
}

// Runs the deltafin binary with `args`; returns its exit code and its stderr in *err.
int RunDeltafin(const std::string& args, const ScopedTempDir& scratch, std::string* err) {
  const std::string err_path = scratch.Join("stderr.txt");
  const std::string cmd = std::string(DF_BINARY) + " " + args + " 2>" + err_path + " >/dev/null";
  const int status = std::system(cmd.c_str());
  *err = ReadTextFile(err_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(MakeModelCli, WritesSummaryAndReportsErrorsOnOneLine) {
  ScopedTempDir dir;
  const std::string out = dir.Join("model");
  std::string err;
  ASSERT_EQ(RunDeltafin("make-model --preset tiny --out " + out + " --seed 9 --no-sync", dir, &err),
            0)
      << err;
  EXPECT_HAS_SUBSTR(err, "make-model: wrote 14 files");
  EXPECT_HAS_SUBSTR(err, "MB/s");
  ExpectMatchesRoster(out);

  // Non-empty output directory without --force.
  EXPECT_EQ(RunDeltafin("make-model --preset tiny --out " + out, dir, &err), 1);
  EXPECT_EQ(err.rfind("error: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_HAS_SUBSTR(err, "--force");

  EXPECT_EQ(
      RunDeltafin("make-model --preset tiny --out " + out + " --force --set bogus=1", dir, &err),
      1);
  EXPECT_HAS_SUBSTR(err, "error: override 'bogus=1': text_config has no field 'bogus'");

  // --force replaces the model; the same seed reproduces the same bytes.
  const std::string before = ReadTextFile(out + "/model-00003-of-000009.safetensors");
  ASSERT_EQ(RunDeltafin("make-model --preset tiny --out " + out + " --seed 9 --force --threads 1",
                        dir, &err),
            0)
      << err;
  EXPECT_EQ(ReadTextFile(out + "/model-00003-of-000009.safetensors"), before);
}

TEST(BpeVocab, BuildsDistinctTokensOfAnySize) {
  auto tokens = BuildBpeVocab(32512);  // the bench vocabulary
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  ASSERT_EQ(tokens->size(), 32512u);
  std::set<std::string> distinct(tokens->begin(), tokens->end());
  EXPECT_EQ(distinct.size(), tokens->size());
  for (int b = 0; b < 256; ++b) EXPECT_EQ((*tokens)[b], std::string(1, static_cast<char>(b)));
  size_t longest = 0;
  for (const auto& t : *tokens) longest = std::max(longest, t.size());
  EXPECT_LE(longest, 16u);
  // Learned merges come first: " the" is an early rank.
  const auto it = std::find(tokens->begin(), tokens->end(), " the");
  ASSERT_NE(it, tokens->end());
  EXPECT_LT(it - tokens->begin(), 300);

  EXPECT_FALSE(BuildBpeVocab(100).ok());
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
}

}  // namespace
}  // namespace deltafin
