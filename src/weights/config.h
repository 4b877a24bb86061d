// ModelConfig: the parts of a K3 config.json the text forward pass needs, parsed and validated.
//
// The checkpoint's config is a VLM wrapper (root `model_type: kimi_k3`) with the text model in
// `text_config` (docs/MODEL.md §1). Parsing refuses, naming the field, anything the engine cannot
// run: a missing field, a value of the wrong type, a flag we do not implement (e.g. RoPE MLA), a
// layer schedule that does not partition the layers. A config with K3's hidden size must also match
// every other K3 number (docs/MODEL.md §1–§2), so a half-edited real config cannot load as "some
// other model".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin {

enum class AttentionKind : uint8_t { kKda, kMla };

// The most sources an AttnRes mix takes (one anchor per block of attn_res_block_size layers, plus
// the running partial; K3 has 9). Parsing refuses a config with more.
constexpr int64_t kMaxAttnResSources = 64;

struct ModelConfig {
  // Token ids (root object; text_config must agree where it repeats them).
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 0;
  int64_t pad_token_id = 0;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // H
  int64_t intermediate_size = 0;  // dense FFN width (layers < first_k_dense_replace)
  int64_t num_hidden_layers = 0;
  int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float situ_beta = 4.0f;           // activation_situ_beta
  float situ_linear_beta = 25.0f;   // activation_situ_linear_beta
  int64_t attn_res_block_size = 0;  // anchors: (layers - 1) / block + 1

  // MLA (NoPE, output gate).
  int64_t mla_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // KDA.
  int64_t kda_heads = 0;
  int64_t kda_head_dim = 0;
  int64_t conv_kernel_size = 0;
  float gate_lower_bound = -5.0f;
  std::vector<AttentionKind> layer_kinds;  // [num_hidden_layers], zero-based

  // MoE.
  int64_t first_k_dense_replace = 1;
  int64_t num_experts = 0;
  int64_t num_experts_per_token = 0;
  int64_t num_shared_experts = 0;
  int64_t moe_intermediate_size = 0;
  int64_t routed_expert_hidden_size = 0;  // latent width
  bool latent_moe_use_norm = true;
  int64_t num_expert_group = 1;
  int64_t topk_group = 1;
  bool moe_renormalize = true;
  float routed_scaling_factor = 1.0f;

  // Derived.
  int64_t kda_width() const { return kda_heads * kda_head_dim; }  // P
  int64_t mla_q_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t shared_width() const { return num_shared_experts * moe_intermediate_size; }
  bool IsMoeLayer(int64_t layer) const { return layer >= first_k_dense_replace; }
  int64_t num_moe_layers() const { return num_hidden_layers - first_k_dense_replace; }
  bool IsFullK3() const { return hidden_size == 7168; }
  // Bytes of one routed expert: w1, w2, w3 each packed (R*C/2) + scales (R*C/32).
  uint64_t ExpertBytes() const;
};

// Parses and validates config.json text; `label` prefixes error messages (usually the path).
Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& label);
Result<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace deltafin
