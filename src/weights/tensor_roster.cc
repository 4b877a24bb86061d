#include "weights/tensor_roster.h"

namespace deltafin {

std::string LayerTensorName(int64_t layer, const std::string& suffix) {
  return kLayerPrefix + std::to_string(layer) + "." + suffix;
}

std::string ExpertTensorName(int64_t layer, int64_t expert, const std::string& suffix) {
  return LayerTensorName(layer,
                         "block_sparse_moe.experts." + std::to_string(expert) + "." + suffix);
}

std::vector<TensorSpec> ExpertTensorSpecs(const ModelConfig& c, int64_t layer, int64_t expert) {
  const int64_t inter = c.moe_intermediate_size, latent = c.routed_expert_hidden_size;
  auto spec = [&](const char* suffix, int64_t rows, int64_t cols) {
    return TensorSpec{ExpertTensorName(layer, expert, suffix), DType::kU8, {rows, cols}};
  };
  return {spec("w1.weight_packed", inter, latent / 2), spec("w1.weight_scale", inter, latent / 32),
          spec("w2.weight_packed", latent, inter / 2), spec("w2.weight_scale", latent, inter / 32),
          spec("w3.weight_packed", inter, latent / 2), spec("w3.weight_scale", inter, latent / 32)};
}

std::vector<TensorSpec> GlobalTensorSpecs(const ModelConfig& c) {
  const int64_t h = c.hidden_size, v = c.vocab_size;
  return {
      {"language_model.model.embed_tokens.weight", DType::kBF16, {v, h}},
      {"language_model.model.norm.weight", DType::kBF16, {h}},
      {"language_model.model.output_attn_res_norm.weight", DType::kBF16, {h}},
      {"language_model.model.output_attn_res_proj.weight", DType::kBF16, {1, h}},
      {"language_model.lm_head.weight", DType::kBF16, {v, h}},
  };
}

std::vector<TensorSpec> LayerTensorSpecs(const ModelConfig& c, int64_t layer) {
  const int64_t h = c.hidden_size;
  std::vector<TensorSpec> out;
  auto add = [&](const std::string& suffix, DType dtype, std::vector<int64_t> shape) {
    out.push_back({LayerTensorName(layer, suffix), dtype, std::move(shape)});
  };
  for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight",
                           "self_attention_res_norm.weight", "mlp_res_norm.weight"}) {
    add(norm, DType::kBF16, {h});
  }
  add("self_attention_res_proj.weight", DType::kBF16, {1, h});
  add("mlp_res_proj.weight", DType::kBF16, {1, h});

  if (c.layer_kinds[static_cast<size_t>(layer)] == AttentionKind::kKda) {
    const int64_t p = c.kda_width(), hd = c.kda_head_dim;
    // A_log is padded to a multiple of 128 entries (one real entry per head).
    const int64_t a_log = (c.kda_heads + 127) / 128 * 128;
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
      add(std::string("self_attn.") + proj + ".weight", DType::kBF16, {p, h});
    }
    for (const char* conv : {"q_conv1d", "k_conv1d", "v_conv1d"}) {
      add(std::string("self_attn.") + conv + ".weight", DType::kF32, {p, 1, c.conv_kernel_size});
    }
    add("self_attn.f_a_proj.weight", DType::kBF16, {hd, h});
    add("self_attn.f_b_proj.weight", DType::kBF16, {p, hd});
    add("self_attn.dt_bias", DType::kF32, {p});
    add("self_attn.A_log", DType::kF32, {a_log});
    add("self_attn.b_proj.weight", DType::kBF16, {c.kda_heads, h});
    add("self_attn.g_proj.weight", DType::kBF16, {p, h});
    add("self_attn.o_norm.weight", DType::kF32, {hd});
    add("self_attn.o_proj.weight", DType::kBF16, {h, p});
  } else {
    const int64_t nh = c.mla_heads;
    add("self_attn.q_a_proj.weight", DType::kBF16, {c.q_lora_rank, h});
    add("self_attn.q_a_layernorm.weight", DType::kBF16, {c.q_lora_rank});
    add("self_attn.q_b_proj.weight", DType::kBF16, {nh * c.mla_q_head_dim(), c.q_lora_rank});
    add("self_attn.kv_a_proj_with_mqa.weight", DType::kBF16,
        {c.kv_lora_rank + c.qk_rope_head_dim, h});
    add("self_attn.kv_a_layernorm.weight", DType::kBF16, {c.kv_lora_rank});
    add("self_attn.kv_b_proj.weight", DType::kBF16,
        {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank});
    add("self_attn.g_proj.weight", DType::kBF16, {nh * c.v_head_dim, h});
    add("self_attn.o_proj.weight", DType::kBF16, {h, nh * c.v_head_dim});
  }

  if (!c.IsMoeLayer(layer)) {
    add("mlp.gate_proj.weight", DType::kBF16, {c.intermediate_size, h});
    add("mlp.up_proj.weight", DType::kBF16, {c.intermediate_size, h});
    add("mlp.down_proj.weight", DType::kBF16, {h, c.intermediate_size});
  } else {
    const int64_t latent = c.routed_expert_hidden_size, sw = c.shared_width();
    add("block_sparse_moe.gate.weight", DType::kBF16, {c.num_experts, h});
    add("block_sparse_moe.gate.e_score_correction_bias", DType::kF32, {c.num_experts});
    add("block_sparse_moe.routed_expert_down_proj.weight", DType::kBF16, {latent, h});
    if (c.latent_moe_use_norm) {
      add("block_sparse_moe.routed_expert_norm.weight", DType::kBF16, {latent});
    }
    add("block_sparse_moe.routed_expert_up_proj.weight", DType::kBF16, {h, latent});
    add("block_sparse_moe.shared_experts.gate_proj.weight", DType::kBF16, {sw, h});
    add("block_sparse_moe.shared_experts.up_proj.weight", DType::kBF16, {sw, h});
    add("block_sparse_moe.shared_experts.down_proj.weight", DType::kBF16, {h, sw});
  }
  return out;
}

}  // namespace deltafin
