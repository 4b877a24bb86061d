#include "weights/config.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "io/mapped_file.h"

namespace deltafin {

namespace {

using nlohmann::json;

// Reads typed fields out of one JSON object, remembering the first error with its dotted path.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string path, std::string label)
      : obj_(obj), path_(std::move(path)), label_(std::move(label)) {}

  Status status() const { return status_; }

  const json* Find(const char* key) {
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      Fail(key, "is missing");
      return nullptr;
    }
    return &*it;
  }
  int64_t Int(const char* key, int64_t min_value = 1) {
    const json* v = Find(key);
    if (v == nullptr) return 0;
    if (!v->is_number_integer()) return Fail(key, "must be an integer"), 0;
    int64_t x = v->get<int64_t>();
    if (x < min_value) Fail(key, "must be >= " + std::to_string(min_value));
    return x;
  }
  double Number(const char* key) {
    const json* v = Find(key);
    if (v == nullptr) return 0;
    if (!v->is_number()) return Fail(key, "must be a number"), 0;
    return v->get<double>();
  }
  bool Bool(const char* key) {
    const json* v = Find(key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) return Fail(key, "must be true or false"), false;
    return v->get<bool>();
  }
  std::string String(const char* key) {
    const json* v = Find(key);
    if (v == nullptr) return "";
    if (!v->is_string()) return Fail(key, "must be a string"), "";
    return v->get<std::string>();
  }
  const json* Object(const char* key) {
    const json* v = Find(key);
    if (v != nullptr && !v->is_object()) return Fail(key, "must be an object"), nullptr;
    return v;
  }
  std::vector<int64_t> IntList(const char* key) {
    std::vector<int64_t> out;
    const json* v = Find(key);
    if (v == nullptr) return out;
    if (!v->is_array()) return Fail(key, "must be a list of integers"), out;
    for (const auto& e : *v) {
      if (!e.is_number_integer()) return Fail(key, "must be a list of integers"), out;
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  void Expect(const char* key, const std::string& want) {
    std::string got = String(key);
    if (status_.ok() && got != want)
      Fail(key, "is \"" + got + "\"; only \"" + want + "\" is supported");
  }
  void ExpectTrue(const char* key, const char* why) {
    bool got = Bool(key);
    if (status_.ok() && !got) Fail(key, std::string("must be true: ") + why);
  }
  void Fail(const std::string& key, const std::string& what) {
    if (status_.ok()) status_ = Status::Error(label_ + ": field " + path_ + key + " " + what);
  }
  std::string Path(const char* key) const { return path_ + key + "."; }

 private:
  const json& obj_;
  std::string path_;
  std::string label_;
  Status status_;
};

Status ParseQuantization(const json& q, const std::string& label) {
  FieldReader r(q, "text_config.quantization_config.", label);
  r.Expect("quant_method", "compressed-tensors");
  r.Expect("format", "mxfp4-pack-quantized");
  r.Expect("quantization_status", "compressed");
  DF_RETURN_IF_ERROR(r.status());
  const json* groups = r.Object("config_groups");
  DF_RETURN_IF_ERROR(r.status());
  FieldReader gr(*groups, r.Path("config_groups"), label);
  const json* g0 = gr.Object("group_0");
  DF_RETURN_IF_ERROR(gr.status());
  FieldReader g(*g0, gr.Path("group_0"), label);
  g.Expect("format", "mxfp4-pack-quantized");
  const json* w = g.Object("weights");
  DF_RETURN_IF_ERROR(g.status());
  FieldReader wr(*w, g.Path("weights"), label);
  if (wr.Int("num_bits") != 4) wr.Fail("num_bits", "must be 4");
  wr.Expect("type", "float");
  wr.ExpectTrue("symmetric", "MXFP4 is symmetric");
  wr.Expect("strategy", "group");
  if (wr.Int("group_size") != 32) wr.Fail("group_size", "must be 32");
  wr.Expect("scale_dtype", "torch.uint8");
  if (const json* dyn = wr.Find("dynamic"); dyn && (!dyn->is_boolean() || dyn->get<bool>())) {
    wr.Fail("dynamic", "must be false");
  }
  DF_RETURN_IF_ERROR(wr.status());
  // input_activations may be absent or null; anything else asks for activation quantisation.
  if (auto it = g0->find("input_activations"); it != g0->end() && !it->is_null()) {
    return Status::Error(
        label + ": field " + gr.Path("group_0") +
        "input_activations must be null (activation quantisation is not supported)");
  }
  return Status::Ok();
}

// Every K3 number from docs/MODEL.md §1; a config with K3's hidden size must match all of them.
Status CheckFullK3(const ModelConfig& c, const std::string& label) {
  struct Want {
    const char* field;
    int64_t got, want;
  };
  const Want wants[] = {
      {"vocab_size", c.vocab_size, 163840},
      {"intermediate_size", c.intermediate_size, 33792},
      {"num_hidden_layers", c.num_hidden_layers, 93},
      {"attn_res_block_size", c.attn_res_block_size, 12},
      {"num_attention_heads", c.mla_heads, 96},
      {"q_lora_rank", c.q_lora_rank, 1536},
      {"kv_lora_rank", c.kv_lora_rank, 512},
      {"qk_nope_head_dim", c.qk_nope_head_dim, 128},
      {"qk_rope_head_dim", c.qk_rope_head_dim, 64},
      {"v_head_dim", c.v_head_dim, 128},
      {"linear_attn_config.head_dim", c.kda_head_dim, 128},
      {"linear_attn_config.num_heads", c.kda_heads, 96},
      {"linear_attn_config.short_conv_kernel_size", c.conv_kernel_size, 4},
      {"first_k_dense_replace", c.first_k_dense_replace, 1},
      {"num_experts", c.num_experts, 896},
      {"num_experts_per_token", c.num_experts_per_token, 16},
      {"num_shared_experts", c.num_shared_experts, 2},
      {"moe_intermediate_size", c.moe_intermediate_size, 3072},
      {"routed_expert_hidden_size", c.routed_expert_hidden_size, 3584},
      {"num_expert_group", c.num_expert_group, 1},
      {"topk_group", c.topk_group, 1},
      {"bos_token_id", c.bos_token_id, 163584},
      {"eos_token_id", c.eos_token_id, 163586},
      {"pad_token_id", c.pad_token_id, 163839},
  };
  for (const auto& w : wants) {
    if (w.got != w.want) {
      return Status::Error(label + ": field text_config." + w.field + " is " +
                           std::to_string(w.got) + " but a K3 config (hidden_size 7168) needs " +
                           std::to_string(w.want));
    }
  }
  for (int64_t i = 0; i < 93; ++i) {
    const bool mla = (i + 1) % 4 == 0 || i == 92;
    if ((c.layer_kinds[static_cast<size_t>(i)] == AttentionKind::kMla) != mla) {
      return Status::Error(label + ": field text_config.linear_attn_config: layer " +
                           std::to_string(i + 1) +
                           " (one-based) has the wrong attention kind for K3");
    }
  }
  if (c.ExpertBytes() != 17547264ull) {
    return Status::Error(label + ": K3 expert size mismatch");
  }
  return Status::Ok();
}

}  // namespace

uint64_t ModelConfig::ExpertBytes() const {
  const uint64_t inter = static_cast<uint64_t>(moe_intermediate_size);
  const uint64_t latent = static_cast<uint64_t>(routed_expert_hidden_size);
  const uint64_t per_matrix = inter * latent / 2 + inter * latent / 32;
  return 3 * per_matrix;
}

Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& label) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return Status::Error(label + ": not well-formed JSON");
  }
  ModelConfig c;
  FieldReader rr(root, "", label);
  rr.Expect("model_type", "kimi_k3");
  const json* text = rr.Object("text_config");
  DF_RETURN_IF_ERROR(rr.status());
  c.bos_token_id = rr.Int("bos_token_id", 0);
  c.eos_token_id = rr.Int("eos_token_id", 0);
  c.pad_token_id = rr.Int("pad_token_id", 0);
  if (const json* tie =
          root.contains("tie_word_embeddings") ? rr.Find("tie_word_embeddings") : nullptr;
      tie && (!tie->is_boolean() || tie->get<bool>())) {
    rr.Fail("tie_word_embeddings", "must be false (K3 has a separate lm_head)");
  }
  DF_RETURN_IF_ERROR(rr.status());

  FieldReader r(*text, "text_config.", label);
  r.Expect("model_type", "kimi_linear");
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    if (text->contains(key)) {
      const int64_t v = r.Int(key, 0);
      const int64_t root_v = rr.Int(key, 0);
      if (r.status().ok() && v != root_v) r.Fail(key, "disagrees with the root object");
    }
  }
  c.vocab_size = r.Int("vocab_size");
  c.hidden_size = r.Int("hidden_size");
  c.intermediate_size = r.Int("intermediate_size");
  c.num_hidden_layers = r.Int("num_hidden_layers");
  c.max_position_embeddings = r.Int("max_position_embeddings");
  c.rms_norm_eps = static_cast<float>(r.Number("rms_norm_eps"));
  r.Expect("hidden_act", "situ");
  c.situ_beta = static_cast<float>(r.Number("activation_situ_beta"));
  c.situ_linear_beta = static_cast<float>(r.Number("activation_situ_linear_beta"));
  c.attn_res_block_size = r.Int("attn_res_block_size");
  c.mla_heads = r.Int("num_attention_heads");
  const int64_t kv_heads = r.Int("num_key_value_heads");
  c.q_lora_rank = r.Int("q_lora_rank");
  c.kv_lora_rank = r.Int("kv_lora_rank");
  c.qk_nope_head_dim = r.Int("qk_nope_head_dim");
  c.qk_rope_head_dim = r.Int("qk_rope_head_dim", 0);
  c.v_head_dim = r.Int("v_head_dim");
  r.ExpectTrue("mla_use_nope", "rotary MLA is not implemented");
  r.ExpectTrue("mla_use_output_gate", "MLA without the output gate is not implemented");
  c.first_k_dense_replace = r.Int("first_k_dense_replace", 0);
  if (r.Int("moe_layer_freq") != 1) r.Fail("moe_layer_freq", "must be 1");
  c.num_experts = r.Int("num_experts");
  c.num_experts_per_token = r.Int("num_experts_per_token");
  c.num_shared_experts = r.Int("num_shared_experts", 0);
  c.moe_intermediate_size = r.Int("moe_intermediate_size");
  c.routed_expert_hidden_size = r.Int("routed_expert_hidden_size");
  c.latent_moe_use_norm = r.Bool("latent_moe_use_norm");
  r.Expect("moe_router_activation_func", "sigmoid");
  r.Expect("topk_method", "noaux_tc");
  const bool grouped = r.Bool("use_grouped_topk");
  c.num_expert_group = grouped ? r.Int("num_expert_group") : 1;
  c.topk_group = grouped ? r.Int("topk_group") : 1;
  c.moe_renormalize = r.Bool("moe_renormalize");
  c.routed_scaling_factor = static_cast<float>(r.Number("routed_scaling_factor"));
  if (text->contains("num_nextn_predict_layers") && r.Int("num_nextn_predict_layers", 0) != 0) {
    r.Fail("num_nextn_predict_layers", "must be 0 (MTP heads are not supported)");
  }
  if (text->contains("tie_word_embeddings") && r.Bool("tie_word_embeddings")) {
    r.Fail("tie_word_embeddings", "must be false");
  }
  DF_RETURN_IF_ERROR(r.status());

  const json* lin = r.Object("linear_attn_config");
  DF_RETURN_IF_ERROR(r.status());
  FieldReader lr(*lin, r.Path("linear_attn_config"), label);
  c.kda_head_dim = lr.Int("head_dim");
  c.kda_heads = lr.Int("num_heads");
  c.conv_kernel_size = lr.Int("short_conv_kernel_size");
  lr.ExpectTrue("use_full_rank_gate", "the low-rank output gate is not implemented");
  c.gate_lower_bound = static_cast<float>(lr.Number("gate_lower_bound"));
  const auto kda_layers = lr.IntList("kda_layers");
  const auto mla_layers = lr.IntList("full_attn_layers");
  DF_RETURN_IF_ERROR(lr.status());

  const json* quant = r.Object("quantization_config");
  DF_RETURN_IF_ERROR(r.status());
  DF_RETURN_IF_ERROR(ParseQuantization(*quant, label));

  // Cross-field structure the forward pass relies on.
  auto fail = [&](const std::string& field, const std::string& what) {
    return Status::Error(label + ": field text_config." + field + " " + what);
  };
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) return fail("rms_norm_eps", "must be in (0, 1)");
  if (!(c.situ_beta > 0)) return fail("activation_situ_beta", "must be > 0");
  if (!(c.situ_linear_beta > 0)) return fail("activation_situ_linear_beta", "must be > 0");
  if (!(c.gate_lower_bound < 0)) {
    return fail("linear_attn_config.gate_lower_bound", "must be negative");
  }
  if (kv_heads != c.mla_heads) {
    return fail("num_key_value_heads", "must equal num_attention_heads (no GQA in K3 MLA)");
  }
  if (c.first_k_dense_replace > c.num_hidden_layers) {
    return fail("first_k_dense_replace", "exceeds num_hidden_layers");
  }
  if (c.num_experts_per_token > c.num_experts) {
    return fail("num_experts_per_token", "exceeds num_experts");
  }
  if (c.num_shared_experts == 0) return fail("num_shared_experts", "must be >= 1");
  if (c.num_experts % c.num_expert_group != 0) {
    return fail("num_expert_group", "must divide num_experts");
  }
  if (c.topk_group > c.num_expert_group) return fail("topk_group", "exceeds num_expert_group");
  if (c.num_expert_group > 1 && c.num_experts / c.num_expert_group < 2) {
    return fail("num_expert_group", "leaves fewer than 2 experts per group");
  }
  if (c.num_experts_per_token > c.topk_group * (c.num_experts / c.num_expert_group)) {
    return fail("num_experts_per_token", "exceeds the experts in the kept groups");
  }
  if (c.moe_intermediate_size % 32 != 0) {
    return fail("moe_intermediate_size", "must be a multiple of 32 (MXFP4 groups)");
  }
  if (c.routed_expert_hidden_size % 32 != 0) {
    return fail("routed_expert_hidden_size", "must be a multiple of 32 (MXFP4 groups)");
  }
  if (c.conv_kernel_size < 2)
    return fail("linear_attn_config.short_conv_kernel_size", "must be >= 2");
  if (c.eos_token_id >= c.vocab_size)
    return Status::Error(label + ": field eos_token_id is outside the vocabulary");

  // The lists must name every layer, so a layer count beyond their length leaves some layer in
  // neither. Report it before allocating per-layer arrays: a corrupt num_hidden_layers (e.g.
  // 2^40) must be an error, not a bad_alloc.
  if (static_cast<uint64_t>(c.num_hidden_layers) > kda_layers.size() + mla_layers.size()) {
    std::set<int64_t> listed(kda_layers.begin(), kda_layers.end());
    listed.insert(mla_layers.begin(), mla_layers.end());
    int64_t first_unlisted = 1;
    for (int64_t l : listed) {
      if (l == first_unlisted) ++first_unlisted;
      if (l > first_unlisted) break;
    }
    return fail("linear_attn_config", "layer " + std::to_string(first_unlisted) +
                                          " is in neither kda_layers nor full_attn_layers");
  }
  c.layer_kinds.assign(static_cast<size_t>(c.num_hidden_layers), AttentionKind::kKda);
  std::vector<int> seen(static_cast<size_t>(c.num_hidden_layers), 0);
  auto mark = [&](const std::vector<int64_t>& list, AttentionKind kind, const char* field) {
    for (int64_t one_based : list) {
      if (one_based < 1 || one_based > c.num_hidden_layers) {
        return fail(std::string("linear_attn_config.") + field,
                    "lists layer " + std::to_string(one_based) + " outside 1.." +
                        std::to_string(c.num_hidden_layers));
      }
      const auto i = static_cast<size_t>(one_based - 1);
      if (seen[i]++) {
        return fail(std::string("linear_attn_config.") + field,
                    "lists layer " + std::to_string(one_based) + " twice or in both lists");
      }
      c.layer_kinds[i] = kind;
    }
    return Status::Ok();
  };
  DF_RETURN_IF_ERROR(mark(kda_layers, AttentionKind::kKda, "kda_layers"));
  DF_RETURN_IF_ERROR(mark(mla_layers, AttentionKind::kMla, "full_attn_layers"));
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) {
      return fail("linear_attn_config", "layer " + std::to_string(i + 1) +
                                            " is in neither kda_layers nor full_attn_layers");
    }
  }
  if (c.attn_res_block_size >= 1 &&
      (c.num_hidden_layers - 1) / c.attn_res_block_size + 2 > kMaxAttnResSources) {
    return fail("attn_res_block_size", "leaves more than " +
                                           std::to_string(kMaxAttnResSources - 1) +
                                           " AttnRes blocks for num_hidden_layers");
  }
  // AttnRes assumes every block boundary (i % block == 0) starts a new block; layer 0 must exist.
  if (c.IsFullK3()) DF_RETURN_IF_ERROR(CheckFullK3(c, label));
  return c;
}

Result<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  DF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseModelConfig(text, path);
}

}  // namespace deltafin
