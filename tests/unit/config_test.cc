// Tests of ParseModelConfig (src/weights/config.h): the golden tiny-k3 config, the docs/MODEL.md §7
// tiny config and a full K3 config (docs/MODEL.md §1, built in-test) parse to the expected values;
// every missing field, wrong type, unsupported value and broken layer schedule is refused with a
// message that names the field; and a config with K3's hidden size must match every other K3
// number.
#include "weights/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "unit/test_files.h"

namespace deltafin {
namespace {

using nlohmann::json;

constexpr char kLabel[] = "test-config.json";

std::string GoldenModelDir() { return std::string(DF_TEST_DATA_DIR) + "/golden/tiny-k3"; }

json GoldenJson() { return json::parse(testing::ReadTextFile(GoldenModelDir() + "/config.json")); }

// docs/MODEL.md §7 (tests/data/k3-tiny-config.json; provenance in tests/data/README.md).
json SpecTinyJson() {
  return json::parse(testing::ReadTextFile(std::string(DF_TEST_DATA_DIR) + "/k3-tiny-config.json"));
}

// The full K3 config of docs/MODEL.md §1, made by editing the K3 numbers into the spec-tiny config
// (which already has K3's field set, flags, vocabulary and token ids).
json K3Json() {
  json j = SpecTinyJson();
  json& t = j["text_config"];
  t["hidden_size"] = 7168;
  t["intermediate_size"] = 33792;
  t["num_hidden_layers"] = 93;
  t["max_position_embeddings"] = 1048576;
  t["attn_res_block_size"] = 12;
  t["num_attention_heads"] = 96;
  t["num_key_value_heads"] = 96;
  t["q_lora_rank"] = 1536;
  t["kv_lora_rank"] = 512;
  t["qk_nope_head_dim"] = 128;
  t["qk_rope_head_dim"] = 64;
  t["v_head_dim"] = 128;
  t["num_experts"] = 896;
  t["num_experts_per_token"] = 16;
  t["num_shared_experts"] = 2;
  t["moe_intermediate_size"] = 3072;
  t["routed_expert_hidden_size"] = 3584;
  t["num_expert_group"] = 1;
  t["topk_group"] = 1;
  t["linear_attn_config"]["num_heads"] = 96;
  t["linear_attn_config"]["head_dim"] = 128;
  // One-based: MLA every 4th layer and 93; KDA the rest.
  std::vector<int> kda, mla;
  for (int one_based = 1; one_based <= 93; ++one_based) {
    (one_based % 4 == 0 || one_based == 93 ? mla : kda).push_back(one_based);
  }
  t["linear_attn_config"]["kda_layers"] = kda;
  t["linear_attn_config"]["full_attn_layers"] = mla;
  return j;
}

Result<ModelConfig> Parse(const json& j) { return ParseModelConfig(j.dump(2), kLabel); }

// The error message of a config that must be refused ("" and a failure if it parsed).
std::string ParseError(const json& j) {
  auto r = Parse(j);
  EXPECT_FALSE(r.ok()) << "config unexpectedly accepted";
  return r.ok() ? std::string() : r.status().message();
}

// "text_config.linear_attn_config.kda_layers" -> JSON pointer.
json::json_pointer Pointer(const std::string& dotted) {
  std::string p;
  size_t begin = 0;
  while (begin <= dotted.size()) {
    size_t dot = dotted.find('.', begin);
    if (dot == std::string::npos) dot = dotted.size();
    p += "/" + dotted.substr(begin, dot - begin);
    begin = dot + 1;
  }
  return json::json_pointer(p);
}

json With(json j, const std::string& field, const json& value) {
  j[Pointer(field)] = value;
  return j;
}

json Without(json j, const std::string& field) {
  const json::json_pointer p = Pointer(field);
  EXPECT_TRUE(j.contains(p)) << "test bug: no field " << field;
  j[p.parent_pointer()].erase(p.back());
  return j;
}

std::vector<AttentionKind> KindsFromMlaZeroBased(int64_t layers, const std::vector<int>& mla) {
  std::vector<AttentionKind> kinds(static_cast<size_t>(layers), AttentionKind::kKda);
  for (int i : mla) kinds[static_cast<size_t>(i)] = AttentionKind::kMla;
  return kinds;
}

// ---------------------------------------------------------------------------------------------
// Configs that parse

TEST(ConfigTest, GoldenConfigParses) {
  auto r = LoadModelConfig(GoldenModelDir());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.bos_token_id, 640);
  EXPECT_EQ(c.eos_token_id, 642);
  EXPECT_EQ(c.pad_token_id, 895);
  EXPECT_EQ(c.vocab_size, 896);
  EXPECT_EQ(c.hidden_size, 160);
  EXPECT_EQ(c.intermediate_size, 640);
  EXPECT_EQ(c.num_hidden_layers, 9);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.situ_beta, 4.0f);
  EXPECT_EQ(c.situ_linear_beta, 25.0f);
  EXPECT_EQ(c.attn_res_block_size, 4);
  EXPECT_EQ(c.mla_heads, 4);
  EXPECT_EQ(c.q_lora_rank, 96);
  EXPECT_EQ(c.kv_lora_rank, 64);
  EXPECT_EQ(c.qk_nope_head_dim, 32);
  EXPECT_EQ(c.qk_rope_head_dim, 16);
  EXPECT_EQ(c.v_head_dim, 32);
  EXPECT_EQ(c.mla_q_head_dim(), 48);
  EXPECT_EQ(c.kda_heads, 2);
  EXPECT_EQ(c.kda_head_dim, 128);
  EXPECT_EQ(c.kda_width(), 256);
  EXPECT_EQ(c.conv_kernel_size, 4);
  EXPECT_EQ(c.gate_lower_bound, -5.0f);
  // KDA except zero-based 3, 7, 8 (one-based 4, 8, 9).
  EXPECT_EQ(c.layer_kinds, KindsFromMlaZeroBased(9, {3, 7, 8}));
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_TRUE(c.IsMoeLayer(8));
  EXPECT_EQ(c.num_moe_layers(), 8);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.num_experts_per_token, 4);
  EXPECT_EQ(c.num_shared_experts, 2);
  EXPECT_EQ(c.moe_intermediate_size, 96);
  EXPECT_EQ(c.shared_width(), 192);
  EXPECT_EQ(c.routed_expert_hidden_size, 128);
  EXPECT_TRUE(c.latent_moe_use_norm);
  EXPECT_EQ(c.num_expert_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_TRUE(c.moe_renormalize);
  EXPECT_EQ(c.routed_scaling_factor, 1.0f);
  EXPECT_FALSE(c.IsFullK3());
  EXPECT_EQ(c.ExpertBytes(), 19584u);  // same expert dims as docs/MODEL.md §7
}

TEST(ConfigTest, SpecTinyConfigParses) {
  auto r = Parse(SpecTinyJson());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_EQ(c.num_hidden_layers, 9);
  EXPECT_EQ(c.kda_heads, 4);
  EXPECT_EQ(c.kda_width(), 512);
  EXPECT_EQ(c.layer_kinds, KindsFromMlaZeroBased(9, {3, 7, 8}));
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.num_experts_per_token, 4);
  EXPECT_EQ(c.num_expert_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_EQ(c.bos_token_id, 163584);
  EXPECT_EQ(c.eos_token_id, 163586);
  EXPECT_EQ(c.pad_token_id, 163839);
  EXPECT_FALSE(c.IsFullK3());
  // docs/MODEL.md §7: w1/w3 packed [96,64] + scale [96,4]; w2 packed [128,48] + scale [128,3].
  EXPECT_EQ(c.ExpertBytes(), 19584u);
}

TEST(ConfigTest, FullK3ConfigParses) {
  auto r = Parse(K3Json());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ModelConfig& c = *r;
  EXPECT_TRUE(c.IsFullK3());
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_hidden_layers, 93);
  EXPECT_EQ(c.kda_width(), 12288);
  EXPECT_EQ(c.mla_q_head_dim(), 192);
  EXPECT_EQ(c.shared_width(), 6144);
  EXPECT_EQ(c.num_moe_layers(), 92);
  EXPECT_EQ(c.ExpertBytes(), 17547264u);  // docs/MODEL.md §2.8
  // docs/MODEL.md §1.5: zero-based i is MLA iff (i + 1) % 4 == 0 or i == 92; 24 MLA, 69 KDA.
  int mla = 0;
  for (int64_t i = 0; i < 93; ++i) {
    const bool want_mla = (i + 1) % 4 == 0 || i == 92;
    EXPECT_EQ(c.layer_kinds[static_cast<size_t>(i)] == AttentionKind::kMla, want_mla) << i;
    mla += want_mla;
  }
  EXPECT_EQ(mla, 24);
  EXPECT_EQ(c.layer_kinds[0], AttentionKind::kKda);
  EXPECT_EQ(c.layer_kinds[91], AttentionKind::kMla);
  EXPECT_EQ(c.layer_kinds[92], AttentionKind::kMla);
}

TEST(ConfigTest, UnknownAndOptionalFieldsAreIgnored) {
  json j = GoldenJson();
  j["text_config"]["rope_theta"] = 50000.0;
  j["text_config"]["head_dim"] = 999;
  j["text_config"]["kda_chunk_size"] = 64;
  j["text_config"]["linear_attn_config"]["some_future_knob"] = "x";
  j["something_new"] = {1, 2, 3};
  j.erase("vision_config");
  j["text_config"].erase("architectures");
  // Token ids repeated in text_config are optional (the root is authoritative).
  j["text_config"].erase("bos_token_id");
  j["text_config"].erase("eos_token_id");
  j["text_config"].erase("pad_token_id");
  j["text_config"]["quantization_config"]["config_groups"]["group_0"].erase("input_activations");
  auto r = Parse(j);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->eos_token_id, 642);
}

TEST(ConfigTest, UngroupedTopkMeansOneGroup) {
  json j = With(GoldenJson(), "text_config.use_grouped_topk", false);
  auto r = Parse(j);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->num_expert_group, 1);
  EXPECT_EQ(r->topk_group, 1);
}

// ---------------------------------------------------------------------------------------------
// A config with hidden_size 7168 must be K3 in every other number

struct K3Edit {
  std::vector<std::pair<std::string, json>> edits;
  std::string field;  // must appear in the message
};

TEST(ConfigTest, K3ConfigWithAnyOtherNumberChangedIsRefused) {
  const K3Edit cases[] = {
      {{{"text_config.vocab_size", 163841}}, "text_config.vocab_size"},
      {{{"text_config.intermediate_size", 33760}}, "text_config.intermediate_size"},
      {{{"text_config.attn_res_block_size", 11}}, "text_config.attn_res_block_size"},
      {{{"text_config.num_attention_heads", 95}, {"text_config.num_key_value_heads", 95}},
       "text_config.num_attention_heads"},
      {{{"text_config.q_lora_rank", 1535}}, "text_config.q_lora_rank"},
      {{{"text_config.kv_lora_rank", 511}}, "text_config.kv_lora_rank"},
      {{{"text_config.qk_nope_head_dim", 127}}, "text_config.qk_nope_head_dim"},
      {{{"text_config.qk_rope_head_dim", 63}}, "text_config.qk_rope_head_dim"},
      {{{"text_config.v_head_dim", 127}}, "text_config.v_head_dim"},
      {{{"text_config.linear_attn_config.head_dim", 64}},
       "text_config.linear_attn_config.head_dim"},
      {{{"text_config.linear_attn_config.num_heads", 95}},
       "text_config.linear_attn_config.num_heads"},
      {{{"text_config.linear_attn_config.short_conv_kernel_size", 3}},
       "text_config.linear_attn_config.short_conv_kernel_size"},
      {{{"text_config.first_k_dense_replace", 2}}, "text_config.first_k_dense_replace"},
      {{{"text_config.num_experts", 895}}, "text_config.num_experts"},
      {{{"text_config.num_experts_per_token", 15}}, "text_config.num_experts_per_token"},
      {{{"text_config.num_shared_experts", 1}}, "text_config.num_shared_experts"},
      {{{"text_config.moe_intermediate_size", 3040}}, "text_config.moe_intermediate_size"},
      {{{"text_config.routed_expert_hidden_size", 3552}}, "text_config.routed_expert_hidden_size"},
      {{{"text_config.num_expert_group", 2}}, "text_config.num_expert_group"},
      {{{"text_config.num_expert_group", 2}, {"text_config.topk_group", 2}},
       "text_config.num_expert_group"},
      {{{"bos_token_id", 163585}, {"text_config.bos_token_id", 163585}},
       "text_config.bos_token_id"},
      {{{"eos_token_id", 163587}, {"text_config.eos_token_id", 163587}},
       "text_config.eos_token_id"},
      {{{"pad_token_id", 163838}, {"text_config.pad_token_id", 163838}},
       "text_config.pad_token_id"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field);
    json j = K3Json();
    for (const auto& [field, value] : c.edits) j = With(j, field, value);
    const std::string msg = ParseError(j);
    EXPECT_HAS_SUBSTR(msg, kLabel);
    EXPECT_HAS_SUBSTR(msg, "field " + c.field + " ");
    EXPECT_HAS_SUBSTR(msg, "K3");
  }
}

TEST(ConfigTest, K3ConfigWithOtherLayerCountIsRefused) {
  // 92 layers with a consistent schedule (MLA every 4th layer): valid, but not K3.
  json j = K3Json();
  j["text_config"]["num_hidden_layers"] = 92;
  std::vector<int> mla = j["text_config"]["linear_attn_config"]["full_attn_layers"];
  mla.pop_back();  // 93
  j["text_config"]["linear_attn_config"]["full_attn_layers"] = mla;
  const std::string msg = ParseError(j);
  EXPECT_HAS_SUBSTR(msg, "field text_config.num_hidden_layers ");
  EXPECT_HAS_SUBSTR(msg, "K3");
}

TEST(ConfigTest, K3ConfigWithOtherScheduleIsRefused) {
  // Layers 4 and 5 (one-based) swap kinds: still a partition, but not K3's schedule.
  json j = K3Json();
  json& lin = j["text_config"]["linear_attn_config"];
  std::vector<int> kda = lin["kda_layers"], mla = lin["full_attn_layers"];
  std::replace(kda.begin(), kda.end(), 5, 4);
  std::replace(mla.begin(), mla.end(), 4, 5);
  lin["kda_layers"] = kda;
  lin["full_attn_layers"] = mla;
  const std::string msg = ParseError(j);
  EXPECT_HAS_SUBSTR(msg, "field text_config.linear_attn_config");
  EXPECT_HAS_SUBSTR(msg, "layer 4 ");
}

// ---------------------------------------------------------------------------------------------
// Missing fields, wrong types, unsupported values

TEST(ConfigTest, MissingFieldIsNamed) {
  const char* fields[] = {
      "model_type",
      "text_config",
      "bos_token_id",
      "eos_token_id",
      "pad_token_id",
      "text_config.model_type",
      "text_config.vocab_size",
      "text_config.hidden_size",
      "text_config.intermediate_size",
      "text_config.num_hidden_layers",
      "text_config.max_position_embeddings",
      "text_config.rms_norm_eps",
      "text_config.hidden_act",
      "text_config.activation_situ_beta",
      "text_config.activation_situ_linear_beta",
      "text_config.attn_res_block_size",
      "text_config.num_attention_heads",
      "text_config.num_key_value_heads",
      "text_config.q_lora_rank",
      "text_config.kv_lora_rank",
      "text_config.qk_nope_head_dim",
      "text_config.qk_rope_head_dim",
      "text_config.v_head_dim",
      "text_config.mla_use_nope",
      "text_config.mla_use_output_gate",
      "text_config.first_k_dense_replace",
      "text_config.moe_layer_freq",
      "text_config.num_experts",
      "text_config.num_experts_per_token",
      "text_config.num_shared_experts",
      "text_config.moe_intermediate_size",
      "text_config.routed_expert_hidden_size",
      "text_config.latent_moe_use_norm",
      "text_config.moe_router_activation_func",
      "text_config.topk_method",
      "text_config.use_grouped_topk",
      "text_config.num_expert_group",
      "text_config.topk_group",
      "text_config.moe_renormalize",
      "text_config.routed_scaling_factor",
      "text_config.linear_attn_config",
      "text_config.linear_attn_config.head_dim",
      "text_config.linear_attn_config.num_heads",
      "text_config.linear_attn_config.short_conv_kernel_size",
      "text_config.linear_attn_config.kda_layers",
      "text_config.linear_attn_config.full_attn_layers",
      "text_config.linear_attn_config.use_full_rank_gate",
      "text_config.linear_attn_config.gate_lower_bound",
      "text_config.quantization_config",
      "text_config.quantization_config.quant_method",
      "text_config.quantization_config.format",
      "text_config.quantization_config.quantization_status",
      "text_config.quantization_config.config_groups",
      "text_config.quantization_config.config_groups.group_0",
      "text_config.quantization_config.config_groups.group_0.format",
      "text_config.quantization_config.config_groups.group_0.weights",
      "text_config.quantization_config.config_groups.group_0.weights.num_bits",
      "text_config.quantization_config.config_groups.group_0.weights.type",
      "text_config.quantization_config.config_groups.group_0.weights.symmetric",
      "text_config.quantization_config.config_groups.group_0.weights.strategy",
      "text_config.quantization_config.config_groups.group_0.weights.group_size",
      "text_config.quantization_config.config_groups.group_0.weights.dynamic",
      "text_config.quantization_config.config_groups.group_0.weights.scale_dtype",
  };
  for (const char* field : fields) {
    SCOPED_TRACE(field);
    const std::string msg = ParseError(Without(GoldenJson(), field));
    EXPECT_HAS_SUBSTR(msg, kLabel);
    EXPECT_HAS_SUBSTR(msg, std::string("field ") + field + " is missing");
  }
}

struct BadValue {
  std::string field;  // dotted path of the edited field
  json value;
  std::string named;  // what the message must name (the field, unless set)
  std::string what;   // and what it must say about it
};

void ExpectRefused(const std::vector<BadValue>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field + " = " + c.value.dump());
    const std::string msg = ParseError(With(GoldenJson(), c.field, c.value));
    EXPECT_HAS_SUBSTR(msg, kLabel);
    EXPECT_HAS_SUBSTR(msg, "field " + (c.named.empty() ? c.field : c.named));
    EXPECT_HAS_SUBSTR(msg, c.what);
  }
}

TEST(ConfigTest, WrongTypeIsNamed) {
  ExpectRefused({
      {"text_config", "kimi_linear", "", "must be an object"},
      {"bos_token_id", "640", "", "must be an integer"},
      {"text_config.hidden_size", "160", "", "must be an integer"},
      {"text_config.hidden_size", 160.0, "", "must be an integer"},
      {"text_config.num_hidden_layers", true, "", "must be an integer"},
      {"text_config.rms_norm_eps", "1e-5", "", "must be a number"},
      {"text_config.mla_use_nope", 1, "", "must be true or false"},
      {"text_config.moe_renormalize", nullptr, "", "must be true or false"},
      {"text_config.hidden_act", json::array({"situ"}), "", "must be a string"},
      {"text_config.linear_attn_config", json::array(), "", "must be an object"},
      {"text_config.linear_attn_config.kda_layers", "1,2,3,5,6,7", "",
       "must be a list of integers"},
      {"text_config.linear_attn_config.full_attn_layers", json::parse("[4, 8.0, 9]"), "",
       "must be a list of integers"},
      {"text_config.linear_attn_config.full_attn_layers", json::parse("[4, \"8\", 9]"), "",
       "must be a list of integers"},
      {"text_config.quantization_config", "mxfp4", "", "must be an object"},
      {"text_config.quantization_config.config_groups.group_0", json::array(), "",
       "must be an object"},
      {"text_config.quantization_config.config_groups.group_0.weights.group_size", "32", "",
       "must be an integer"},
      {"text_config.num_experts", -16, "", "must be >= 1"},
      {"text_config.hidden_size", 0, "", "must be >= 1"},
      {"tie_word_embeddings", "false", "", "must be false"},
  });
}

TEST(ConfigTest, UnsupportedValueIsNamed) {
  const std::string q = "text_config.quantization_config.";
  const std::string w = q + "config_groups.group_0.weights.";
  ExpectRefused({
      {"model_type", "kimi_k2", "", "only \"kimi_k3\""},
      {"text_config.model_type", "deepseek_v3", "", "only \"kimi_linear\""},
      {"text_config.hidden_act", "silu", "", "only \"situ\""},
      {"text_config.mla_use_nope", false, "", "must be true"},
      {"text_config.mla_use_output_gate", false, "", "must be true"},
      {"text_config.topk_method", "greedy", "", "only \"noaux_tc\""},
      {"text_config.moe_router_activation_func", "softmax", "", "only \"sigmoid\""},
      {"text_config.moe_layer_freq", 2, "", "must be 1"},
      {"text_config.num_nextn_predict_layers", 1, "", "must be 0"},
      {"tie_word_embeddings", true, "", "must be false"},
      {"text_config.tie_word_embeddings", true, "", "must be false"},
      {"text_config.eos_token_id", 641, "", "disagrees with the root"},
      {q + "quant_method", "gptq", "", "only \"compressed-tensors\""},
      {q + "format", "nvfp4-pack-quantized", "", "only \"mxfp4-pack-quantized\""},
      {q + "quantization_status", "frozen", "", "only \"compressed\""},
      {q + "config_groups.group_0.format", "int-quantized", "", "only \"mxfp4-pack-quantized\""},
      {w + "num_bits", 8, "", "must be 4"},
      {w + "type", "int", "", "only \"float\""},
      {w + "symmetric", false, "", "must be true"},
      {w + "strategy", "channel", "", "only \"group\""},
      {w + "group_size", 16, "", "must be 32"},
      {w + "scale_dtype", "torch.float16", "", "only \"torch.uint8\""},
      {w + "dynamic", true, "", "must be false"},
      {q + "config_groups.group_0.input_activations", json{{"num_bits", 8}}, "", "must be null"},
      {"text_config.num_key_value_heads", 2, "", "must equal num_attention_heads"},
      {"text_config.linear_attn_config.use_full_rank_gate", false, "", "must be true"},
      {"text_config.linear_attn_config.gate_lower_bound", 0.0, "", "must be negative"},
      {"text_config.linear_attn_config.short_conv_kernel_size", 1, "", "must be >= 2"},
      {"text_config.rms_norm_eps", 0.0, "", "must be in (0, 1)"},
      {"text_config.activation_situ_beta", -4.0, "", "must be > 0"},
      {"text_config.activation_situ_linear_beta", 0, "", "must be > 0"},
      {"text_config.first_k_dense_replace", 10, "", "exceeds num_hidden_layers"},
      {"text_config.num_experts_per_token", 17, "", "exceeds num_experts"},
      {"text_config.num_expert_group", 3, "", "must divide num_experts"},
      {"text_config.num_expert_group", 16, "", "fewer than 2 experts per group"},
      {"text_config.topk_group", 5, "", "exceeds num_expert_group"},
      // 4 groups of 4 experts, keep 2 groups: at most 8 candidates for top-9.
      {"text_config.num_experts_per_token", 9, "", "exceeds the experts in the kept groups"},
      {"text_config.moe_intermediate_size", 100, "", "multiple of 32"},
      {"text_config.routed_expert_hidden_size", 100, "", "multiple of 32"},
      {"text_config.num_shared_experts", 0, "", "must be >= 1"},
  });
}

TEST(ConfigTest, MoreAttnResBlocksThanTheMixTakesAreRefused) {
  // 100 layers in blocks of 1: 101 AttnRes sources, above kMaxAttnResSources.
  json kda = json::array(), full = json::array();
  for (int layer = 1; layer <= 100; ++layer) (layer % 4 == 0 ? full : kda).push_back(layer);
  json j = With(GoldenJson(), "text_config.num_hidden_layers", 100);
  j = With(j, "text_config.linear_attn_config.kda_layers", kda);
  j = With(j, "text_config.linear_attn_config.full_attn_layers", full);
  const auto at_limit = Parse(With(j, "text_config.attn_res_block_size", 2));
  EXPECT_TRUE(at_limit.ok()) << "50 blocks + the partial = 51 sources must load: "
                             << at_limit.status().message();
  const std::string msg = ParseError(With(j, "text_config.attn_res_block_size", 1));
  EXPECT_HAS_SUBSTR(msg, "field text_config.attn_res_block_size");
  EXPECT_HAS_SUBSTR(msg, "more than 63 AttnRes blocks");
}

TEST(ConfigTest, EosOutsideVocabularyIsRefused) {
  json j = With(GoldenJson(), "eos_token_id", 896);
  j = With(j, "text_config.eos_token_id", 896);
  const std::string msg = ParseError(j);
  EXPECT_HAS_SUBSTR(msg, "field eos_token_id");
  EXPECT_HAS_SUBSTR(msg, "outside the vocabulary");
}

TEST(ConfigTest, BrokenLayerScheduleIsNamed) {
  const std::string lin = "text_config.linear_attn_config.";
  ExpectRefused({
      // One-based layer 5 in neither list.
      {lin + "kda_layers", json::array({1, 2, 3, 6, 7}), "text_config.linear_attn_config",
       "layer 5 is in neither"},
      // One-based layer 4 in both lists.
      {lin + "kda_layers", json::array({1, 2, 3, 4, 5, 6, 7}), lin + "full_attn_layers",
       "layer 4 twice or in both lists"},
      {lin + "kda_layers", json::array({1, 1, 2, 3, 5, 6, 7}), lin + "kda_layers", "layer 1 twice"},
      {lin + "full_attn_layers", json::array({4, 8, 9, 10}), lin + "full_attn_layers",
       "layer 10 outside 1..9"},
      {lin + "kda_layers", json::array({0, 1, 2, 3, 5, 6, 7}), lin + "kda_layers",
       "layer 0 outside 1..9"},
      {lin + "full_attn_layers", json::array(), "text_config.linear_attn_config",
       "layer 4 is in neither"},
  });
}

TEST(ConfigTest, HugeLayerCountIsAnErrorNotACrash) {
  // A corrupt layer count must be refused like any other bad value, not end in bad_alloc.
  for (int64_t layers : {int64_t{10}, int64_t{1} << 40, int64_t{1} << 62}) {
    SCOPED_TRACE(layers);
    const std::string msg = ParseError(With(GoldenJson(), "text_config.num_hidden_layers", layers));
    EXPECT_HAS_SUBSTR(msg, "field text_config.linear_attn_config");
    EXPECT_HAS_SUBSTR(msg, "layer 10 is in neither");
  }
}

TEST(ConfigTest, NotJsonOrNotAnObject) {
  for (const char* text : {"", "{\"model_type\": ", "[1, 2]", "42"}) {
    SCOPED_TRACE(text);
    auto r = ParseModelConfig(text, kLabel);
    ASSERT_FALSE(r.ok());
    EXPECT_HAS_SUBSTR(r.status().message(), kLabel);
    EXPECT_HAS_SUBSTR(r.status().message(), "not well-formed JSON");
  }
}

TEST(ConfigTest, LoadModelConfigNamesTheMissingFile) {
  testing::ScopedTempDir dir;
  auto r = LoadModelConfig(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_HAS_SUBSTR(r.status().message(), dir.Join("config.json"));
}

TEST(ConfigTest, LoadModelConfigLabelsErrorsWithThePath) {
  testing::ScopedTempDir dir;
  testing::WriteTextFile(dir.Join("config.json"),
                         Without(GoldenJson(), "text_config.hidden_size").dump());
  auto r = LoadModelConfig(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_HAS_SUBSTR(r.status().message(),
                    dir.Join("config.json") + ": field text_config.hidden_size is missing");
}

}  // namespace
}  // namespace deltafin
